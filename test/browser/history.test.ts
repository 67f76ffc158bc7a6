// The panel's History view (issue 15) in Chromium: what an agent ran before the host restarted is still there —
// searchable, filterable, with a process's stored output, its network decisions and its session's file changes.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { type Host, startHost } from '../../src/app/host.js';
import { b64, RpcClient } from '../helpers/client.js';
import { tempDir } from '../helpers/server.js';
import { type Browser, ensureBuilt, openBrowser, visibleText } from './harness.js';

describe('History view across a host restart', () => {
  const dir = tempDir('corral-history-');
  const dbPath = join(dir.path, 'state', 'audit.db');
  // Fixed tokens, so that the page reconnects to the restarted host by itself.
  const tokens = { agent: 'history-agent-token-0123456789', panel: 'history-panel-token-0123456789' };
  let host: Host | null = null;
  let browser: Browser | null = null;

  after(async () => {
    await browser?.close();
    await host?.shutdown();
    dir.cleanup();
  });

  test('processes of the previous run are listed, searched and opened with their output, decisions and files', async () => {
    const panelDir = ensureBuilt();
    const opts = { servePanel: true, panelDir, tokens, audit: { dbPath, outputBytes: 4096 } } as const;
    // First run: an agent works, then the host stops.
    host = await startHost(opts);
    const port = host.listener.port;
    const agent = await RpcClient.open(host.execUrl, 'codex-before-restart');
    const start = (processId: string, script: string, extra: Record<string, unknown> = {}) =>
      agent.request('process/start', {
        processId,
        argv: ['/bin/sh', '-c', script],
        cwd: dir.path,
        env: { PATH: '/usr/bin:/bin' },
        tty: false,
        ...extra,
      });
    // The build waits for the agent's fs/writeFile, so the write falls within its run.
    await start(
      'build',
      'echo compiling-module-alpha; while [ ! -e patched.txt ]; do sleep 0.02; done; echo warning-beta >&2; exit 2',
    );
    await agent.request('fs/writeFile', {
      path: join(dir.path, 'patched.txt'),
      dataBase64: b64('patched\n'),
    });
    await agent.collect('build');
    await start('fetch', "curl --noproxy '' -s -o /dev/null http://blocked.test/ || true", {
      managedNetwork: { config: { network: { enabled: true, domains: { 'blocked.test': 'deny' } } } },
    });
    await agent.collect('fetch', 20_000);
    await start('quiet', 'true');
    await agent.collect('quiet');
    agent.close();
    await host.shutdown();
    host = null;

    // Second run: the same database, the same port and token (the open page reconnects by itself).
    browser = await openBrowser();
    const page = browser.page;
    host = await startHost({ ...opts, port });
    await page.goto(`${host.panelUrl!}&view=history`);
    await page.locator('#conn-status', { hasText: 'connected' }).waitFor({ timeout: 15_000 });
    const table = page.getByTestId('history-table');
    await table.locator('tr[data-process-id="quiet"]').waitFor({ timeout: 10_000 });
    const ids = await table
      .locator('tbody tr')
      .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-process-id')));
    assert.deepEqual(ids, ['quiet', 'fetch', 'build'], 'newest first');
    assert.match(
      await visibleText(page.getByTestId('history-retention')),
      /Keeps the last 30 days, at most 1\.00 GiB/,
    );
    assert.match(await visibleText(page.getByTestId('history-retention')), /3 processes/);

    // Search and filter.
    await page.getByTestId('history-search').fill('module-alpha');
    await table.locator('tbody tr').first().waitFor();
    await page.waitForFunction(
      () => document.querySelectorAll('[data-testid="history-table"] tbody tr[data-process-id]').length === 1,
      undefined,
      { timeout: 5000 },
    );
    await page.getByTestId('history-search').fill('');
    await page.getByTestId('history-status').selectOption('failure');
    await page.waitForFunction(
      () =>
        [...document.querySelectorAll('[data-testid="history-table"] tbody tr[data-process-id]')]
          .map((r) => r.getAttribute('data-process-id'))
          .join() === 'build',
      undefined,
      { timeout: 5000 },
    );

    // A process's detail: stored output, exit, the file its session changed while it ran.
    await table.locator('tr[data-process-id="build"]').click();
    const detail = page.getByTestId('history-detail');
    await detail.getByTestId('history-output').waitFor();
    const out = await visibleText(detail.getByTestId('history-output'));
    assert.match(out, /compiling-module-alpha/);
    assert.match(out, /warning-beta/);
    assert.equal(await visibleText(detail.getByTestId('history-exit')), 'exit 2');
    assert.match(
      await visibleText(detail.getByTestId('history-files')),
      /writeFile\s+.*patched\.txt\s+allowed/,
    );
    await browser.screenshot('history-process-detail');

    // The other process's network decisions.
    await page.getByTestId('history-status').selectOption('');
    await table.locator('tr[data-process-id="fetch"]').click();
    await detail.getByTestId('history-network').locator('tbody tr').first().waitFor();
    await page.waitForFunction(
      () =>
        /blocked\.test:80/.test(document.querySelector('[data-testid="history-network"]')?.textContent ?? ''),
      undefined,
      { timeout: 5000 },
    );
    const net = await visibleText(detail.getByTestId('history-network'));
    assert.match(net, /deny\s+blocked\.test:80\s+denied\s+config: deny:blocked\.test/);

    // The network list, filtered by decision.
    await page.getByTestId('history-type').selectOption('network');
    await page.getByTestId('history-decision').selectOption('deny');
    await table.locator('tr[data-host="blocked.test"]').waitFor({ timeout: 5000 });
    // Its receipt: the configured deny entry that matched (issue 37, item 2).
    assert.equal(
      await table.locator('tr[data-host="blocked.test"]').getByTestId('history-rule').first().textContent(),
      'config: deny:blocked.test',
    );
    await browser.screenshot('history-network');

    // The host restarts again while the page stays open: it reconnects and the history is still there.
    await host.shutdown();
    host = await startHost({ ...opts, port });
    await page.locator('#conn-status', { hasText: 'connected' }).waitFor({ timeout: 20_000 });
    await page.getByTestId('history-type').selectOption('process');
    await table.locator('tr[data-process-id="build"]').waitFor({ timeout: 10_000 });
    // Chromium logs the reconnect attempts made while the host was down; nothing else may go wrong.
    assert.deepEqual(
      browser.errors.filter((e) => !/ERR_CONNECTION_REFUSED/.test(e)),
      [],
    );
  });
});
