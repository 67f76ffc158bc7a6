// What the open panel costs while agents work (issue 38), in Chromium against the headless host: four agents start
// processes paced at 250/s, the panel open on the Processes view. Asserted on the page's own accounting of its main
// thread (CDP Performance.getMetrics: TaskDuration, the wall time of its tasks, and ThreadTime, their CPU), not on a
// wall clock of the test: ≤ 10% of one core is the goal, asserted with a margin. The panel of cca01b7 took 304 ms/s
// of TaskDuration (182 ms/s of CPU) here and fails (CORRAL_PANEL_FROM=cca01b7 builds it); this one 57 (43). Every process still shows in its final
// state; the row the user scrolled to stays put while rows stream in above it; the selection, the counts and the
// filters are exact after the flood; a search typed during a flood (keys that narrow it, a key typed and taken back)
// keeps the page within budget and the filter exact over the rows that kept coming. Figures per rate: `npm run bench
// -- panelCost`. And at 50/s, with keys typed and another view shown and back, no task of the page takes over 100 ms
// of its main thread's CPU (thread time from a trace, not wall time: on this shared machine a 20 ms frame waits for a
// core long enough to be a 100 ms long task by the wall clock; the bench prints both, and the load).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { type Host, startHost } from '../../src/app/host.js';
import type { MonitorProcess } from '../../src/protocol/monitor.js';
import { type FeedPod, startFeedPod } from '../bench/feedPods.js';
import {
  Agent,
  describeTask,
  flood,
  lags,
  metrics,
  PAGE_INSTRUMENTATION,
  pageTimes,
  pct,
  traceTasks,
  waitShown,
} from '../bench/panelDriver.js';
import { needsAddon } from '../helpers/native.js';
import { until } from '../helpers/server.js';
import { type Browser, openBrowser } from './harness.js';
import { privateBuild } from './panelBuild.js';

/** Main-thread time the page may take (ms per second): 10% of one core. */
const BUDGET = 100;
/** TaskDuration is wall time: on a loaded machine a task that waits for a core grows; its margin is wider. */
const TASK_MARGIN = 2;
const CPU_MARGIN = 1.5;
const RATE = 250;
const SECONDS = 8;
/** CPU one task of the page may take (ms): the goal's "no long task over 100 ms", as the page's own work. */
const LONG_TASK_CPU = 100;

type PageMetrics = Awaited<ReturnType<typeof metrics>>;

/** The page's main-thread time per second between two readings (TaskDuration, and ThreadTime: its CPU). */
function perSecond(m0: PageMetrics, m1: PageMetrics, t0: number): { taskPerS: number; cpuPerS: number } {
  const seconds = (performance.now() - t0) / 1000;
  return {
    taskPerS: ((m1.taskSeconds - m0.taskSeconds) * 1000) / seconds,
    cpuPerS: ((m1.cpuSeconds - m0.cpuSeconds) * 1000) / seconds,
  };
}

/** Both within the budget, with their margins. */
function assertWithinBudget(c: { taskPerS: number; cpuPerS: number }, what: string): void {
  assert.ok(
    c.taskPerS <= BUDGET * TASK_MARGIN,
    `TaskDuration within ${BUDGET} ms/s × ${TASK_MARGIN}: ${what}`,
  );
  assert.ok(c.cpuPerS <= BUDGET * CPU_MARGIN, `CPU within ${BUDGET} ms/s × ${CPU_MARGIN}: ${what}`);
}

/** A key typed in the focused search box and taken back at a person's pace (an empty table, then the rows again). */
async function keyTypedAndTakenBack(page: Page): Promise<void> {
  await page.keyboard.press('z');
  await new Promise((r) => setTimeout(r, 300));
  await page.keyboard.press('Backspace');
  await new Promise((r) => setTimeout(r, 300));
}

/** Every process of a flood shows in its final state (within a minute). */
async function allShown(page: Page, timings: readonly { processId: string }[]): Promise<void> {
  const missing = await waitShown(
    page,
    timings.map((t) => t.processId),
    60_000,
  );
  assert.equal(missing, 0, 'every process shows in its final state');
}

describe('the panel open during a flood of 250 processes a second', () => {
  let host: Host;
  let browser: Browser;
  const agents: Agent[] = [];

  before(async () => {
    const build = await privateBuild();
    host = await startHost({ servePanel: true, panelDir: `${build}/renderer`, resumeGraceMs: 60_000 });
    for (let i = 0; i < 4; i++) agents.push(await Agent.open(host.execUrl, `cost-${i + 1}`));
    browser = await openBrowser();
    await browser.page.addInitScript(PAGE_INSTRUMENTATION);
    await browser.page.goto(host.panelUrl!);
    await browser.page.locator('#conn-status', { hasText: 'connected' }).waitFor({ timeout: 30_000 });
  });

  after(async () => {
    for (const a of agents) a.close();
    await browser?.close();
    await host?.shutdown();
  });

  // Without the addon (CI's CORRAL_NATIVE=0 pass) the child_process spawner starts 68–100 processes a second here, alone:
  // too few for the flood this case measures the panel under (the panel is the same code in both passes).
  const flood250 = needsAddon('a flood of 250 starts a second on this 2-core machine');
  test('main-thread time within budget; every process shown in its final state; selection and counts exact', {
    skip: flood250,
  }, async () => {
    const page = browser.page;
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Performance.enable');
    // Warm the server and the page (V8 optimises both as they run).
    const warm = await flood(agents, { total: 600, rate: 100_000, inflight: 4, prefix: 'warm-' });
    assert.equal(
      await waitShown(
        page,
        warm.timings.map((t) => t.processId),
        60_000,
      ),
      0,
    );
    // A process selected before the flood stays selected, its detail its own, while rows stream in above it.
    await page.locator('tr[data-process-id="warm-599"]').click();
    await page.locator('[data-testid="process-detail"]', { hasText: 'warm-599' }).waitFor();

    // Scrolled down to an older row: it stays where it is while rows stream in above it.
    const topRow = () =>
      page.evaluate(() => {
        const sc = document.querySelector('.proc-scroll')!;
        const r = sc.getBoundingClientRect();
        const head = sc.querySelector('thead')!.getBoundingClientRect().height;
        return (
          document.elementFromPoint(r.left + 60, r.top + head + 8)?.closest('tr')?.dataset.processId ?? null
        );
      });
    await page.evaluate(() => {
      const sc = document.querySelector('.proc-scroll') as HTMLElement;
      const head = sc.querySelector('thead')!.getBoundingClientRect().height;
      sc.scrollTop = (sc.querySelector('tbody') as HTMLElement).offsetTop + 299 * 32 - head;
    });
    let before: string | null = null;
    await until(async () => {
      before = await topRow();
      return before !== null;
    }, 5000);
    assert.match(before ?? '', /^warm-(29|30)\d$/);

    const m0 = await metrics(cdp);
    const t0 = performance.now();
    const run = await flood(agents, { total: RATE * SECONDS, rate: RATE, inflight: 4, prefix: 'f-' });
    const missing = await waitShown(
      page,
      run.timings.map((t) => t.processId),
      60_000,
    );
    const cost = perSecond(m0, await metrics(cdp), t0);
    const { taskPerS, cpuPerS } = cost;
    const l = lags(run.timings, await pageTimes(page));
    const what =
      `${Math.round(run.rate)}/s achieved; page main thread ${taskPerS.toFixed(1)} ms/s (TaskDuration), ` +
      `${cpuPerS.toFixed(1)} ms/s CPU; final-state lag p50 ${pct(l.final, 50)} p99 ${pct(l.final, 99)} ms`;
    console.log(what);
    assert.equal(missing, 0, `every process shows in its final state (${what})`);
    // The budget holds at any rate; the agents only have to come near enough to 250/s for a regression to show
    // (cca01b7's panel took 187 ms/s at 50/s and 262 at 250/s). A loaded machine gives ~100/s here.
    assert.ok(run.rate > RATE * 0.4, `the agents reached at least 100/s (${what})`);
    assertWithinBudget(cost, what);
    assert.ok(pct(l.final, 99) <= 500, `shown ≤ 500 ms after closing: ${what}`);

    assert.equal(await topRow(), before, 'the row the user scrolled to is still at the top of the view');
    // Exact after the flood: the counts, the selection and its detail, a search.
    const total = 600 + RATE * SECONDS;
    const thin = (x: number) => String(x).replace(/\B(?=(\d{3})+$)/g, '\u202f');
    const counts = page.locator('[data-testid="process-counts"]');
    await counts
      .filter({ hasText: new RegExp(`^${thin(total)} processes · 0 running · ${thin(total)} ok`) })
      .waitFor();
    assert.match((await page.locator('[data-testid="process-detail"]').textContent()) ?? '', /warm-599/);
    await page.fill('#view-processes input[type="search"]', 'warm-599');
    await counts.filter({ hasText: /· showing 1$/ }).waitFor();
    assert.deepEqual(
      await page
        .locator('tbody tr[data-process-id]')
        .evaluateAll((rs) => rs.map((r) => [r.getAttribute('data-process-id'), r.className])),
      [['warm-599', 'selected']],
    );
    await page.fill('#view-processes input[type="search"]', '');
    await counts.filter({ hasText: /failed$/ }).waitFor();
  });

  test('a search typed key by key during the flood: within budget, and the filter exact over the rows that kept coming', async () => {
    const page = browser.page;
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Performance.enable');
    const box = page.locator('#view-processes input[type="search"]');
    await box.focus();
    const m0 = await metrics(cdp);
    const t0 = performance.now();
    const total = RATE * 4;
    let producing = true;
    const running = flood(agents, { total, rate: RATE, inflight: 4, prefix: 'g-' }).finally(() => {
      producing = false;
    });
    // A person's pace: each key narrows the search (the table tests only the rows it shows), rows keep coming in.
    const query = 'G-1';
    for (const key of query) {
      await new Promise((r) => setTimeout(r, 400));
      await page.keyboard.press(key === 'G' ? 'Shift+G' : key);
    }
    // And a key typed and taken back (an empty table, then the rows again) until the flood ends.
    while (producing) await keyTypedAndTakenBack(page);
    const run = await running;
    await allShown(page, run.timings);
    const cost = perSecond(m0, await metrics(cdp), t0);
    const what = `${Math.round(run.rate)}/s with keys typed; page main thread ${cost.taskPerS.toFixed(1)} ms/s (TaskDuration), ${cost.cpuPerS.toFixed(1)} ms/s CPU`;
    console.log(what);
    assertWithinBudget(cost, what);
    // g-1, g-10…g-19, g-100…g-199 (of g-0…g-999): every one, and nothing else.
    const want = new Set(
      Array.from({ length: total }, (_, i) => `g-${i}`).filter((id) => id.startsWith('g-1')),
    );
    assert.equal(want.size, 111);
    const counts = page.locator('[data-testid="process-counts"]');
    await counts.filter({ hasText: /· showing 111$/ }).waitFor({ timeout: 10_000 });
    const shown = await page
      .locator('tbody tr[data-process-id]')
      .evaluateAll((rs) => rs.map((r) => r.getAttribute('data-process-id')));
    assert.ok(shown.length > 5, `rows shown: ${shown.length}`);
    assert.deepEqual(
      shown.filter((id) => !want.has(id ?? '')),
      [],
      'the rows shown are matches',
    );
    await page.fill('#view-processes input[type="search"]', '');
    await counts.filter({ hasText: /failed$/ }).waitFor();
  });

  test('at 50/s no task of the page takes over 100 ms of CPU: keys typed, another view shown and back, the relative-time tick', async () => {
    const page = browser.page;
    const cdp = await page.context().newCDPSession(page);
    const box = page.locator('#view-processes input[type="search"]');
    await box.focus();
    const p0 = await page.evaluate(() => performance.now());
    const stopTrace = await traceTasks(cdp, page);
    // Seven seconds: past the 5 s tick that moves every "started … ago" on.
    let producing = true;
    const running = flood(agents, { total: 50 * 7, rate: 50, inflight: 4, prefix: 'h-' }).finally(() => {
      producing = false;
    });
    let round = 0;
    while (producing) {
      // A key typed and taken back…
      await keyTypedAndTakenBack(page);
      // …and now and then the Network view (its first render since the rows came) and back to the rows.
      if (round++ % 3 === 1) {
        await page.locator('button.nav-item[data-view="network"]').click();
        await page.locator('#view-network').waitFor();
        await page.locator('button.nav-item[data-view="processes"]').click();
        await box.focus();
      }
    }
    const run = await running;
    await allShown(page, run.timings);
    const p1 = await page.evaluate(() => performance.now());
    const tasks = (await stopTrace()).filter((t) => t.start >= p0 && t.start <= p1);
    const frames = (await pageTimes(page)).frames;
    const heaviest = tasks.reduce((m, t) => (t.cpu > m.cpu ? t : m));
    const longest = tasks.reduce((m, t) => (t.wall > m.wall ? t : m));
    const what =
      `${Math.round(run.rate)}/s, ${tasks.length} tasks; most CPU: ${describeTask(heaviest, frames)} ms; ` +
      `longest: ${describeTask(longest, frames)} ms (wall / CPU)`;
    console.log(what);
    // The trace has the page's frames (a trace that lost its tasks would pass anything).
    assert.ok(tasks.length > 7 * 4, `the page's tasks were traced: ${what}`);
    assert.ok(heaviest.cpu <= LONG_TASK_CPU, `no task over ${LONG_TASK_CPU} ms of CPU: ${what}`);
  });
});

// Prompts come from a stand-in server the host watches (test/bench/feedPods.ts): 100 network approval prompts a second,
// each answered (resolved) 100 ms later, with their audit events, four notifications per prompt relayed to the page.
// The panel of 3027f18 asked the browser for the notification permission once per prompt (a synchronous round trip)
// and made a card for every prompt pending at each frame, most of them out of sight: it fails here
// (CORRAL_PANEL_FROM=3027f18 builds it).
const PROMPT_RATE = 100;
const PROMPT_SECONDS = 8;
/**
 * CPU the page may take per second under the burst: the budget with the other cases' margin. Alone, in CI, the same
 * code measured 87.9 to 123.3 ms/s across runs (a ×1.15 margin failed one of them); the old panel's prompt per card
 * fails on the cards at once below, whatever its CPU.
 */
const PROMPTS_CPU = BUDGET * CPU_MARGIN;

describe('the prompt stack during a burst of 100 approval prompts a second', () => {
  let pod: FeedPod;
  let host: Host;
  let browser: Browser;

  before(async () => {
    // Only the approvals feed of the stand-in is used: its process rows (from this template) never come.
    pod = await startFeedPod({} as MonitorProcess, 'session-pod-1');
    const build = await privateBuild();
    host = await startHost({
      servePanel: true,
      panelDir: `${build}/renderer`,
      join: [{ url: pod.url, token: 'stand-in-pods-take-any-token', name: 'pod-1' }],
    });
    await pod.subscribed;
    browser = await openBrowser();
    await browser.page.addInitScript(PAGE_INSTRUMENTATION);
    await browser.page.goto(host.panelUrl!);
    await browser.page.locator('#conn-status', { hasText: 'connected' }).waitFor({ timeout: 30_000 });
  });

  after(async () => {
    await browser?.close();
    await host?.shutdown();
    await pod?.close();
  });

  test('within budget (thread time) with keys typed in the search box; a few cards shown, the rest counted; all gone after', async () => {
    const page = browser.page;
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Performance.enable');
    // Warm up: a short burst (V8 optimises the page's handlers as they run).
    await pod.runApprovals({ total: 100, rate: PROMPT_RATE });
    await page.locator('[data-testid="approval-prompt"]').first().waitFor({ state: 'detached' });
    const box = page.locator('#view-processes input[type="search"]');
    await box.focus();
    const m0 = await metrics(cdp);
    const t0 = performance.now();
    let producing = true;
    const running = pod
      .runApprovals({ total: PROMPT_RATE * PROMPT_SECONDS, rate: PROMPT_RATE })
      .finally(() => {
        producing = false;
      });
    // While it lasts: the stack shows some cards, never more than its few, and counts the others.
    let most = 0;
    let counted = false;
    while (producing) {
      const seen = await page.evaluate(() => ({
        cards: document.querySelectorAll('[data-testid="approval-prompt"]').length,
        more: document.querySelector('[data-testid="approval-more"]') !== null,
      }));
      most = Math.max(most, seen.cards);
      counted ||= seen.more;
      await keyTypedAndTakenBack(page);
    }
    await running;
    const cost = perSecond(m0, await metrics(cdp), t0);
    const what = `${PROMPT_RATE} prompts/s with keys typed; page main thread ${cost.taskPerS.toFixed(1)} ms/s (TaskDuration), ${cost.cpuPerS.toFixed(1)} ms/s CPU; at most ${most} cards at once`;
    console.log(what);
    assert.ok(cost.cpuPerS <= PROMPTS_CPU, `CPU within ${PROMPTS_CPU} ms/s: ${what}`);
    assert.ok(
      cost.taskPerS <= BUDGET * TASK_MARGIN,
      `TaskDuration within ${BUDGET} ms/s × ${TASK_MARGIN}: ${what}`,
    );
    assert.ok(most >= 1 && most <= 3, `a few cards shown at once: ${what}`);
    assert.ok(counted, 'the prompts not shown as cards were counted under them');
    // Every prompt was answered: the stack and the nav's counter empty.
    await page.locator('#approval-prompts > *').first().waitFor({ state: 'detached' });
    await page
      .locator('button.nav-item[data-view="approvals"] .nav-count:empty')
      .waitFor({ state: 'attached' });
  });
});
