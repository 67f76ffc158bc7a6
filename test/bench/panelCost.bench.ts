/**
 * What the open panel costs (issue 38): the page's main-thread time while processes stream in, per rate, next to
 * what it costs idle. The panel is a private build of the working tree (test/browser/panelBuild.ts), served by a
 * `corral serve` child of the same build, open in Chromium on the Processes view.
 *
 * - idle: the page with 2000 finished processes listed and nothing happening.
 * - 50/s and 250/s from real agents: four agents start `/bin/true` processes paced at the rate, 16 at a time (250/s
 *   is about what this 2-core machine gives through the real agent path with the page open).
 * - 2000/s from a stand-in pod (feedPods.ts): a fleet host joined to a pod that sends real rows at the rate; what is
 *   measured is the host's relay and the page.
 * - the Network view under a flood of blocked requests and policy decisions from the stand-in pod (2000/s).
 * - the prompt stack (shown over every view) under a burst of network approval prompts, 100/s, each answered 100 ms
 *   later.
 * - the desktop window's one extra per-event cost (the renderer is the same bundle, its client the preload's bridge
 *   instead of a WebSocket): contextBridge's deep copy of each notification, stood in for by a structuredClone at
 *   250/s (BRIDGE_COPY).
 *
 * Per phase: main-thread time per second (CDP TaskDuration, the wall time of its tasks; the goal is ≤ 100 ms/s, 10%
 * of a core) and per process, its CPU (ThreadTime), over the first half of the flood (the feed alone), and over the
 * second half, where a key is typed in the search box (a real input event) and taken back once a second; the lag of
 * each process's final state behind its close, long tasks, and input → paint of those keys.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CDPSession, Page } from 'playwright-core';
import { type Browser, openBrowser } from '../browser/harness.js';
import { privateBuild } from '../browser/panelBuild.js';
import { type FeedPod, realRow, startFeedPod } from './feedPods.js';
import {
  Agent,
  detailRows,
  flood,
  lags,
  longestTaskRows,
  longTaskRow,
  longTasksIn,
  metrics,
  PAGE_INSTRUMENTATION,
  pageTimes,
  rateRow,
  type Serve,
  spread,
  startServe,
  type Timing,
  traceTasks,
  waitShown,
} from './panelDriver.js';
import type { BenchRow } from './types.js';

/** Seconds each flood lasts. */
const FLOOD_S = 10;
const IDLE_S = 5;
/** Key pairs (a key and the key that takes it back) the keys phase types, a second apart. */
const KEY_PAIRS = 8;
/** Main-thread time the page may take: 10% of one core. */
const BUDGET_MS_PER_S = 100;

const r2 = (v: number) => Math.round(v * 100) / 100;

/**
 * Installed in the page: for each `input` event on the search box, the time from the event (its timeStamp: when the
 * browser got the key) to the end of the frame that showed its result.
 */
const INPUT_LATENCY = `(() => {
  const l = (window.__inputLatency = []);
  document.addEventListener('input', (e) => {
    const t = e.timeStamp;
    requestAnimationFrame(() => setTimeout(() => l.push(performance.now() - t), 0));
  }, true);
})();`;

/**
 * Installed in the page: the one piece of per-event work the desktop window adds over the browser's. In Electron the
 * preload parses each message (as the page does here) and contextBridge hands each notification's params to the page
 * as a deep copy; Electron cannot run here, so that copy is stood in for by a structuredClone of the params of each
 * notification that arrives while `__bridgeCopy` is set, timed on its own (its own phase: it adds to the page's time).
 */
const BRIDGE_COPY = `(() => {
  const W = window.WebSocket;
  window.__bridgeCopy = false;
  window.__bridgeCopied = { ms: 0, n: 0, bytes: 0 };
  window.WebSocket = class extends W {
    constructor(...a) {
      super(...a);
      this.addEventListener('message', (e) => {
        if (!window.__bridgeCopy || typeof e.data !== 'string') return;
        const m = JSON.parse(e.data);
        if (typeof m.method !== 'string') return;
        const t = performance.now();
        structuredClone(m.params);
        const c = window.__bridgeCopied;
        c.ms += performance.now() - t;
        c.n++;
        c.bytes += e.data.length;
      });
    }
  };
})();`;

async function openPanel(browser: Browser, url: string): Promise<{ page: Page; cdp: CDPSession }> {
  const page = browser.page;
  await page.addInitScript(PAGE_INSTRUMENTATION);
  await page.addInitScript(INPUT_LATENCY);
  await page.addInitScript(BRIDGE_COPY);
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Performance.enable');
  await page.goto(url);
  await page.locator('#conn-status', { hasText: 'connected' }).waitFor({ timeout: 120_000 });
  return { page, cdp };
}

/** Types a key into the search box and takes it back, once a second until `done()` (input latency probes). */
async function typeWhile(page: Page, done: () => boolean): Promise<void> {
  const box = page.locator('#view-processes input[type="search"]');
  while (!done()) {
    // A page too busy to take the focus in 2 s (the old panel under a burst of prompts) still gets the keys.
    await box.focus({ timeout: 2000 }).catch(() => {});
    await page.keyboard.press('z');
    await page.keyboard.press('Backspace');
    await new Promise((r) => setTimeout(r, 1000));
  }
}

async function takeInputLatency(page: Page): Promise<number[]> {
  return page.evaluate(() => {
    const w = window as unknown as { __inputLatency: number[] };
    return w.__inputLatency.splice(0);
  });
}

/** The page's cost with nothing happening, over IDLE_S seconds (after a second to settle). */
async function idlePhase(cdp: CDPSession, section: string): Promise<BenchRow[]> {
  await new Promise((r) => setTimeout(r, 1000));
  const m0 = await metrics(cdp);
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, IDLE_S * 1000));
  const m1 = await metrics(cdp);
  const s = (performance.now() - t0) / 1000;
  return [
    {
      section,
      metric: 'idle: main-thread time per second (TaskDuration)',
      corral: r2(((m1.taskSeconds - m0.taskSeconds) * 1000) / s),
      unit: 'ms/s',
    },
  ];
}

/**
 * What one key typed in the search box and taken back costs the page with no feed (issue 38: the keys phases): page
 * CPU (ThreadTime) per pair of keys over KEY_PAIRS pairs a second apart, less the page's CPU over as long with the box
 * focused and no key (the caret); then the same keys in a copy of the box that no listener hears (the browser's own
 * cost of a key: the rest is the view's refilter and the frames that show it). Low noise: a lever's A/B figure.
 */
async function keysPhase(page: Page, cdp: CDPSession, section: string): Promise<BenchRow[]> {
  const box = page.locator('#view-processes input[type="search"]');
  const cpuOver = async (keys: boolean): Promise<number> => {
    const m0 = await metrics(cdp);
    for (let i = 0; i < KEY_PAIRS; i++) {
      const t = performance.now();
      if (keys) {
        await page.keyboard.press('z');
        await page.keyboard.press('Backspace');
      }
      await new Promise((r) => setTimeout(r, Math.max(0, 1000 - (performance.now() - t))));
    }
    return ((await metrics(cdp)).cpuSeconds - m0.cpuSeconds) * 1000;
  };
  await box.focus();
  // The frame that shows the focus drawn (two frames later, the page is past it) before anything is measured.
  await page.evaluate(
    () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(null)))),
  );
  const caret = await cpuOver(false);
  const view = (await cpuOver(true)) - caret;
  // CORRAL_PANEL_PROFILE: the same keys once more, traced (where a key's CPU goes; not a figure to compare).
  let profiled: BenchRow[] = [];
  if (process.env.CORRAL_PANEL_PROFILE) {
    const stopTrace = await traceTasks(cdp, page);
    await cpuOver(true);
    profiled = detailRows(section, (await stopTrace()).detail, KEY_PAIRS);
  }
  // The same keys where nothing listens: a copy of the box in its place, then the box back.
  await page.evaluate(() => {
    const b = document.querySelector<HTMLInputElement>('#view-processes input[type="search"]')!;
    const copy = b.cloneNode(true) as HTMLInputElement;
    (window as unknown as { __box: HTMLInputElement }).__box = b;
    b.replaceWith(copy);
    copy.focus();
  });
  const bare = (await cpuOver(true)) - caret;
  if (process.env.CORRAL_PANEL_PROFILE) {
    const stopTrace = await traceTasks(cdp, page);
    await cpuOver(true);
    profiled.push(
      ...detailRows(`${section}, the box nothing listens to`, (await stopTrace()).detail, KEY_PAIRS),
    );
  }
  await page.evaluate(() => {
    const b = (window as unknown as { __box: HTMLInputElement }).__box;
    document.querySelector('#view-processes input[type="search"]')!.replaceWith(b);
  });
  return [
    {
      section,
      metric: `a key typed in the search box and taken back, no feed: page CPU per pair (${KEY_PAIRS} pairs, less the focused box's)`,
      corral: r2(view / KEY_PAIRS),
      unit: 'ms',
    },
    {
      section,
      metric: '  the same keys in a box nothing listens to (the browser\u2019s own)',
      corral: r2(bare / KEY_PAIRS),
      unit: 'ms',
    },
    ...profiled,
  ];
}

/**
 * Runs `produce` with the page traced and measured: the metrics at the start, at half the flood (FLOOD_S / 2), then
 * `second` (a person's inputs) until `produce` ends. Returns what `produce` returned and the marks of each half.
 */
async function halves<T>(
  page: Page,
  cdp: CDPSession,
  produce: () => Promise<T>,
  second: (done: () => boolean) => Promise<void>,
) {
  await takeInputLatency(page);
  const stopTrace = await traceTasks(cdp, page);
  const m0 = await metrics(cdp);
  const p0 = await page.evaluate(() => performance.now());
  const t0 = performance.now();
  let producing = true;
  const running = produce().finally(() => {
    producing = false;
  });
  await new Promise((r) => setTimeout(r, (FLOOD_S / 2) * 1000));
  const mHalf = await metrics(cdp);
  const tHalf = performance.now();
  const pHalf = await page.evaluate(() => performance.now());
  const inputs = second(() => !producing);
  const run = await running;
  await inputs;
  return { run, stopTrace, m0, mHalf, p0, pHalf, t0, tHalf };
}

/**
 * A flood with the panel open: `produce` makes the processes; the page's main-thread time over the whole window
 * (first start to the last final state shown), lags, long tasks, input latency (keys typed during the flood).
 */
async function costPhase(
  page: Page,
  cdp: CDPSession,
  phase: { section: string; rate: number; what?: string },
  produce: () => Promise<{ timings: Timing[]; rate: number }>,
): Promise<BenchRow[]> {
  const { section } = phase;
  // The first half of the flood is the feed alone; in the second, a person types in the search box.
  const { run, stopTrace, m0, mHalf, p0, pHalf, t0, tHalf } = await halves(page, cdp, produce, (done) =>
    typeWhile(page, done),
  );
  const missing = await waitShown(
    page,
    run.timings.map((t) => t.processId),
    120_000,
  );
  const m1 = await metrics(cdp);
  const p1 = await page.evaluate(() => performance.now());
  const t1 = performance.now();
  const traced = await stopTrace(pHalf);
  const shown = await pageTimes(page);
  const l = lags(run.timings, shown);
  const long = longTasksIn(shown.long, p0, p1);
  const input = await takeInputLatency(page);
  const firstS = (tHalf - t0) / 1000;
  const taskMs = (mHalf.taskSeconds - m0.taskSeconds) * 1000;
  const cpuMs = (mHalf.cpuSeconds - m0.cpuSeconds) * 1000;
  const typedS = (t1 - tHalf) / 1000;
  const typedTaskPerS = ((m1.taskSeconds - mHalf.taskSeconds) * 1000) / typedS;
  const typedCpuPerS = ((m1.cpuSeconds - mHalf.cpuSeconds) * 1000) / typedS;
  return [
    rateRow(section, phase, run.rate),
    {
      section,
      metric: 'main-thread time per second, the feed alone (TaskDuration)',
      corral: r2(taskMs / firstS),
      unit: 'ms/s',
      target: `≤ ${BUDGET_MS_PER_S}`,
    },
    {
      section,
      metric: '  per process',
      corral: r2(taskMs / firstS / run.rate),
      unit: 'ms',
      target: `≤ ${r2(BUDGET_MS_PER_S / phase.rate)}`,
    },
    { section, metric: '  its CPU per second (ThreadTime)', corral: r2(cpuMs / firstS), unit: 'ms/s' },
    {
      section,
      metric: '  with a key typed in the search box and taken back each second',
      corral: r2(typedTaskPerS),
      unit: 'ms/s',
      target: `≤ ${BUDGET_MS_PER_S}`,
    },
    { section, metric: '    its CPU per second (ThreadTime)', corral: r2(typedCpuPerS), unit: 'ms/s' },
    {
      section,
      metric: 'lag, final state after process/closed (p50 / p99 / max)',
      corral: spread(l.final),
      unit: 'ms',
      target: 'max ≤ 500',
    },
    { section, metric: 'processes never shown in their final state', corral: missing, unit: '', target: '0' },
    longTaskRow(section, long),
    ...longestTaskRows(section, traced, shown.frames, p0, p1),
    ...detailRows(section, traced.detail, firstS, typedS),
    {
      section,
      metric: `input → paint, a key in the search box (p50 / p99 / max of ${input.length})`,
      corral: spread(input),
      unit: 'ms',
      target: '≤ 100',
    },
  ];
}

/** Picks another audit decision filter and back, once a second until `done()` (input latency probes). */
async function filterWhile(page: Page, done: () => boolean): Promise<void> {
  const select = page.locator('#view-network select[aria-label="Audit decisions"]');
  while (!done()) {
    await select.selectOption('deny');
    await select.selectOption('');
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/**
 * A view shown while a stand-in pod floods it with events (`produce`), inputs probing it (`probe`) meanwhile; then
 * back to the Processes view.
 */
async function eventPhase(
  page: Page,
  cdp: CDPSession,
  section: string,
  view: 'network' | 'processes',
  produce: () => Promise<void>,
  probe: (done: () => boolean) => Promise<void>,
  probeName: string,
): Promise<BenchRow[]> {
  await page.locator(`button.nav-item[data-view="${view}"]`).click();
  await page.locator(`#view-${view}`).waitFor();
  // The first half is the flood alone; in the second, the probe's inputs too.
  const { stopTrace, m0, mHalf, p0, pHalf, t0, tHalf } = await halves(page, cdp, produce, probe);
  // What the last batch changed is drawn (a paced frame at most PACE_MS later, and the frame after it).
  await page.evaluate(() => new Promise((r) => setTimeout(() => requestAnimationFrame(() => r(null)), 300)));
  const m1 = await metrics(cdp);
  const firstS = (tHalf - t0) / 1000;
  const secondS = (performance.now() - tHalf) / 1000;
  const p1 = await page.evaluate(() => performance.now());
  const traced = await stopTrace(pHalf);
  const shown = await pageTimes(page);
  const long = longTasksIn(shown.long, p0, p1);
  const input = await takeInputLatency(page);
  // A page that does not take the click (the old panel under a burst of prompts) ends the phase all the same.
  await page
    .locator('button.nav-item[data-view="processes"]')
    .click({ timeout: 10_000 })
    .catch(() => {});
  return [
    {
      section,
      metric: 'main-thread time per second, the flood alone (TaskDuration)',
      corral: r2(((mHalf.taskSeconds - m0.taskSeconds) * 1000) / firstS),
      unit: 'ms/s',
      target: `≤ ${BUDGET_MS_PER_S}`,
    },
    {
      section,
      metric: '  its CPU per second (ThreadTime)',
      corral: r2(((mHalf.cpuSeconds - m0.cpuSeconds) * 1000) / firstS),
      unit: 'ms/s',
    },
    {
      section,
      metric: `  with ${probeName} each second`,
      corral: r2(((m1.taskSeconds - mHalf.taskSeconds) * 1000) / secondS),
      unit: 'ms/s',
    },
    longTaskRow(section, long),
    ...longestTaskRows(section, traced, shown.frames, p0, p1),
    ...detailRows(section, traced.detail, firstS, secondS),
    {
      section,
      metric: `input → paint, ${probeName} (p50 / p99 / max of ${input.length})`,
      corral: spread(input),
      unit: 'ms',
      target: '≤ 100',
    },
  ] satisfies BenchRow[];
}

/** The desktop window's extra per-event work at 250/s, stood in for (BRIDGE_COPY). */
async function bridgePhase(page: Page, agents: Agent[], section: string): Promise<BenchRow[]> {
  await page.evaluate('window.__bridgeCopy = true; window.__bridgeCopied = { ms: 0, n: 0, bytes: 0 };');
  const t0 = performance.now();
  await flood(agents, { total: 250 * FLOOD_S, rate: 250, inflight: 4, prefix: 'b-' });
  const s = (performance.now() - t0) / 1000;
  const c = (await page.evaluate('window.__bridgeCopy = false; window.__bridgeCopied')) as {
    ms: number;
    n: number;
    bytes: number;
  };
  return [
    {
      section,
      metric: "contextBridge's copy of each notification (structuredClone stand-in), per second",
      corral: r2(c.ms / s),
      unit: 'ms/s',
    },
    {
      section,
      metric: '  notifications per second (their JSON, KiB/s)',
      corral: `${Math.round(c.n / s)} (${Math.round(c.bytes / 1024 / s)})`,
      unit: '',
    },
  ];
}

/** What a part of the bench that threw says in the table. */
function errorRow(section: string, e: unknown): BenchRow {
  return { section, metric: 'ERROR', corral: String(e).slice(0, 160), unit: '' };
}

/** Runs `total` processes on each pod at `rate`/s each, all at once. */
async function runOn(pods: FeedPod[], opts: { total: number; rate: number; prefix: string }) {
  const t0 = performance.now();
  const all = await Promise.all(pods.map((p, k) => p.run({ ...opts, prefix: `${opts.prefix}${k + 1}-` })));
  const timings: Timing[] = all.flat();
  return { timings, rate: timings.length / ((performance.now() - t0) / 1000) };
}

async function realAgents(cli: string): Promise<BenchRow[]> {
  const section = (what: string) => `panel cost: ${what}`;
  const rows: BenchRow[] = [];
  let serve: Serve | null = null;
  let browser: Browser | null = null;
  const agents: Agent[] = [];
  try {
    serve = await startServe([], cli);
    for (let i = 0; i < 4; i++) agents.push(await Agent.open(serve.execUrl, `cost-agent-${i + 1}`));
    const warm = await flood(agents, { total: 2000, rate: 100_000, inflight: 4, prefix: 'warm-' });
    browser = await openBrowser();
    const { page, cdp } = await openPanel(browser, serve.panelUrl);
    await waitShown(page, [warm.timings.at(-1)!.processId], 120_000);
    rows.push(...(await idlePhase(cdp, section('real agents, 2000 listed'))));
    if (wanted('keys')) rows.push(...(await keysPhase(page, cdp, section('real agents, 2000 listed'))));
    let listed = 2000;
    for (const rate of [50, 250].filter((r) => wanted(String(r)))) {
      listed += rate * FLOOD_S;
      rows.push(
        ...(await costPhase(page, cdp, { section: section(`${rate}/s, real agents`), rate }, () =>
          flood(agents, { total: rate * FLOOD_S, rate, inflight: 4, prefix: `r${rate}-` }),
        )),
      );
    }
    if (wanted('bridge')) {
      listed += 250 * FLOOD_S;
      rows.push(...(await bridgePhase(page, agents, section('250/s, desktop stand-in'))));
    }
    rows.push(...(await idlePhase(cdp, section(`real agents, ${listed} listed`))));
    return rows;
  } catch (e) {
    return [...rows, errorRow(section('real agents'), e)];
  } finally {
    for (const a of agents) a.close();
    await browser?.close();
    await serve?.stop();
  }
}

async function standInPod(cli: string): Promise<BenchRow[]> {
  const section = (what: string) => `panel cost: ${what}`;
  const rows: BenchRow[] = [];
  let serve: Serve | null = null;
  let browser: Browser | null = null;
  let pod: FeedPod | null = null;
  let tokenDir: string | null = null;
  try {
    const template = await (async () => {
      const s = await startServe([], cli);
      try {
        return await realRow(s);
      } finally {
        await s.stop();
      }
    })();
    pod = await startFeedPod({ ...template, clientName: 'agent-pod-1' }, 'session-pod-1');
    tokenDir = mkdtempSync(join(tmpdir(), 'corral-bench-cost-'));
    const tokenFile = join(tokenDir, 'panel-token');
    writeFileSync(tokenFile, 'stand-in-pods-take-any-token', { mode: 0o600 });
    serve = await startServe(
      ['--join', `${pod.url}#token-file=${encodeURIComponent(tokenFile)}&name=pod-1`],
      cli,
    );
    await pod.subscribed;
    const warm = await runOn([pod], { total: 2000, rate: 2000, prefix: 'warm-' });
    browser = await openBrowser();
    const { page, cdp } = await openPanel(browser, serve.panelUrl);
    await waitShown(page, [warm.timings.at(-1)!.processId], 120_000);
    rows.push(...(await idlePhase(cdp, section('stand-in pod, 2000 listed'))));
    if (wanted('2000'))
      rows.push(
        ...(await costPhase(page, cdp, { section: section('2000/s, stand-in pod'), rate: 2000 }, () =>
          runOn([pod!], { total: 2000 * FLOOD_S, rate: 2000, prefix: 'g-' }),
        )),
      );
    if (wanted('network'))
      rows.push(
        ...(await eventPhase(
          page,
          cdp,
          section('Network view, 2000 events/s'),
          'network',
          () => pod!.runNetwork({ total: 2000 * FLOOD_S, rate: 2000 }),
          (done) => filterWhile(page, done),
          'the decision filter changed and back',
        )),
      );
    if (wanted('approvals'))
      rows.push(
        ...(await eventPhase(
          page,
          cdp,
          section('approval prompts, 100/s (Processes view)'),
          'processes',
          () => pod!.runApprovals({ total: 100 * FLOOD_S, rate: 100 }),
          (done) => typeWhile(page, done),
          'a key typed in the search box and taken back',
        )),
      );
    return rows;
  } catch (e) {
    return [...rows, errorRow(section('stand-in pod'), e)];
  } finally {
    await browser?.close();
    await serve?.stop();
    await pod?.close();
    if (tokenDir) rmSync(tokenDir, { recursive: true, force: true });
  }
}

/**
 * CORRAL_PANEL_COST=250 (or 50, 2000, keys, network, approvals, bridge, a comma-separated list) runs only those phases: one
 * lever at a time. CORRAL_PANEL_PROFILE=1 adds where each phase's main-thread CPU went (self time by trace event:
 * style, layout, paint, script…) and its layouts' sizes (panelDriver.ts `detailRows`): a profile (its trace costs the
 * page and the server CPU of its own), not figures to compare with a run without it. CORRAL_PANEL_PROFILE=invalidations
 * adds what invalidated layout (node, reason), at the price of a stack trace per invalidation (script figures inflated).
 * In the keys phase the profile is of one more pass of the keys, in the view's box and in the box nothing listens to.
 */
const only = process.env.CORRAL_PANEL_COST?.split(',') ?? null;
const wanted = (phase: string) => only === null || only.includes(phase);

export async function run(): Promise<BenchRow[]> {
  const build = await privateBuild({ cli: true });
  const cli = join(build, 'cli.js');
  return [
    ...(wanted('50') || wanted('250') || wanted('bridge') || wanted('keys') ? await realAgents(cli) : []),
    ...(wanted('2000') || wanted('network') || wanted('approvals') ? await standInPod(cli) : []),
  ];
}
