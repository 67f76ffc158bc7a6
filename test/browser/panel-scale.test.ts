// The panel under a flood (issue 16), in Chromium against the headless host: thousands of short processes from two
// agents stream in; the newest shows at the top in its final state, the counts per state and per client and the
// filters are exact, the table keeps only the rows on screen in the DOM, the selected process's detail stays its
// own while rows stream in, and a process with 100 MB of output shows its latest output with a bounded page and the
// earlier (retained) output on demand. Speed figures are the bench's (`npm run bench -- panel`).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { type Host, startHost } from '../../src/app/host.js';
import { b64, RpcClient } from '../helpers/client.js';
import { type Browser, ensureBuilt, openBrowser, visibleText } from './harness.js';

type Agent = RpcClient & { sessionId: string };

/** Runs `count` processes on the agent, `inflight` at a time; `argv(i)` for the i-th. */
async function flood(
  agent: Agent,
  prefix: string,
  count: number,
  argv: (i: number) => string[],
): Promise<void> {
  const closed = new Set<string>();
  let next = 0;
  const waiting = new Map<string, () => void>();
  agent.ws.on('message', (data) => {
    const text = data.toString();
    if (!text.startsWith('{"method":"process/closed"')) return;
    const id = (JSON.parse(text).params as { processId: string }).processId;
    closed.add(id);
    waiting.get(id)?.();
  });
  const worker = async () => {
    while (next < count) {
      const i = next++;
      const processId = `${prefix}${i}`;
      const done = new Promise<void>((r) => waiting.set(processId, r));
      await agent.request('process/start', { processId, argv: argv(i), cwd: '/tmp', env: {}, tty: false });
      if (!closed.has(processId)) await done;
      waiting.delete(processId);
    }
  };
  await Promise.all(Array.from({ length: 32 }, worker));
}

describe('panel under a flood of processes', () => {
  let host: Host;
  let browser: Browser;
  let a: Agent;
  let b: Agent;

  before(async () => {
    host = await startHost({ servePanel: true, panelDir: ensureBuilt(), resumeGraceMs: 60_000 });
    browser = await openBrowser();
    a = await RpcClient.open(host.execUrl, 'flood-a');
    b = await RpcClient.open(host.execUrl, 'flood-b');
    await browser.page.goto(host.panelUrl!);
    await browser.page.locator('#conn-status', { hasText: 'connected' }).waitFor({ timeout: 15_000 });
  });

  after(async () => {
    a?.close();
    b?.close();
    await browser?.close();
    await host?.shutdown();
  });

  test('the newest process shows in its final state; counts and filters are exact; the DOM holds only what is on screen', async () => {
    const page = browser.page;
    // 1500 + 1500 processes at once from two agents; every 5th of b's exits 3.
    await Promise.all([
      flood(a, 'a', 1500, () => ['/bin/true']),
      flood(b, 'b', 1500, (i) => (i % 5 === 4 ? ['/bin/sh', '-c', 'exit 3'] : ['/bin/true'])),
    ]);
    const last = await b.request('process/start', {
      processId: 'the-last-one',
      argv: ['/bin/true'],
      cwd: '/tmp',
      env: {},
      tty: false,
    });
    assert.ok(last);
    await b.collect('the-last-one');
    // Newest first: the last process is the table's first row, closed.
    const first = page.locator('[data-testid="process-table"] tbody tr[data-process-id]').first();
    await page
      .locator('[data-testid="process-table"] tbody tr[data-process-id="the-last-one"] [data-state="closed"]')
      .waitFor();
    assert.equal(await first.getAttribute('data-process-id'), 'the-last-one');
    const counts = page.locator('[data-testid="process-counts"]');
    await counts
      .filter({ hasText: /^3\u202f001 processes · 0 running · 2\u202f701 ok · 300 failed$/ })
      .waitFor();
    // Only the rows on screen (and a few either side) are in the DOM.
    const inDom = await page.locator('[data-testid="process-table"] tbody tr[data-process-id]').count();
    assert.ok(inDom > 10 && inDom < 80, `${inDom} rows in the DOM`);
    await browser.screenshot('panel-flood');

    // Per client, in the filter's options; the filter itself.
    const optionText = (value: string) =>
      page.locator(`[data-testid="filter-client"] option[value="${value}"]`).textContent();
    assert.equal(await optionText('flood-a'), 'flood-a (1\u202f500)');
    assert.equal(await optionText('flood-b'), 'flood-b (1\u202f501)');
    await page.selectOption('[data-testid="filter-client"]', 'flood-b');
    await counts.filter({ hasText: /· showing 1\u202f501$/ }).waitFor();
    await page.selectOption('[data-testid="filter-state"]', 'failed');
    await counts.filter({ hasText: /· showing 300$/ }).waitFor();
    const failedRows = page.locator('[data-testid="process-table"] tbody tr[data-process-id]');
    for (const id of await failedRows.evaluateAll((rs) => rs.map((r) => r.getAttribute('data-process-id'))))
      assert.match(id ?? '', /^b\d*[49]$/, `a failed row of b, every 5th: ${id}`);
    await page.selectOption('[data-testid="filter-client"]', '');
    await page.selectOption('[data-testid="filter-state"]', '');
    // The row elements a search hides stay in the table for the key that undoes it (virtualRows.ts): hidden, no
    // query finds them, they make no scroll area, and the empty table's message shows under the header.
    const rowElements = () =>
      page.evaluate(() => {
        const rows = [...document.querySelectorAll('[data-testid="process-table"] tbody tr:not(.vspacer)')];
        return rows.map((r) => {
          const tagged = r as HTMLElement & { __tag?: number };
          tagged.__tag ??= Math.random();
          return tagged.__tag;
        });
      });
    const before = await rowElements();
    await page.fill('input[type="search"]', 'a1234');
    await counts.filter({ hasText: /· showing 1$/ }).waitFor();
    assert.equal(await failedRows.count(), 1);
    assert.equal(await failedRows.first().getAttribute('data-process-id'), 'a1234');
    const shown = await page.evaluate(() => {
      const sc = document.querySelector('.proc-scroll') as HTMLElement;
      return {
        overflow: sc.scrollHeight - sc.clientHeight,
        rows: sc.querySelectorAll('tbody tr:not(.vspacer)').length,
      };
    });
    assert.ok(shown.overflow <= 0, `one row shown, no scroll area (${shown.overflow} px past the view)`);
    assert.ok(shown.rows > 1, 'the rows the search hid are still in the table');
    // Past the end of the list the clip box cuts the hidden rows off: out of the accessibility tree, no item's
    // data-* left, and none of them restyled (no visibility) but the one row the box's extra pixel reaches.
    const cutOff = await page.evaluate(() => {
      const clip = document.querySelector('.proc-scroll .vclip')!.getBoundingClientRect();
      const rows = [...document.querySelectorAll('.proc-scroll tbody tr:not(.vspacer)')].slice(1);
      return rows.map((r) => ({
        ariaHidden: r.getAttribute('aria-hidden'),
        data: [...r.attributes].filter((a) => a.name.startsWith('data-')).length,
        veiled: getComputedStyle(r).visibility === 'hidden',
        top: r.getBoundingClientRect().top,
        clipBottom: clip.bottom,
      }));
    });
    assert.ok(cutOff.length > 1);
    for (const [i, r] of cutOff.entries()) {
      const what = `hidden row ${i}: ${JSON.stringify(r)}`;
      assert.equal(r.ariaHidden, 'true', what);
      assert.equal(r.data, 0, what);
      // The first reaches into the box's last pixels (so it is made invisible); the others are wholly below it.
      if (i === 0) assert.ok(r.veiled && r.top >= r.clipBottom - 2, what);
      else assert.ok(!r.veiled && r.top >= r.clipBottom, what);
    }
    await page.fill('input[type="search"]', 'nothing-matches-this');
    await counts.filter({ hasText: /· showing 0$/ }).waitFor();
    const empty = await page.evaluate(() => {
      const sc = document.querySelector('.proc-scroll')!.getBoundingClientRect();
      const m = document.querySelector('.proc-scroll .empty')!.getBoundingClientRect();
      return { inView: m.height > 0 && m.top >= sc.top && m.bottom <= sc.bottom };
    });
    assert.ok(empty.inView, "the empty table's message shows in the view, not under the hidden rows");
    await page.fill('input[type="search"]', '');
    await counts.filter({ hasText: /failed$/ }).waitFor();
    assert.deepEqual(await rowElements(), before, 'the search undone shows the same row elements again');
    const unveiled = await page.evaluate(() =>
      [...document.querySelectorAll('.proc-scroll tbody tr:not(.vspacer)')].filter(
        (r) => r.hasAttribute('aria-hidden') || getComputedStyle(r).visibility === 'hidden',
      ),
    );
    assert.equal(unveiled.length, 0, 'shown again: no row hidden from view or from the accessibility tree');

    // Scrolled to the middle, the rows there are rendered (and only those).
    await page.evaluate(() => {
      const sc = document.querySelector('.proc-scroll') as HTMLElement;
      sc.scrollTop = sc.scrollHeight / 2;
    });
    await page.waitForFunction(() => {
      const ids = [...document.querySelectorAll('[data-testid="process-table"] tbody tr[data-process-id]')];
      return ids.length > 0 && !ids.some((r) => r.getAttribute('data-process-id') === 'the-last-one');
    });
    await browser.screenshot('panel-flood-middle');
    await page.evaluate(() => {
      (document.querySelector('.proc-scroll') as HTMLElement).scrollTop = 0;
    });
    // Back at the top fewer rows are needed (no overscan above): the extra ones stand where items of the list still
    // are (the bottom spacer's place), so they are invisible as well as hidden.
    const extra = page.locator('.proc-scroll tbody tr[aria-hidden="true"]:not(.vspacer)');
    await extra.first().waitFor({ state: 'attached' });
    const spacerRows = await extra.evaluateAll((rs) =>
      rs.map((r) => ({
        veiled: getComputedStyle(r).visibility === 'hidden',
        data: r.getAttribute('data-key'),
      })),
    );
    assert.ok(spacerRows.length > 0);
    for (const r of spacerRows)
      assert.deepEqual(r, { veiled: true, data: null }, "a row in the spacer's place");
  });

  test('the selected process stays selected and right while rows stream in', async () => {
    const page = browser.page;
    await a.request('process/start', {
      processId: 'watched',
      argv: ['/bin/sh', '-c', 'echo watching-this; exec cat'],
      cwd: '/tmp',
      env: {},
      tty: false,
      pipeStdin: true,
    });
    await page.locator('tr[data-process-id="watched"]').click();
    const detail = page.locator('[data-testid="process-detail"]');
    await detail.locator('.out-stdout', { hasText: 'watching-this' }).waitFor();
    // Rows stream in above it (newest first) while it is shown.
    await flood(b, 'more', 600, () => ['/bin/true']);
    await b.collect('more599');
    assert.match(await visibleText(detail), /Process id\s+watched/);
    assert.equal((await page.locator('tr.selected').count()) <= 1, true);
    await page.fill('[data-testid="stdin"]', 'typed-while-flooded');
    await page.press('[data-testid="stdin"]', 'Enter');
    await detail.locator('.out-stdout', { hasText: 'typed-while-flooded' }).waitFor();
    await page.click('[data-testid="terminate"]');
    await a.collect('watched');
    await detail.locator('[data-state="closed"]', { hasText: 'exited 137' }).waitFor();
  });

  test('100 MB of output: the latest shows live with a bounded page; earlier output on demand', async () => {
    const page = browser.page;
    await a.request('process/start', {
      processId: 'huge',
      // Waits for a line, then writes 100 MB of numbered lines and a last marker.
      argv: ['/bin/sh', '-c', 'read go; seq -f "line-%09.0f" 1 6666667; echo END-OF-HUGE-OUTPUT'],
      cwd: '/tmp',
      env: { PATH: '/usr/bin:/bin' },
      tty: false,
      pipeStdin: true,
    });
    await page.locator('tr[data-process-id="huge"]').click();
    const detail = page.locator('[data-testid="process-detail"]');
    await detail.locator('[data-testid="stdin"]').waitFor();
    await a.request('process/write', { processId: 'huge', chunk: b64('go\n') });
    await a.collect('huge', 120_000);
    const pre = detail.locator('.pipe-output');
    await pre.locator('span', { hasText: 'END-OF-HUGE-OUTPUT' }).waitFor({ timeout: 30_000 });
    const shown = await pre.evaluate((el) => (el.textContent ?? '').length);
    assert.ok(shown <= 200 * 1024, `${shown} characters in the DOM`);
    const bytes = host.monitor.snapshot().processes.find((p) => p.processId === 'huge')!.bytesOut;
    assert.ok(bytes > 100_000_000, `${bytes} bytes written`);
    // Live, the output was sampled (too fast to send it all: gaps are marked). On demand the view becomes the newest
    // retained stretch, without gaps, and then pages back through what the server retains.
    assert.match((await pre.textContent()) ?? '', /not shown live/);
    const earlier = detail.locator('[data-testid="output-earlier"]');
    await earlier.waitFor();
    /** The line numbers shown, and whether they are consecutive. */
    const lines = () =>
      pre.evaluate((el) => {
        const nums = [...(el.textContent ?? '').matchAll(/line-(\d+)/g)].map((m) => Number(m[1]));
        return {
          first: nums[0] ?? 0,
          last: nums[nums.length - 1] ?? 0,
          gapless: nums.every((x, i) => i === 0 || x === nums[i - 1]! + 1),
        };
      });
    await earlier.click();
    await page.waitForFunction(
      (sel) => !/not shown live/.test(document.querySelector(sel)?.textContent ?? ''),
      '[data-testid="process-detail"] .pipe-output',
    );
    const tail = await lines();
    assert.ok(tail.gapless, 'the retained stretch has no gaps');
    assert.equal(tail.last, 6666667);
    await pre.locator('span', { hasText: 'END-OF-HUGE-OUTPUT' }).waitFor();
    await earlier.click();
    await page.waitForFunction(
      ([sel, first]) => {
        const m = /line-(\d+)/.exec(document.querySelector(sel)?.textContent ?? '');
        return m !== null && Number(m[1]) < first;
      },
      ['[data-testid="process-detail"] .pipe-output', tail.first] as const,
    );
    const paged = await lines();
    assert.ok(paged.gapless && paged.first < tail.first && paged.last === 6666667, JSON.stringify(paged));
    await browser.screenshot('panel-huge-output');
  });

  test('no page errors', () => {
    assert.deepEqual(browser.errors, []);
  });
});
