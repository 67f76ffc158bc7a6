/**
 * The desktop app's IPC as one more client connection of the exec server's dispatcher: the renderer sends the same
 * JSON-RPC text it would send over the WebSocket, main feeds it to `server.connect(ipcTransport)`, and responses and
 * notifications go back as text. Same zod validation, same ExecParams, no second API. Electron is not imported here:
 * `serveIpc` takes `ipcMain`-like and `webContents`-like objects, so it is tested without the Electron binary.
 *
 * The client side (the preload's bridge, the panel's WebSocket) is src/protocol/client.ts.
 */
import { IPC_CHANNEL, IPC_CONTROL } from '../protocol/client.js';
import { MAX_MESSAGE_BYTES } from '../protocol/methods.js';
import type { RpcConnection, Transport } from './connection.js';

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

/** Where connections go, as whom (`P`: what the server calls a connection's proof of identity). */
export interface ConnectTarget<P> {
  connect(transport: Transport, principal: P): RpcConnection;
}

export interface IpcServeOptions<P> {
  /** Only these senders may talk to the server (the app's own window). Others are ignored and logged. */
  isTrusted?: (sender: IpcSenderLike) => boolean;
  onRejected?: (sender: IpcSenderLike) => void;
  /** What every renderer's connection is (the app's own window: the panel). */
  principal: P;
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
    write(messages, onWritten) {
      if (sender.isDestroyed()) {
        onWritten();
        return;
      }
      const last = messages.length - 1;
      for (let i = 0; i <= last; i++) {
        sender.send(IPC_CHANNEL, messages[i]!.toString('utf8'));
        if (acks) pending.push(i === last ? onWritten : null);
      }
      if (!acks) onWritten();
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
export function serveIpc<P>(
  server: ConnectTarget<P>,
  ipcMain: IpcMainLike,
  opts: IpcServeOptions<P>,
): IpcServer {
  const connections = new Map<number, RpcConnection>();
  const transports = new Map<number, IpcTransport>();
  /** Whether each renderer's bridge acknowledges messages (announced in its `open`). */
  const ackMode = new Map<number, boolean>();
  const watched = new Set<number>();

  const open = (sender: IpcSenderLike): RpcConnection => {
    connections.get(sender.id)?.transportClosed();
    const transport = ipcTransport(sender, { acks: ackMode.get(sender.id) ?? false });
    transports.set(sender.id, transport);
    const conn = server.connect(transport, opts.principal);
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
    if (text.length > MAX_MESSAGE_BYTES) {
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
