/**
 * The servers a fleet host joined (src/fleet), as the monitor and the panel's actions need them: their rows for a
 * snapshot, and their own actions. Every row is tagged with its server's id by the fleet, never by the server itself.
 * (An interface here, so that src/server does not import src/fleet: the fleet implements it.)
 */
import { invalidRequest } from '../../protocol/errors.js';
import type {
  FollowResult,
  MonitorAudit,
  MonitorBlocked,
  MonitorProcess,
  MonitorServer,
  MonitorSession,
} from '../../protocol/monitor.js';

export interface JoinedServers {
  servers(): MonitorServer[];
  processes(): Iterable<MonitorProcess>;
  sessions(): Iterable<MonitorSession>;
  blocked(): Iterable<MonitorBlocked>;
  audit(): Iterable<MonitorAudit>;
  /** A monitor method on server `id` (its own ids in `params`), with that server's credential; its checked result. */
  forward(id: string, method: string, params: Record<string, unknown>): Promise<unknown>;
  /** Starts or stops the live output of one of server `id`'s processes (reference-counted by the fleet). */
  follow(id: string, ref: { sessionId: string; processId: string }, on: boolean): Promise<FollowResult>;
}

/** The joined server a request names (`server`), or null for this host; a server that is not joined is an error. */
export function remoteServer(joined: JoinedServers | null, server: string | null | undefined): string | null {
  if (server === null || server === undefined || server === '') return null;
  if (!joined?.servers().some((s) => s.id === server)) throw invalidRequest(`unknown server ${server}`);
  return server;
}
