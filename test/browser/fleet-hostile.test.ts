// The fleet panel in Chromium joined to a hostile server (issue 19 item 1): what that server sends is shown as text
// (markup in argv, client names, cwd, hosts and prompts never becomes elements or runs), a row larger than the host
// keeps is refused and counted, and the host's own rows and page are untouched. Its prompt's card and its learning
// sessions offer the approvals v2 actions, which the host forwards to it alone; so do its project rules in the Rules
// table (shown with the server's name; toggle, note and revoke sent to it).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { type Host, startHost } from '../../src/app/host.js';
import { type HostileServer, startHostileServer } from '../helpers/hostileServer.js';
import { monitorProcess, wirePrompt } from '../helpers/monitorRows.js';
import { until } from '../helpers/server.js';
import { type Browser, ensureBuilt, openBrowser, visibleText } from './harness.js';

const waitUntil = (f: () => boolean) => until(f, 15_000, 'the hostile server got the call');

const HTML = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script><b>bold</b>';

/** A project rule of the hostile server, with markup wherever it can put text (and naming another server). */
const evilRule = {
  server: 's9',
  id: 'evil-rule',
  workspace: `/w/${HTML}`,
  decision: 'allow',
  protocol: 'http',
  host: 'h.test',
  port: 80,
  method: 'GET',
  pathPrefix: `/${HTML}`,
  origin: 'panel',
  createdBy: { kind: 'panel', credential: HTML, clientName: HTML },
  createdAt: 1,
  promptId: null,
  enabled: true,
  note: HTML,
  hits: 3,
  lastHitAt: null,
  contradiction: `its policy denies ${HTML}`,
};

describe('fleet panel and a hostile joined server', () => {
  let evil: HostileServer;
  let host: Host;
  let browser: Browser;

  before(async () => {
    evil = await startHostileServer({
      'approvals/ruleUpdate': (p) => ({
        result: { rule: { ...evilRule, ...(p as object), contradiction: null } },
      }),
      'approvals/revoke': () => ({ result: { revoked: true } }),
    });
    host = await startHost({
      servePanel: true,
      panelDir: ensureBuilt(),
      join: [{ url: evil.url, token: 'evil-server-token', name: `evil ${HTML}` }],
    });
    browser = await openBrowser();
    await browser.page.goto(host.panelUrl!);
    await browser.page.locator('#conn-status', { hasText: 'connected' }).waitFor({ timeout: 15_000 });
    await browser.page.locator('[data-testid="filter-server"]:not([hidden])').waitFor();
  });

  after(async () => {
    await browser?.close();
    await host?.shutdown();
    await evil?.close();
  });

  test('markup it sends is text: in the table, the detail, a network event and a prompt', async () => {
    const page = browser.page;
    evil.send({
      method: 'monitor/batch',
      params: {
        processes: [
          monitorProcess({
            sessionId: HTML,
            processId: 'html-row',
            clientName: HTML,
            argv: [HTML, '--flag', HTML],
            cwd: `/tmp/${HTML}`,
            metadata: { note: HTML },
            envKeys: [HTML],
            startedAt: Date.now(),
          }),
        ],
        blocked: [
          {
            id: 1,
            processId: 'html-row',
            sessionId: HTML,
            host: HTML,
            port: 80,
            reason: HTML,
            method: 'GET',
            protocol: 'http',
            mode: null,
            decision: 'deny',
            source: null,
            client: null,
            timestamp: 1,
            blockedTotal: 1,
          },
        ],
      },
    });
    const row = page.locator('tr[data-process-id="html-row"]');
    await row.waitFor();
    assert.ok((await visibleText(row)).includes('<img src=x'), 'the markup shows as text');
    await row.click();
    const detail = page.locator('[data-testid="process-detail"]');
    await detail.waitFor();
    assert.ok((await visibleText(detail)).includes('<script>'));
    await page.click('button[data-view="network"]');
    await page.locator('[data-testid="blocked-table"] tr[data-server="s1"]').waitFor();
    evil.send({
      method: 'approvals/requested',
      params: {
        prompt: wirePrompt({
          id: HTML,
          sessionId: HTML,
          processId: 'html-row',
          clientName: HTML,
          command: [HTML],
          cwd: HTML,
          host: HTML,
          port: 1,
          protocol: 'http',
          method: HTML,
        }),
      },
    });
    const prompt = page.locator('[data-testid="approval-prompt"][data-server="s1"]');
    await prompt.waitFor();
    assert.ok((await visibleText(prompt)).includes('<img'));
    // Its card offers "Wait until the process exits" too: the host forwards it to that server alone.
    await prompt.locator('[data-action="wait"]').click();
    await waitUntil(() => evil.received.some((r) => r.method === 'approvals/waitForExit'));
    assert.deepEqual(evil.received.filter((r) => r.method === 'approvals/waitForExit').at(-1)!.params, {
      id: HTML,
    });
    // Its learning sessions show as a project row of that server; stopping one is sent to it.
    evil.send({
      method: 'approvals/learningChanged',
      params: {
        server: 's9',
        learning: [
          {
            workspace: `/w/${HTML}`,
            startedAt: Date.now(),
            endsAt: Date.now() + 600_000,
            maxRequests: 10,
            requests: 1,
            active: true,
            proposal: [
              { protocol: 'https', host: HTML, port: 443, method: 'GET', pathPrefix: '/api', hits: 1 },
            ],
          },
        ],
      },
    });
    await page.click('button[data-view="approvals"]');
    const project = page.locator('.project-row[data-server="s1"]');
    await project.waitFor();
    assert.ok((await visibleText(project)).includes(`/w/${HTML}`));
    await project.locator('[data-action="learning-toggle"]').click();
    await waitUntil(() => evil.received.some((r) => r.method === 'approvals/learnEnd'));
    assert.deepEqual(evil.received.filter((r) => r.method === 'approvals/learnEnd').at(-1)!.params, {
      workspace: `/w/${HTML}`,
      accept: [],
    });
    // Nothing it sent became an element or ran.
    assert.equal(await page.locator('img, b, main script').count(), 0);
    assert.equal(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned), undefined);
    await browser.screenshot('fleet-hostile');
  });

  test('its project rules: listed with its name, markup as text; toggle, note and revoke go to it alone', async () => {
    const page = browser.page;
    // Its prompt of the test before, answered: the card stack no longer covers the view.
    evil.send({
      method: 'approvals/resolved',
      params: { id: HTML, outcome: 'denyOnce', released: 0, resolvedAt: Date.now() },
    });
    await page.locator('[data-testid="approval-prompt"]').waitFor({ state: 'detached' });
    evil.send({ method: 'approvals/rulesChanged', params: { server: 's9', rules: [evilRule] } });
    await page.click('button[data-view="approvals"]');
    const row = page.locator(
      '[data-testid="approvals-rules"] tr[data-rule-id="evil-rule"][data-server="s1"]',
    );
    await row.waitFor();
    const text = await visibleText(row);
    assert.ok(text.includes(`evil ${HTML}: `), `the server's name shown: ${text}`);
    assert.ok(text.includes(`/w/${HTML}`) && text.includes(`its policy denies ${HTML}`), 'markup as text');
    assert.equal(await row.locator('[data-field="contradiction"]').count(), 1, 'its own flag, on its row');
    const sent = (m: string) => evil.received.filter((r) => r.method === m).at(-1)?.params;
    await row.locator('[data-action="toggle"]').click();
    await waitUntil(() => sent('approvals/ruleUpdate') !== undefined);
    assert.deepEqual(sent('approvals/ruleUpdate'), { id: 'evil-rule', enabled: false });
    await row.locator('[data-action="note"]').click();
    await row.locator('[data-field="note-input"]').fill('checked by hand');
    await row.locator('[data-action="note-save"]').click();
    await waitUntil(() => (sent('approvals/ruleUpdate') as { note?: string }).note !== undefined);
    assert.deepEqual(sent('approvals/ruleUpdate'), { id: 'evil-rule', note: 'checked by hand' });
    await row.locator('[data-action="revoke"]').click();
    await waitUntil(() => sent('approvals/revoke') !== undefined);
    assert.deepEqual(sent('approvals/revoke'), { id: 'evil-rule' });
    // The rules of another size: a 1 MiB note is refused by the host (counted), never shown.
    evil.send({
      method: 'approvals/rulesChanged',
      params: { rules: [{ ...evilRule, id: 'huge-note', note: 'n'.repeat(1 << 20) }] },
    });
    evil.send({ method: 'approvals/rulesChanged', params: { rules: [] } });
    await row.waitFor({ state: 'detached' });
    assert.equal(await page.locator('tr[data-rule-id="huge-note"]').count(), 0);
    assert.equal(await page.locator('img, b, main script').count(), 0);
    await page.click('button[data-view="processes"]');
  });

  test('a row larger than the host keeps is refused and counted; the host stays joined', async () => {
    const page = browser.page;
    evil.send({
      method: 'monitor/batch',
      params: {
        processes: [monitorProcess({ sessionId: 's', processId: 'too-big', argv: ['x'.repeat(100 * 1024)] })],
      },
    });
    await page.click('button[data-view="servers"]');
    // The row may still show an earlier refusal (the rules cases before this one): wait for this one's.
    await page.locator('[data-testid="servers-table"] tr[data-server="s1"] td.bad').waitFor();
    await page
      .locator('[data-testid="servers-table"] tr[data-server="s1"]', { hasText: 'a process row over' })
      .waitFor();
    assert.match(
      await visibleText(page.locator('[data-testid="servers-table"] tr[data-server="s1"]')),
      /connected[\s\S]*refused from the server: a process row over 65536 bytes/,
    );
    await page.click('button[data-view="processes"]');
    assert.equal(await page.locator('tr[data-process-id="too-big"]').count(), 0);
  });

  test('a message nested past the bound drops the link: the Servers view says why', async () => {
    const page = browser.page;
    evil.send(
      `{"method":"monitor/batch","params":{"processes":[${'['.repeat(30_000)}${']'.repeat(30_000)}]}}`,
    );
    await page.click('button[data-view="servers"]');
    const dropped = page.locator(
      '[data-testid="servers-table"] tr[data-server="s1"] [data-testid="dropped"]',
    );
    await dropped.waitFor({ timeout: 15_000 });
    assert.match(await visibleText(dropped), /dropped .*nesting deeper than 64 levels/);
    await page.click('button[data-view="processes"]');
  });

  test('no page errors', () => {
    assert.deepEqual(browser.errors, []);
  });
});
