// Network approvals in the panel (issue 7): Chromium against the headless host; an agent's child curls a loopback
// origin through its managed proxy, the prompt appears over the open view, and clicking decides the held request.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { askingNetwork, curlCode } from '../helpers/approvalsCli.js';
import type { RpcClient } from '../helpers/client.js';
import { shellStart } from '../helpers/registry-contract.js';
import { startOrigin } from '../integration/network-helpers.js';
import { type Browser, openPanelHost, type PanelHost, visibleText } from './harness.js';

const CURL = '/usr/bin/curl';

describe('network approvals in the browser panel', {
  skip: existsSync(CURL) ? false : 'curl is not installed',
}, () => {
  let browser: Browser;
  let agent: RpcClient & { sessionId: string };
  let origin: Awaited<ReturnType<typeof startOrigin>>;

  let ph: PanelHost;
  before(async () => {
    origin = await startOrigin();
    ph = await openPanelHost();
    ({ browser, agent } = ph);
  });

  after(async () => {
    await ph?.close();
    await origin?.close();
  });

  test('the prompt shows the request; Allow once lets it through, the next request prompts again; Deny blocks it', async () => {
    const page = browser.page;
    const P = origin.port;
    const script = [
      curlCode('first', `http://127.0.0.1:${P}/first`),
      curlCode('second', `http://127.0.0.1:${P}/second`, true),
    ].join('; ');
    const managedNetwork = askingNetwork({ 'denied.test': 'deny' });
    (managedNetwork.config.network as Record<string, unknown>).approval_timeout_ms = 20_000;
    await agent.request('process/start', { ...shellStart('fetch-docs', script, '/tmp'), managedNetwork });
    // The prompt appears over the current (processes) view.
    const prompt = page.locator('[data-testid="approval-prompt"]');
    await prompt.first().waitFor({ timeout: 15_000 });
    assert.equal(await prompt.count(), 1);
    const field = (name: string) => visibleText(prompt.first().locator(`[data-field="${name}"]`));
    assert.match(await field('process'), /fetch-docs \(codex-agent\)/);
    assert.match(await field('command'), /\/bin\/sh -c/);
    assert.equal(await field('host'), '127.0.0.1');
    assert.equal(await field('port'), String(P));
    assert.equal(await field('protocol'), 'http');
    assert.equal(await field('method'), 'GET');
    assert.equal(await page.locator('#view-processes').isVisible(), true, 'non-modal: the view stays open');
    assert.equal(
      await page.locator('.nav-item[data-view="approvals"] .nav-count').textContent(),
      '1',
      'the nav counts pending prompts',
    );
    assert.equal(origin.requests.length, 0, 'the request is held');
    await browser.screenshot('approvals-prompt');
    const firstId = await prompt.first().getAttribute('data-id');
    await prompt.first().locator('button[data-decision="allowOnce"]').click();

    // Allow once: the next request prompts again.
    const second = page.locator(`[data-testid="approval-prompt"]:not([data-id="${firstId}"])`);
    await second.waitFor({ timeout: 15_000 });
    assert.ok(origin.requests.some((r) => r.url === '/first'));
    await second.locator('button[data-decision="deny"]').click();
    await agent.collect('fetch-docs', 20_000);
    const out = agent.output('fetch-docs', 'stdout');
    assert.match(out, /first=200/);
    assert.match(out, /second=403/);
    assert.match(out, /"reason":"not_allowed","decision":"deny","source":"decider"/);
    assert.ok(!origin.requests.some((r) => r.url === '/second'));
    await page
      .locator('[data-testid="approval-prompt"]')
      .first()
      .waitFor({ state: 'detached', timeout: 5000 });

    // The Approvals view lists the remembered deny, exports it, and revokes it.
    await page.locator('.nav-item[data-view="approvals"]').click();
    const rows = page.locator('[data-testid="approvals-decisions"] tr[data-decision-id]');
    await rows.first().waitFor({ timeout: 5000 });
    assert.equal(await rows.count(), 1);
    assert.match(await visibleText(rows.first()), /deny\s+session\s+http 127\.0\.0\.1:\d+/);
    const exportBox = page.locator('[data-testid="approval-export"]');
    await page.waitForFunction(
      () =>
        /"127\.0\.0\.1": "deny"/.test(
          document.querySelector('[data-testid="approval-export"]')?.textContent ?? '',
        ),
      null,
      { timeout: 5000 },
    );
    assert.match((await exportBox.textContent()) ?? '', /"domains"/);
    const audit = await visibleText(page.locator('[data-testid="approvals-audit"]'));
    assert.match(audit, /allowed once/);
    assert.match(audit, /denied/);
    await browser.screenshot('approvals-view');
    await rows.first().locator('button', { hasText: 'Revoke' }).click();
    await rows.first().waitFor({ state: 'detached', timeout: 5000 });
    assert.deepEqual(browser.errors, []);
  });
});
