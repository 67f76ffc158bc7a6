/**
 * Spawner benchmarks (issue 2), with no server in between: start→exit of `true` (sequential) and 64 concurrent
 * `sh -c 'for i in 1 2 3 4 5; do echo line $i; done'`, for the native spawner ("corral", default async-exec mode, and
 * its vfork mode) against child_process (the "reference"), alternating them so that machine load drifts affect all
 * alike.
 */
import type { LaunchSpec } from '../../src/process/launch.js';
import { nativeLoadError, spawnPipedWith } from '../../src/process/spawner.js';
import type { BenchRow } from './types.js';

const SH5: LaunchSpec = {
  file: '/bin/sh',
  argv: ['sh', '-c', 'for i in 1 2 3 4 5; do echo line $i; done'],
  env: {},
  cwd: '/',
};
const TRUE: LaunchSpec = { file: '/bin/true', argv: ['true'], env: {}, cwd: '/' };

type Impl = 'native' | 'vfork' | 'node';
const IMPLS: Impl[] = ['native', 'vfork', 'node'];

/** Runs one child to the end: exit observed and both pipes closed. Resolves with the stdout byte count. */
function runOnce(impl: Impl, spec: LaunchSpec): Promise<number> {
  return new Promise((resolve, reject) => {
    const c =
      impl === 'node'
        ? spawnPipedWith('node', spec, { stdin: 'null' })
        : spawnPipedWith('native', spec, { stdin: 'null' }, impl === 'vfork' ? 'vfork' : 'async');
    let bytes = 0;
    let left = 3;
    let code = 0;
    const done = () => {
      if (--left > 0) return;
      if (code !== 0) reject(new Error(`${spec.argv.join(' ')} exited ${code}`));
      else resolve(bytes);
    };
    c.stdout.on('data', (d: Buffer) => {
      bytes += d.length;
    });
    c.stderr.resume();
    c.stdout.on('close', done);
    c.stderr.on('close', done);
    c.onExit((exitCode) => {
      code = exitCode;
      done();
    });
  });
}

async function latencies(kind: Impl, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await runOnce(kind, TRUE);
    out.push(performance.now() - t);
  }
  return out.sort((a, b) => a - b);
}

/** Processes per second, and this process's CPU time (user + system) per process in µs. */
async function throughput(
  kind: Impl,
  total: number,
  concurrency: number,
): Promise<{ rate: number; cpu: number }> {
  let started = 0;
  let bytes = 0;
  const lane = async () => {
    while (started < total) {
      started++;
      const b = await runOnce(kind, SH5);
      bytes += b;
    }
  };
  const cpu0 = process.cpuUsage();
  const t = performance.now();
  await Promise.all(Array.from({ length: concurrency }, lane));
  const secs = (performance.now() - t) / 1000;
  const cpu = process.cpuUsage(cpu0);
  if (bytes !== total * 35) throw new Error(`${kind}: got ${bytes} bytes of output, expected ${total * 35}`);
  return { rate: total / secs, cpu: (cpu.user + cpu.system) / total };
}

const pct = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

export async function run(): Promise<BenchRow[]> {
  if (nativeLoadError) throw new Error(`native spawner not built: ${nativeLoadError}`);
  for (const impl of IMPLS) await throughput(impl, 64, 64); // warm-up
  const lat: Record<Impl, number[]> = { native: [], vfork: [], node: [] };
  for (let round = 0; round < 2; round++) {
    for (const impl of IMPLS) lat[impl].push(...(await latencies(impl, 100)));
  }
  for (const impl of IMPLS) lat[impl].sort((a, b) => a - b);
  const rate: Record<Impl, number[]> = { native: [], vfork: [], node: [] };
  const cpu: Record<Impl, number[]> = { native: [], vfork: [], node: [] };
  for (let round = 0; round < 3; round++) {
    for (const impl of IMPLS) {
      const r = await throughput(impl, 500, 64);
      rate[impl].push(r.rate);
      cpu[impl].push(r.cpu);
    }
  }
  const section = 'spawner: native (ref. child_process)';
  const rows: BenchRow[] = [];
  for (const [p, label] of [
    [0.5, 'p50'],
    [0.9, 'p90'],
    [0.99, 'p99'],
  ] as const) {
    for (const impl of ['native', 'vfork'] as const) {
      rows.push({
        section,
        metric: `${impl === 'vfork' ? '[vfork mode] ' : ''}true spawn→exit ${label} (200 sequential)`,
        corral: pct(lat[impl], p),
        reference: pct(lat.node, p),
        unit: 'ms',
        target: label === 'p50' && impl === 'native' ? '≤ 3 ms (through the server)' : undefined,
      });
    }
  }
  for (const impl of ['native', 'vfork'] as const) {
    rows.push({
      section,
      metric: `${impl === 'vfork' ? '[vfork mode] ' : ''}64 concurrent sh 5-line, median of 3×500`,
      corral: median(rate[impl]),
      reference: median(rate.node),
      unit: '/s',
      target: impl === 'native' ? '≥ 1500 /s (through the server)' : undefined,
    });
  }
  for (const impl of ['native', 'vfork'] as const) {
    rows.push({
      section,
      metric: `${impl === 'vfork' ? '[vfork mode] ' : ''}server-process CPU per process in that run (median)`,
      corral: median(cpu[impl]),
      reference: median(cpu.node),
      unit: 'µs',
    });
  }
  return rows;
}
