/**
 * Audit-trail benchmarks (issue 15): what the trail costs the hot path (start→closed p50 and 64 concurrent short
 * processes, with the trail on and off, next to the reference server), and how fast audit/query answers a text
 * search over 100 000 stored processes (the store alone, and through the protocol).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { AuditRecord } from '../../src/audit/events.js';
import { openAuditStore } from '../../src/audit/openStore.js';
import { AuditQueryParams } from '../../src/protocol/audit.js';
import { RpcClient } from '../helpers/client.js';
import {
  BenchClient,
  concurrency,
  pct,
  referenceCodex,
  startLatencies,
  startServer,
  stopServer,
} from './exec.bench.js';
import type { BenchRow } from './types.js';

const root = join(import.meta.dirname, '..', '..');
const CLI = join(root, 'dist', 'cli.js');
const PROCESSES = 100_000;

interface HotPath {
  p50: number;
  procsPerSec: number;
}

async function hotPath(url: string, tag: string): Promise<HotPath> {
  const c = await BenchClient.open(url);
  const lat = await startLatencies(c, tag);
  const procs = await concurrency(c, tag);
  c.close();
  return { p50: pct(lat, 50), procsPerSec: procs.warm };
}

const corralServer = (args: string[]) =>
  startServer(process.execPath, [
    CLI,
    'exec-server',
    '--listen',
    'ws://127.0.0.1:0',
    '--log-level',
    'warn',
    ...args,
  ]);

/** `corral serve`; `url` is the panel's WebSocket URL with the panel token (audit/* is for the panel). */
async function startServe(args: string[]): Promise<{ url: string; proc: ChildProcess }> {
  const proc = spawn(process.execPath, [CLI, 'serve', '--log-level', 'warn', ...args], {
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const rl = createInterface({ input: proc.stdout! });
  const panel = await new Promise<string>((resolve, reject) => {
    rl.on('line', (l) => {
      if (l.startsWith('panel: ')) resolve(l.slice('panel: '.length));
    });
    proc.once('exit', (c) => reject(new Error(`corral serve exited ${c}`)));
  });
  const u = new URL(panel);
  const token = new URLSearchParams(u.hash.slice(1)).get('token') ?? '';
  return { url: `ws://${u.host}/?token=${encodeURIComponent(token)}`, proc };
}

async function corral(tag: string, args: string[]): Promise<HotPath> {
  const s = await corralServer(args);
  try {
    return await hotPath(s.url, tag);
  } finally {
    await stopServer(s);
  }
}

const WORDS = [
  'npm',
  'test',
  'cargo',
  'build',
  'git',
  'status',
  'ls',
  '-la',
  'python3',
  'pytest',
  'grep',
  '-rn',
  'src',
  'make',
];

/** The records of processes [from, from + count) shaped like an agent's (argv, env names, policy, 1 KiB output). */
export function agentRecords(from: number, count: number, t0: number): AuditRecord[] {
  const out = new Uint8Array(1024).fill(0x2e);
  const batch: AuditRecord[] = [];
  for (let i = from; i < from + count; i++) {
    const t = t0 + i * 15_000;
    const words = Array.from({ length: 5 }, (_, j) => WORDS[(i * 7 + j * 13) % WORDS.length]);
    const ids = { sessionId: `session-${Math.floor(i / 300)}`, processId: `call_${i.toString(36)}` };
    batch.push(
      {
        kind: 'processStart',
        time: t,
        ...ids,
        clientName: i % 3 === 0 ? 'codex_exec' : 'codex-tui',
        argv: ['/bin/bash', '-lc', `${words.join(' ')} ${i.toString(36)}`],
        cwd: `/home/user/projects/repo-${i % 40}`,
        tty: i % 10 === 0,
        envNames: ['HOME', 'LANG', 'PATH', 'TERM', 'USER', 'CODEX_SANDBOX'],
        sandboxType: 'linuxSeccomp',
        policy: {
          sandbox: 'linux-seccomp',
          writableRoots: [{ root: `/home/user/projects/repo-${i % 40}` }],
          network: 'restricted',
        },
        network: null,
        metadata: { threadId: `thread-${Math.floor(i / 50)}`, toolCallId: `call_${i}` },
        pid: 1000 + (i % 30000),
      },
      {
        kind: 'processExit',
        time: t + 40,
        ...ids,
        exitCode: i % 7 === 0 ? 1 : 0,
        signal: null,
        sandboxDenied: false,
        limitHit: null,
      },
      {
        kind: 'processClose',
        time: t + 41,
        ...ids,
        outputBytes: out.length,
        head: out,
        tail: null,
        omittedBytes: 0,
      },
    );
  }
  return batch;
}

const T0 = Date.now() - 20 * 86_400_000;

/** 100k processes in one database. */
function fill(path: string): void {
  const store = openAuditStore(path);
  for (let b = 0; b < PROCESSES; b += 5000) store.write(agentRecords(b, 5000, T0));
  store.db.pragma('wal_checkpoint(TRUNCATE)');
  store.close();
}

/**
 * What one flush costs: committing ~1000 records (334 processes' start, exit and close) into the 100k database, which
 * the worker thread does; and the structured clone of that batch, the main thread's part of handing it over.
 */
function flushCost(path: string): { commitMs: number; cloneMs: number } {
  const store = openAuditStore(path);
  const commits: number[] = [];
  const clones: number[] = [];
  for (let k = 0; k < 7; k++) {
    const batch = agentRecords(PROCESSES + k * 334, 334, T0);
    let t = performance.now();
    structuredClone(batch);
    clones.push(performance.now() - t);
    t = performance.now();
    store.write(batch);
    commits.push(performance.now() - t);
  }
  store.close();
  return { commitMs: median(commits.slice(2)), cloneMs: median(clones.slice(2)) };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

export async function run(): Promise<BenchRow[]> {
  const dir = mkdtempSync(join(tmpdir(), 'corral-bench-audit-'));
  const rows: BenchRow[] = [];
  try {
    // ---- the hot path, audit off / on, and the reference -------------------------------------------------------
    const off = await corral('off', ['--no-audit']);
    const on = await corral('on', ['--audit-db', join(dir, 'hot.db')]);
    let ref: HotPath | null = null;
    const codex = referenceCodex('0.120.0');
    if ('binary' in codex) {
      const s = await startServer(codex.binary, ['exec-server', '--listen', 'ws://127.0.0.1:0'], {
        ...process.env,
        CODEX_HOME: join(root, '.cache', 'codex-home-bench'),
      });
      try {
        ref = await hotPath(s.url, 'ref');
      } finally {
        await stopServer(s);
      }
    }
    const section = 'audit trail: hot path';
    const r2 = (v: number) => Math.round(v * 100) / 100;
    rows.push(
      {
        section,
        metric: 'start→closed `true` p50, audit off',
        corral: r2(off.p50),
        reference: ref ? r2(ref.p50) : undefined,
        unit: 'ms',
        target: '≤ 3',
      },
      {
        section,
        metric: 'start→closed `true` p50, audit on',
        corral: r2(on.p50),
        reference: ref ? r2(ref.p50) : undefined,
        unit: 'ms',
        target: '≤ 3',
      },
      {
        section,
        metric: '64 concurrent short processes, audit off',
        corral: Math.round(off.procsPerSec),
        reference: ref ? Math.round(ref.procsPerSec) : undefined,
        unit: 'proc/s',
      },
      {
        section,
        metric: '64 concurrent short processes, audit on',
        corral: Math.round(on.procsPerSec),
        reference: ref ? Math.round(ref.procsPerSec) : undefined,
        unit: 'proc/s',
        target: '≥ 1.8× ref',
      },
      ...('missing' in codex
        ? [{ section, metric: `reference skipped: ${codex.missing}`, corral: 'n/a', unit: '' }]
        : []),
    );

    // ---- text search over 100k processes ---------------------------------------------------------------------
    const dbPath = join(dir, 'big.db');
    const t0 = performance.now();
    fill(dbPath);
    const fillSecs = (performance.now() - t0) / 1000;
    const flush = flushCost(dbPath);
    const store = openAuditStore(dbPath);
    const search = (text: string) => {
      const q = AuditQueryParams.parse({ type: 'process', text, limit: 100 });
      const times: number[] = [];
      let n = 0;
      for (let i = 0; i < 7; i++) {
        const t = performance.now();
        n = store.query(q).items.length;
        times.push(performance.now() - t);
      }
      return { ms: median(times.slice(2)), n };
    };
    const rare = search('no-such-command-anywhere');
    const common = search('status');
    store.close();
    // Through the protocol: `corral serve` on that database, a panel client, audit/query round trips.
    const s = await startServe(['--audit-db', dbPath]);
    let wire = 0;
    let wireCommon = 0;
    try {
      const c = await RpcClient.open(s.url, 'bench');
      const ask = async (text: string) => {
        const times: number[] = [];
        for (let i = 0; i < 7; i++) {
          const t = performance.now();
          await c.request('audit/query', { type: 'process', text, limit: 100 });
          times.push(performance.now() - t);
        }
        return median(times.slice(2));
      };
      wire = await ask('no-such-command-anywhere');
      wireCommon = await ask('status');
      c.close();
    } finally {
      await stopServer(s);
    }
    const q = 'audit trail: audit/query, 100k processes';
    rows.push(
      {
        section: q,
        metric: `database: ${PROCESSES} processes (filled in ${fillSecs.toFixed(1)} s)`,
        corral: Math.round(statSync(dbPath).size / 1048576),
        unit: 'MiB',
      },
      {
        section: q,
        metric: 'one flush: commit of 1000 records (worker thread, not the event loop)',
        corral: r2(flush.commitMs),
        unit: 'ms',
      },
      {
        section: q,
        metric: 'one flush: structured clone of those records (main thread)',
        corral: r2(flush.cloneMs),
        unit: 'ms',
      },
      {
        section: q,
        metric: 'text search, no match (scans all), store',
        corral: r2(rare.ms),
        unit: 'ms',
        target: '≤ 100',
      },
      {
        section: q,
        metric: `text search, common word (${common.n} rows), store`,
        corral: r2(common.ms),
        unit: 'ms',
      },
      {
        section: q,
        metric: 'text search, no match, audit/query round trip',
        corral: r2(wire),
        unit: 'ms',
        target: '≤ 100',
      },
      {
        section: q,
        metric: 'text search, common word, audit/query round trip',
        corral: r2(wireCommon),
        unit: 'ms',
      },
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return rows;
}
