/**
 * The server side of the method table (src/protocol/methods.ts). Modules register a handler per method; each request
 * is then looked up (an unknown or unserved method: -32601, before anything else), gated (the handshake first; a
 * panel method for panel credentials only; an agent method never for a watching panel), parsed with its params schema (-32602 naming the field) and handed to its
 * handler, typed by the table, with the connection it came on.
 */
import { invalidRequest, methodNotFound } from '../../protocol/errors.js';
import {
  type Caller,
  isMethodName,
  METHODS,
  type MethodName,
  type MethodResult,
  type ParsedParams,
} from '../../protocol/methods.js';
import { Deferred, type ResultWithCallback, type RpcConnection } from '../../rpc/connection.js';
import type { Principal } from './auth.js';
import { parseParams } from './params.js';
import type { Session } from './session.js';

export const NOT_PRIVILEGED =
  'monitor and policy methods need a panel connection: the desktop app itself, or a WebSocket client that ' +
  'presented the panel token (the agent token is not enough)';

export const FLEET_NOT_PRIVILEGED =
  'fleet methods need a panel connection: the desktop app itself, or a WebSocket client that presented the panel ' +
  'token (the agent token is not enough)';

export const APPROVALS_NOT_PRIVILEGED =
  'approval methods need a panel connection: the desktop app itself, or a WebSocket client that presented the ' +
  'panel token (an agent can never see or decide an approval)';

export const WATCHING_PANEL =
  "process and fs methods need an agent or the host's own panel: this connection presented the watching panel " +
  'credential (--panel-token-file, what a fleet host holds), which watches and steers but never starts a process ' +
  'or touches a file';

export type Phase = 'new' | 'initializing' | 'ready';

/** What the server keeps of each connection. */
export interface ConnState {
  phase: Phase;
  session: Session | null;
  clientName: string;
  /** What the connection proved (src/server/core/auth.ts): sessions it creates are bound to it. */
  readonly principal: Principal;
  /** This connection's fs/* requests, in order among themselves but apart from its other requests. */
  readonly fsLane: Lane;
  /** Declared in `initialize {capabilities: {networkApprovals: true}}`: it answers `network/policyRequest`. */
  answersNetworkApprovals: boolean;
}

/** Who is on a connection of the server (for the approval broker); null for a connection it did not make. */
export function clientOf(
  conn: RpcConnection,
): Pick<ConnState, 'principal' | 'clientName' | 'answersNetworkApprovals'> | null {
  const st = conn.state as ConnState | undefined;
  if (!st || typeof st !== 'object' || !('principal' in st)) return null;
  return st;
}

/** One request, as its handler sees it. */
export interface Call {
  readonly conn: RpcConnection;
  readonly state: ConnState;
}

/** What a handler may answer: the result, now or later (a Promise holds the connection's queue, a Deferred not). */
export type Reply<R> =
  | R
  | ResultWithCallback<R>
  | Deferred<R>
  | Promise<R | ResultWithCallback<R> | Deferred<R>>;

export type Handler<M extends MethodName> = (params: ParsedParams<M>, call: Call) => Reply<MethodResult<M>>;

export interface HandlerOptions {
  /**
   * `fs`: answered when done without holding the connection's queue (protocol.md §3.6), in order with the
   * connection's other fs/* requests: a FIFO, a slow disk or a big copy must not delay process/terminate.
   */
  lane?: 'fs';
}

/** What a module that serves methods needs of the server: a place to register them. */
export interface MethodRegistry {
  handle<M extends MethodName>(method: M, handler: Handler<M>, opts?: HandlerOptions): void;
}

/**
 * Requests run one after another on a lane: each starts when the one before has settled, and a failure does not
 * stop the ones behind it.
 */
export class Lane {
  private tail: Promise<unknown> = Promise.resolve();
  run<T>(work: () => Promise<T>): Promise<T> {
    const r = this.tail.then(work);
    this.tail = r.catch(() => {});
    return r;
  }
}

interface Registered {
  handler: (params: unknown, call: Call) => unknown;
  lane: HandlerOptions['lane'];
}

export class MethodDispatch implements MethodRegistry {
  private readonly handlers = new Map<MethodName, Registered>();

  handle<M extends MethodName>(method: M, handler: Handler<M>, opts: HandlerOptions = {}): void {
    this.handlers.set(method, { handler: handler as Registered['handler'], lane: opts.lane });
  }

  /** The methods this server answers. */
  served(): MethodName[] {
    return [...this.handlers.keys()];
  }

  /** The handler of `method`, for a module that extends it (the fleet extends approvals/*). */
  handlerOf<M extends MethodName>(method: M): Handler<M> | undefined {
    return this.handlers.get(method)?.handler as Handler<M> | undefined;
  }

  /** Answers one request of `conn` (throws an RpcError to answer an error). */
  call(method: string, params: unknown, conn: RpcConnection): unknown {
    const registered = isMethodName(method) ? this.handlers.get(method) : undefined;
    if (!registered) throw methodNotFound(method);
    const spec = METHODS[method as MethodName];
    const state = conn.state as ConnState;
    gate(method, spec.caller, state);
    const run = () =>
      registered.handler(
        parseParams(spec.params, params, spec.paramsName, spec.fieldErrors, spec.fastParams),
        {
          conn,
          state,
        },
      );
    if (registered.lane === 'fs') return new Deferred(state.fsLane.run(async () => run()));
    return run();
  }
}

function gate(method: string, caller: Caller, state: ConnState): void {
  if (caller === 'handshake') {
    if (state.phase !== 'new') throw invalidRequest(`${method} may only be sent once per connection`);
    return;
  }
  if (state.phase !== 'ready') {
    const what = method.startsWith('fs/') ? 'filesystem' : 'exec';
    throw invalidRequest(
      state.phase === 'new'
        ? `client must call initialize before using ${what} methods`
        : `client must send initialized before using ${what} methods`,
    );
  }
  if (caller === 'agent' && state.principal.watchOnly) throw invalidRequest(WATCHING_PANEL);
  if (caller === 'panel' && state.principal.role !== 'panel')
    throw invalidRequest(
      method.startsWith('approvals/')
        ? APPROVALS_NOT_PRIVILEGED
        : method.startsWith('fleet/')
          ? FLEET_NOT_PRIVILEGED
          : NOT_PRIVILEGED,
    );
}
