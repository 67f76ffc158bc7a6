/**
 * fs/writeFile of 4 KiB, request → response, through the real CLI server (dist/, its own process) on loopback: with
 * a 0.169 sandbox context (root read, workspace write, a `none` folder; issue 12's confined walk on fds: policy
 * resolution, the carve-outs' identities, openat2 per component, fd-relative create) against the same write
 * without a context (by name, through Node's fs). The two alternate request by request, so that machine load hits
 * them alike. The workspace is 6 components deep, as a project under a home directory typically is.
 * Then fs/getMetadata, fs/readFile and fs/writeFile of 4 KiB without a context, Corral against codex exec-server 0.171
 * (when cached in .cache/codex: scripts/install-codex.mjs), the two servers taking turns request by request.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import { RpcClient } from '../helpers/client.js';
import { entry, managedContext, rootEntry } from '../hostile/fs-util.js';
import { referenceCodex } from './exec.bench.js';
import type { BenchRow } from './types.js';

const root = join(import.meta.dirname, '..', '..');
const RUNS = 2000;
const WARMUP = 500;

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

export async function run(): Promise<BenchRow[]> {
  const base = mkdtempSync(join(os.tmpdir(), 'corral-fs-bench-'));
  const ws = join(base, 'home', 'alice', 'src', 'app');
  const out = join(base, 'secret');
  mkdirSync(join(ws, '.git'), { recursive: true });
  mkdirSync(out);
  const uri = (p: string) => pathToFileURL(p).href;
  // As 0.169 sends it: the protected names as read entries, policyContext and userHomeDir.
  const sandbox = {
    ...managedContext(ws, [
      rootEntry('read'),
      { path: { type: 'special', value: { kind: 'project_roots' } }, access: 'write' },
      entry(out, 'none'),
      ...['.git', '.agents', '.codex', '.aws'].map((subpath) => ({
        path: { type: 'special', value: { kind: 'project_roots', subpath } },
        access: 'read',
        missing_path_behavior: 'skip',
      })),
    ]),
    policyContext: { cwd: uri(ws), workspaceRoots: [uri(ws)] },
    userHomeDir: uri(join(base, 'home', 'alice')),
  };
  let proc: ChildProcess | undefined;
  try {
    proc = spawn(
      process.execPath,
      [join(root, 'dist', 'cli.js'), 'exec-server', '--listen', 'ws://127.0.0.1:0', '--log-level', 'warn'],
      { stdio: ['ignore', 'pipe', 'ignore'] },
    );
    const first = await createInterface({ input: proc.stdout! })[Symbol.asyncIterator]().next();
    if (first.done) throw new Error('the server printed no URL');
    const c = await RpcClient.open(first.value as string, 'fs-bench');
    const dataBase64 = Buffer.alloc(4096, 'x').toString('base64');
    const times = { sandboxed: [] as number[], plain: [] as number[] };
    for (let i = 0; i < WARMUP + RUNS; i++) {
      for (const kind of ['sandboxed', 'plain'] as const) {
        const path = join(ws, `${kind}-${i % 64}.txt`);
        const params = kind === 'sandboxed' ? { path, dataBase64, sandbox } : { path, dataBase64 };
        const t0 = performance.now();
        await c.request('fs/writeFile', params);
        if (i >= WARMUP) times[kind].push(performance.now() - t0);
      }
    }
    const vsCodex = await againstCodex(c, ws);
    c.close();
    const section = 'fs/* (4 KiB fs/writeFile, request→response)';
    const r = (v: number) => Math.round(v * 1000) / 1000;
    return [
      ...vsCodex,
      {
        section,
        metric: 'with a sandbox context (confined walk) p50',
        corral: r(pct(times.sandboxed, 50)),
        reference: r(pct(times.plain, 50)),
        unit: 'ms',
        target: '≤ 3 ms',
      },
      { section, metric: 'with a sandbox context p99', corral: r(pct(times.sandboxed, 99)), unit: 'ms' },
      {
        section,
        metric: 'without a sandbox context (by name) p50',
        corral: r(pct(times.plain, 50)),
        unit: 'ms',
      },
      { section, metric: 'without a sandbox context p99', corral: r(pct(times.plain, 99)), unit: 'ms' },
    ];
  } finally {
    proc?.kill('SIGTERM');
    rmSync(base, { recursive: true, force: true });
  }
}

/**
 * Corral (`c`, no sandbox context) against codex exec-server 0.171, request by request in turns: fs/getMetadata and
 * fs/readFile of a 4 KiB file, fs/writeFile of 4 KiB (file:// paths: 0.171 takes no other).
 */
async function againstCodex(c: RpcClient, dir: string): Promise<BenchRow[]> {
  const section = 'fs/* against codex 0.171 (4 KiB, request→response p50)';
  const codex = referenceCodex('0.171.0');
  if ('missing' in codex) return [{ section, metric: `skipped: ${codex.missing}`, corral: 'n/a', unit: '' }];
  const bin = codex.binary;
  const home = join(root, '.cache', 'codex-home-bench');
  mkdirSync(home, { recursive: true });
  const proc = spawn(bin, ['exec-server', '--listen', 'ws://127.0.0.1:0'], {
    stdio: ['ignore', 'pipe', 'ignore'],
    env: { ...process.env, CODEX_HOME: home },
  });
  try {
    const first = await createInterface({ input: proc.stdout! })[Symbol.asyncIterator]().next();
    if (first.done) throw new Error('codex printed no URL');
    const ref = await RpcClient.open(first.value as string, 'fs-bench');
    const file = join(dir, 'read-4k.txt');
    const dataBase64 = Buffer.alloc(4096, 'y').toString('base64');
    await c.request('fs/writeFile', { path: pathToFileURL(file).href, dataBase64 });
    const ops: [string, (cl: RpcClient, who: string, i: number) => Promise<unknown>][] = [
      ['fs/getMetadata', (cl) => cl.request('fs/getMetadata', { path: pathToFileURL(file).href })],
      ['fs/readFile', (cl) => cl.request('fs/readFile', { path: pathToFileURL(file).href })],
      [
        'fs/writeFile',
        (cl, who, i) =>
          cl.request('fs/writeFile', {
            path: pathToFileURL(join(dir, `${who}-w${i % 64}`)).href,
            dataBase64,
          }),
      ],
    ];
    const rows: BenchRow[] = [];
    for (const [method, op] of ops) {
      const times: Record<string, number[]> = { corral: [], codex: [] };
      for (let i = 0; i < WARMUP + RUNS; i++)
        for (const who of i % 2 ? ['corral', 'codex'] : ['codex', 'corral']) {
          const t0 = performance.now();
          await op(who === 'corral' ? c : ref, who, i);
          if (i >= WARMUP) times[who]!.push(performance.now() - t0);
        }
      const r = (v: number) => Math.round(v * 1000) / 1000;
      rows.push({
        section,
        metric: method,
        corral: r(pct(times.corral!, 50)),
        reference: r(pct(times.codex!, 50)),
        unit: 'ms',
      });
    }
    ref.close();
    return rows;
  } finally {
    proc.kill('SIGTERM');
  }
}
