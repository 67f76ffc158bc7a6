/**
 * Remote executor (issue 18): start→closed latency of `/bin/true` through the environment registry's relay vs
 * directly. The same Corral CLI runs twice in its own process: once listening (`--listen`, the client connects to
 * it), once as a remote executor of the fake registry (`--remote … --remote-transport direct`, the client reaches it
 * through the relay of test/helpers/registry.ts, which runs in this process next to the client). Target: the relay
 * adds ≤ 2 ms at p50. `npm run bench -- remote` runs only this section.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { RpcClient } from '../helpers/client.js';
import { startFakeRegistry } from '../helpers/registry.js';
import type { BenchRow } from './types.js';

const root = join(import.meta.dirname, '..', '..');
const cli = [process.execPath, '--import', 'tsx', join(root, 'src', 'cli.ts'), 'exec-server'];

function start(args: string[]): ChildProcess {
  return spawn(cli[0]!, [...cli.slice(1), ...args], { cwd: root, stdio: ['ignore', 'pipe', 'ignore'] });
}

async function stop(p: ChildProcess): Promise<void> {
  if (p.exitCode !== null) return;
  p.kill('SIGTERM');
  await once(p, 'exit');
}

async function latencies(url: string, tag: string, n: number): Promise<number[]> {
  const c = await RpcClient.open(url, 'bench');
  const run = async (id: string) => {
    await c.request('process/start', {
      processId: id,
      argv: ['/bin/true'],
      cwd: '/tmp',
      env: {},
      tty: false,
      arg0: null,
    });
    await c.waitFor((m) => m.method === 'process/closed' && m.params.processId === id);
  };
  for (let i = 0; i < 50; i++) await run(`${tag}-w${i}`);
  const lat: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await run(`${tag}-${i}`);
    lat.push(performance.now() - t0);
  }
  c.close();
  return lat.sort((a, b) => a - b);
}

const pct = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

export async function run(): Promise<BenchRow[]> {
  const N = 300;
  const direct = start(['--listen', 'ws://127.0.0.1:0', '--ws-auth', 'none']);
  const [url] = (await once(createInterface({ input: direct.stdout! }), 'line')) as [string];
  const registry = await startFakeRegistry({ harnessToken: null });
  const remote = start([
    '--remote',
    registry.url,
    '--environment-id',
    'bench',
    '--remote-transport',
    'direct',
  ]);
  try {
    await registry.waitForExecutor('bench', 20_000);
    // Alternate the two, twice, so that machine load drifts affect both alike; the medians of all samples count.
    const d: number[] = [];
    const r: number[] = [];
    for (let round = 0; round < 2; round++) {
      d.push(...(await latencies(url.trim(), `d${round}`, N / 2)));
      await registry.waitForExecutor('bench', 20_000);
      r.push(...(await latencies(registry.harnessUrl('bench'), `r${round}`, N / 2)));
    }
    d.sort((a, b) => a - b);
    r.sort((a, b) => a - b);
    const row = (metric: string, corral: number, reference?: number, target?: string): BenchRow => ({
      section: 'remote',
      metric,
      corral: Math.round(corral * 100) / 100,
      ...(reference !== undefined ? { reference: Math.round(reference * 100) / 100 } : {}),
      unit: 'ms',
      ...(target ? { target } : {}),
    });
    return [
      row('start→closed `true` p50, through the relay (reference: direct)', pct(r, 50), pct(d, 50)),
      row('start→closed `true` p90, through the relay (reference: direct)', pct(r, 90), pct(d, 90)),
      row('added by the relay at p50', pct(r, 50) - pct(d, 50), undefined, '≤ 2 ms'),
    ];
  } finally {
    await stop(direct);
    await stop(remote);
    await registry.close();
  }
}
