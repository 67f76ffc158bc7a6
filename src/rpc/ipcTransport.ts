/**
 * The desktop app's IPC as one more client connection of the exec server's dispatcher: the renderer sends the same
 * JSON-RPC text it would send over the WebSocket, main feeds it to `server.connect(ipcTransport)`, and responses and
 * notifications go back as text. Same zod validation, same ExecParams, no second API. Electron is not imported here:
 * `serveIpc` takes `ipcMain`-like and `webContents`-like objects, so it is tested without the Electron binary.
 *
 * The second half, `RpcClientCore`, is the pure client side (ids, pending requests, notification handlers) used by
 * the preload script and by the panel's WebSocket transport. It imports nothing from Node.
 */
import type { Principal } from '../server/auth.js';
import type { RpcConnection, Transport } from './connection.js';

/** JSON-RPC text, both directions. */
export const IPC_CHANNEL = 'corral:rpc';
/** Renderer → main: (re)open the connection for this renderer (page load). Main → renderer: the connection closed. */
export const IPC_CONTROL = 'corral:rpc-control';
/** Same limit as the WebSocket (protocol.md §2.2). */
export const IPC_MAX_MESSAGE = 16 * 1024 * 1024;

export interface IpcSenderLike {
  readonly id: number;
  send(channel: string, ...args: unknown[]): void;
  isDestroyed(): boolean;
  once(event: 'destroyed', listener: () => void): unknown;
}

export interface IpcEventLike {
  readonly sender: IpcSenderLike;
}

export interface IpcMainLike {
  on(channel: string, listener: (event: IpcEventLike, ...args: unknown[]) => void): unknown;
  removeListener(channel: string, listener: (event: IpcEventLike, ...args: unknown[]) => void): unknown;
}

export interface ConnectTarget {
  connect(transport: Transport, principal?: Principal): RpcConnection;
}

export interface IpcServeOptions {
  /** Only these senders may talk to the server (the app's own window). Others are ignored and logged. */
  isTrusted?: (sender: IpcSenderLike) => boolean;
  onRejected?: (sender: IpcSenderLike) => void;
  /** What the renderer's connection is: the app's own window is the panel (the default). */
  principal?: Principal;
}

export interface IpcServer {
  /** Live connections, by sender id. */
  readonly connections: ReadonlyMap<number, RpcConnection>;
  /** Their transports (unacknowledged message counts), by sender id. */
  readonly transports: ReadonlyMap<number, IpcTransport>;
  /** Stops listening and closes every connection. */
  close(): void;
}

/** The transport of one renderer, with `ack` for the renderer's receipts (see `ipcTransport`). */
export interface IpcTransport extends Transport {
  /** The renderer has handled `n` more messages. */
  ack(n: number): void;
  /** Messages sent and not yet acknowledged. */
  readonly unacked: number;
}

/**
 * The transport of one renderer: messages out through `sender.send`, close as a control message. With `acks`, a
 * message counts as written (its `onWritten` runs) only when the renderer acknowledges it, so a renderer that falls
 * behind applies the same backpressure to the children as a slow WebSocket (protocol.md §5.9) instead of queueing
 * without bound inside Electron's IPC.
 */
export function ipcTransport(sender: IpcSenderLike, opts: { acks?: boolean } = {}): IpcTransport {
  const acks = opts.acks ?? false;
  let pending: ((() => void) | null)[] = [];
  let head = 0;
  return {
    peer: `ipc:${sender.id}`,
    send(text, onWritten) {
      if (sender.isDestroyed()) {
        onWritten?.();
        return;
      }
      sender.send(IPC_CHANNEL, text);
      if (acks) pending.push(onWritten ?? null);
      else onWritten?.();
    },
    close(code, reason) {
      if (!sender.isDestroyed()) sender.send(IPC_CONTROL, { type: 'closed', code, reason: reason ?? '' });
    },
    ack(n) {
      const end = Math.min(pending.length, head + Math.max(0, Math.floor(n)));
      while (head < end) {
        const cb = pending[head];
        pending[head++] = null;
        cb?.();
      }
      if (head > 1024 && head * 2 > pending.length) {
        pending = pending.slice(head);
        head = 0;
      }
    },
    get unacked() {
      return pending.length - head;
    },
  };
}

/**
 * Serves the exec server to renderers over IPC: one panel connection per renderer (webContents), replaced when
 * the page (re)opens it, closed when the webContents is destroyed.
 */
export function serveIpc(server: ConnectTarget, ipcMain: IpcMainLike, opts: IpcServeOptions = {}): IpcServer {
  const connections = new Map<number, RpcConnection>();
  const transports = new Map<number, IpcTransport>();
  /** Whether each renderer's bridge acknowledges messages (announced in its `open`). */
  const ackMode = new Map<number, boolean>();
  const watched = new Set<number>();

  const open = (sender: IpcSenderLike): RpcConnection => {
    connections.get(sender.id)?.transportClosed();
    const transport = ipcTransport(sender, { acks: ackMode.get(sender.id) ?? false });
    transports.set(sender.id, transport);
    const conn = server.connect(transport, opts.principal ?? { role: 'panel', credential: 'ipc' });
    connections.set(sender.id, conn);
    if (!watched.has(sender.id)) {
      watched.add(sender.id);
      sender.once('destroyed', () => {
        watched.delete(sender.id);
        connections.get(sender.id)?.transportClosed();
        connections.delete(sender.id);
        transports.delete(sender.id);
        ackMode.delete(sender.id);
      });
    }
    return conn;
  };

  const trusted = (sender: IpcSenderLike): boolean => {
    if (opts.isTrusted && !opts.isTrusted(sender)) {
      opts.onRejected?.(sender);
      return false;
    }
    return true;
  };

  const onMessage = (event: IpcEventLike, text: unknown) => {
    if (!trusted(event.sender)) return;
    let conn = connections.get(event.sender.id);
    if (!conn || conn.closed) conn = open(event.sender);
    if (typeof text !== 'string') {
      conn.close(1002, 'IPC messages must be JSON text');
      connections.delete(event.sender.id);
      return;
    }
    if (text.length > IPC_MAX_MESSAGE) {
      conn.close(1009, 'message too big');
      connections.delete(event.sender.id);
      return;
    }
    conn.receive(text);
  };
  const onControl = (event: IpcEventLike, msg: unknown) => {
    if (!trusted(event.sender)) return;
    const m = msg as { type?: unknown; acks?: unknown; n?: unknown } | null;
    const type = m?.type;
    if (type === 'ack') {
      if (typeof m?.n === 'number') transports.get(event.sender.id)?.ack(m.n);
    } else if (type === 'open') {
      ackMode.set(event.sender.id, m?.acks === true);
      open(event.sender);
    } else if (type === 'close') {
      connections.get(event.sender.id)?.transportClosed();
      connections.delete(event.sender.id);
    }
  };
  ipcMain.on(IPC_CHANNEL, onMessage);
  ipcMain.on(IPC_CONTROL, onControl);
  return {
    connections,
    transports,
    close() {
      ipcMain.removeListener(IPC_CHANNEL, onMessage);
      ipcMain.removeListener(IPC_CONTROL, onControl);
      for (const c of connections.values()) c.close(1001, 'app quitting');
      connections.clear();
    },
  };
}

// ---- client side (pure) ----------------------------------------------------------------------------------------

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
