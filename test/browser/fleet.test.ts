// The fleet panel in Chromium (issue 19 item 1) against the Kubernetes rig: three Corral pods (corral exec-server
// from the SandboxTemplate, each in a network namespace of its own, with a panel credential) behind the
// agent-sandbox router stand-in, and one headless host joined to every pod through the router. Agents start
// processes on several pods; the panel shows them all with their server, terminates one on pod 2 (it dies there,
// and only there), sends stdin and reads output on pod 1, and notices pod 3 being killed (its rows stale, the server
// down) and coming back (rejoined, new rows live).
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { type Host, startHost } from '../../src/app/host.js';
import type { RpcClient } from '../helpers/client.js';
import { type Fleet, fleetAvailable, startFleet } from '../helpers/fleetRig.js';
import { type Browser, ensureBuilt, openBrowser, visibleText } from './harness.js';

const avail = fleetAvailable();
const skip = avail.ok ? false : avail.reason;
if (!avail.ok) console.log(`# fleet panel: skipped: ${avail.reason}`);

type Agent = RpcClient & { sessionId: string };

describe('fleet panel over three pods behind the router', { skip }, () => {
  let fleet: Fleet;
  let host: Host;
  let browser: Browser;
  const agents: Record<string, Agent> = {};
  /** The host's id of each pod (joined in order: pod-1 → s1 …). */
  const id = (pod: string) => `s${pod.slice(4)}`;
  const rowOf = (pod: string, processId: string) =>
    browser.page.locator(`tr[data-process-id="${processId}"][data-server="${id(pod)}"]`);

  before(async () => {
    if (skip) return;
    fleet = await startFleet({ pods: 3, panelToken: true, router: { retries: 1, retryInitialDelayMs: 20 } });
    const join = fleet.pods().map((p) => {
      const r = fleet.route(p.name);
      const url = new URL(r.url);
      url.searchParams.set('token', fleet.panelToken!);
      return { url: url.toString(), headers: r.headers, name: p.name };
    });
    host = await startHost({
      servePanel: true,
      panelDir: ensureBuilt(),
      join,
      fleet: { backoffMs: [100, 1000] },
    });
    browser = await openBrowser();
    await browser.page.goto(host.panelUrl!);
    await browser.page.locator('#conn-status', { hasText: 'connected' }).waitFor({ timeout: 15_000 });
    for (const p of fleet.pods())
      agents[p.name] = await fleet.connect(p.name, { clientName: `agent-${p.name}` });
  });

  after(async () => {
    for (const a of Object.values(agents)) a.close();
    await browser?.close();
    await host?.shutdown();
    await fleet?.close();
  });

  test('every pod is joined through the router, connected and ready', async () => {
    const page = browser.page;
    await page.click('button[data-view="servers"]');
    for (const p of fleet.pods()) {
      const r = page.locator(`[data-testid="servers-table"] tr[data-server="${id(p.name)}"]`);
      await r.locator('.status-dot[data-state="connected"]').waitFor({ timeout: 20_000 });
      await r.locator('td', { hasText: /^ready$/ }).waitFor({ timeout: 20_000 });
      assert.match(await visibleText(r), new RegExp(p.name));
    }
    assert.doesNotMatch(await page.content(), new RegExp(fleet.panelToken!), 'no credential in the page');
    await browser.screenshot('fleet-servers');
  });

  test('processes of every pod show with their server; the same id on two pods is two rows', async () => {
    const page = browser.page;
    await page.click('button[data-view="processes"]');
    for (const [pod, a] of Object.entries(agents)) {
      await a.request('process/start', {
        processId: 'sleeper',
        argv: ['/bin/sleep', '300'],
        cwd: '/',
        env: {},
        tty: false,
      });
      await a.request('process/start', {
        processId: 'hello',
        argv: ['/bin/sh', '-c', `echo hello-from-${pod}; exec cat`],
        cwd: '/',
        env: { PATH: '/usr/bin:/bin' },
        tty: false,
        pipeStdin: true,
      });
    }
    for (const pod of Object.keys(agents)) {
      const r = rowOf(pod, 'sleeper');
      await r.locator('[data-state="running"]').waitFor();
      assert.equal(await r.locator('td.srv').textContent(), pod);
      assert.match(await visibleText(r), new RegExp(`agent-${pod}`));
    }
    // The server filter.
    await page.selectOption('[data-testid="filter-server"]', id('pod-2'));
    await page.locator('[data-testid="process-counts"]', { hasText: /showing 2$/ }).waitFor();
    assert.equal(await page.locator('tbody tr[data-process-id]').count(), 2);
    await page.selectOption('[data-testid="filter-server"]', { index: 0 });
    await browser.screenshot('fleet-processes');
  });

  test('stdin and output of a process on pod 1 go through the host', async () => {
    const page = browser.page;
    await rowOf('pod-1', 'hello').click();
    const detail = page.locator('[data-testid="process-detail"]');
    await detail.locator('.out-stdout', { hasText: 'hello-from-pod-1' }).waitFor();
    assert.match(await visibleText(detail), /Server\s+pod-1/);
    await page.fill('[data-testid="stdin"]', 'typed-for-pod-1');
    await page.press('[data-testid="stdin"]', 'Enter');
    await detail.locator('.out-stdout', { hasText: 'typed-for-pod-1' }).waitFor();
    await agents['pod-1']!.waitFor(
      (n) =>
        n.method === 'process/output' &&
        Buffer.from(n.params.chunk as string, 'base64')
          .toString()
          .includes('typed-for-pod-1'),
    );
    assert.doesNotMatch(agents['pod-2']!.output('hello'), /typed-for-pod-1/);
  });

  test('Terminate on a pod-2 process kills it on pod 2 only', async () => {
    const page = browser.page;
    await rowOf('pod-2', 'sleeper').click();
    await page.locator('[data-testid="process-detail"]', { hasText: 'pod-2' }).waitFor();
    const pid = host.monitor
      .snapshot()
      .processes.find((p) => p.server === id('pod-2') && p.processId === 'sleeper')!.pid;
    assert.ok(pid > 0 && existsSync(`/proc/${pid}`), `pod 2's sleeper runs as pid ${pid}`);
    await page.click('[data-testid="terminate"]');
    const exited = await agents['pod-2']!.waitFor(
      (n) => n.method === 'process/exited' && n.params.processId === 'sleeper',
    );
    assert.equal(exited.params.exitCode, 137);
    await agents['pod-2']!.collect('sleeper');
    assert.ok(!existsSync(`/proc/${pid}`), 'it died on pod 2');
    await rowOf('pod-2', 'sleeper').locator('[data-state="closed"]', { hasText: 'exited 137' }).waitFor();
    for (const pod of ['pod-1', 'pod-3'])
      assert.equal(
        await rowOf(pod, 'sleeper').locator('[data-state="running"]').count(),
        1,
        `${pod} runs on`,
      );
    assert.ok(
      !agents['pod-1']!.notifications.some(
        (n) => n.method === 'process/exited' && n.params.processId === 'sleeper',
      ),
    );
  });

  test('pod 3 killed: shown down, its rows stale; back: rejoined, new processes live', async () => {
    const page = browser.page;
    await page.click('[data-testid="process-detail"] button[title="Close"]');
    agents['pod-3']!.close();
    delete agents['pod-3'];
    await fleet.killPod('pod-3');
    await rowOf('pod-3', 'sleeper').and(page.locator('tr.stale')).waitFor({ timeout: 20_000 });
    await page
      .locator('[data-testid="filter-server"] option', { hasText: /pod-3 \(\d+\) · down/ })
      .waitFor({ state: 'attached' });
    await browser.screenshot('fleet-pod3-down');
    await page.click('button[data-view="servers"]');
    const srv = page.locator(`[data-testid="servers-table"] tr[data-server="${id('pod-3')}"]`);
    await srv.locator('.status-dot[data-state="disconnected"]').waitFor();
    await fleet.startPod('pod-3');
    await srv.locator('.status-dot[data-state="connected"]').waitFor({ timeout: 30_000 });
    await page.click('button[data-view="processes"]');
    // The old rows stay, stale (the new pod does not know them); a process on the new pod is live.
    assert.equal(await rowOf('pod-3', 'sleeper').and(page.locator('tr.stale')).count(), 1);
    const again = await fleet.connect('pod-3', { clientName: 'agent-pod-3-again' });
    agents['pod-3'] = again;
    await again.request('process/start', {
      processId: 'after-restart',
      argv: ['/bin/true'],
      cwd: '/',
      env: {},
      tty: false,
    });
    const fresh = rowOf('pod-3', 'after-restart');
    await fresh.locator('[data-state="closed"]').waitFor();
    assert.equal(await fresh.getAttribute('class'), '');
    await browser.screenshot('fleet-pod3-back');
  });

  test('no page errors', () => {
    assert.deepEqual(browser.errors, []);
  });
});
