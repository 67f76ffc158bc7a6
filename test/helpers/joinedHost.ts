// A fleet host run in a child process (helpers/fleetHostChild.ts) that joins one server: the hostile tests' host.
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import type { MonitorServer } from '../../src/protocol/monitor.js';
import { type Cli, startCli, tsEntry } from './cli.js';
import { callError, RpcClient } from './client.js';
import { stillServes } from './hostileJson.js';
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
      ...tsEntry('test/helpers/fleetHostChild.ts'),
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
 * host: started before the suite's tests, closed after them. `err` is the panel's call's error (code 0: answered);
 * `holds` asserts the host is up and still runs a process for its own agent.
 */
export function hostileFleetRig(answers: Parameters<typeof startHostileServer>[0] = {}) {
  const rig = {
    err: (method: string, params: unknown) => callError(rig.panel, method, params),
    async holds(word: string): Promise<void> {
      assert.equal(rig.host.proc.exitCode, null, `the host exited: ${rig.host.stderr().slice(-3000)}`);
      await stillServes(rig.agent, word);
    },
  } as {
    evil: HostileServer;
    host: Cli;
    agent: RpcClient & { sessionId: string };
    panel: RpcClient & { sessionId: string };
    err(method: string, params: unknown): Promise<{ code: number; message: string }>;
    holds(word: string): Promise<void>;
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
