// The preload's whole logic, without Electron: a JSON-RPC client over an ipcRenderer-like object, shaped as the
// two functions the panel may use. Tested in test/unit/ipc*.test.ts against the real dispatcher.
import {
  type ClientApi,
  encodeBridgeError,
  IPC_CHANNEL,
  IPC_CONTROL,
  type NotificationHandler,
  RpcClientCore,
  RpcRemoteError,
} from '../src/protocol/client.js';

export interface IpcRendererLike {
  send(channel: string, ...args: unknown[]): void;
  on(channel: string, listener: (event: unknown, ...args: unknown[]) => void): unknown;
}

/** Sent through onNotification when main closes the connection; the next request opens a new one. */
export const TRANSPORT_CLOSED = 'transport/closed';

export function createBridgeApi(ipc: IpcRendererLike): ClientApi {
  const core = new RpcClientCore((text) => ipc.send(IPC_CHANNEL, text));
  const handlers = new Set<NotificationHandler>();
  // Receipts: once per task, how many messages were handled, so main can apply backpressure (ipcTransport acks).
  let received = 0;
  let ackScheduled = false;
  const sendAck = () => {
    ackScheduled = false;
    const n = received;
    received = 0;
    if (n > 0) ipc.send(IPC_CONTROL, { type: 'ack', n });
  };
  ipc.on(IPC_CHANNEL, (_e, text) => {
    if (typeof text === 'string') core.receive(text);
    received++;
    if (!ackScheduled) {
      ackScheduled = true;
      setTimeout(sendAck, 0);
    }
  });
  ipc.on(IPC_CONTROL, (_e, msg) => {
    const m = msg as { type?: string; code?: number; reason?: string } | null;
    if (m?.type !== 'closed') return;
    core.fail(`connection closed (${m.code ?? 0})`);
    received = 0;
    // Ready for the next connection (the panel reconnects by sending requests again).
    ipc.send(IPC_CONTROL, { type: 'open', acks: true });
    for (const h of [...handlers]) h(TRANSPORT_CLOSED, { code: m.code ?? 0, reason: m.reason ?? '' });
  });
  // A fresh connection for this page (replaces the one of a previous load of the same window).
  ipc.send(IPC_CONTROL, { type: 'open', acks: true });
  return {
    // Errors cross the contextBridge with their message only: keep the JSON-RPC code in it.
    request: (method: string, params?: unknown) =>
      core.request(String(method), params ?? null).catch((e: unknown) => {
        const err = e instanceof RpcRemoteError ? e : new RpcRemoteError(0, String(e));
        throw new Error(encodeBridgeError(err.code, err.message));
      }),
    onNotification: (handler: NotificationHandler) => {
      if (typeof handler !== 'function') throw new TypeError('onNotification needs a function');
      const off = core.onNotification(handler);
      handlers.add(handler);
      return () => {
        off();
        handlers.delete(handler);
      };
    },
  };
}
