/**
 * Exec-server benchmarks (issue 2): start→closed latency for `true`, 64 MiB of stdout through notifications, and 64
 * concurrent short processes. One client, the same for Corral and the reference `codex exec-server` 0.120.0
 * (referenceCodex: installed into .cache/codex when missing), each server in its own process, on loopback.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import WebSocket, { WebSocketServer } from 'ws';
import { codexBinary } from '../e2e/codex/rig.js';
import type { BenchRow } from './types.js';

const root = join(import.meta.dirname, '..', '..');

interface Server {
  url: string;
  proc: ChildProcess;
}

export async function startServer(
  cmd: string,
  args: string[],
  env: NodeJS.ProcessEnv = process.env,
): Promise<Server> {
  const proc = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'ignore'], env });
  const rl = createInterface({ input: proc.stdout! });
  const url = await new Promise<string>((resolve, reject) => {
    rl.once('line', (l) => resolve(l.trim()));
    proc.once('exit', (c) => reject(new Error(`${cmd} exited ${c}`)));
  });
  return { url, proc };
}

export function stopServer(s: Server): Promise<void> {
  return new Promise((resolve) => {
    s.proc.once('exit', () => resolve());
    s.proc.kill('SIGTERM');
  });
}

const OUTPUT_METHOD = Buffer.from('"method":"process/output"');
const CHUNK_KEY = Buffer.from('"chunk":"');
const SEQ_KEY = Buffer.from('"seq":');
const ID_KEY = Buffer.from('"processId":"');

/**
 * Reads a process/output notification the way a client with a zero-copy JSON reader (serde in Codex) would: finds
 * `seq` and the base64 `chunk` in the frame without building JS objects or decoding the text. It still checks what
 * matters for the figure: the method, seq order without gaps, and the byte count carried by each chunk.
 * Returns null for any other message.
 */
function scanOutput(data: Buffer): { processId: string; seq: number; bytes: number } | null {
  const head = data.subarray(0, 64);
  if (head.indexOf(OUTPUT_METHOD) < 0) return null;
  const p = data.indexOf(ID_KEY);
  const s = data.indexOf(SEQ_KEY);
  const c = data.indexOf(CHUNK_KEY);
  if (p < 0 || s < 0 || c < 0) throw new Error(`malformed output notification: ${data.subarray(0, 200)}`);
  const processId = data.toString('utf8', p + ID_KEY.length, data.indexOf(0x22, p + ID_KEY.length));
  let seq = 0;
  for (let i = s + SEQ_KEY.length; data[i]! >= 0x30 && data[i]! <= 0x39; i++)
    seq = seq * 10 + data[i]! - 0x30;
  const start = c + CHUNK_KEY.length;
  const end = data.indexOf(0x22, start);
  if (end < 0 || (end - start) % 4 !== 0) throw new Error('malformed base64 chunk');
  const pad = data[end - 1] === 0x3d ? (data[end - 2] === 0x3d ? 2 : 1) : 0;
  return { processId, seq, bytes: ((end - start) / 4) * 3 - pad };
}

/** A minimal protocol client: request/response by id, notifications by processId. */
export class BenchClient {
  private id = 0;
  private pending = new Map<number, (m: Record<string, unknown>) => void>();
  private closedWaiters = new Map<string, () => void>();
  bytes = 0;
  /** Output notifications are read with scanOutput instead of JSON.parse (see there). */
  lean = false;
  private lastSeq = new Map<string, number>();
  /** The stdout of the processes output() runs, by processId. */
  private collected = new Map<string, Buffer[]>();

  constructor(private ws: WebSocket) {
    ws.on('message', (data: Buffer) => {
      if (this.lean) {
        const o = scanOutput(data);
        if (o) {
          this.bytes += o.bytes;
          this.checkSeq(o.processId, o.seq);
          return;
        }
      }
      const m = JSON.parse(data.toString()) as Record<string, unknown>;
      if (typeof m.id === 'number') {
        this.pending.get(m.id)?.(m);
        this.pending.delete(m.id);
        return;
      }
      const p = m.params as Record<string, unknown>;
      if (m.method === 'process/output') {
        this.checkSeq(p.processId as string, p.seq as number);
        const c = p.chunk as string;
        this.bytes += (c.length / 4) * 3 - (c.endsWith('==') ? 2 : c.endsWith('=') ? 1 : 0);
        if (p.stream === 'stdout') this.collected.get(p.processId as string)?.push(Buffer.from(c, 'base64'));
      } else if (m.method === 'process/closed') {
        const id = p.processId as string;
        this.closedWaiters.get(id)?.();
        this.closedWaiters.delete(id);
      }
    });
  }

  /**
   * Output notifications of a process arrive in increasing seq order. (Not checked: that no seq is skipped. The
   * reference server can deliver process/exited between two outputs, so the seq after an output may be missing then.)
   */
  private checkSeq(processId: string, seq: number): void {
    const last = this.lastSeq.get(processId) ?? 0;
    if (seq <= last) throw new Error(`${processId}: output seq ${seq} after ${last}`);
    this.lastSeq.set(processId, seq);
  }

  static async open(url: string): Promise<BenchClient> {
    const ws = new WebSocket(url, { perMessageDeflate: false });
    await new Promise((r, j) => {
      ws.once('open', r);
      ws.once('error', j);
    });
    const c = new BenchClient(ws);
    await c.request('initialize', { clientName: 'bench' });
    ws.send(JSON.stringify({ method: 'initialized', params: {} }));
    return c;
  }

  request(method: string, params: unknown): Promise<Record<string, unknown>> {
    const id = ++this.id;
    return new Promise((resolve, reject) => {
      this.pending.set(id, (m) => (m.error ? reject(new Error(JSON.stringify(m.error))) : resolve(m)));
      this.ws.send(JSON.stringify({ id, method, params }));
    });
  }

  /** Starts a process and resolves when its process/closed arrives; `extra` adds to or replaces the start's params. */
  run(processId: string, argv: string[], extra: Record<string, unknown> = {}): Promise<void> {
    const closed = new Promise<void>((resolve) => this.closedWaiters.set(processId, resolve));
    const started = this.request('process/start', {
      processId,
      argv,
      cwd: '/tmp',
      env: { PATH: '/usr/bin:/bin' },
      tty: false,
      arg0: null,
      ...extra,
    });
    return Promise.all([started, closed]).then(() => undefined);
  }

  /** Like run, and resolves with the process's stdout (not with `lean`, which skips parsing output). */
  async output(processId: string, argv: string[], extra: Record<string, unknown> = {}): Promise<string> {
    const chunks: Buffer[] = [];
    this.collected.set(processId, chunks);
    try {
      await this.run(processId, argv, extra);
    } finally {
      this.collected.delete(processId);
    }
    return Buffer.concat(chunks).toString();
  }

  close(): void {
    this.ws.close();
  }
}

/**
 * Warms up the bench client (V8 optimises its receive path only after a few hundred MiB) against a stand-in server
 * in this process that answers initialize and process/start and sends `bytes` of output notifications shaped like
 * Corral's, so that the first run against each real server measures that server cold, not the client. Without it
 * the first 64 MiB run was client-bound (the client used ~200 ms of CPU, ~4x its warm cost) and the server measured
 * second inherited a warm client.
 */
async function warmUpClient(bytes: number): Promise<void> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
  await new Promise((r) => wss.once('listening', r));
  const chunk = Buffer.alloc(65536).toString('base64');
  wss.on('connection', (ws) => {
    ws.on('message', async (data: Buffer) => {
      const m = JSON.parse(data.toString()) as { id?: number; method: string; params: { processId: string } };
      if (m.id === undefined) return;
      ws.send(JSON.stringify({ id: m.id, result: {} }));
      if (m.method !== 'process/start') return;
      const processId = m.params.processId;
      let seq = 0;
      for (let sent = 0; sent < bytes; sent += 65536) {
        const frame = `{"method":"process/output","params":{"processId":"${processId}","seq":${++seq},"stream":"stdout","chunk":"${chunk}"}}`;
        if (ws.bufferedAmount < 8 << 20) ws.send(frame);
        else await new Promise<void>((r) => ws.send(frame, () => r()));
      }
      ws.send(JSON.stringify({ method: 'process/exited', params: { processId, seq: ++seq, exitCode: 0 } }));
      ws.send(JSON.stringify({ method: 'process/closed', params: { processId, seq: ++seq } }));
    });
  });
  const { port } = wss.address() as { port: number };
  const c = await BenchClient.open(`ws://127.0.0.1:${port}`);
  for (let i = 0; i < 4; i++) {
    c.lean = true;
    c.bytes = 0;
    await c.run(`client-warm-${i}`, []);
    if (c.bytes !== bytes) throw new Error(`client warm-up: received ${c.bytes} of ${bytes} bytes`);
  }
  c.close();
  await new Promise((r) => wss.close(r));
}

interface Figures {
  p50: number;
  p90: number;
  p99: number;
  mibPerSec: number;
  /** slowest and fastest of the five measured runs */
  mibRange: [number, number];
  coldMibPerSec: number;
  /** the server's CPU time (all its threads, not its children) for the first 64 MiB run, and the median warm one */
  coldCpuMs: number;
  warmCpuMs: number;
  parsedMibPerSec: number;
  coldProcsPerSec: number;
  procsPerSec: number;
}

/**
 * CPU time in ms that a process and its threads (not its children) have used so far, from /proc/<pid>/task/<tid>/
 * schedstat (nanoseconds; /proc/<pid>/stat counts 10 ms ticks, too coarse for a 100 ms run). Threads that exited
 * in between are not counted (the servers keep theirs).
 */
export function cpuMs(pid: number): number {
  let ns = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // the thread ended meanwhile
    }
  }
  return ns / 1e6;
}

/** start→closed of `/bin/true`, one at a time: 20 warm-up runs, then 200 measured (ms, sorted). */
export async function startLatencies(c: BenchClient, tag: string): Promise<number[]> {
  for (let i = 0; i < 20; i++) await c.run(`${tag}-w${i}`, ['/bin/true']);
  const lat: number[] = [];
  for (let i = 0; i < 200; i++) {
    const t0 = performance.now();
    await c.run(`${tag}-t${i}`, ['/bin/true']);
    lat.push(performance.now() - t0);
  }
  return lat.sort((a, b) => a - b);
}

/**
 * Concurrency: rounds of 64 processes started at once. The first 10 rounds are reported on their own; then 60 more
 * rounds of warm-up and 10 measured rounds. Corral's per-process path runs through ~140 JavaScript functions that
 * V8 optimises only after they have run about a thousand times (TurboFan takes 5-20 ms per function on this
 * machine): here a fresh server does ~1300 /s and reaches ~2100 /s after ~4500 processes. The reference server
 * gets exactly the same sequence.
 */
export async function concurrency(c: BenchClient, tag: string): Promise<{ cold: number; warm: number }> {
  const script = 'for i in 1 2 3 4 5; do echo line $i; done';
  const round = (name: string) =>
    Promise.all(Array.from({ length: 64 }, (_, i) => c.run(`${name}-${i}`, ['/bin/sh', '-c', script])));
  const rounds = async (name: string, n: number): Promise<number> => {
    const t = performance.now();
    for (let r = 0; r < n; r++) await round(`${name}${r}`);
    return (n * 64) / ((performance.now() - t) / 1000);
  };
  const cold = await rounds(`${tag}-c-cold`, 10);
  await rounds(`${tag}-c-w`, 60);
  return { cold, warm: await rounds(`${tag}-c`, 10) };
}

export function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function measure(url: string, tag: string, serverPid: number): Promise<Figures> {
  const c = await BenchClient.open(url);
  const lat = await startLatencies(c, tag);

  // Throughput. The first 64 MiB after start-up is reported on its own: Corral's hot path is JavaScript that V8 is
  // still optimising then (the first two or three 64 MiB runs are 30-40 % slower than the rest). Then three more
  // 64 MiB warm-up runs, five measured runs (median) with the lean client, and one with a client that JSON.parses
  // every notification (on this 2-core machine that client needs as much CPU as the server). The reference server
  // gets exactly the same sequence.
  const total = 64 * 1024 * 1024;
  let lastCpuMs = 0;
  const stream = async (name: string, bytes: number, lean: boolean): Promise<number> => {
    c.lean = lean;
    c.bytes = 0;
    const cpu0 = cpuMs(serverPid);
    const t = performance.now();
    await c.run(name, ['/usr/bin/head', '-c', String(bytes), '/dev/zero']);
    const secs = (performance.now() - t) / 1000;
    lastCpuMs = cpuMs(serverPid) - cpu0;
    if (c.bytes !== bytes) throw new Error(`${tag}: received ${c.bytes} of ${bytes} bytes`);
    c.lean = false;
    return bytes / 1048576 / secs;
  };
  const coldMibPerSec = await stream(`${tag}-big-cold`, total, true);
  const coldCpuMs = lastCpuMs;
  for (let i = 0; i < 3; i++) await stream(`${tag}-big-w${i}`, total, true);
  const leanRuns: number[] = [];
  const cpuRuns: number[] = [];
  for (let i = 0; i < 5; i++) {
    leanRuns.push(await stream(`${tag}-big${i}`, total, true));
    cpuRuns.push(lastCpuMs);
  }
  leanRuns.sort((a, b) => a - b);
  cpuRuns.sort((a, b) => a - b);
  const parsedMibPerSec = await stream(`${tag}-big-parsed`, total, false);

  const procs = await concurrency(c, tag);
  c.close();
  return {
    p50: pct(lat, 50),
    p90: pct(lat, 90),
    p99: pct(lat, 99),
    mibPerSec: leanRuns[2]!,
    mibRange: [leanRuns[0]!, leanRuns[4]!],
    coldMibPerSec,
    coldCpuMs,
    warmCpuMs: cpuRuns[2]!,
    parsedMibPerSec,
    coldProcsPerSec: procs.cold,
    procsPerSec: procs.warm,
  };
}

const referenceCache = new Map<string, { binary: string } | { missing: string }>();

/**
 * The reference server of a released Codex version: its native binary in .cache/codex/<version>, installed there by
 * scripts/install-codex.mjs first when it is missing (from the npm registry; the e2e matrix shares the cache), so that
 * `npm run bench` on a fresh machine has its reference rows. `missing` says why not (no registry, no such version);
 * asked once per version and run.
 */
export function referenceCodex(version: string): { binary: string } | { missing: string } {
  const known = referenceCache.get(version);
  if (known) return known;
  let binary = codexBinary(version);
  let missing = '';
  if (!binary) {
    console.error(`bench: installing codex ${version} into .cache/codex (scripts/install-codex.mjs)`);
    const run = spawnSync(process.execPath, [join(root, 'scripts', 'install-codex.mjs'), version], {
      encoding: 'utf8',
      timeout: 600_000,
    });
    binary = codexBinary(version);
    if (!binary) {
      let status: { message?: string } | undefined;
      try {
        status = JSON.parse(readFileSync(join(root, '.cache', 'codex', 'status.json'), 'utf8'))[version];
      } catch {
        // no status written: the installer's own output says why
      }
      const said = `${run.stdout ?? ''}${run.stderr ?? ''}`.trim();
      missing = `codex ${version} could not be installed: ${status?.message ?? (said || run.error?.message || 'no binary after the install')}`;
    }
  }
  const found = binary ? { binary } : { missing };
  referenceCache.set(version, found);
  return found;
}

/**
 * What each command's cgroup costs: two fresh Corral servers side by side, one as is and one with CORRAL_CGROUPS=0,
 * measured in alternating blocks (the same noise for both on a shared machine): `true` start→closed p50 over 10
 * blocks of 40, and 64-concurrent throughput (median of 8 blocks of 5 rounds) after the warm-up of `concurrency`.
 */
async function measureCgroupCost(
  auditDir: string,
): Promise<{ p50: [number, number]; warm: [number, number] }> {
  const servers = [
    await startServer(process.execPath, corralArgs(join(auditDir, 'cg.db'))),
    await startServer(process.execPath, corralArgs(join(auditDir, 'nocg.db')), {
      ...process.env,
      CORRAL_CGROUPS: '0',
    }),
  ];
  try {
    const clients = await Promise.all(servers.map((s) => BenchClient.open(s.url)));
    const tags = ['cg', 'nocg'];
    const lat: number[][] = [[], []];
    const rates: number[][] = [[], []];
    for (const [i, c] of clients.entries()) await concurrency(c, `${tags[i]}-warm`);
    for (let b = 0; b < 10; b++) {
      for (const [i, c] of clients.entries()) {
        for (let k = 0; k < 40; k++) {
          const t0 = performance.now();
          await c.run(`${tags[i]}-l${b}-${k}`, ['/bin/true']);
          lat[i]!.push(performance.now() - t0);
        }
      }
    }
    const script = 'for i in 1 2 3 4 5; do echo line $i; done';
    for (let b = 0; b < 8; b++) {
      for (const [i, c] of clients.entries()) {
        const t = performance.now();
        for (let r = 0; r < 5; r++)
          await Promise.all(
            Array.from({ length: 64 }, (_, j) =>
              c.run(`${tags[i]}-r${b}-${r}-${j}`, ['/bin/sh', '-c', script]),
            ),
          );
        rates[i]!.push((5 * 64) / ((performance.now() - t) / 1000));
      }
    }
    for (const c of clients) c.close();
    const median = (v: number[]) =>
      pct(
        [...v].sort((a, b) => a - b),
        50,
      );
    return {
      p50: [median(lat[0]!), median(lat[1]!)],
      warm: [median(rates[0]!), median(rates[1]!)],
    };
  } finally {
    for (const s of servers) await stopServer(s);
  }
}

/** Corral as it runs by default: with its audit trail on (in a scratch database, not the user's). */
function corralArgs(auditDb: string): string[] {
  const cli = join(root, 'dist', 'cli.js');
  return [cli, 'exec-server', '--listen', 'ws://127.0.0.1:0', '--log-level', 'warn', '--audit-db', auditDb];
}

export async function run(): Promise<BenchRow[]> {
  await warmUpClient(64 * 1024 * 1024);
  const auditDir = mkdtempSync(join(tmpdir(), 'corral-bench-audit-'));
  let ours: Figures;
  let cost: Awaited<ReturnType<typeof measureCgroupCost>>;
  try {
    const corral = await startServer(process.execPath, corralArgs(join(auditDir, 'audit.db')));
    try {
      ours = await measure(corral.url, 'corral', corral.proc.pid!);
    } finally {
      await stopServer(corral);
    }
    cost = await measureCgroupCost(auditDir);
  } finally {
    rmSync(auditDir, { recursive: true, force: true });
  }
  let ref: Figures | null = null;
  const codex = referenceCodex('0.120.0');
  if ('binary' in codex) {
    const home = join(root, '.cache', 'codex-home-bench');
    mkdirSync(home, { recursive: true });
    const server = await startServer(codex.binary, ['exec-server', '--listen', 'ws://127.0.0.1:0'], {
      ...process.env,
      CODEX_HOME: home,
    });
    try {
      ref = await measure(server.url, 'ref', server.proc.pid!);
    } finally {
      await stopServer(server);
    }
  }
  const section = 'exec-server (pipes, no sandbox, audit on)';
  const r = (v: number) => Math.round(v * 100) / 100;
  /** A row of one figure, ours against the reference's, rounded by `round`. */
  const versus = (
    metric: string,
    figure: (f: Figures) => number,
    unit: string,
    round: (v: number) => number = r,
    target?: string,
  ): BenchRow => ({
    section,
    metric,
    corral: round(figure(ours)),
    reference: ref ? round(figure(ref)) : undefined,
    unit,
    ...(target ? { target } : {}),
  });
  return [
    versus('start→closed `true` p50', (f) => f.p50, 'ms', r, '≤ 3'),
    versus('start→closed `true` p90', (f) => f.p90, 'ms'),
    versus('start→closed `true` p99', (f) => f.p99, 'ms'),
    versus('64 MiB stdout via notifications, first run after start', (f) => f.coldMibPerSec, 'MiB/s'),
    versus('64 MiB stdout via notifications, warm (median of 5)', (f) => f.mibPerSec, 'MiB/s', r, '≥ 500'),
    {
      section,
      metric: '  slowest / fastest of those 5',
      corral: `${Math.round(ours.mibRange[0])} / ${Math.round(ours.mibRange[1])}`,
      reference: ref ? `${Math.round(ref.mibRange[0])} / ${Math.round(ref.mibRange[1])}` : undefined,
      unit: 'MiB/s',
    },
    {
      section,
      metric: 'server CPU per 64 MiB, first run / warm',
      corral: `${Math.round(ours.coldCpuMs)} / ${Math.round(ours.warmCpuMs)}`,
      reference: ref ? `${Math.round(ref.coldCpuMs)} / ${Math.round(ref.warmCpuMs)}` : undefined,
      unit: 'ms',
    },
    versus('64 MiB stdout, client JSON.parses each', (f) => f.parsedMibPerSec, 'MiB/s'),
    versus('64 concurrent short processes, first 10 rounds', (f) => f.coldProcsPerSec, 'proc/s', Math.round),
    versus(
      '64 concurrent short processes, warm (10 rounds)',
      (f) => f.procsPerSec,
      'proc/s',
      Math.round,
      '≥ 1500',
    ),
    {
      section,
      metric: 'cgroup per command: start→closed `true` p50, with / without (CORRAL_CGROUPS=0), interleaved',
      corral: `${r(cost.p50[0])} / ${r(cost.p50[1])}`,
      unit: 'ms',
    },
    {
      section,
      metric: 'cgroup per command: 64 concurrent, warm, with / without, interleaved',
      corral: `${Math.round(cost.warm[0])} / ${Math.round(cost.warm[1])}`,
      unit: 'proc/s',
    },
    ...('missing' in codex
      ? [{ section, metric: `reference skipped: ${codex.missing}`, corral: 'n/a', unit: '' }]
      : []),
  ];
}
