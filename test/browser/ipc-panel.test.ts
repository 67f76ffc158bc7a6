// The panel over the desktop path, in Chromium: the page gets a `window.corral` with exactly request/onNotification
// (as the preload's contextBridge gives it), backed by the REAL preload bridge (preload/bridge.ts) talking over a fake
// ipcMain/webContents pair to the REAL IPC server of the host. Only Electron's transport is simulated.
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { after, before, describe, test } from 'node:test';
import { createBridgeApi } from '../../preload/bridge.js';
import { type Host, startHost } from '../../src/app/host.js';
import { IPC_CONTROL } from '../../src/protocol/client.js';
import type { IpcSenderLike } from '../../src/rpc/ipcTransport.js';
import { RpcClient } from '../helpers/client.js';
import { until } from '../helpers/server.js';
import { type Browser, ensureBuilt, openBrowser, visibleText } from './harness.js';

class FakeContents extends EventEmitter implements IpcSenderLike {
  readonly id = 4242;
  readonly toRenderer = new EventEmitter();
  send(channel: string, ...args: unknown[]) {
    const copy = structuredClone(args);
    setImmediate(() => this.toRenderer.emit(channel, {}, ...copy));
  }
  isDestroyed() {
    return false;
  }
}

describe('panel over the preload bridge (desktop path) in Chromium', () => {
  let host: Host;
  let browser: Browser;
  let agent: RpcClient & { sessionId: string };
  let wc: FakeContents;

  before(async () => {
    const panelDir = ensureBuilt();
    host = await startHost({ servePanel: true, panelDir, resumeGraceMs: 0 });
    const ipcMain = new EventEmitter();
    wc = new FakeContents();
    host.serveIpc(ipcMain, (sender) => sender === wc);
    const bridge = createBridgeApi({
      send(channel, ...args) {
        const copy = structuredClone(args);
        setImmediate(() => ipcMain.emit(channel, { sender: wc }, ...copy));
      },
      on(channel, l) {
        wc.toRenderer.on(channel, l);
      },
    });
    browser = await openBrowser();
    const page = browser.page;
    // Notifications are delivered to the page in order, one batch at a time.
    let queue: [string, unknown][] = [];
    let flushing = false;
    const flush = async () => {
      while (queue.length > 0) {
        const batch = queue;
        queue = [];
        // (Scripts go to the page as text: functions compiled by tsx carry helpers the page does not have.)
        await page
          .evaluate(`for (const [m, p] of ${JSON.stringify(batch)}) window.__corralDispatch(m, p);`)
          .catch(() => {});
      }
      flushing = false;
    };
    bridge.onNotification((m, p) => {
      queue.push([m, p]);
      if (!flushing) {
        flushing = true;
        void flush();
      }
    });
    await page.exposeFunction('__corralRequest', (method: string, params: unknown) =>
      bridge.request(method, params),
    );
    // As contextBridge does, each handler gets its own copy of a notification's params (a deep copy per handler per
    // notification): the page keeps one handler on the bridge (__corralHandlers counts them).
    await page.addInitScript(`{
      const handlers = new Set();
      window.__corralHandlers = () => handlers.size;
      window.__corralDispatch = (m, p) => { for (const h of handlers) h(m, structuredClone(p)); };
      const request = window.__corralRequest;
      window.corral = Object.freeze({
        request: (m, p) => request(m, p),
        onNotification: (h) => { handlers.add(h); return () => handlers.delete(h); },
      });
    }`);
    agent = await RpcClient.open(host.execUrl, 'codex-agent');
    // No token in the URL: the page must use window.corral, not the WebSocket.
    await page.goto(host.panelUrl!.replace(/#.*/, ''));
    await page.locator('#conn-status', { hasText: 'connected · desktop IPC' }).waitFor({ timeout: 15_000 });
  });

  after(async () => {
    agent?.close();
    await browser?.close();
    await host?.shutdown();
  });

  test('the IPC client sees other clients’ processes live, streams output, and gets coded errors', async () => {
    const page = browser.page;
    assert.equal(host.server.sessions.size, 2, 'the panel is one more session of the same server');
    await agent.request('process/start', {
      processId: 'via-ws',
      argv: ['/bin/sh', '-c', 'echo seen-over-ipc; exec sleep 300'],
      cwd: '/tmp',
      env: {},
      tty: false,
    });
    const row = page.locator('tr[data-process-id="via-ws"]');
    await row.click();
    await page.locator('[data-testid="process-detail"] .out-stdout', { hasText: 'seen-over-ipc' }).waitFor();
    await page.click('[data-testid="terminate"]');
    const exited = await agent.waitFor(
      (n) => n.method === 'process/exited' && n.params.processId === 'via-ws',
    );
    assert.equal(exited.params.exitCode, 137);

    // An error crosses the bridge with its JSON-RPC code.
    await page.click('button[data-view="run"]');
    await page.fill('[data-testid="run-cwd"]', '/nonexistent-corral-dir');
    await page.click('[data-testid="run-start"]');
    const err = page.locator('[data-testid="run-error"]');
    await err.waitFor();
    assert.match(
      await visibleText(err),
      /process\/start failed \(-32603\): No such file or directory \(os error 2\)/,
    );
    await browser.screenshot('desktop-ipc-run-error');
    assert.deepEqual(browser.errors, []);
  });

  test('the page keeps one notification handler on the bridge (one copy per notification), through a reconnect', async () => {
    const page = browser.page;
    const handlers = () => page.evaluate('window.__corralHandlers()') as Promise<number>;
    assert.equal(
      await handlers(),
      1,
      'one handler: the old panel held two (two copies of every notification)',
    );
    // Main closes the connection (its control message to the preload): the panel reconnects over the bridge.
    wc.toRenderer.emit(IPC_CONTROL, {}, { type: 'closed', code: 1001, reason: 'test' });
    await page.locator('#conn-status', { hasText: 'connected · desktop IPC' }).waitFor({ timeout: 15_000 });
    await until(async () => (await handlers()) === 1, 10_000);
    assert.equal(await handlers(), 1, 'the closed link took its handler off the bridge');
    await agent.request('process/start', {
      processId: 'after-reconnect',
      argv: ['/bin/true'],
      cwd: '/tmp',
      env: {},
      tty: false,
    });
    await page.click('button[data-view="processes"]');
    await page.locator('tr[data-process-id="after-reconnect"]').waitFor();
    assert.deepEqual(browser.errors, []);
  });
});
