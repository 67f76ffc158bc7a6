// The panel end to end: Chromium against the headless host, with a separate WebSocket client playing the agent.
import assert from 'node:assert/strict';
import { chmodSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import WebSocket from 'ws';
import type { Host } from '../../src/app/host.js';
import { RpcClient } from '../helpers/client.js';
import { needsSandbox } from '../helpers/native.js';
import { shellStart } from '../helpers/registry-contract.js';
import { tempDir } from '../helpers/server.js';
import { seedParam, special } from '../integration/sandbox-util.js';
import { type Browser, openPanelHost, type PanelHost, visibleText } from './harness.js';

const text = (b: Buffer | string) => Buffer.from(b).toString('base64');

/** A seed SandboxLaunchConfig: workspace-write on `cwd` (read everything, write the cwd), no network (sandbox.md §2.5). */
const workspaceWrite = (cwd: string) =>
  seedParam({ cwd, entries: [special('root', 'read'), special('current_working_directory', 'write')] });

describe('panel in a browser against the headless host', () => {
  let host: Host;
  let browser: Browser;
  let agent: RpcClient & { sessionId: string };
  const dir = tempDir('corral-panel-');

  let ph: PanelHost;
  before(async () => {
    ph = await openPanelHost();
    ({ host, browser, agent } = ph);
  });

  after(async () => {
    await ph?.close();
    dir.cleanup();
  });

  test('the panel is served with a strict CSP; foreign origins and path tricks are refused', async () => {
    const res = await fetch(host.panelUrl!.replace(/#.*$/, ''));
    assert.equal(res.status, 200);
    const csp = res.headers.get('content-security-policy') ?? '';
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self'/);
    assert.match(csp, /connect-src 'self' ws:\/\/127\.0\.0\.1:\d+/);
    const status = (path: string) =>
      new Promise<number>((resolve, reject) => {
        httpRequest({ host: '127.0.0.1', port: host.listener.port, path }, (r) => {
          r.resume();
          resolve(r.statusCode ?? 0);
        })
          .on('error', reject)
          .end();
      });
    assert.equal(await status('/panel/../package.json'), 404);
    assert.equal(await status('/panel/%2e%2e/%2e%2e/package.json'), 404);
    // A page from another origin cannot open the exec server, even with the token.
    const code = await new Promise<number>((resolve) => {
      const ws = new WebSocket(host.execUrl, { origin: 'http://evil.test' });
      ws.on('unexpected-response', (_q, r) => resolve(r.statusCode ?? 0));
      ws.on('open', () => resolve(101));
    });
    assert.equal(code, 403);
  });

  test('a process started by a separate WebSocket client appears live with its sandbox badge', async () => {
    const page = browser.page;
    await agent.request('process/start', {
      ...shellStart('agent-pipe', 'echo hello-from-agent; echo oops-on-stderr >&2; exec sleep 300', dir.path),
      env: { PATH: '/usr/bin:/bin', OPENAI_API_KEY: 'sk-panel-must-not-see-this' },
      metadata: { threadId: 'thread-42', toolCallId: 'call-7' },
    });
    // A 0.120–0.130 client wraps its own sandbox: argv[0] is its codex-linux-sandbox launcher.
    const wrapper = join(dir.path, 'codex-linux-sandbox');
    writeFileSync(wrapper, '#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done; shift; exec "$@"\n');
    chmodSync(wrapper, 0o755);
    await agent.request('process/start', {
      processId: 'agent-wrapped',
      argv: [
        wrapper,
        '--sandbox-policy-cwd',
        dir.path,
        '--sandbox-policy',
        '{"type":"read-only"}',
        '--',
        '/bin/sh',
        '-c',
        'echo wrapped; exec sleep 300',
      ],
      cwd: dir.path,
      env: { PATH: '/usr/bin:/bin' },
      tty: false,
    });
    const pipeRow = page.locator('tr[data-process-id="agent-pipe"]');
    await pipeRow.waitFor();
    assert.equal(await pipeRow.locator('[data-badge]').getAttribute('data-badge'), 'none');
    assert.match(await visibleText(pipeRow), /codex-agent/);
    assert.match(await visibleText(pipeRow), /running/);
    const wrappedRow = page.locator('tr[data-process-id="agent-wrapped"]');
    await wrappedRow.waitFor();
    assert.equal(await wrappedRow.locator('[data-badge]').getAttribute('data-badge'), 'client-wrapped');
    // Filter by client.
    await page.selectOption('[data-testid="filter-client"]', 'codex-agent');
    assert.equal(await page.locator('tbody tr[data-process-id]').count(), 2);
    await page.selectOption('[data-testid="filter-client"]', '');
    await browser.screenshot('processes');

    // Pipe output, stdout and stderr distinguished; env values never shown.
    await pipeRow.click();
    const detail = page.locator('[data-testid="process-detail"]');
    await detail.locator('.out-stdout', { hasText: 'hello-from-agent' }).waitFor();
    await detail.locator('.out-stderr', { hasText: 'oops-on-stderr' }).waitFor();
    assert.match(await visibleText(detail), /thread-42/);
    assert.match((await detail.textContent()) ?? '', /Environment: 2 variables[\s\S]*OPENAI_API_KEY/);
    assert.doesNotMatch(await page.content(), /sk-panel-must-not-see-this/);
    await browser.screenshot('process-detail-pipes');

    await wrappedRow.click();
    await detail.locator('.policy-card', { hasText: 'Sandbox applied by the client' }).waitFor();
    await browser.screenshot('process-detail-client-wrapped');
  });

  test('a row changes in place as its process moves on: the same element, the same state pill, the same text nodes', async () => {
    const page = browser.page;
    await agent.request('process/start', {
      ...shellStart('in-place', 'read line; echo "$line"; exit 3', dir.path),
      pipeStdin: true,
    });
    const row = page.locator('tr[data-process-id="in-place"]');
    await row.locator('[data-state="running"]').waitFor();
    // What the row is made of while its process runs: the element, its state pill, every text node in it.
    await row.evaluate((tr) => {
      const nodes: Node[] = [];
      const walk = document.createTreeWalker(tr, NodeFilter.SHOW_TEXT);
      for (let n = walk.nextNode(); n; n = walk.nextNode()) nodes.push(n);
      (window as unknown as { __row: unknown }).__row = { tr, pill: tr.querySelector('[data-state]'), nodes };
    });
    await agent.request('process/write', { processId: 'in-place', chunk: text('a-line\n') });
    await row.locator('[data-state="closed"]', { hasText: 'exited 3' }).waitFor();
    const kept = await row.evaluate((tr) => {
      const was = (window as unknown as { __row: { tr: Element; pill: Element; nodes: Node[] } }).__row;
      const madeAnew: (string | null)[] = [];
      const walk = document.createTreeWalker(tr, NodeFilter.SHOW_TEXT);
      for (let n = walk.nextNode(); n; n = walk.nextNode())
        if (!was.nodes.includes(n)) madeAnew.push(n.textContent);
      return { sameRow: tr === was.tr, samePill: tr.querySelector('[data-state]') === was.pill, madeAnew };
    });
    // A flood re-binds every visible row each frame: a text node or pill made anew is a box the browser makes anew.
    assert.deepEqual(kept, { sameRow: true, samePill: true, madeAnew: [] });
  });

  test('PTY output streams into xterm live; the stdin box writes; Terminate kills it', async () => {
    const page = browser.page;
    await agent.request('process/start', {
      ...shellStart('agent-tty', 'printf "\\033[1;32mtty-ready\\033[0m\\n"; exec cat', dir.path),
      tty: true,
    });
    const row = page.locator('tr[data-process-id="agent-tty"]');
    await row.click();
    const term = page.locator('[data-testid="process-detail"] .xterm-rows');
    await term.filter({ hasText: 'tty-ready' }).waitFor();
    // Live: the agent writes to its own PTY; the echo appears in the panel's terminal.
    await agent.request('process/write', { processId: 'agent-tty', chunk: text('from-the-agent\n') });
    await term.filter({ hasText: 'from-the-agent' }).waitFor();
    // The panel's stdin box writes into the other client's process.
    await page.fill('[data-testid="stdin"]', 'typed-in-panel');
    await page.press('[data-testid="stdin"]', 'Enter');
    await term.filter({ hasText: 'typed-in-panel' }).waitFor();
    await agent.waitFor(
      (n) =>
        n.method === 'process/output' &&
        n.params.processId === 'agent-tty' &&
        Buffer.from(n.params.chunk as string, 'base64')
          .toString()
          .includes('typed-in-panel'),
    );
    await browser.screenshot('process-detail-tty');

    await page.click('[data-testid="terminate"]');
    const exited = await agent.waitFor(
      (n) => n.method === 'process/exited' && n.params.processId === 'agent-tty',
    );
    assert.equal(exited.params.exitCode, 137);
    await agent.collect('agent-tty');
    await page.locator('tr[data-process-id="agent-tty"] [data-state="closed"]').waitFor();
    assert.match(await visibleText(row), /exited 137/);
    assert.equal(await page.locator('[data-testid="terminate"]').isDisabled(), true);
  });

  test('a sandboxed process shows its badge and effective policy', { skip: needsSandbox }, async () => {
    const page = browser.page;
    await page.click('button[data-view="processes"]');
    await agent.request('process/start', {
      ...shellStart('agent-sandboxed', 'echo inside-the-sandbox; exec sleep 300', dir.path),
      sandbox: workspaceWrite(dir.path),
    });
    const row = page.locator('tr[data-process-id="agent-sandboxed"]');
    await row.waitFor();
    assert.equal(await row.locator('[data-badge]').getAttribute('data-badge'), 'linux-seccomp');
    await row.click();
    const policy = page.locator('[data-testid="process-detail"] [data-testid="policy"]');
    await policy.waitFor();
    const t = await visibleText(policy);
    assert.ok(t.includes(dir.path), t);
    assert.match(t, /Network\s+restricted/);
    await page
      .locator('[data-testid="process-detail"] .out-stdout', { hasText: 'inside-the-sandbox' })
      .waitFor();
    await browser.screenshot('process-detail-sandboxed');
  });

  test('a Landlock-sandboxed process says so in its badge; the host info shows the doctor report', {
    skip: needsSandbox,
  }, async () => {
    const page = browser.page;
    await page.click('button[data-view="processes"]');
    await agent.request('process/start', {
      ...shellStart('agent-landlock', 'exec sleep 300', dir.path),
      sandbox: { ...workspaceWrite(dir.path), useLegacyLandlock: true },
    });
    const row = page.locator('tr[data-process-id="agent-landlock"]');
    await row.waitFor();
    const extra = row.locator('[data-badge-extra="landlock"]');
    assert.equal(await extra.count(), 1, await row.innerHTML());
    assert.equal(await visibleText(extra), 'landlock');
    assert.match((await extra.getAttribute('title')) ?? '', /every policy element held exactly/);
    const doctor = page.locator('#side-foot details.doctor');
    await doctor.waitFor();
    assert.match((await doctor.locator('summary').textContent()) ?? '', /^doctor: /);
    assert.equal(
      await doctor.locator('[data-policy="useLegacyLandlock (workspace-write)"]').textContent(),
      'useLegacyLandlock (workspace-write): landlock',
    );
  });

  test('the panel says what bounds each command, and marks a process that hit its limit', async () => {
    const page = browser.page;
    const limits = host.server.resourceLimits;
    const foot = page.locator('#side-foot');
    await foot
      .locator('div', { hasText: limits.version === 'none' ? 'not bounded' : 'each command' })
      .waitFor();
    const t = await visibleText(foot);
    if (limits.version === 'none') assert.match(t, /commands are not bounded/);
    else
      assert.match(t, new RegExp(`each command: ≤ ${limits.pidsMax ?? ''}.*\\(cgroup ${limits.version}\\)`));
    if (!limits.enforced.includes('memory')) return;
    await page.click('button[data-view="processes"]');
    const hog = `const a=[];for(let i=0;i<32;i++)a.push(Buffer.alloc(16<<20,1))`;
    await agent.request('process/start', {
      processId: 'agent-hog',
      argv: [process.execPath, '-e', hog],
      cwd: dir.path,
      env: { PATH: '/usr/bin:/bin' },
      tty: false,
      limits: { memoryMaxBytes: 128 * 1024 * 1024 },
    });
    await agent.collect('agent-hog', 30_000);
    await page.locator('tr[data-process-id="agent-hog"]').click();
    await page.locator('[data-testid="process-detail"] .badge', { hasText: 'memory limit hit' }).waitFor();
  });

  test('a request blocked by the managed proxy appears with its reason and process', async () => {
    const page = browser.page;
    // The process gets its own proxy (managedNetwork); it asks for a local address the policy refuses.
    await agent.request('process/start', {
      processId: 'agent-curl',
      argv: [
        '/bin/sh',
        '-c',
        'curl -s -o /dev/null -w "%{http_code}" --noproxy "" -x "$HTTP_PROXY" http://127.0.0.9:8080/',
      ],
      cwd: dir.path,
      env: { PATH: '/usr/bin:/bin' },
      tty: false,
      managedNetwork: {
        config: { network: { enabled: true, mode: 'full', domains: {} } },
        auditMetadata: { conversationId: 'conv-panel' },
      },
    });
    await agent.collect('agent-curl');
    assert.equal(agent.output('agent-curl', 'stdout'), '403');
    await page.click('button[data-view="network"]');
    const row = page.locator('[data-testid="blocked-table"] tr[data-host="127.0.0.9"]');
    await row.waitFor();
    const t = await visibleText(row);
    assert.match(t, /not_allowed_local/);
    assert.match(t, /127\.0\.0\.9:8080/);
    assert.match(t, /codex-agent · agent-curl/);
    await page.locator('[data-testid="hosts-table"] tr[data-host="127.0.0.9"]').waitFor();
    await browser.screenshot('network');
  });

  test('policy debugger: validation errors by field, a preview, and a URL decision', async () => {
    const page = browser.page;
    await page.click('button[data-view="policy"]');
    await page.fill(
      '[data-testid="sandbox-json"]',
      JSON.stringify({ sandbox: 'linux-seccmp', policy: { type: 'read-only' } }),
    );
    await page.click('[data-testid="preview"]');
    const errs = page.locator('[data-testid="validation-errors"]');
    await errs.waitFor();
    const et = await visibleText(errs);
    assert.match(et, /sandbox\.sandbox/);
    assert.match(et, /sandbox\.fileSystemPolicy/);
    await browser.screenshot('policy-invalid');

    await page.fill('[data-testid="sandbox-json"]', JSON.stringify(workspaceWrite(dir.path), null, 2));
    await page.click('[data-testid="preview"]');
    await page.locator('[data-testid="preview-ok"]').waitFor();
    assert.match(
      await visibleText(page.locator('[data-testid="preview-ok"]')),
      /Valid SandboxLaunchConfig → linuxSeccomp/,
    );
    const argv = await visibleText(page.locator('[data-testid="preview-argv"]'));
    assert.match(argv, /bwrap/);
    assert.match(argv, /--unshare-net/);
    assert.ok(argv.includes(`--bind ${dir.path} ${dir.path}`), argv);
    await browser.screenshot('policy-preview');
    // A Seatbelt config is previewed as macOS would run it.
    await page.click('text=Seatbelt');
    await page.click('[data-testid="preview"]');
    await page.locator('[data-testid="preview-ok"]', { hasText: 'macosSeatbelt' }).waitFor();
    assert.match(await visibleText(page.locator('[data-testid="preview-profile"]')), /^\(version 1\)/);
    assert.match(await visibleText(page.locator('[data-testid="preview-argv"]')), /sandbox-exec/);
    await browser.screenshot('policy-seatbelt');

    await page.fill(
      '[data-testid="network-json"]',
      JSON.stringify({
        config: { network: { enabled: true, mode: 'full', domains: { localhost: 'allow' } } },
      }),
    );
    await page.fill('[data-testid="check-target"]', 'http://127.0.0.3:8080/');
    await page.click('[data-testid="check"]');
    const verdict = page.locator('[data-testid="verdict"]');
    await verdict.waitFor();
    assert.equal(await verdict.getAttribute('data-decision'), 'deny');
    assert.equal(await visibleText(page.locator('[data-testid="verdict-reason"]')), 'not_allowed_local');
    await page.fill('[data-testid="check-target"]', 'http://localhost:8080/');
    await page.click('[data-testid="check"]');
    await page.locator('[data-testid="verdict"][data-decision="allow"]').waitFor();
    await browser.screenshot('policy');
  });

  test('the run form sends process/start through the same client API', { skip: needsSandbox }, async () => {
    const page = browser.page;
    await page.click('button[data-view="run"]');
    await page.fill('[data-testid="run-argv"]', 'echo from-run-form; echo to-stderr >&2');
    await page.fill('[data-testid="run-cwd"]', dir.path);
    await browser.screenshot('run');
    await page.click('[data-testid="run-start"]');
    const detail = page.locator('[data-testid="process-detail"]');
    await detail.locator('.out-stdout', { hasText: 'from-run-form' }).waitFor();
    await detail.locator('.out-stderr', { hasText: 'to-stderr' }).waitFor();
    assert.match(await visibleText(detail), /corral-panel/);
    // A start error is shown, not swallowed.
    await page.click('button[data-view="run"]');
    await page.fill('[data-testid="run-cwd"]', join(dir.path, 'missing-dir'));
    await page.click('[data-testid="run-start"]');
    await page.locator('[data-testid="run-error"]', { hasText: 'No such file or directory' }).waitFor();

    // Sandbox preset: workspace-write under bwrap; writing outside the workspace fails.
    await page.fill('[data-testid="run-cwd"]', dir.path);
    await page.selectOption('[data-testid="run-sandbox"]', 'workspace-write');
    await page.fill(
      '[data-testid="run-argv"]',
      'touch ok-inside && echo wrote-inside; touch /usr/corral-nope || echo denied-outside',
    );
    await page.click('[data-testid="run-start"]');
    await detail.locator('[data-badge="linux-seccomp"]').waitFor();
    await detail.locator('.out-stdout', { hasText: 'denied-outside' }).waitFor();
    assert.match(await visibleText(detail.locator('.pipe-output')), /wrote-inside/);

    // Managed network: the process gets its own proxy in its environment.
    await page.click('button[data-view="run"]');
    await page.selectOption('[data-testid="run-sandbox"]', 'none');
    await page.check('[data-testid="run-net"]');
    await page.fill('[data-testid="run-argv"]', 'echo "proxy=$HTTP_PROXY"');
    await page.click('[data-testid="run-start"]');
    await detail.locator('.out-stdout', { hasText: /proxy=http:\/\/127\.0\.0\.1:\d+/ }).waitFor();
    assert.match(
      await visibleText(detail.locator('[data-testid="policy"]')),
      /No sandbox: full access to the disk\. Network through the managed proxy \(HTTP 127\.0\.0\.1:\d+/,
    );
    await page.click('button[data-view="run"]');
    await page.uncheck('[data-testid="run-net"]');
  });

  test('a lost connection shows a clear state and reconnects', async () => {
    const page = browser.page;
    await page.click('button[data-view="processes"]');
    const panelSession = [...host.server.sessions.values()].find(
      (s) => s.clientName === 'corral-panel' && s.conn,
    );
    assert.ok(panelSession?.conn);
    panelSession.conn.close(1001, 'test drop');
    await page.locator('#disconnected-banner:not([hidden])').waitFor();
    await page.locator('#conn-status', { hasText: 'disconnected' }).waitFor();
    await browser.screenshot('disconnected');
    await page.locator('#conn-status', { hasText: 'connected ·' }).waitFor({ timeout: 15_000 });
    assert.equal(await page.locator('#disconnected-banner').isHidden(), true);
    // After reconnecting the feed is live again.
    await agent.request('process/start', {
      processId: 'after-reconnect',
      argv: ['/bin/true'],
      cwd: dir.path,
      env: {},
      tty: false,
    });
    await page.locator('tr[data-process-id="after-reconnect"]').waitFor();
    // The panel resumed its own session (within the grace period): no second panel session, none detached.
    const panels = [...host.server.sessions.values()].filter((s) => s.clientName === 'corral-panel');
    assert.equal(panels.length, 1);
    assert.equal(panels[0], panelSession);
    assert.ok(panelSession.conn, 're-attached');
  });

  test('a disconnected client’s session shows its countdown; Kill now kills its processes', async () => {
    const page = browser.page;
    await page.click('button[data-view="processes"]');
    const gone = await RpcClient.open(host.execUrl, 'agent-gone');
    await gone.request('process/start', {
      processId: 'orphan',
      argv: ['/bin/sleep', '300'],
      cwd: dir.path,
      env: {},
      tty: false,
    });
    await page.locator('tr[data-process-id="orphan"] [data-state="running"]').waitFor();
    // The panel names sessions by their public id (the client's sessionId is its secret resume key).
    const publicId = host.server.sessionByResumeKey(gone.sessionId)!.id;
    gone.close();
    const chip = page.locator(`[data-testid="detached-sessions"] [data-session="${publicId}"]`);
    await chip.waitFor();
    assert.match(
      await visibleText(chip),
      /agent-gone\s+disconnected · 1 running · killed in (59|60)s unless it resumes/,
    );
    await browser.screenshot('detached-session');
    await chip.locator('button', { hasText: 'Kill now' }).click();
    await page.locator('tr[data-process-id="orphan"] [data-state="closed"]').waitFor();
    assert.match(await visibleText(page.locator('tr[data-process-id="orphan"]')), /exited 137/);
  });

  test('dark mode renders readably', async () => {
    const page = browser.page;
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.click('button[data-view="processes"]');
    await page.locator('tr[data-process-id="agent-tty"]').click();
    await page.locator('[data-testid="process-detail"] .xterm-rows', { hasText: 'tty-ready' }).waitFor();
    const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    assert.equal(bg, 'rgb(15, 17, 21)');
    await browser.screenshot('processes-dark');
    await page.click('button[data-view="network"]');
    await browser.screenshot('network-dark');
    await page.emulateMedia({ colorScheme: 'light' });
  });

  test('a narrow window stays usable', async () => {
    const page = browser.page;
    await page.setViewportSize({ width: 1024, height: 700 });
    await page.click('button[data-view="processes"]');
    await page.locator('tr[data-process-id="agent-pipe"]').click();
    await page.locator('[data-testid="process-detail"]').waitFor();
    await browser.screenshot('processes-narrow');
    await page.click('button[data-view="policy"]');
    await browser.screenshot('policy-narrow');
    await page.setViewportSize({ width: 1440, height: 900 });
  });

  test('no page errors and no CSP violations', () => {
    assert.deepEqual(browser.errors, []);
  });
});
