/**
 * The client side of the protocol, pure (no Node, no DOM): request ids, pending requests and notification fan-out
 * over any text transport (`RpcClientCore`), the two functions the panel talks through (`ClientApi`), and the
 * Electron IPC channel names with the error encoding that crosses its contextBridge. Used by the preload's bridge
 * (preload/bridge.ts) and by the panel's WebSocket link (renderer/client.ts); the server side of the IPC is
 * src/rpc/ipcTransport.ts.
 */

import type { MethodName, MethodParams, MethodResult } from './methods.js';

/** JSON-RPC text, both directions. */
export const IPC_CHANNEL = 'corral:rpc';
/** Renderer → main: (re)open the connection for this renderer (page load). Main → renderer: the connection closed. */
export const IPC_CONTROL = 'corral:rpc-control';

/** An error answer of the server (`{"error":{code,message}}`), or a transport failure (code 0). */
export class RpcRemoteError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
    this.name = 'RpcRemoteError';
  }
}

/** Errors cross Electron's contextBridge with only their message: the code travels as a `[code] ` prefix. */
export function encodeBridgeError(code: number, message: string): string {
  return `[${code}] ${message}`;
}

export function decodeBridgeError(e: unknown): RpcRemoteError {
  const text = e instanceof Error ? e.message : String(e);
  const m = /^(?:Error invoking remote method '[^']*': )?(?:Error: )?\[(-?\d+)\] ([\s\S]*)$/.exec(text);
  return m ? new RpcRemoteError(Number(m[1]), m[2]!) : new RpcRemoteError(0, text);
}

export type NotificationHandler = (method: string, params: unknown) => void;

/** The whole client API the panel talks through, in Electron (preload) and in a browser (WebSocket). */
export interface ClientApi {
  request(method: string, params?: unknown): Promise<unknown>;
  onNotification(handler: NotificationHandler): () => void;
}

/** Requests typed by the method table (src/protocol/methods.ts): its params in, its result out. */
export interface TypedRequests {
  request<M extends MethodName>(method: M, params: MethodParams<M>): Promise<MethodResult<M>>;
}

/** `api` with its requests typed by the method table (the same calls: only their types change). */
export function typedRequests(api: ClientApi): TypedRequests {
  return { request: (method, params) => api.request(method, params) as Promise<never> };
}

/**
 * JSON-RPC client state over any text transport: request ids, pending promises, notification fan-out. `receive`
 * takes each inbound message; `fail` rejects everything pending (the transport is gone).
 */
export class RpcClientCore implements ClientApi {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private readonly handlers = new Set<NotificationHandler>();

  constructor(private readonly sendText: (text: string) => void) {}

  get pendingCount(): number {
    return this.pending.size;
  }

  /**
   * Sends a request. The one client notification of the protocol, `initialized`, also goes through here (the
   * bridge exposes only `request`): it is sent as a notification and resolves to null.
   */
  request(method: string, params: unknown = null): Promise<unknown> {
    if (method === 'initialized') {
      try {
        this.notify(method, params ?? {});
        return Promise.resolve(null);
      } catch (e) {
        return Promise.reject(new RpcRemoteError(0, e instanceof Error ? e.message : String(e)));
      }
    }
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      try {
        this.sendText(JSON.stringify({ id, method, params }));
      } catch (e) {
        this.pending.delete(id);
        reject(new RpcRemoteError(0, e instanceof Error ? e.message : String(e)));
      }
    });
  }

  /** Sends a notification (e.g. `initialized`). */
  notify(method: string, params: unknown = {}): void {
    this.sendText(JSON.stringify({ method, params }));
  }

  onNotification(handler: NotificationHandler): () => void {
    this.handlers.add(handler);
    return () => this.handlers.delete(handler);
  }

  receive(text: string): void {
    let msg: { id?: unknown; method?: unknown; params?: unknown; result?: unknown; error?: unknown };
    try {
      msg = JSON.parse(text);
    } catch {
      return;
    }
    if (typeof msg.method === 'string') {
      for (const h of [...this.handlers]) {
        try {
          h(msg.method, msg.params);
        } catch {
          // a failing handler must not break the others
        }
      }
      return;
    }
    if (typeof msg.id !== 'number') return;
    const p = this.pending.get(msg.id);
    if (!p) return;
    this.pending.delete(msg.id);
    if (msg.error && typeof msg.error === 'object') {
      const err = msg.error as { code?: number; message?: string };
      p.reject(new RpcRemoteError(err.code ?? 0, err.message ?? 'error'));
    } else p.resolve(msg.result);
  }

  fail(reason: string): void {
    const all = [...this.pending.values()];
    this.pending.clear();
    for (const p of all) p.reject(new RpcRemoteError(0, reason));
  }
}
