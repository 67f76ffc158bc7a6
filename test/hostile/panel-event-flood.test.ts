// The panel against a joined server that floods it (issue 38): thousands of blocked requests and policy decisions in
// a few batches, wide (long hosts, 60 metadata keys), deep (nested metadata) and carrying markup, and a burst of
// approval prompts. The Network view keeps only the rows in view in the DOM (the old view held every event it kept,
// 500 + 300 rows rebuilt on every frame: a second-long task per frame under a flood), shows every value as text, keeps
// every event reachable by scrolling, and its filter stays exact; the prompt stack shows the three oldest prompts as
// cards and counts the rest (a newer prompt never pushes an older one out; the Approvals view lists them all), and a
// card stays the same element while its prompt is re-sent (a click on it is never lost to a redraw). No page error,
// no script run from a value.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { type Host, startHost } from '../../src/app/host.js';
import { type Browser, openBrowser } from '../browser/harness.js';
import { privateBuild } from '../browser/panelBuild.js';
import { type HostileServer, startHostileServer } from '../helpers/hostileServer.js';
import { wirePrompt } from '../helpers/monitorRows.js';
import { until } from '../helpers/server.js';

const MARKUP = '<img src=x onerror="window.__pwned=1">';
const BATCHES = 20;
const PER_BATCH = 100;

function deep(n: number): unknown {
  return n === 0 ? 'bottom' : { d: deep(n - 1) };
}

describe('the panel against a flood of network events and prompts from a joined server', () => {
  let evil: HostileServer;
  let host: Host;
  let browser: Browser;

  before(async () => {
    evil = await startHostileServer();
    const build = await privateBuild();
    host = await startHost({
      servePanel: true,
      panelDir: `${build}/renderer`,
      join: [{ url: evil.url, token: 'evil-token-0123456789', name: 'evil' }],
    });
    await until(() => evil.received.some((m) => m.method === 'monitor/subscribe'), 10_000);
    browser = await openBrowser();
    await browser.page.goto(host.panelUrl!);
    await browser.page.locator('#conn-status', { hasText: 'connected' }).waitFor({ timeout: 30_000 });
  });

  after(async () => {
    await browser?.close();
    await host?.shutdown();
    await evil?.close();
  });

  test('the Network view holds only the rows in view, shows values as text, and its filter stays exact', async () => {
    const page = browser.page;
    await page.locator('button.nav-item[data-view="network"]').click();
    const metadata: Record<string, unknown> = { nested: deep(10), markup: MARKUP };
    for (let k = 0; k < 60; k++) metadata[`key-${k}`] = 'v'.repeat(100);
    let id = 0;
    for (let b = 0; b < BATCHES; b++) {
      const blocked = [];
      const audit = [];
      for (let i = 0; i < PER_BATCH; i++) {
        const n = b * PER_BATCH + i;
        blocked.push({
          id: ++id,
          processId: `p-${n}`,
          sessionId: 'hostile-session',
          host: `${MARKUP}${'h'.repeat(1500)}-${n}.invalid`,
          port: 443,
          reason: MARKUP,
          method: MARKUP,
          protocol: 'http-connect',
          mode: 'full',
          decision: 'deny',
          source: 'baseline_policy',
          client: null,
          timestamp: Date.now() / 1000,
          blockedTotal: id,
        });
        audit.push({
          id: ++id,
          processId: `p-${n}`,
          sessionId: 'hostile-session',
          host: `a-${n}.invalid`,
          port: 443,
          decision: n % 3 === 0 ? 'allow' : 'deny',
          reason: MARKUP,
          source: 'baseline_policy',
          protocol: 'http-connect',
          method: 'CONNECT',
          scope: 'domain',
          override: false,
          timestamp: new Date().toISOString(),
          metadata,
        });
      }
      evil.send({ method: 'monitor/batch', params: { blocked, audit } });
    }
    const last = BATCHES * PER_BATCH - 1;
    const audit = page.locator('[data-testid="audit-table"] tbody tr:not(.vspacer)');
    const blocked = page.locator('[data-testid="blocked-table"] tbody tr:not(.vspacer)');
    // The newest shows on top of each table.
    await page
      .locator('[data-testid="audit-table"] tbody tr', { hasText: `a-${last}.invalid` })
      .first()
      .waitFor();
    await page
      .locator('[data-testid="blocked-table"] tbody tr', { hasText: `-${last}.invalid` })
      .first()
      .waitFor();
    // Only the rows in view (and a few either side) are in the DOM, whatever the flood.
    const inDom = { audit: await audit.count(), blocked: await blocked.count() };
    assert.ok(inDom.audit > 3 && inDom.audit < 40, `audit rows in the DOM: ${inDom.audit}`);
    assert.ok(inDom.blocked > 3 && inDom.blocked < 40, `blocked rows in the DOM: ${inDom.blocked}`);
    // Values are text.
    assert.equal(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned), undefined);
    assert.equal(await page.locator('#view-network img').count(), 0);
    assert.match((await blocked.first().textContent()) ?? '', /<img src=x onerror=/);
    // Every event kept is reachable: the bottom of the audit table is the oldest the host kept.
    const kept = await page.evaluate(() => {
      const sc = document.querySelector('[data-testid="audit-table"]')!.parentElement!;
      sc.scrollTop = sc.scrollHeight;
      return sc.scrollHeight;
    });
    assert.ok(kept > 44 * 400, `the audit table spans every kept event (${kept}px)`);
    await until(
      () =>
        page.evaluate(() => {
          const rows = [...document.querySelectorAll('[data-testid="audit-table"] tbody tr:not(.vspacer)')];
          return rows.length > 0 && rows.length < 40;
        }),
      5000,
    );
    // The decision filter is exact: only allowed decisions, every third event.
    await page.selectOption('#view-network select[aria-label="Audit decisions"]', 'allow');
    await page.evaluate(() => {
      const sc = document.querySelector('[data-testid="audit-table"]')!.parentElement!;
      sc.scrollTop = 0;
    });
    await until(
      () =>
        page.evaluate(
          () =>
            [...document.querySelectorAll('[data-testid="audit-table"] tbody tr:not(.vspacer)')].every((r) =>
              r.textContent?.includes('allow'),
            ) && document.querySelectorAll('[data-testid="audit-table"] tbody tr:not(.vspacer)').length > 0,
        ),
      5000,
    );
    const hosts = await audit.evaluateAll((rs) =>
      rs.map((r) => /a-(\d+)\.invalid/.exec(r.textContent ?? '')?.[1]),
    );
    for (const n of hosts) assert.equal(Number(n) % 3, 0, `an allowed decision is every third event: a-${n}`);
    await page.selectOption('#view-network select[aria-label="Audit decisions"]', '');
    assert.deepEqual(browser.errors, []);
  });

  test('a burst of prompts: the three oldest as cards, kept while the burst goes on, the rest counted; gone once resolved', async () => {
    const page = browser.page;
    await page.locator('button.nav-item[data-view="processes"]').click();
    const prompt = (n: number) =>
      wirePrompt({
        id: `prompt-${n}`,
        sessionId: 'hostile-session',
        processId: `p-${n}`,
        clientName: MARKUP,
        command: [MARKUP, 'x'.repeat(5000)],
        cwd: '/tmp',
        host: `${MARKUP}.invalid`,
      });
    const first = prompt(0);
    evil.send({ method: 'approvals/requested', params: { prompt: first } });
    for (let n = 1; n < 5; n++) evil.send({ method: 'approvals/requested', params: { prompt: prompt(n) } });
    const cards = page.locator('[data-testid="approval-prompt"]');
    const more = page.locator('[data-testid="approval-more-count"]');
    // Five pending: the three oldest are cards, the two others counted under them.
    await more.filter({ hasText: /^2 more requests waiting$/ }).waitFor();
    assert.deepEqual(await cards.evaluateAll((cs) => cs.map((c) => c.getAttribute('data-id'))), [
      'prompt-0',
      'prompt-1',
      'prompt-2',
    ]);
    // The first card is the same element while 200 more prompts come and go behind it.
    await page.evaluate(() => {
      (window as unknown as { __first: Element }).__first = document.querySelector(
        '[data-testid="approval-prompt"]',
      )!;
    });
    for (let n = 5; n < 205; n++) {
      evil.send({ method: 'approvals/requested', params: { prompt: prompt(n) } });
      evil.send({
        method: 'approvals/resolved',
        params: { id: `prompt-${n}`, outcome: 'deny', released: 1, resolvedAt: Date.now() },
      });
    }
    // The first prompt again and again, more requests held on it each time: its card changes in place.
    for (let waiting = 2; waiting <= 100; waiting++)
      evil.send({ method: 'approvals/requested', params: { prompt: { ...first, waiting } } });
    // A newer prompt does not push an older one out of the stack: it is counted.
    evil.send({ method: 'approvals/requested', params: { prompt: prompt(999) } });
    // "3 more" alone could be a frame of the loop above (prompt-n shown before its resolution came); the first card
    // holding 100 requests comes after the whole loop, so the count seen after it is prompt-999's.
    await cards
      .first()
      .filter({ hasText: /Held100 requests/ })
      .waitFor({ timeout: 10_000 });
    await more.filter({ hasText: /^3 more requests waiting$/ }).waitFor({ timeout: 10_000 });
    assert.equal(await cards.count(), 3);
    assert.equal(await page.locator('[data-testid="approval-prompt"][data-id="prompt-999"]').count(), 0);
    assert.equal(
      await page.evaluate(
        () =>
          (window as unknown as { __first: Element }).__first ===
          document.querySelector('[data-testid="approval-prompt"]'),
      ),
      true,
      'the card under the pointer was not remade',
    );
    // "Show all": the Approvals view lists every pending prompt, the counted ones too.
    await page.locator('[data-testid="approval-more"] button').click();
    await page
      .locator('[data-testid="approvals-pending"] tbody tr', { hasText: 'p-999' })
      .waitFor({ timeout: 10_000 });
    assert.equal(await page.locator('[data-testid="approvals-pending"] tbody tr').count(), 6);
    await page.locator('button.nav-item[data-view="processes"]').click();
    assert.equal(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned), undefined);
    for (let n = 0; n < 5; n++)
      evil.send({
        method: 'approvals/resolved',
        params: { id: `prompt-${n}`, outcome: 'deny', released: 1, resolvedAt: Date.now() },
      });
    // The counted one is a card once the older ones are answered.
    await page.locator('[data-testid="approval-prompt"][data-id="prompt-999"]').waitFor({ timeout: 10_000 });
    await more.waitFor({ state: 'detached' });
    evil.send({
      method: 'approvals/resolved',
      params: { id: 'prompt-999', outcome: 'deny', released: 1, resolvedAt: Date.now() },
    });
    await until(async () => (await cards.count()) === 0, 10_000);
    assert.deepEqual(browser.errors, []);
  });

  test('a connection that came through the transparent TCP path is marked so; any other transport value is refused', async () => {
    const page = browser.page;
    await page.locator('button.nav-item[data-view="network"]').click();
    const event = (host: string, transport: unknown) => ({
      id: Date.now() + Math.floor(Math.random() * 1e6),
      processId: 'p-t',
      sessionId: 'hostile-session',
      host,
      port: 5432,
      decision: 'allow',
      reason: 'allowed',
      source: 'baseline_policy',
      protocol: 'socks5_tcp',
      method: 'CONNECT',
      scope: 'domain',
      override: false,
      timestamp: new Date().toISOString(),
      metadata: {},
      ...(transport !== undefined ? { transport } : {}),
    });
    evil.send({ method: 'monitor/batch', params: { audit: [event('raw.invalid', 'transparent')] } });
    evil.send({ method: 'monitor/batch', params: { audit: [event('proxied.invalid', undefined)] } });
    // A joined server's other value for the field: the message is refused (not shown, not a badge).
    evil.send({
      method: 'monitor/batch',
      params: { audit: [event('forged.invalid', `${MARKUP} transparent`)] },
    });
    const row = (host: string) => page.locator('[data-testid="audit-table"] tbody tr', { hasText: host });
    await row('raw.invalid').first().waitFor({ timeout: 10_000 });
    await row('proxied.invalid').first().waitFor({ timeout: 10_000 });
    assert.equal(await row('raw.invalid').first().locator('[data-testid="transparent"]').count(), 1);
    assert.equal(await row('proxied.invalid').first().locator('[data-testid="transparent"]').count(), 0);
    assert.equal(await row('forged.invalid').count(), 0);
    assert.equal(await page.locator('#view-network img').count(), 0);
    assert.deepEqual(browser.errors, []);
  });
});
