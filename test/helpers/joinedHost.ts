// A fleet host run in a child process (helpers/fleetHostChild.ts) that joins one server: the hostile tests' host.
import { type Cli, startCli } from './cli.js';
import type { HostileServer } from './hostileServer.js';

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
