// The desktop wiring without the Electron binary: main's IPC server (host.serveIpc → src/rpc/ipcTransport.ts) and
// the preload's bridge (preload/bridge.ts) joined by a fake ipcMain/ipcRenderer pair that behaves like Electron's
// (asynchronous delivery, structured-clone copies, a webContents that can be destroyed), against the real dispatcher.
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { after, before, describe, test } from 'node:test';
import { createBridgeApi, TRANSPORT_CLOSED } from '../../preload/bridge.js';
import { type Host, startHost } from '../../src/app/host.js';
import { type ClientApi, decodeBridgeError, IPC_CHANNEL, IPC_CONTROL } from '../../src/protocol/client.js';
import type { IpcEventLike, IpcMainLike, IpcSenderLike } from '../../src/rpc/ipcTransport.js';
import { alive, until } from '../helpers/server.js';

class FakeWebContents extends EventEmitter implements IpcSenderLike {
  private static next = 1;
  readonly id = FakeWebContents.next++;
  destroyed = false;
  /** What the renderer side receives. */
  readonly toRenderer = new EventEmitter();

  /** Every text message main sent to this renderer, in order. */
  readonly received: string[] = [];

  send(channel: string, ...args: unknown[]): void {
    if (this.destroyed) throw new Error('Object has been destroyed');
    const copy = structuredClone(args);
    if (channel === IPC_CHANNEL) this.received.push(copy[0] as string);
    setImmediate(() => this.toRenderer.emit(channel, {}, ...copy));
  }
  isDestroyed(): boolean {
    return this.destroyed;
  }
  destroy(): void {
    this.destroyed = true;
    this.emit('destroyed');
  }
}

class FakeIpcMain extends EventEmitter implements IpcMainLike {
  override on(channel: string, listener: (event: IpcEventLike, ...args: unknown[]) => void): this {
    return super.on(channel, listener);
  }
}

/** A renderer window: its webContents (main side) and its ipcRenderer (preload side). */
function fakeWindow(ipcMain: FakeIpcMain) {
  const wc = new FakeWebContents();
  const ipcRenderer = {
    sent: [] as unknown[],
    /** While set, the renderer's receipts (acks) are held back: a renderer that has fallen behind. */
    holdAcks: false,
    held: [] as unknown[][],
    send(channel: string, ...args: unknown[]) {
      const copy = structuredClone(args);
      this.sent.push(copy[0]);
      if (this.holdAcks && (copy[0] as { type?: string } | null)?.type === 'ack') {
        this.held.push(copy);
        return;
      }
      setImmediate(() => ipcMain.emit(channel, { sender: wc }, ...copy));
    },
    releaseAcks() {
      this.holdAcks = false;
      for (const copy of this.held.splice(0))
        setImmediate(() => ipcMain.emit(IPC_CONTROL, { sender: wc }, ...copy));
    },
    on(channel: string, listener: (event: unknown, ...args: unknown[]) => void) {
      wc.toRenderer.on(channel, listener);
    },
  };
  return { wc, ipcRenderer };
}

async function handshake(api: ClientApi, name = 'panel'): Promise<string> {
  const r = (await api.request('initialize', { clientName: name })) as { sessionId: string };
  await api.request('initialized', {});
  return r.sessionId;
}

function collector(api: ClientApi) {
  const seen: { method: string; params: Record<string, unknown> }[] = [];
  api.onNotification((method, params) => seen.push({ method, params: params as Record<string, unknown> }));
  return {
    seen,
    async waitFor(pred: (n: { method: string; params: Record<string, unknown> }) => boolean, ms = 10_000) {
      await until(() => seen.some(pred), ms, 'notification');
      return seen.find(pred)!;
    },
  };
}

describe('IPC: main + preload against the same dispatcher', () => {
  let host: Host;
  let ipcMain: FakeIpcMain;
  let trusted: Set<number>;

  before(async () => {
    host = await startHost({ resumeGraceMs: 0 });
    ipcMain = new FakeIpcMain();
    trusted = new Set();
    host.serveIpc(ipcMain, (sender) => trusted.has(sender.id));
  });
  after(async () => {
    await host.shutdown();
  });

  test('the bridge exposes exactly request and onNotification', () => {
    const { ipcRenderer } = fakeWindow(ipcMain);
    assert.deepEqual(Object.keys(createBridgeApi(ipcRenderer)).sort(), ['onNotification', 'request']);
  });

  test('handshake, process/start, notifications and the monitor over IPC; errors keep their code', async () => {
    const { wc, ipcRenderer } = fakeWindow(ipcMain);
    trusted.add(wc.id);
    const api = createBridgeApi(ipcRenderer);
    const n = collector(api);

    // Same lifecycle rules as the WebSocket: exec methods before initialize are refused.
    const early = await api.request('process/read', { processId: 'x' }).catch((e) => decodeBridgeError(e));
    assert.equal((early as { code: number }).code, -32600);
    assert.equal((early as Error).message, 'client must call initialize before using exec methods');

    const sessionId = await handshake(api);
    assert.match(sessionId, /^[0-9a-f-]{36}$/);
    // Same zod validation and serde-style texts as over the WebSocket.
    const bad = await api
      .request('process/start', { processId: 'p', argv: 'ls' })
      .catch((e) => decodeBridgeError(e));
    assert.equal((bad as { code: number }).code, -32602);
    assert.match((bad as Error).message, /invalid type: string "ls", expected a sequence/);
    const unknown = await api.request('nope/method', {}).catch((e) => decodeBridgeError(e));
    assert.equal((unknown as { code: number }).code, -32601);

    const started = await api.request('process/start', {
      processId: 'ipc-1',
      argv: ['/bin/sh', '-c', 'echo over-ipc'],
      cwd: '/tmp',
      env: {},
      tty: false,
    });
    assert.deepEqual(started, { processId: 'ipc-1', sandboxType: 'none' });
    await n.waitFor((x) => x.method === 'process/closed' && x.params.processId === 'ipc-1');
    const out = n.seen.find((x) => x.method === 'process/output' && x.params.processId === 'ipc-1');
    assert.equal(Buffer.from(out!.params.chunk as string, 'base64').toString(), 'over-ipc\n');
    // The start response came before the first notification of the process (the dispatcher's guarantee holds).
    const resp = wc.received.findIndex((t) => t.includes('"result":{"processId":"ipc-1"'));
    const first = wc.received.findIndex((t) => t.startsWith('{"method":"process/output"'));
    assert.ok(resp >= 0 && first > resp, `response at ${resp}, first output at ${first}`);

    // The IPC connection is privileged: the monitor sees every session.
    const snap = (await api.request('monitor/subscribe', {})) as { processes: { processId: string }[] };
    assert.ok(snap.processes.some((p) => p.processId === 'ipc-1'));
    const info = (await api.request('host/info', {})) as { execUrl: string };
    assert.equal(info.execUrl, host.execUrl);
    wc.destroy();
  });

  test('a destroyed window detaches its session and its processes are killed', async () => {
    const { wc, ipcRenderer } = fakeWindow(ipcMain);
    trusted.add(wc.id);
    const api = createBridgeApi(ipcRenderer);
    const sessionId = await handshake(api);
    await api.request('process/start', {
      processId: 'long',
      argv: ['/bin/sleep', '300'],
      cwd: '/tmp',
      env: {},
      tty: false,
    });
    const pid = host.server.sessionByResumeKey(sessionId)!.get('long')!.pid;
    assert.ok(alive(pid));
    wc.destroy();
    await until(() => !alive(pid), 5000, 'child killed');
    assert.equal(!!host.server.sessionByResumeKey(sessionId), false);
  });

  test('reloading the page (a new open) replaces the connection; the old session is gone', async () => {
    const { wc, ipcRenderer } = fakeWindow(ipcMain);
    trusted.add(wc.id);
    const first = createBridgeApi(ipcRenderer);
    const s1 = await handshake(first);
    const second = createBridgeApi(ipcRenderer); // the preload runs again on reload
    const s2 = await handshake(second, 'panel-2');
    assert.notEqual(s1, s2);
    await until(() => !host.server.sessionByResumeKey(s1), 5000, 'old session expired');
    wc.destroy();
  });

  test('a renderer that falls behind pauses the child instead of queueing without bound', async () => {
    const { wc, ipcRenderer } = fakeWindow(ipcMain);
    trusted.add(wc.id);
    const api = createBridgeApi(ipcRenderer);
    const sessionId = await handshake(api);
    ipcRenderer.holdAcks = true;
    await api.request('process/start', {
      processId: 'flood',
      argv: ['/usr/bin/head', '-c', String(64 << 20), '/dev/zero'],
      cwd: '/tmp',
      env: {},
      tty: false,
    });
    const proc = host.server.sessionByResumeKey(sessionId)!.get('flood')!;
    // The session's high-water mark (8 MiB queued) pauses the child's output.
    await until(() => (proc as unknown as { paused: boolean }).paused, 10_000, 'child paused');
    const sentBytes = () => wc.received.reduce((n, t) => n + t.length, 0);
    assert.equal(proc.state, 'running');
    assert.ok(sentBytes() < 16 << 20, `sent ${sentBytes()} bytes to a renderer that acknowledged nothing`);
    ipcRenderer.releaseAcks();
    await until(() => proc.state === 'closed', 30_000, 'flood finished');
    await until(
      () => wc.received.some((t) => t.startsWith('{"method":"process/closed"')),
      10_000,
      'closed delivered',
    );
    let bytes = 0;
    for (const t of wc.received) {
      if (!t.startsWith('{"method":"process/output"')) continue;
      bytes += Buffer.from((JSON.parse(t) as { params: { chunk: string } }).params.chunk, 'base64').length;
    }
    assert.equal(bytes, 64 << 20);
    wc.destroy();
  });

  test('an untrusted renderer gets nothing', async () => {
    const { wc, ipcRenderer } = fakeWindow(ipcMain);
    const api = createBridgeApi(ipcRenderer);
    const before = host.server.sessions.size;
    let answered = false;
    void api.request('initialize', { clientName: 'intruder' }).then(() => {
      answered = true;
    });
    // Delivery is asynchronous: wait until main has certainly processed the message (a trusted round trip after it).
    const { wc: okWc, ipcRenderer: okRenderer } = fakeWindow(ipcMain);
    trusted.add(okWc.id);
    const ok = createBridgeApi(okRenderer);
    await handshake(ok);
    assert.equal(answered, false);
    assert.equal(host.server.sessions.size, before + 1);
    wc.destroy();
    okWc.destroy();
  });

  test('a message that is not text closes the connection with a notice to the renderer', async () => {
    const { wc, ipcRenderer } = fakeWindow(ipcMain);
    trusted.add(wc.id);
    const api = createBridgeApi(ipcRenderer);
    const n = collector(api);
    await handshake(api);
    ipcRenderer.send(IPC_CHANNEL, { not: 'text' });
    const closed = await n.waitFor((x) => x.method === TRANSPORT_CLOSED);
    assert.equal(closed.params.code, 1002);
    // The next request opens a fresh connection (reconnect).
    await handshake(api, 'again');
    wc.destroy();
  });
});
