/**
 * What the panel bench drives: `corral serve` as a child, agents that flood it with short processes at a paced rate
 * over WebSocket, and the instrumentation of the panel's page in Chromium (when each process first showed in the
 * table and when its final state did, long tasks, main-thread time, heap).
 *
 * How a process "shows in the table" is observed: a page that calls `window.corralPanelProbe(rows)` after each frame
 * that committed rows to its table reports them there (a virtualized table has only the rows on screen in the DOM);
 * otherwise every `tr[data-process-id]` added to the document is read (a table that renders every row).
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { CDPSession, Page } from 'playwright-core';
import WebSocket from 'ws';
import { type Browser, openBrowser } from '../browser/harness.js';
import type { BenchRow } from './types.js';

export const ROOT = join(import.meta.dirname, '..', '..');

export interface Serve {
  execUrl: string;
  panelUrl: string;
  proc: ChildProcess;
  stop(): Promise<void>;
}

/**
 * Where the audit trail goes, if this build has one: a scratch database, never the user's, in a directory of its own
 * (`dir`: removed when the server has stopped).
 */
function auditArgs(cli: string): { args: string[]; dir?: string } {
  const help = spawnSync(process.execPath, [cli, '--help'], {
    encoding: 'utf8',
  }).stdout;
  if (!help.includes('--audit-db')) return { args: [] };
  const dir = mkdtempSync(join(tmpdir(), 'corral-bench-audit-'));
  return { args: ['--audit-db', join(dir, 'audit.db')], dir };
}

/**
 * `corral serve` as a child process; resolves once it printed both URLs. `cli`: the bundle to run (default dist/'s;
 * a private build, test/browser/panelBuild.ts, serves the panel next to it).
 */
export async function startServe(extra: string[] = [], cli = join(ROOT, 'dist', 'cli.js')): Promise<Serve> {
  const audit = auditArgs(cli);
  const proc = spawn(
    process.execPath,
    [cli, 'serve', '--log-level', 'warn', '--resume-grace-ms', '600000', ...audit.args, ...extra],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  // However the server ends (stopped, or failed to start), its scratch database goes with it.
  proc.once('exit', () => {
    if (audit.dir) rmSync(audit.dir, { recursive: true, force: true });
  });
  const rl = createInterface({ input: proc.stdout! });
  const urls: Record<string, string> = {};
  await new Promise<void>((resolve, reject) => {
    rl.on('line', (l) => {
      const m = /^(exec-server|panel): (\S+)/.exec(l);
      if (m) urls[m[1]!] = m[2]!;
      if (urls['exec-server'] && urls.panel) resolve();
    });
    proc.once('exit', (c) => reject(new Error(`corral serve exited ${c}`)));
  });
  return {
    execUrl: urls['exec-server']!,
    panelUrl: urls.panel!,
    proc,
    stop: () =>
      new Promise((resolve) => {
        if (proc.exitCode !== null) return resolve();
        proc.once('exit', () => resolve());
        proc.kill('SIGTERM');
      }),
  };
}

export interface Timing {
  processId: string;
  /** Date.now() when the start answer arrived, and when process/closed did. */
  started: number;
  closed: number;
}

/** A monitor subscriber without a browser, as a child process (panelSubscriber.mjs): the feed's cost alone. */
export async function leanSubscriber(panelUrl: string): Promise<{ close(): void }> {
  const child = spawn(process.execPath, [join(ROOT, 'test', 'bench', 'panelSubscriber.mjs'), panelUrl], {
    stdio: ['pipe', 'pipe', 'ignore'],
  });
  await new Promise<void>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', () => resolve());
    child.once('exit', (c) => reject(new Error(`subscriber exited ${c}`)));
  });
  return { close: () => child.stdin!.end() };
}

/** An agent: one WebSocket session that starts short processes and records when they started and closed. */
export class Agent {
  private id = 0;
  private readonly pending = new Map<number, (m: Record<string, unknown>) => void>();
  private readonly waiting = new Map<string, () => void>();
  inflight = 0;

  private constructor(private readonly ws: WebSocket) {
    ws.on('message', (data: Buffer) => {
      const m = JSON.parse(data.toString()) as Record<string, unknown>;
      if (typeof m.id === 'number') {
        this.pending.get(m.id)?.(m);
        this.pending.delete(m.id);
        return;
      }
      if (m.method === 'process/closed') {
        const pid = (m.params as { processId: string }).processId;
        this.waiting.get(pid)?.();
        this.waiting.delete(pid);
      }
    });
  }

  static async open(url: string, name: string, headers: Record<string, string> = {}): Promise<Agent> {
    const ws = new WebSocket(url, { perMessageDeflate: false, headers });
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    const a = new Agent(ws);
    await a.request('initialize', { clientName: name });
    ws.send(JSON.stringify({ method: 'initialized', params: {} }));
    return a;
  }

  request(method: string, params: unknown): Promise<Record<string, unknown>> {
    const id = ++this.id;
    return new Promise((resolve, reject) => {
      this.pending.set(id, (m) => (m.error ? reject(new Error(JSON.stringify(m.error))) : resolve(m)));
      this.ws.send(JSON.stringify({ id, method, params }));
    });
  }

  async run(processId: string, argv: string[] = ['/bin/true']): Promise<Timing> {
    this.inflight++;
    const closed = new Promise<number>((r) => this.waiting.set(processId, () => r(Date.now())));
    try {
      await this.request('process/start', {
        processId,
        argv,
        cwd: '/tmp',
        env: { PATH: '/usr/bin:/bin' },
        tty: false,
        arg0: null,
      });
      const started = Date.now();
      return { processId, started, closed: await closed };
    } finally {
      this.inflight--;
    }
  }

  close(): void {
    this.ws.close();
  }
}

export interface FloodResult {
  timings: Timing[];
  /** Processes per second actually achieved (first start to last close). */
  rate: number;
  seconds: number;
}

/**
 * Starts `total` processes across the agents at `rate` per second (paced every 5 ms), at most `inflight` at once per
 * agent: if the server falls behind, the achieved rate is lower and says so.
 */
export async function flood(
  agents: Agent[],
  opts: { total: number; rate: number; inflight: number; prefix: string },
): Promise<FloodResult> {
  const timings: Timing[] = [];
  const running: Promise<void>[] = [];
  const t0 = performance.now();
  let started = 0;
  let next = 0;
  while (started < opts.total) {
    const due = Math.min(opts.total, Math.floor(((performance.now() - t0) / 1000) * opts.rate) + 1);
    let progressed = false;
    while (started < due) {
      let agent: Agent | null = null;
      for (let k = 0; k < agents.length && !agent; k++) {
        const a = agents[(next + k) % agents.length]!;
        if (a.inflight < opts.inflight) agent = a;
      }
      if (!agent) break;
      next++;
      const id = `${opts.prefix}${started++}`;
      running.push(agent.run(id).then((t) => void timings.push(t)));
      progressed = true;
    }
    await new Promise((r) => setTimeout(r, progressed ? 5 : 2));
  }
  await Promise.all(running);
  const seconds = (performance.now() - t0) / 1000;
  return { timings, rate: opts.total / seconds, seconds };
}

/**
 * Installed in the page before its scripts: long tasks, long animation frames (Chromium's LoAF: what ran in a frame
 * over 50 ms, script by script, and when rendering began), and when each process showed in the table, by state.
 */
export const PAGE_INSTRUMENTATION = `(() => {
  const b = { long: [], frames: [], first: new Map(), final: new Map(), probe: false };
  window.__bench = b;
  new PerformanceObserver((l) => { for (const e of l.getEntries()) b.long.push([e.startTime, e.duration]); })
    .observe({ type: 'longtask', buffered: true });
  if (PerformanceObserver.supportedEntryTypes.includes('long-animation-frame'))
    new PerformanceObserver((l) => {
      for (const e of l.getEntries()) {
        const top = [...e.scripts].sort((x, y) => y.duration - x.duration)[0];
        b.frames.push({
          start: e.startTime,
          duration: e.duration,
          script: e.scripts.reduce((n, s) => n + s.duration, 0),
          render: e.renderStart > 0 ? e.startTime + e.duration - e.renderStart : 0,
          forced: e.scripts.reduce((n, s) => n + s.forcedStyleAndLayoutDuration, 0),
          top: top ? top.invoker + (top.sourceFunctionName ? ' ' + top.sourceFunctionName : '') : '',
        });
      }
    }).observe({ type: 'long-animation-frame', buffered: true });
  const see = (id, state, t) => {
    if (!b.first.has(id)) b.first.set(id, t);
    if (state === 'closed' && !b.final.has(id)) b.final.set(id, t);
  };
  let observer = null;
  window.corralPanelProbe = (rows) => {
    if (!b.probe && observer) observer.disconnect();
    b.probe = true;
    const t = Date.now();
    for (const r of rows) see(r.processId, r.state, t);
  };
  const onRow = (tr, t) => {
    const id = tr.getAttribute('data-process-id');
    if (id === null) return;
    const s = tr.querySelector('[data-state]');
    see(id, s ? s.getAttribute('data-state') : '', t);
  };
  observer = new MutationObserver((records) => {
    if (b.probe) return;
    const t = Date.now();
    for (const r of records) {
      for (const n of r.addedNodes) {
        if (n.nodeType !== 1) continue;
        if (n.matches('tr[data-process-id]')) onRow(n, t);
        else for (const tr of n.querySelectorAll('tr[data-process-id]')) onRow(tr, t);
      }
    }
  });
  observer.observe(document, { childList: true, subtree: true });
})();`;

/** A long animation frame (LoAF) as PAGE_INSTRUMENTATION keeps it (ms, the page's clock). */
export interface LongFrame {
  start: number;
  duration: number;
  /** Time in scripts, in rendering (rAF callbacks, style, layout, paint), in layout forced by scripts. */
  script: number;
  render: number;
  forced: number;
  /** The script that took longest: its invoker (and function). */
  top: string;
}

export interface PageTimes {
  first: Map<string, number>;
  final: Map<string, number>;
  long: [number, number][];
  frames: LongFrame[];
}

export async function pageTimes(page: Page): Promise<PageTimes> {
  const r = await page.evaluate(() => {
    const b = (
      window as unknown as {
        __bench: {
          first: Map<string, number>;
          final: Map<string, number>;
          long: [number, number][];
          frames: LongFrame[];
        };
      }
    ).__bench;
    return { first: [...b.first], final: [...b.final], long: b.long, frames: b.frames };
  });
  return { first: new Map(r.first), final: new Map(r.final), long: r.long, frames: r.frames };
}

/** Waits until the page has shown `n` processes (any state), or the timeout; returns how many it has. */
export async function waitCount(page: Page, n: number, timeoutMs: number): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const have = await page.evaluate(
      () => (window as unknown as { __bench: { first: Map<string, number> } }).__bench.first.size,
    );
    if (have >= n || Date.now() > deadline) return have;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Waits until the page has shown the final state of every process in `ids` (or the timeout); returns the missing. */
export async function waitShown(page: Page, ids: string[], timeoutMs: number): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const missing = await page.evaluate((list) => {
      const b = (window as unknown as { __bench: { final: Map<string, number> } }).__bench;
      let n = 0;
      for (const id of list) if (!b.final.has(id)) n++;
      return n;
    }, ids);
    if (missing === 0 || Date.now() > deadline) return missing;
    await new Promise((r) => setTimeout(r, 250));
  }
}

export interface Metrics {
  /** Main-thread task time (s, wall clock), main-thread CPU time (s), script time (s), JS heap used (bytes). */
  taskSeconds: number;
  cpuSeconds: number;
  scriptSeconds: number;
  heapUsed: number;
}

export async function metrics(cdp: CDPSession, gc = false): Promise<Metrics> {
  if (gc) await cdp.send('HeapProfiler.collectGarbage');
  const { metrics: m } = await cdp.send('Performance.getMetrics');
  const get = (n: string) => m.find((x) => x.name === n)?.value ?? 0;
  return {
    taskSeconds: get('TaskDuration'),
    cpuSeconds: get('ThreadTime'),
    scriptSeconds: get('ScriptDuration'),
    heapUsed: get('JSHeapUsedSize'),
  };
}

/** The row of a flood's achieved rate against the phase's. */
export function rateRow(section: string, phase: { rate: number; what?: string }, achieved: number): BenchRow {
  return {
    section,
    metric: `achieved rate${phase.what ? `, ${phase.what}` : ''}`,
    corral: Math.round(achieved),
    unit: 'proc/s',
    target: `${phase.rate}`,
  };
}

export function pct(values: number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

/** Lags (ms) of the page behind the agents: first appearance after the start answer, final state after closed. */
export function lags(
  timings: Timing[],
  shown: PageTimes,
): { appear: number[]; final: number[]; missing: number } {
  const appear: number[] = [];
  const final: number[] = [];
  let missing = 0;
  for (const t of timings) {
    const f = shown.first.get(t.processId);
    const c = shown.final.get(t.processId);
    if (f === undefined || c === undefined) {
      missing++;
      continue;
    }
    appear.push(f - t.started);
    final.push(c - t.closed);
  }
  return { appear, final, missing };
}

interface TraceEvent {
  name: string;
  ph: string;
  pid: number;
  tid: number;
  ts: number;
  dur?: number;
  tdur?: number;
  args?: {
    name?: string;
    src_func?: string;
    beginData?: { dirtyObjects?: number; totalObjects?: number; partialLayout?: boolean };
  };
}

/**
 * A main-thread task of the page: its wall time and the CPU time its thread had in it (ms), when it started (the
 * page's clock, performance.now(), when traceTasks had the page; otherwise NaN) and what posted it (a rendering
 * frame, a timer, a message, V8's incremental marking…: the task's `src_func` in the trace).
 */
export interface TracedTask {
  wall: number;
  cpu: number;
  start: number;
  source: string;
}

/** The mark traceTasks puts in the page to set the trace's clock against the page's. */
const ALIGN_MARK = 'corral-bench-trace-align';

/** The name of a task of a thread's run loop in the `toplevel` trace category. */
const TASK = 'ThreadControllerImpl::RunTask';

/**
 * Starts a Chrome trace of the page's tasks (wall and thread time each); the function it returns stops it and gives
 * the tasks of the busiest renderer main thread. On a loaded machine a long task by the wall clock may be a short one
 * that waited for a core: the thread time says which. Only the `toplevel` category (~4k events/s, 0.8 MB/s here):
 * DevTools' timeline category streamed ~76k events and 14 MB per second through CDP, which took enough CPU from the
 * page and the server to change what the run measured (achieved rate 842–1106 /s with it, 1066–1311 without).
 */
export async function traceTasks(
  cdp: CDPSession,
  page?: Page,
): Promise<(splitAt?: number) => Promise<TracedTask[] & { detail?: TraceDetail }>> {
  const events: TraceEvent[] = [];
  const inner: TraceEvent[] = [];
  const invalidations = new Map<string, number>();
  let mark: TraceEvent | null = null;
  const onData = (d: { value: object[] }) => {
    for (const e of d.value as TraceEvent[]) {
      if ((e.name === TASK && e.ph === 'X') || e.name === 'thread_name') events.push(e);
      else if (e.name === ALIGN_MARK) mark = e;
      else if (PROFILE && e.ph === 'X' && e.tdur !== undefined) inner.push(e);
      else if (PROFILE && e.name === 'LayoutInvalidationTracking') {
        const d = (e.args as { data?: { nodeName?: string; reason?: string } } | undefined)?.data;
        const k = `${d?.nodeName ?? '?'} (${d?.reason ?? '?'})`;
        invalidations.set(k, (invalidations.get(k) ?? 0) + 1);
      }
    }
  };
  cdp.on('Tracing.dataCollected', onData);
  await cdp.send('Tracing.start', {
    // blink.user_timing: only the page's performance.mark()s (one here, to align the clocks).
    categories: [
      'toplevel',
      ...(page ? ['blink.user_timing'] : []),
      ...(PROFILE
        ? [
            'devtools.timeline',
            'disabled-by-default-devtools.timeline',
            // What marked layout dirty: a stack trace per invalidation, which inflates the page's script many times.
            ...(INVALIDATIONS ? ['disabled-by-default-devtools.timeline.invalidationTracking'] : []),
          ]
        : []),
    ].join(','),
    transferMode: 'ReportEvents',
  });
  if (PROFILE) {
    await cdp.send('Profiler.enable');
    await cdp.send('Profiler.setSamplingInterval', { interval: 250 });
    await cdp.send('Profiler.start');
  }
  // The mark's time in the page's clock; its trace event's timestamp is the same instant in the trace's.
  const markAt = page
    ? await page.evaluate((name) => performance.mark(name).startTime, ALIGN_MARK).catch(() => Number.NaN)
    : Number.NaN;
  return async (splitAt?: number) => {
    const profile = PROFILE ? (await cdp.send('Profiler.stop')).profile : null;
    const complete = new Promise<void>((r) => cdp.once('Tracing.tracingComplete', () => r()));
    await cdp.send('Tracing.end');
    await complete;
    cdp.off('Tracing.dataCollected', onData);
    const mains = new Set(
      events
        .filter((e) => e.name === 'thread_name' && e.args?.name === 'CrRendererMain')
        .map((e) => `${e.pid}:${e.tid}`),
    );
    const m = mark as TraceEvent | null;
    const offset = m ? m.ts / 1000 - markAt : Number.NaN;
    const byThread = new Map<string, TracedTask[]>();
    for (const e of events) {
      const k = `${e.pid}:${e.tid}`;
      if (e.name !== TASK || !mains.has(k)) continue;
      const list = byThread.get(k) ?? [];
      byThread.set(k, list);
      list.push({
        wall: (e.dur ?? 0) / 1000,
        cpu: (e.tdur ?? 0) / 1000,
        start: e.ts / 1000 - offset,
        source: e.args?.src_func ?? '',
      });
    }
    const busiest = (l: TracedTask[]) => l.reduce((n, t) => n + t.cpu, 0);
    const main = [...byThread.entries()].sort((a, b) => busiest(b[1]) - busiest(a[1]))[0];
    const tasks: TracedTask[] & { detail?: TraceDetail } = main?.[1] ?? [];
    if (PROFILE && main) {
      const [pid, tid] = main[0].split(':').map(Number);
      tasks.detail = breakdown(
        events.filter((e) => e.pid === pid && e.tid === tid && e.name === TASK),
        inner.filter((e) => e.pid === pid && e.tid === tid),
        splitAt === undefined ? Number.POSITIVE_INFINITY : (splitAt + offset) * 1000,
      );
      if (profile) tasks.detail.script = scriptSelf(profile);
      if (INVALIDATIONS)
        tasks.detail.invalidations = [...invalidations.entries()].sort((a, b) => b[1] - a[1]);
    }
    return tasks;
  };
}

/**
 * CORRAL_PANEL_PROFILE=1: traceTasks also records DevTools' timeline categories and says where the main thread's CPU
 * went (its self time per kind of work: style, layout, paint, script…) and how big the layouts were. That trace
 * streams ~14 MB/s through CDP and takes CPU from everything measured: a profile, not a figure to compare.
 */
const PROFILE =
  process.env.CORRAL_PANEL_PROFILE === '1' || process.env.CORRAL_PANEL_PROFILE === 'invalidations';
/** CORRAL_PANEL_PROFILE=invalidations: also what invalidated layout (its script figures are then not the page's). */
const INVALIDATIONS = process.env.CORRAL_PANEL_PROFILE === 'invalidations';

/** Where a traced phase's main-thread CPU went. */
export interface TraceDetail {
  /** Self thread time (ms) per trace event name, the tasks' own time under `(task)`; before and after the split. */
  self: Map<string, number>;
  after: Map<string, number>;
  /** Layout passes: how many, their objects (dirty / total, mean and max) and how many started at the root. */
  layouts: {
    n: number;
    dirty: number;
    total: number;
    maxTotal: number;
    full: number;
    parents: Map<string, number>;
  };
  /** The page's script by function (self time, ms, from V8's sampling profiler), heaviest first. */
  script?: [string, number][];
  /** What marked layout dirty: node and reason, with how many times (the trace's invalidation tracking). */
  invalidations?: [string, number][];
}

/** Self time per function of a V8 CPU profile (ms), heaviest first. */
function scriptSelf(p: {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  samples?: number[];
  timeDeltas?: number[];
}): [string, number][] {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  // A built-in (no script of its own) is named with its caller's name: which `remove` took the time.
  const parent = new Map<number, (typeof p.nodes)[number]>();
  for (const n of p.nodes as { id: number; children?: number[] }[])
    for (const c of n.children ?? []) parent.set(c, byId.get(n.id)!);
  const self = new Map<string, number>();
  const samples = p.samples ?? [];
  const deltas = p.timeDeltas ?? [];
  for (let i = 0; i < samples.length; i++) {
    const n = byId.get(samples[i]!);
    if (!n) continue;
    const f = n.callFrame;
    const caller = f.url ? undefined : parent.get(n.id)?.callFrame;
    const name =
      `${f.functionName || '(anonymous)'}${f.url ? `@${f.url.replace(/^.*\//, '')}:${f.lineNumber + 1}` : ''}` +
      (caller?.url ? ` (from ${caller.functionName || '(anonymous)'}:${caller.lineNumber + 1})` : '');
    self.set(name, (self.get(name) ?? 0) + (deltas[i + 1] ?? 0) / 1000);
  }
  return [...self.entries()].sort((a, b) => b[1] - a[1]);
}

function breakdown(tasks: TraceEvent[], inner: TraceEvent[], split: number): TraceDetail {
  const self = new Map<string, number>();
  const after = new Map<string, number>();
  const add = (name: string, ms: number, ts: number) => {
    const m = ts < split ? self : after;
    m.set(name, (m.get(name) ?? 0) + ms);
  };
  const all = [...tasks, ...inner].sort((a, b) => a.ts - b.ts || (b.dur ?? 0) - (a.dur ?? 0));
  // Self time: each event's thread time less its children's (events nest on one thread).
  const stack: { e: TraceEvent; end: number; children: number }[] = [];
  const pop = () => {
    const top = stack.pop()!;
    add(
      top.e.name === TASK ? '(task)' : eventKind(top.e),
      Math.max(0, ((top.e.tdur ?? 0) - top.children) / 1000),
      top.e.ts,
    );
    const parent = stack.at(-1);
    if (parent) parent.children += top.e.tdur ?? 0;
  };
  /** What each layout ran inside: the nearest enclosing event that is not the task (a script's forced layout, a frame). */
  const layoutParents = new Map<string, number>();
  for (const e of all) {
    while (stack.length > 0 && stack.at(-1)!.end <= e.ts) pop();
    if (e.name === 'Layout') {
      const parent = [...stack].reverse().find((f) => f.e.name !== TASK && f.e.name !== 'Layout');
      const k = parent ? parent.e.name : '(task)';
      layoutParents.set(k, (layoutParents.get(k) ?? 0) + 1);
    }
    stack.push({ e, end: e.ts + (e.dur ?? 0), children: 0 });
  }
  while (stack.length > 0) pop();
  const layouts = { n: 0, dirty: 0, total: 0, maxTotal: 0, full: 0, parents: layoutParents };
  for (const e of inner) {
    if (e.name !== 'Layout') continue;
    const b = e.args?.beginData ?? {};
    layouts.n++;
    layouts.dirty += b.dirtyObjects ?? 0;
    layouts.total += b.totalObjects ?? 0;
    layouts.maxTotal = Math.max(layouts.maxTotal, b.totalObjects ?? 0);
    if (b.partialLayout === false) layouts.full++;
  }
  return { self, after, layouts };
}

/** A trace event's kind for the profile: its name, and for an IPC message the interface it was for. */
function eventKind(e: TraceEvent): string {
  if (e.name !== 'Receive mojo message') return e.name;
  const info = (e.args as { chrome_mojo_event_info?: Record<string, unknown> } | undefined)
    ?.chrome_mojo_event_info;
  const tag = info?.mojo_interface_tag ?? info?.watcher_notify_interface_tag ?? info?.ipc_hash;
  return tag === undefined ? e.name : `${e.name} (${String(tag)})`;
}

/** The rows of a TraceDetail (CORRAL_PANEL_PROFILE=1): main-thread self CPU per second by kind, the layouts. */
export function detailRows(
  section: string,
  detail: TraceDetail | undefined,
  seconds: number,
  secondsAfter = 0,
): BenchRow[] {
  if (!detail) return [];
  const r1 = (v: number) => Math.round(v * 10) / 10;
  const perS = (m: Map<string, number>, s: number) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 12)
      .map(([k, v]) => `${k} ${r1(v / s)}`)
      .join(', ');
  const halves =
    detail.after.size > 0
      ? [
          {
            section,
            metric: '  profile: main-thread self CPU per second, by trace event, second half (keys)',
            corral: perS(detail.after, secondsAfter),
            unit: 'ms/s',
          },
        ]
      : [];
  const l = detail.layouts;
  return [
    {
      section,
      metric: `  profile: main-thread self CPU per second, by trace event${halves.length > 0 ? ', first half' : ''}`,
      corral: perS(detail.self, seconds),
      unit: 'ms/s',
    },
    ...halves,
    {
      section,
      metric: '  profile: layouts per second; objects dirty / total (mean), max total; from the root',
      corral: `${r1(l.n / seconds)}; ${Math.round(l.dirty / Math.max(1, l.n))} / ${Math.round(l.total / Math.max(1, l.n))}, ${l.maxTotal}; ${l.full}`,
      unit: '',
    },
    {
      section,
      metric: '  profile: layouts per second by what they ran in (a script: forced; a frame: its own)',
      corral: perS(l.parents, seconds + secondsAfter),
      unit: '/s',
    },
    ...(detail.invalidations
      ? [
          {
            section,
            metric: '  profile: layout invalidations per second, by node (reason)',
            corral: detail.invalidations
              .slice(0, 40)
              .map(([k, v]) => `${k} ${r1(v / seconds)}`)
              .join(', '),
            unit: '/s',
          },
        ]
      : []),
    ...(detail.script
      ? [
          {
            section,
            metric: '  profile: script self time per second, by function (sampled)',
            corral: detail.script
              .filter(([k]) => k !== '(idle)' && k !== '(program)')
              .slice(0, 12)
              .map(([k, v]) => `${k} ${r1(v / (seconds + secondsAfter))}`)
              .join(', '),
            unit: 'ms/s',
          },
        ]
      : []),
  ];
}

/** Long tasks (ms) that started within [from, to] of the page's clock (performance.now()). */
export function longTasksIn(long: [number, number][], from: number, to: number): number[] {
  return long.filter(([start]) => start >= from && start <= to).map(([, d]) => d);
}

/** Long tasks as the page saw them (wall clock, the goal's measure): their count and the longest. */
export function longTaskRow(section: string, long: number[]): BenchRow {
  return {
    section,
    metric: 'long tasks (count / max)',
    corral: `${long.length} / ${long.length > 0 ? Math.round(Math.max(...long)) : 0}`,
    unit: 'ms',
    target: 'max ≤ 100',
  };
}

/** What posted a task (its `src_func` in the trace), in words. */
function taskKind(source: string): string {
  // `void v8::internal::IncrementalMarkingJob::ScheduleTask()`: the last name before the arguments.
  const name = source.replace(/\(.*$/, '').replace(/^.*::/, '').replace(/^.* /, '');
  if (source.includes('BeginMainFrame')) return 'a rendering frame';
  if (/IncrementalMarking|Heap|GC/.test(source)) return `V8's GC (${name})`;
  return name || 'unknown';
}

/** A task in words: its wall time and CPU, what it was, and what ran in it by its long animation frame (if any). */
export function describeTask(t: TracedTask | undefined, frames: readonly LongFrame[]): string {
  if (!t) return 'none';
  // The long animation frame the task spent most of its time in.
  const overlap = (x: LongFrame) =>
    Math.min(x.start + x.duration, t.start + t.wall) - Math.max(x.start, t.start);
  const f = frames.reduce<LongFrame | undefined>(
    (m, x) => (overlap(x) > 0 && (!m || overlap(x) > overlap(m)) ? x : m),
    undefined,
  );
  const r = Math.round;
  return (
    `${r(t.wall)} / ${r(t.cpu)}, ${taskKind(t.source)}` +
    (t.cpu < t.wall / 2 ? ' (waited for a core)' : '') +
    (f
      ? `; in a LoAF of ${r(f.duration)}: script ${r(f.script)}${f.top ? ` (${f.top.slice(0, 40)})` : ''}, rendering ${r(f.render)}` +
        (f.forced > 0 ? `, forced layout ${r(f.forced)}` : '')
      : '')
  );
}

/**
 * The longest task of a phase (wall clock, the goal's measure) and the one with the most CPU (the page's own work),
 * each with what it was (trace, LoAF), and the machine's load: a task long by the wall clock with little CPU was
 * CPU starvation (the machine is shared), not the page. `traced` from traceTasks(cdp, page); [from, to] the phase in
 * the page's clock.
 */
export function longestTaskRows(
  section: string,
  traced: readonly TracedTask[],
  frames: readonly LongFrame[],
  from: number,
  to: number,
): BenchRow[] {
  const tasks = traced.filter((t) => Number.isNaN(t.start) || (t.start >= from && t.start <= to));
  const longest = tasks.reduce<TracedTask | undefined>((m, t) => (m && m.wall >= t.wall ? m : t), undefined);
  const heaviest = tasks.reduce<TracedTask | undefined>((m, t) => (m && m.cpu >= t.cpu ? m : t), undefined);
  const inPhase = frames.filter((f) => f.start >= from && f.start <= to);
  return [
    {
      section,
      metric: '  longest task: wall / CPU (trace), what it was',
      corral: describeTask(longest, inPhase),
      unit: 'ms',
      target: 'wall ≤ 100',
    },
    {
      section,
      metric: '  the task with the most CPU (the page’s own work)',
      corral: describeTask(heaviest, inPhase),
      unit: 'ms',
      target: 'CPU ≤ 100',
    },
    {
      section,
      metric: '  machine load at its end (1-min loadavg, 2 cores)',
      corral: Math.round(loadavg()[0]! * 10) / 10,
      unit: '',
    },
  ];
}

/** `p50 / p99 / max` of some times (ms). */
export function spread(v: number[]): string {
  return v.length === 0
    ? 'n/a'
    : `${Math.round(pct(v, 50))} / ${Math.round(pct(v, 99))} / ${Math.round(Math.max(...v))}`;
}

/**
 * The long-task rows of a phase: long tasks as the page saw them (wall clock, the goal's measure), and the CPU the
 * main thread had in its tasks (from the trace): a wall-clock long task with little CPU waited for a core.
 */
export function longTaskRows(section: string, long: number[], traced: TracedTask[]): BenchRow[] {
  const maxCpu = traced.reduce((m, t) => Math.max(m, t.cpu), 0);
  return [
    longTaskRow(section, long),
    {
      section,
      metric: '  main-thread CPU of its longest task / tasks over 50 ms of CPU (trace)',
      corral: `${Math.round(maxCpu)} / ${traced.filter((t) => t.cpu > 50).length}`,
      unit: 'ms',
    },
  ];
}

/**
 * One measured phase with the panel open: `produce` makes the processes (and says when each started and closed);
 * then how the page showed them — achieved rate, lag, processes never shown, main-thread CPU per process, long tasks
 * (with their CPU from a trace), heap.
 */
export async function measurePhase(
  page: Page,
  cdp: CDPSession,
  phase: { section: string; rate: number; what?: string; waitMs?: number },
  produce: () => Promise<{ timings: Timing[]; rate: number }>,
): Promise<BenchRow[]> {
  const { section } = phase;
  const m0 = await metrics(cdp);
  const p0 = await page.evaluate(() => performance.now());
  const stopTrace = await traceTasks(cdp);
  const run = await produce();
  const missing = await waitShown(
    page,
    run.timings.map((t) => t.processId),
    phase.waitMs ?? 120_000,
  );
  const m1 = await metrics(cdp);
  const p1 = await page.evaluate(() => performance.now());
  const traced = await stopTrace();
  const shown = await pageTimes(page);
  const l = lags(run.timings, shown);
  const long = longTasksIn(shown.long, p0, p1);
  const heap = (await metrics(cdp, true)).heapUsed;
  const total = run.timings.length;
  const perProcess = (seconds: number) => Math.round((seconds * 1e5) / total) / 100;
  return [
    rateRow(section, phase, run.rate),
    {
      section,
      metric: 'lag, first shown after start (p50 / p99 / max)',
      corral: spread(l.appear),
      unit: 'ms',
      target: '≤ 250',
    },
    {
      section,
      metric: 'lag, final state after process/closed (p50 / p99 / max)',
      corral: spread(l.final),
      unit: 'ms',
      target: '≤ 250',
    },
    { section, metric: 'processes never shown in their final state', corral: missing, unit: '', target: '0' },
    {
      section,
      metric: 'page main-thread CPU per process (ThreadTime)',
      corral: perProcess(m1.cpuSeconds - m0.cpuSeconds),
      unit: 'ms',
      target: '≤ 0.3',
    },
    {
      section,
      metric: '  main-thread tasks per process, wall clock (TaskDuration)',
      corral: perProcess(m1.taskSeconds - m0.taskSeconds),
      unit: 'ms',
    },
    ...longTaskRows(section, long, traced),
    {
      section,
      metric: 'JS heap after GC',
      corral: Math.round((heap / 1048576) * 10) / 10,
      unit: 'MiB',
      target: '≤ 150',
    },
  ];
}

/**
 * Chromium on a fleet host's panel, instrumented (PAGE_INSTRUMENTATION, CDP Performance), once it is connected and
 * lists the server `lastServer` (the last one joined) in its server filter.
 */
export async function openFleetPanel(
  panelUrl: string,
  lastServer: string,
): Promise<{ browser: Browser; page: Page; cdp: CDPSession }> {
  const browser = await openBrowser();
  const page = browser.page;
  await page.addInitScript(PAGE_INSTRUMENTATION);
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Performance.enable');
  await page.goto(panelUrl);
  await page.locator('#conn-status', { hasText: 'connected' }).waitFor({ timeout: 60_000 });
  await page
    .locator('[data-testid="filter-server"] option', { hasText: lastServer })
    .waitFor({ state: 'attached', timeout: 60_000 });
  return { browser, page, cdp };
}
