/**
 * Panel at scale (issue 16): `corral serve` as a child, real agents over WebSocket, the panel in Chromium.
 *
 * - exec path: start→closed p50 of `/bin/true` (200 in a row) on a warm server with no panel, then with the panel open.
 * - 10k at 2000/s: four agents start 10 000 short processes paced at 2000/s (the achieved rate is printed); the
 *   page's lag behind the agents (first appearance after the start answer; final state after process/closed),
 *   main-thread CPU per process (CDP ThreadTime; TaskDuration is its wall clock), long tasks (as the page saw them,
 *   and the main thread's CPU in each task from a Chrome trace: on a loaded machine a task is long by the wall clock
 *   while it waits for a core), JS heap after GC.
 * - 5k at 800/s: the same below saturation (two cores cannot start 2000/s: ~0.5 ms of CPU per exec here alone), so
 *   the lag is the panel's own rather than a saturated machine's queue.
 * - 100k stored: the server holds 100 000 processes (live sessions keep their finished processes); the panel is
 *   opened on them: load time, heap, long tasks, filter and search answer times, scrolling frame times, rows in the
 *   DOM, and a burst of 2000 more at 2000/s; a screenshot in test-artifacts/panel-bench-100k.png.
 *
 * The machine is shared: figures are noisy, and the achieved rates say how much load the run could put on.
 */
import type { CDPSession, Page } from 'playwright-core';
import { type Browser, openBrowser } from '../browser/harness.js';
import {
  Agent,
  flood,
  leanSubscriber,
  longTasksIn,
  measurePhase,
  metrics,
  PAGE_INSTRUMENTATION,
  pageTimes,
  pct,
  type Serve,
  startServe,
  waitCount,
  waitShown,
} from './panelDriver.js';
import type { BenchRow } from './types.js';

const r1 = (v: number) => Math.round(v * 10) / 10;
const r2 = (v: number) => Math.round(v * 100) / 100;
const MiB = 1024 * 1024;
/** A rate two cores sustain with the browser open (they saturate at ~1300/s of `/bin/true`). */
const BELOW_SATURATION_RATE = 800;

/** start→closed of `/bin/true`, one at a time: `n` samples after 20 warm-up runs. */
async function sequential(agent: Agent, prefix: string, n = 200): Promise<number[]> {
  for (let i = 0; i < 20; i++) await agent.run(`${prefix}w${i}`);
  const lat: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await agent.run(`${prefix}${i}`);
    lat.push(performance.now() - t);
  }
  return lat;
}

async function openPanel(page: Page, url: string): Promise<void> {
  await page.goto(url);
  await page.locator('#conn-status', { hasText: 'connected' }).waitFor({ timeout: 120_000 });
}

const now = (page: Page) => page.evaluate(() => performance.now());

/** Time (ms) from a filter change to the frame after it rendered. */
function timeInput(page: Page, selector: string, value: string, event: 'change' | 'input'): Promise<number> {
  return page.evaluate(
    async ([sel, v, ev]) => {
      const el = document.querySelector(sel) as HTMLInputElement | HTMLSelectElement;
      const t0 = performance.now();
      el.value = v;
      el.dispatchEvent(new Event(ev, { bubbles: true }));
      await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
      return performance.now() - t0;
    },
    [selector, value, event] as const,
  );
}

/**
 * Pages down through the process table: frame intervals, and how many rows the DOM holds. (Source text, not a
 * function: tsx would wrap the inner functions in a helper the page does not have.)
 */
const SCROLL_SRC = `async (n) => {
  const table = document.querySelector('[data-testid="process-table"]');
  let sc = table;
  while (sc && !(sc.scrollHeight > sc.clientHeight + 1 && /(auto|scroll)/.test(getComputedStyle(sc).overflowY)))
    sc = sc.parentElement;
  const el = sc || document.scrollingElement;
  const frames = [];
  const t0 = performance.now();
  let last = t0;
  const step = async (f) => {
    f();
    await new Promise((r) => requestAnimationFrame(r));
    const t = performance.now();
    frames.push(t - last);
    last = t;
  };
  for (let i = 0; i < n; i++) await step(() => { el.scrollTop += el.clientHeight * 0.8; });
  await step(() => { el.scrollTop = el.scrollHeight / 2; });
  await step(() => { el.scrollTop = el.scrollHeight; });
  await step(() => { el.scrollTop = 0; });
  return { frames, t0, t1: performance.now(), rowsInDom: document.querySelectorAll('tr[data-process-id]').length };
}`;

function scrollTable(
  page: Page,
  steps: number,
): Promise<{ frames: number[]; t0: number; t1: number; rowsInDom: number }> {
  return page.evaluate(`(${SCROLL_SRC})(${steps})`);
}

/** A phase of four agents flooding at `rate`, measured on the page. */
function floodPhase(
  page: Page,
  cdp: CDPSession,
  agents: Agent[],
  section: string,
  opts: { total: number; rate: number; prefix: string; waitMs: number },
): Promise<BenchRow[]> {
  return measurePhase(page, cdp, { section, rate: opts.rate, waitMs: opts.waitMs }, () =>
    flood(agents, { total: opts.total, rate: opts.rate, inflight: 64, prefix: opts.prefix }),
  );
}

export async function run(): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  let serve: Serve | null = null;
  let browser: Browser | null = null;
  const agents: Agent[] = [];
  try {
    serve = await startServe();
    for (let i = 0; i < 4; i++) agents.push(await Agent.open(serve.execUrl, `bench-agent-${i + 1}`));
    // Warm the server (its per-process path is JavaScript that V8 optimises after a few thousand runs).
    await flood(agents, { total: 3000, rate: 100_000, inflight: 64, prefix: 'warm-' });
    // No panel, a subscriber without a browser (a process of its own), no panel again: the reference is both.
    const without = await sequential(agents[0]!, 'seq-a-');
    const lean = await leanSubscriber(serve.panelUrl);
    const p50Lean = pct(await sequential(agents[0]!, 'seq-l-'), 50);
    lean.close();
    without.push(...(await sequential(agents[0]!, 'seq-c-')));
    const p50Without = pct(without, 50);

    browser = await openBrowser();
    const page = browser.page;
    await page.addInitScript(PAGE_INSTRUMENTATION);
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Performance.enable');
    await openPanel(page, serve.panelUrl);
    await waitShown(page, ['seq-a-199'], 120_000);
    const p50With = pct(await sequential(agents[0]!, 'seq-b-'), 50);
    await waitShown(page, ['seq-b-199'], 120_000);
    rows.push(
      {
        section: 'panel: exec path',
        metric: 'start→closed `true` p50, no panel (before and after the next row)',
        corral: r2(p50Without),
        unit: 'ms',
      },
      {
        section: 'panel: exec path',
        metric: 'start→closed `true` p50, a monitor subscriber (no browser)',
        corral: r2(p50Lean),
        reference: r2(p50Without),
        unit: 'ms',
        target: 'unchanged',
      },
      {
        section: 'panel: exec path',
        metric: 'start→closed `true` p50, panel open in Chromium',
        corral: r2(p50With),
        reference: r2(p50Without),
        unit: 'ms',
        target: 'unchanged',
      },
    );

    rows.push(
      ...(await floodPhase(page, cdp, agents, 'panel: 10k at 2000/s', {
        total: 10_000,
        rate: 2000,
        prefix: 'f10k-',
        waitMs: 180_000,
      })),
    );
    // Below saturation: 2000/s is more than two cores can start (the achieved rate says what this one reached).
    rows.push(
      ...(await floodPhase(page, cdp, agents, `panel: 5k at ${BELOW_SATURATION_RATE}/s`, {
        total: 5000,
        rate: BELOW_SATURATION_RATE,
        prefix: 'f5k-',
        waitMs: 180_000,
      })),
    );

    // 100k stored: fill the server with the panel closed, then open it on them.
    await page.goto('about:blank');
    const have = 3000 + 4 * 220 + 10_000 + 5000;
    await flood(agents, { total: 100_000 - have, rate: 100_000, inflight: 64, prefix: 'fill-' });
    const lastFill = `fill-${100_000 - have - 1}`;
    const section = 'panel: 100k stored';
    const load0 = Date.now();
    await openPanel(page, serve.panelUrl);
    const loadMissing = await waitShown(page, [lastFill], 300_000);
    const loadMs = Date.now() - load0;
    const loadedAll = await waitCount(page, 100_000, 300_000);
    const loadAllMs = Date.now() - load0;
    const afterLoad = await now(page);
    await page
      .locator('[data-testid="process-counts"]', { hasText: /^100\u202f\d{3} processes/ })
      .waitFor({ timeout: 5000 })
      .catch(() => {});
    const loadLong = longTasksIn((await pageTimes(page)).long, 0, afterLoad);
    const heapLoaded = (await metrics(cdp, true)).heapUsed;
    rows.push(
      {
        section,
        metric: 'open the panel on 100k: until the newest row shows',
        corral: loadMissing === 0 ? loadMs : `> ${loadMs}`,
        unit: 'ms',
      },
      {
        section,
        metric: '  until all 100k are in the table',
        corral: loadedAll >= 100_000 ? loadAllMs : `> ${loadAllMs} (${loadedAll})`,
        unit: 'ms',
      },
      {
        section,
        metric: '  long tasks while loading (count / max)',
        corral: `${loadLong.length} / ${loadLong.length > 0 ? Math.round(Math.max(...loadLong)) : 0}`,
        unit: 'ms',
      },
      {
        section,
        metric: 'JS heap after GC, 100k loaded',
        corral: r1(heapLoaded / MiB),
        unit: 'MiB',
        target: '≤ 150',
      },
    );
    const filters: [string, string, string, 'change' | 'input'][] = [
      ['filter by state: running', '[data-testid="filter-state"]', 'running', 'change'],
      ['filter by state: finished', '[data-testid="filter-state"]', 'exited', 'change'],
      ['filter by state: all', '[data-testid="filter-state"]', '', 'change'],
      ['filter by client', '[data-testid="filter-client"]', 'bench-agent-2', 'change'],
      ['filter by client: all', '[data-testid="filter-client"]', '', 'change'],
      ['search one process id', 'input[type="search"]', 'fill-4242', 'input'],
      ['search: cleared', 'input[type="search"]', '', 'input'],
    ];
    for (const [metric, sel, value, ev] of filters) {
      rows.push({
        section,
        metric,
        corral: r1(await timeInput(page, sel, value, ev)),
        unit: 'ms',
        target: '≤ 100',
      });
    }
    const sc = await scrollTable(page, 60);
    const scrollLong = longTasksIn((await pageTimes(page)).long, sc.t0, sc.t1);
    rows.push(
      {
        section,
        metric: 'scrolling: frame p95 / max (60 pages, jumps)',
        corral: `${Math.round(pct(sc.frames, 95))} / ${Math.round(Math.max(...sc.frames))}`,
        unit: 'ms',
      },
      {
        section,
        metric: '  long tasks while scrolling (count / max)',
        corral: `${scrollLong.length} / ${scrollLong.length > 0 ? Math.round(Math.max(...scrollLong)) : 0}`,
        unit: 'ms',
      },
      { section, metric: 'table rows in the DOM', corral: sc.rowsInDom, unit: 'rows' },
    );
    await browser.screenshot('panel-bench-100k');
    rows.push(
      ...(await floodPhase(page, cdp, agents, 'panel: 2000 more at 2000/s on 100k', {
        total: 2000,
        rate: 2000,
        prefix: 'b100k-',
        waitMs: 180_000,
      })),
    );
  } catch (e) {
    rows.push({ section: 'panel', metric: 'ERROR', corral: (e as Error).message.slice(0, 120), unit: '' });
  } finally {
    for (const a of agents) a.close();
    await browser?.close();
    await serve?.stop();
  }
  return rows;
}
