/** What the entry points of the HTTP proxy (request.ts, upgrade.ts, connect.ts) share; http.ts builds it. */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { ForwardAgents, TunnelOrigin } from './dial.js';
import type { CredentialBroker } from './mitm/broker.js';
import type { Interceptor } from './mitm/interceptor.js';
import type { PolicyEngine } from './policy.js';
import type { Recorder } from './recorder.js';

export interface HttpContext extends TunnelOrigin {
  readonly policy: PolicyEngine;
  readonly recorder: Recorder;
  readonly agents: ForwardAgents;
  readonly idleTimeoutMs: number;
  /** TLS interception, when on (issue 34). */
  readonly mitm?: Interceptor | undefined;
  /** The credential broker, when on (issue 34): plain requests may get a real token too. */
  readonly broker?: CredentialBroker | undefined;
  /**
   * Takes over a socket that Node's server handed out (CONNECT, upgrade): tracked, destroyed on error, with no idle
   * timeout while it tunnels.
   */
  adopt(socket: Duplex): void;
  /** Gives a socket back to the HTTP server as a new connection (a refused CONNECT keeps it open, §4.3). */
  reattach(socket: Duplex): void;
}

/** An entry point for a socket Node's server hands out with its request (`connect`, `upgrade`). */
export type SocketEntry = (
  ctx: HttpContext,
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
) => Promise<void>;
