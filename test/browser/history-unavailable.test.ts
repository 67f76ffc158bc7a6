// The panel's History view of a host whose SQLite driver does not load (its binding built for another Node ABI, as
// in Electron without a rebuild): it says why the trail is unavailable and how to fix it, instead of an empty list.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { tempDir, until } from '../helpers/server.js';
import { brokenSqliteInstall, OTHER_ABI, runCli } from '../integration/audit-driver-rig.js';
import { type Browser, openBrowser, visibleText } from './harness.js';

const install = brokenSqliteInstall('other-abi');
const state = tempDir('corral-history-unavailable-');
let browser: Browser | null = null;
after(async () => {
  await browser?.close();
  install.cleanup();
  state.cleanup();
});

test('History says the audit trail is unavailable, why, and how to fix it', async () => {
  const serve = runCli(install.cli, ['serve'], { ...process.env, XDG_STATE_HOME: join(state.path, 'xdg') });
  try {
    await until(
      () => serve.stdout.some((l) => l.startsWith('panel: ')) || serve.child.exitCode !== null,
      20_000,
      'serve to print its URLs',
    );
    const panelUrl = serve.stdout.find((l) => l.startsWith('panel: '))?.slice(7);
    assert.ok(panelUrl, serve.stderr());
    browser = await openBrowser();
    const page = browser.page;
    await page.goto(`${panelUrl}&view=history`);
    await page.locator('#conn-status', { hasText: 'connected' }).waitFor({ timeout: 15_000 });
    const table = page.getByTestId('history-table');
    await table.locator('td', { hasText: 'unavailable' }).waitFor({ timeout: 10_000 });
    const cell = await visibleText(table.locator('tbody'));
    assert.match(cell, /audit trail is unavailable on this server: better-sqlite3 cannot be loaded/);
    assert.match(cell, new RegExp(`NODE_MODULE_VERSION ${OTHER_ABI}\\b`));
    assert.match(cell, /npm rebuild better-sqlite3/);
    assert.doesNotMatch(cell, /Nothing recorded matches/);
    const retention = page.getByTestId('history-retention');
    await retention.filter({ hasText: 'unavailable' }).waitFor({ timeout: 10_000 });
    assert.match(
      await visibleText(retention),
      /The audit trail is unavailable on this host: nothing is stored/,
    );
    await browser.screenshot('history-unavailable');
    assert.deepEqual(browser.errors, []);
  } finally {
    await serve.stop();
  }
});
