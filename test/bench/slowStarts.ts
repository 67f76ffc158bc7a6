/**
 * What held up a fresh server's slowest starts, for hotpath.bench.ts: the kernel's scheduler events (tracefs
 * sched_switch and sched_process_fork, root only) over the same 200 `true` starts the p99 row measures. For each start
 * slower than twice their median: the task that ran longest on any CPU meanwhile, other than the start's own (the
 * server's event loop, the client's, the command), and how long the CPUs sat idle meanwhile. On the 2-core dev VM,
 * 13 of 16 such starts in 4 fresh servers waited behind the server's own V8 threads (its optimizing compiler warming
 * up the hot path, its GC helpers) on one CPU while the other was idle (its kernel packs runnable tasks onto fewer
 * vCPUs); the rest behind the client's own V8 threads, the VM's agent or the kernel's memory monitor (kdamond).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { AUDIT_THREAD_NAME } from '../../src/audit/trail.js';
import { BenchClient, pct, startServer, stopServer } from './exec.bench.js';

const TRACEFS = '/sys/kernel/tracing';
const EVENTS = ['sched:sched_switch', 'sched:sched_process_fork'];

/** One start as the client saw it, CLOCK_MONOTONIC µs (the clock `trace_clock mono` stamps events with). */
export interface StartWindow {
  t0: number;
  t1: number;
}

/** Who is who in the trace. */
export interface Roles {
  serverPid: number;
  /** Every thread of the server, its main thread (serverPid) included. */
  serverTids: ReadonlySet<number>;
  clientPid: number;
  clientTids: ReadonlySet<number>;
}

export interface Cause {
  what: string;
  starts: number;
  /** Median over those starts of the time that task ran during the start, ms. */
  ranMs: number;
  /** Median over those starts of the time the CPUs were idle during the start (all CPUs added), ms. */
  idleMs: number;
}

export interface SlowStarts {
  starts: number;
  medianMs: number;
  slow: number;
  causes: Cause[];
}

const LINE = /^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+(\d+\.\d+): (sched_switch|sched_process_fork): (.*)$/;
const SWITCH_NEXT = /next_comm=(.*) next_pid=(\d+) next_prio=/;
const FORK = /pid=(\d+) child_comm=.* child_pid=(\d+)$/;

interface Run {
  cpu: number;
  from: number;
  to: number;
  pid: number;
  comm: string;
}

/** What each CPU ran, from sched_switch lines (µs), and the children the server forked. */
export function parseTrace(
  text: string,
  serverTids: ReadonlySet<number>,
): { runs: Run[]; children: Set<number> } {
  const runs: Run[] = [];
  const children = new Set<number>();
  const current = new Map<number, { pid: number; comm: string; since: number }>();
  for (const line of text.split('\n')) {
    const m = LINE.exec(line);
    if (!m) continue;
    const cpu = Number(m[3]);
    const ts = Number(m[4]) * 1e6;
    if (m[5] === 'sched_process_fork') {
      const f = FORK.exec(m[6]!);
      if (f && serverTids.has(Number(m[2]))) children.add(Number(f[2]));
      continue;
    }
    const n = SWITCH_NEXT.exec(m[6]!);
    if (!n) continue;
    const was = current.get(cpu);
    if (was) runs.push({ cpu, from: was.since, to: ts, pid: was.pid, comm: was.comm });
    current.set(cpu, { pid: Number(n[2]), comm: n[1]!, since: ts });
  }
  return { runs, children };
}

/**
 * A task's group: the server's and the client's other threads by role (the server's audit worker apart, by the name
 * it gives its thread), anything else by its name.
 */
function groupOf(pid: number, comm: string, roles: Roles): string {
  if (roles.serverTids.has(pid))
    return comm === AUDIT_THREAD_NAME
      ? "the server's audit thread (its batch of rows: SQLite, the hash chain)"
      : "the server's other threads (V8's compiler and GC, libuv's pool)";
  if (roles.clientTids.has(pid)) return "the client's other threads";
  return `another process: ${comm.replace(/\/.*$/, '')}`;
}

const NOTHING = 'none ran 30 % of the start: its own work (server, command, client)';

/** Attributes each start slower than twice the median (see the file's comment). */
export function attribute(text: string, windows: readonly StartWindow[], roles: Roles): SlowStarts {
  const { runs, children } = parseTrace(text, roles.serverTids);
  const sorted = windows.map((w) => w.t1 - w.t0).sort((a, b) => a - b);
  const median = pct(sorted, 50);
  const own = (pid: number) => pid === roles.serverPid || pid === roles.clientPid || children.has(pid);
  const byCause = new Map<string, { ran: number[]; idle: number[] }>();
  let slow = 0;
  for (const w of windows) {
    if (w.t1 - w.t0 < 2 * median) continue;
    slow++;
    const ran = new Map<number, { us: number; comm: string }>();
    let idle = 0;
    for (const r of runs) {
      const us = Math.min(r.to, w.t1) - Math.max(r.from, w.t0);
      if (us <= 0) continue;
      if (r.pid === 0) idle += us;
      else if (!own(r.pid)) {
        const e = ran.get(r.pid) ?? { us: 0, comm: r.comm };
        e.us += us;
        ran.set(r.pid, e);
      }
    }
    let top: [number, { us: number; comm: string }] | undefined;
    for (const e of ran) if (!top || e[1].us > top[1].us) top = e;
    const cause = top && top[1].us >= 0.3 * (w.t1 - w.t0) ? groupOf(top[0], top[1].comm, roles) : NOTHING;
    const c = byCause.get(cause) ?? { ran: [], idle: [] };
    c.ran.push(top && cause !== NOTHING ? top[1].us / 1000 : 0);
    c.idle.push(idle / 1000);
    byCause.set(cause, c);
  }
  const med = (v: number[]) =>
    pct(
      [...v].sort((a, b) => a - b),
      50,
    );
  const causes = [...byCause]
    .map(([what, c]) => ({ what, starts: c.ran.length, ranMs: med(c.ran), idleMs: med(c.idle) }))
    .sort((a, b) => b.starts - a.starts);
  return { starts: windows.length, medianMs: median / 1000, slow, causes };
}

/**
 * Readies the scheduler's events: null when they can be read (tracefs mounted; as root it is mounted here when it was
 * not, and `mounted` says so), else why not.
 */
export function readyTracefs(): { mounted: boolean } | { why: string } {
  if (process.getuid?.() !== 0) return { why: "the scheduler's trace needs root (tracefs)" };
  let mounted = false;
  if (!existsSync(join(TRACEFS, 'trace'))) {
    try {
      mkdirSync(TRACEFS, { recursive: true });
      // A pseudo filesystem of the kernel's own; mounting it changes nothing else.
      execFileSync('mount', ['-t', 'tracefs', 'nodev', TRACEFS]);
      mounted = true;
    } catch (e) {
      return {
        why: `tracefs is not mounted at ${TRACEFS} and could not be (${(e as Error).message.split('\n')[0]})`,
      };
    }
  }
  return existsSync(join(TRACEFS, 'events', 'sched', 'sched_switch'))
    ? { mounted }
    : { why: 'this kernel has no sched_switch trace event' };
}

function threadsOf(pid: number): Set<number> {
  return new Set(readdirSync(`/proc/${pid}/task`).map(Number));
}

/**
 * A fresh server (`argv`), 20 starts to warm up, then 200 traced: each slow start's cause. The trace settings are
 * put back as they were, and the trace buffer left empty.
 */
export async function slowStartCauses(
  argv: readonly [string, ...string[]],
  run: (c: BenchClient, i: number) => Promise<unknown>,
): Promise<SlowStarts> {
  const files = ['tracing_on', 'set_event', 'trace_clock', 'buffer_size_kb'] as const;
  const saved = new Map(files.map((f) => [f, readFileSync(join(TRACEFS, f), 'utf8')]));
  const put = (f: string, v: string) => writeFileSync(join(TRACEFS, f), v);
  const s = await startServer(argv[0], argv.slice(1));
  try {
    const c = await BenchClient.open(s.url);
    for (let i = 0; i < 20; i++) await run(c, -1 - i);
    put('tracing_on', '0');
    put('set_event', EVENTS.join('\n'));
    put('trace_clock', 'mono');
    put('buffer_size_kb', '32768');
    put('trace', '');
    const windows: StartWindow[] = [];
    const now = () => Number(process.hrtime.bigint()) / 1000;
    put('tracing_on', '1');
    for (let i = 0; i < 200; i++) {
      const t0 = now();
      await run(c, i);
      windows.push({ t0, t1: now() });
    }
    put('tracing_on', '0');
    const text = readFileSync(join(TRACEFS, 'trace'), 'utf8');
    const roles: Roles = {
      serverPid: s.proc.pid!,
      serverTids: threadsOf(s.proc.pid!),
      clientPid: process.pid,
      clientTids: threadsOf(process.pid),
    };
    c.close();
    return attribute(text, windows, roles);
  } finally {
    put('trace', '');
    // The saved trace_clock lists every clock with the current one in brackets.
    for (const f of files) {
      const v = saved.get(f)!.trim();
      put(f, f === 'trace_clock' ? (/\[(\S+)\]/.exec(v)?.[1] ?? 'local') : f === 'set_event' ? `${v}\n` : v);
    }
    await stopServer(s);
  }
}
