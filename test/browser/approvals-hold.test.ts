// Approvals v2 in Chromium (issue 36, items 3 and 2): the card explains itself (cwd, project, why asked, what each
// button stores); its countdown pauses on the server while the pointer is over the card or focus is in it, and
// resumes with the time it had left; Allow for this project stores a rule the Project rules table shows.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { type Host, startHost } from '../../src/app/host.js';
import type { ApprovalPrompt, ApprovalsState, RulesResult } from '../../src/protocol/approvals.js';
import { askingNetwork, curlCode } from '../helpers/approvalsCli.js';
import { RpcClient } from '../helpers/client.js';
import { shellStart } from '../helpers/registry-contract.js';
import { tempDir, until } from '../helpers/server.js';
import { loopbackOnlyDialer, startOrigin, stubResolver } from '../integration/network-helpers.js';
import { type Browser, openBrowser, visibleText } from './harness.js';
import { privateBuild } from './panelBuild.js';

describe('approval cards in the browser panel: explained, paused while read, project rules', {
  skip: existsSync('/usr/bin/curl') ? false : 'curl is not installed',
}, () => {
  const tmp = tempDir('corral-approvals-hold-');
  const offMachine: string[] = [];
  let host: Host;
  let browser: Browser;
  let agent: RpcClient & { sessionId: string };
  let panel: RpcClient & { sessionId: string };
  let origin: Awaited<ReturnType<typeof startOrigin>>;

  before(async () => {
    const panelDir = join(await privateBuild(), 'renderer');
    origin = await startOrigin();
    host = await startHost({
      servePanel: true,
      panelDir,
      resumeGraceMs: 60_000,
      server: { launcher: { resolver: stubResolver, dialer: loopbackOnlyDialer(offMachine) } },
      approvalRules: join(tmp.path, 'rules', 'approval-rules.db'),
    });
    browser = await openBrowser();
    agent = await RpcClient.open(host.execUrl, 'codex-agent');
    panel = await RpcClient.open(
      `${host.listener.url}/?token=${encodeURIComponent(host.tokens.panel)}`,
      'observer',
    );
    await browser.page.goto(host.panelUrl!);
    await browser.page.locator('#conn-status', { hasText: 'connected' }).waitFor({ timeout: 15_000 });
  });

  after(async () => {
    agent?.close();
    panel?.close();
    await browser?.close();
    await host?.shutdown();
    await origin?.close();
    tmp.cleanup();
    assert.deepEqual(offMachine, []);
  });

  const pending = async () =>
    (await panel.request<ApprovalsState>('approvals/list', {})).pending.find(
      (p) => p.processId === 'read-me',
    );

  test('the countdown pauses while the card is hovered or focused, and resumes; project rule from the card', async () => {
    const page = browser.page;
    const work = join(tmp.path, 'repo');
    mkdirSync(join(work, '.git'), { recursive: true });
    mkdirSync(join(work, 'pkg'), { recursive: true });
    const net = askingNetwork();
    (net.config.network as Record<string, unknown>).approval_timeout_ms = 60_000;
    await agent.request('process/start', {
      ...shellStart('read-me', curlCode('got', `http://127.0.0.1:${origin.port}/read`), join(work, 'pkg')),
      managedNetwork: net,
    });
    const card = page.locator('[data-testid="approval-prompt"]').first();
    await card.waitFor({ timeout: 15_000 });
    const field = (name: string) => visibleText(card.locator(`[data-field="${name}"]`));
    assert.equal(await field('cwd'), join(work, 'pkg'));
    assert.equal(await field('workspace'), realpathSync(work));
    assert.match(await field('why'), /hard_deny_allowlist_misses: false/);
    assert.match(
      (await card.locator('button[data-decision="allowProject"]').getAttribute('title')) ?? '',
      /Stores a rule for this workspace/,
    );
    assert.match(
      (await card.locator('button[data-decision="allowOnce"]').getAttribute('title')) ?? '',
      /stores nothing/,
    );
    const countdown = card.locator('[data-testid="approval-countdown"]');
    const before = (await pending())!;
    assert.equal(before.pausedLeftMs ?? null, null);

    // Hover: paused on the server (the bound is the deadline), and the card says so.
    await card.hover();
    await until(async () => (await pending())?.pausedLeftMs != null, 10_000, 'paused by hover');
    const paused = (await pending()) as ApprovalPrompt;
    assert.ok(paused.pausedLeftMs! <= 60_000 && paused.pausedLeftMs! > 30_000);
    assert.equal(paused.expiresAt, paused.requestedAt + 10 * 60_000);
    await until(async () => /paused/.test((await countdown.textContent()) ?? ''), 5000, 'shown paused');

    // Pointer away: resumed with what it had left.
    await page.mouse.move(0, 0);
    await until(async () => (await pending())?.pausedLeftMs == null, 10_000, 'resumed');
    const resumed = (await pending()) as ApprovalPrompt;
    assert.ok(resumed.expiresAt - Date.now() <= paused.pausedLeftMs!, 'no more than it had left');
    await until(async () => /^\d+s left$/.test((await countdown.textContent()) ?? ''), 5000, 'shown running');

    // Focus in the card pauses too; focus gone resumes.
    await card.locator('button[data-decision="denyOnce"]').focus();
    await until(async () => (await pending())?.pausedLeftMs != null, 10_000, 'paused by focus');
    await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur());
    await until(async () => (await pending())?.pausedLeftMs == null, 10_000, 'resumed after blur');

    // Allow for this project: a stored rule, shown in the Project rules table.
    await card.locator('button[data-decision="allowProject"]').click();
    await agent.collect('read-me', 20_000);
    assert.match(agent.output('read-me', 'stdout'), /got=200/);
    const rules = await panel.request<RulesResult>('approvals/rules', {});
    assert.equal(rules.rules.length, 1);
    assert.equal(rules.rules[0]!.origin, 'panel');
    await page.locator('.nav-item[data-view="approvals"]').click();
    const row = page.locator('[data-testid="approvals-rules"] tr[data-rule-id]');
    await row.first().waitFor({ timeout: 5000 });
    assert.match(await visibleText(row.first()), /allow\s+http 127\.0\.0\.1:\d+ GET/);
    await row.first().locator('button', { hasText: 'Revoke' }).click();
    await row.first().waitFor({ state: 'detached', timeout: 5000 });
    assert.deepEqual((await panel.request<RulesResult>('approvals/rules', {})).rules, []);
    assert.deepEqual(browser.errors, []);
  });
});
