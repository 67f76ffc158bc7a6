/**
 * The panel shows the last `corral selftest` result kept on the host (issue 37, item 5): its verdict and time in the
 * side bar, each case's status inside, the details as text (a planted detail is shown, never run). Chromium against
 * the headless host; the host reads the result where `corral selftest` keeps it (XDG_STATE_HOME here).
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { SelftestReport } from '../../src/protocol/selftest.js';
import { selftestResultPath } from '../../src/selftest/lastResult.js';
import { openPanelHost, type PanelHost, visibleText } from './harness.js';

const state = mkdtempSync(join(tmpdir(), 'corral-selftest-panel-'));
const savedXdg = process.env.XDG_STATE_HOME;
process.env.XDG_STATE_HOME = state;
const planted = '<img src=x onerror="window.__pwned=1">';
const report: SelftestReport = {
  time: '2026-12-06T00:00:00.000Z',
  ok: false,
  cases: [
    { name: 'loopback-spellings', status: 'held', detail: '7 spellings refused' },
    { name: 'relay-in-sandbox', status: 'broken', detail: `reached the host ${planted}` },
    { name: 'leave-cgroup', status: 'not-applicable', detail: 'no per-command cgroups here' },
  ],
};

let ph: PanelHost;
before(async () => {
  mkdirSync(join(state, 'corral'), { recursive: true, mode: 0o700 });
  writeFileSync(selftestResultPath(), JSON.stringify(report), { mode: 0o600 });
  ph = await openPanelHost();
});
after(async () => {
  await ph?.close();
  if (savedXdg === undefined) delete process.env.XDG_STATE_HOME;
  else process.env.XDG_STATE_HOME = savedXdg;
  rmSync(state, { recursive: true, force: true });
});

test('the side bar shows the last self-test: broken, its time, each case; details as text', async () => {
  const page = ph.browser.page;
  const section = page.locator('#side-foot details.selftest[data-selftest="broken"]');
  await section.waitFor();
  const summary = await section.locator('summary').textContent();
  assert.match(summary ?? '', /^self-test: 1 broken \(.+\)$/);
  assert.match(
    (await section.getAttribute('title')) ?? '',
    /BROKEN at 2026-12-06T00:00:00.000Z: relay-in-sandbox/,
  );
  await section.locator('summary').click();
  const broken = section.locator('[data-case="relay-in-sandbox"]');
  assert.equal(await visibleText(broken), '✗ relay-in-sandbox: broken');
  assert.equal(await broken.getAttribute('title'), `reached the host ${planted}`);
  assert.equal(
    await visibleText(section.locator('[data-case="leave-cgroup"]')),
    '– leave-cgroup: not-applicable',
  );
  assert.equal(await page.locator('#side-foot img').count(), 0);
  assert.equal(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned), undefined);
});
