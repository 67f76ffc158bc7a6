// A fleet host run in a child process (helpers/fleetHostChild.ts) that joins one server: the hostile tests' host.
import { after, before } from 'node:test';
import type { MonitorServer } from '../../src/protocol/monitor.js';
import { type Cli, startCli } from './cli.js';
import { RpcClient } from './client.js';
import { type HostileServer, startHostileServer } from './hostileServer.js';

export interface JoinedHost {
  host: Cli;
  /** The host's URL and its agent and panel tokens. */
  info: { url: string; agent: string; panel: string };
}

/** Starts a host that joins `evil` (as "evil", with a token it accepts). */
export async function startHostJoining(evil: HostileServer): Promise<JoinedHost> {
  const host = await startCli(
    [
      '--import',
      'tsx',
      'test/helpers/fleetHostChild.ts',
      JSON.stringify({ join: [{ url: evil.url, token: 'evil-token-0123456789', name: 'evil' }] }),
    ],
    { script: true },
  );
  return { host, info: JSON.parse(host.url!) };
}

/** The host's record of the one server it joined (fleet/list), as its panel `panel` sees it. */
export async function joinedRecord(panel: RpcClient): Promise<MonitorServer> {
  return ((await panel.request('fleet/list', {})) as { servers: MonitorServer[] }).servers[0]!;
}

/**
 * The suite's hostile server (answering `answers` too) and a host joining it, with one agent and one panel of that
 * host: started before the suite's tests, closed after them.
 */
export function hostileFleetRig(answers: Parameters<typeof startHostileServer>[0] = {}) {
  const rig = {} as {
    evil: HostileServer;
    host: Cli;
    agent: RpcClient & { sessionId: string };
    panel: RpcClient & { sessionId: string };
  };
  before(async () => {
    rig.evil = await startHostileServer(answers);
    const { host, info } = await startHostJoining(rig.evil);
    rig.host = host;
    rig.agent = await RpcClient.open(`${info.url}/?token=${info.agent}`, 'local-agent');
    rig.panel = await RpcClient.open(`${info.url}/?token=${info.panel}`, 'panel');
  });
  after(async () => {
    rig.agent?.close();
    rig.panel?.close();
    await rig.host?.stop();
    await rig.evil?.close();
  });
  return rig;
}
