// main/desktop.ts without the Electron binary: fake app/BrowserWindow/session/ipcMain objects that record what the
// app asks of Electron, and the real preload bridge talking to the real dispatcher through them.
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { type AddressInfo, createServer } from 'node:net';
import { describe, test } from 'node:test';
import { type ElectronDeps, runDesktop, webPreferences } from '../../main/desktop.js';
import { createBridgeApi } from '../../preload/bridge.js';
import type { Logger } from '../../src/server/core/log.js';
import { alive, until } from '../helpers/server.js';

const quiet: Logger = { info() {}, warn() {}, error() {}, debug() {} };

class FakeContents extends EventEmitter {
  private static next = 100;
  readonly id = FakeContents.next++;
  destroyed = false;
  openHandler: ((d: { url: string }) => { action: string }) | null = null;
  readonly toRenderer = new EventEmitter();
  send(channel: string, ...args: unknown[]) {
    const copy = structuredClone(args);
    setImmediate(() => this.toRenderer.emit(channel, {}, ...copy));
  }
  isDestroyed() {
    return this.destroyed;
  }
  setWindowOpenHandler(h: (d: { url: string }) => { action: string }) {
    this.openHandler = h;
  }
}

function fakeElectron(opts: { lock?: boolean } = {}) {
  class FakeApp extends EventEmitter {
    quits = 0;
    readonly exits: number[] = [];
    requestSingleInstanceLock = () => opts.lock ?? true;
    whenReady = () => Promise.resolve();
    quit() {
      this.quits++;
      this.emit('before-quit', { preventDefault() {} });
    }
    exit(code: number) {
      this.exits.push(code);
    }
  }
  const app = new FakeApp();
  const windows: FakeWindow[] = [];
  class FakeWindow extends EventEmitter {
    readonly webContents = new FakeContents();
    loaded: string | null = null;
    constructor(readonly options: Record<string, unknown>) {
      super();
      windows.push(this);
      app.emit('web-contents-created', {}, this.webContents);
    }
    loadFile(p: string) {
      this.loaded = p;
      return Promise.resolve();
    }
    isDestroyed() {
      return false;
    }
    isMinimized() {
      return false;
    }
    restore() {}
    focus() {}
    show() {}
    static getAllWindows() {
      return windows;
    }
  }
  const permission: { handler: ((wc: unknown, p: string, cb: (ok: boolean) => void) => void) | null } = {
    handler: null,
  };
  const requests: {
    filter: unknown;
    handler: ((d: unknown, cb: (r: { cancel: boolean }) => void) => void) | null;
  } = {
    filter: null,
    handler: null,
  };
  const session = {
    defaultSession: {
      setPermissionRequestHandler: (h: typeof permission.handler) => {
        permission.handler = h;
      },
      webRequest: {
        onBeforeRequest: (filter: unknown, h: typeof requests.handler) => {
          requests.filter = filter;
          requests.handler = h;
        },
      },
    },
  };
  const opened: string[] = [];
  const shell = {
    openExternal: (url: string) => {
      opened.push(url);
      return Promise.resolve();
    },
  };
  const ipcMain = new EventEmitter();
  const deps = { app, BrowserWindow: FakeWindow, ipcMain, session, shell } as unknown as ElectronDeps;
  /** The preload side of a window. */
  const renderer = (wc: FakeContents) => ({
    send(channel: string, ...args: unknown[]) {
      const copy = structuredClone(args);
      setImmediate(() => ipcMain.emit(channel, { sender: wc }, ...copy));
    },
    on(channel: string, l: (e: unknown, ...a: unknown[]) => void) {
      wc.toRenderer.on(channel, l);
    },
  });
  return { deps, app, windows, permission, requests, opened, renderer };
}

const OPTS = {
  log: quiet,
  logFile: '/tmp/corral-test.log',
  preloadPath: '/app/preload.cjs',
  indexHtml: '/app/index.html',
};

describe('desktop main (fake Electron, real dispatcher)', () => {
  test('a second instance quits without starting anything', async () => {
    const f = fakeElectron({ lock: false });
    assert.equal(await runDesktop(f.deps, OPTS), null);
    assert.equal(f.app.quits, 1);
    assert.equal(f.windows.length, 0);
  });

  test('secure window, blocked navigation and popups, no permissions, no remote requests', async () => {
    const f = fakeElectron();
    const d = await runDesktop(f.deps, { ...OPTS, host: { resumeGraceMs: 0 } });
    assert.ok(d);
    try {
      assert.equal(f.windows.length, 1);
      const w = f.windows[0]!;
      assert.deepEqual(w.options.webPreferences, webPreferences('/app/preload.cjs'));
      const prefs = w.options.webPreferences as Record<string, unknown>;
      assert.equal(prefs.contextIsolation, true);
      assert.equal(prefs.sandbox, true);
      assert.equal(prefs.nodeIntegration, false);
      assert.equal(w.loaded, '/app/index.html');

      let prevented = 0;
      for (const ev of ['will-navigate', 'will-redirect', 'will-attach-webview']) {
        w.webContents.emit(ev, { preventDefault: () => prevented++ });
      }
      assert.equal(prevented, 3);
      assert.deepEqual(w.webContents.openHandler!({ url: 'https://127.0.0.1/docs' }), { action: 'deny' });
      assert.deepEqual(w.webContents.openHandler!({ url: 'file:///etc/passwd' }), { action: 'deny' });
      assert.deepEqual(f.opened, ['https://127.0.0.1/docs']);

      let granted: boolean | null = null;
      f.permission.handler!({}, 'media', (ok) => {
        granted = ok;
      });
      assert.equal(granted, false);
      for (const perm of ['geolocation', 'notifications', 'openExternal', 'clipboard-read']) {
        f.permission.handler!({}, perm, (ok) => {
          granted = ok;
        });
        assert.equal(granted, false, perm);
      }
      f.permission.handler!({}, 'clipboard-sanitized-write', (ok) => {
        granted = ok;
      });
      assert.equal(granted, true);
      let cancel: boolean | null = null;
      f.requests.handler!({ url: 'https://localhost/x.js' }, (r) => {
        cancel = r.cancel;
      });
      assert.equal(cancel, true);
      assert.deepEqual((f.requests.filter as { urls: string[] }).urls.sort(), [
        'http://*/*',
        'https://*/*',
        'ws://*/*',
        'wss://*/*',
      ]);
      assert.match(d.host.execUrl, /^ws:\/\/127\.0\.0\.1:\d+\/\?token=[\w-]{20,}$/);
    } finally {
      await d.host.shutdown();
    }
  });

  test('the window is a privileged client over IPC; other senders are ignored; quitting kills every child', async () => {
    const f = fakeElectron();
    const d = await runDesktop(f.deps, { ...OPTS, host: { resumeGraceMs: 60_000 } });
    assert.ok(d);
    const w = f.windows[0]!;
    const api = createBridgeApi(f.renderer(w.webContents));
    const r = (await api.request('initialize', { clientName: 'corral-panel' })) as { sessionId: string };
    await api.request('initialized', {});
    const info = (await api.request('host/info', {})) as { mode: string; logFile: string };
    assert.deepEqual([info.mode, info.logFile], ['desktop', '/tmp/corral-test.log']);
    await api.request('process/start', {
      processId: 'bg',
      argv: ['/bin/sleep', '300'],
      cwd: '/tmp',
      env: {},
      tty: false,
    });
    const pid = d.host.server.sessionByResumeKey(r.sessionId)!.get('bg')!.pid;
    assert.ok(alive(pid));

    // A webContents that is not the app's window gets no answer at all.
    const stranger = new FakeContents();
    const other = createBridgeApi(f.renderer(stranger));
    let answered = false;
    void other.request('initialize', { clientName: 'stranger' }).then(() => {
      answered = true;
    });
    await api.request('host/info', {});
    assert.equal(answered, false);
    assert.equal(d.host.server.sessions.size, 1);

    // Quit: before-quit is held until the host has shut down, then quit goes through.
    f.app.quit();
    await until(() => f.app.quits >= 2, 5000, 'quit after shutdown');
    assert.equal(alive(pid), false, 'the child died before the app quit');
  });

  test('a host that cannot start is fatal, with the reason', async () => {
    const f = fakeElectron();
    const messages: string[] = [];
    // The configured port is taken.
    const busy = createServer();
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', () => r()));
    try {
      const d = await runDesktop(f.deps, {
        ...OPTS,
        host: { port: (busy.address() as AddressInfo).port },
        onFatal: (m) => messages.push(m),
      });
      assert.equal(d, null);
      assert.equal(messages.length, 1);
      assert.match(messages[0]!, /^could not start the exec server: .*EADDRINUSE/);
      assert.equal(f.windows.length, 0);
    } finally {
      busy.close();
    }
  });
});
