/**
 * `npm run bench -- landlock-start` (issue 32: "the Landlock start within 1.2× of an unsandboxed one"): `true` started
 * through Corral with the Landlock backend, and with bwrap, against the same start unsandboxed, on this checkout and
 * on the A/B variants of LANDLOCK_VARIANTS (as HOTPATH_VARIANTS: `label=<git revision>` or `label=<entry>.ts`), all
 * servers up at once and taking turns block by block, so load drifts over every row alike. Each server runs with
 * every default on (hotpath.bench.ts's corralServerArgv). Per row: start→closed p50/p90 and the server's CPU per start
 * (every thread, from /proc/<pid>/task/<tid>/schedstat, over blocks of LANDLOCK_BLOCK sequential starts of one kind:
 * the audit worker's batch of a block lands mostly in it). LANDLOCK_BLOCKS blocks of each kind per server (default
 * 12). The policy: read everything, write the workspace (with a .git) and /tmp, as hotpath's sandbox rows. The
 * `landlock, /tmp changing` row is the same Landlock start with a file of the bench's made in /tmp and the one before
 * removed ahead of each start, as compilers and editors do all the time: /tmp is a frozen root under this policy (one
 * rule per entry), so each such start plans anew and builds a new ruleset.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { seedParam } from '../integration/sandbox-util.js';
import { BenchClient, cpuMs, pct, startServer, stopServer } from './exec.bench.js';
import { buildCorral, corralArgsIn, removeBuilds, type Target, variantTargets } from './hotpath.bench.js';
import { benchWorkspace } from './hotpathPhases.js';
import type { BenchRow } from './types.js';

const root = join(import.meta.dirname, '..', '..');
const cache = join(root, '.cache', 'landlock-start');
const BLOCK = Number(process.env.LANDLOCK_BLOCK ?? 20);
const BLOCKS = Number(process.env.LANDLOCK_BLOCKS ?? 12);
const TRUE = ['/bin/true'];

type Kind = 'landlock' | 'plain' | 'bwrap' | 'landlock, /tmp changing';
const KINDS: Kind[] = ['landlock', 'plain', 'bwrap', 'landlock, /tmp changing'];
/** Per kind of start: start→closed times (ms) and the server's CPU (µs) per start, one figure per block. */
type Figures = Record<Kind, { lat: number[]; cpu: number[] }>;

const sorted = (v: number[]) => [...v].sort((a, b) => a - b);
const median = (v: number[]) => pct(sorted(v), 50);
/** p50 and p90 of the start→closed times, the median of the blocks' CPU per start. */
const summary = (lat: number[], cpu: number[]) => ({
  p50: median(lat),
  p90: pct(sorted(lat), 90),
  cpu: median(cpu),
});
const f2 = (v: number) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));

export async function run(): Promise<BenchRow[]> {
  if (process.platform !== 'linux')
    return [{ section: 'landlock-start', metric: 'skipped', corral: 'n/a', unit: '' }];
  mkdirSync(cache, { recursive: true });
  const scratch = mkdtempSync(join(cache, 'run-'));
  try {
    const args = corralArgsIn(scratch);
    const targets: Target[] = [
      { name: 'Corral (this checkout)', argv: args(await buildCorral('landlock-now'), 'now') },
      ...(await variantTargets(args, process.env.LANDLOCK_VARIANTS ?? '')),
    ];
    const { ws, entries } = benchWorkspace(scratch);
    const params: Record<Kind, Record<string, unknown>> = {
      landlock: { sandbox: seedParam({ cwd: ws, entries, useLegacyLandlock: true }) },
      plain: {},
      bwrap: { sandbox: seedParam({ cwd: ws, entries }) },
      'landlock, /tmp changing': { sandbox: seedParam({ cwd: ws, entries, useLegacyLandlock: true }) },
    };
    let n = 0;
    // The file of the `/tmp changing` row: a new one before each of its starts, the one before removed.
    let churned: string | null = null;
    const churn = () => {
      const next = join(tmpdir(), `corral-bench-churn-${process.pid}-${n}`);
      writeFileSync(next, '');
      if (churned) rmSync(churned, { force: true });
      churned = next;
    };
    const env = { PATH: '/usr/bin:/bin' };
    const servers = await Promise.all(
      targets.map((t) => startServer(t.argv[0], t.argv.slice(1), t.env ?? process.env)),
    );
    const figures: Figures[] = targets.map(
      () => Object.fromEntries(KINDS.map((k) => [k, { lat: [], cpu: [] }])) as unknown as Figures,
    );
    try {
      const clients = await Promise.all(servers.map((s) => BenchClient.open(s.url)));
      const block = async (i: number, kind: Kind, keep: boolean) => {
        const c = clients[i]!;
        const pid = servers[i]!.proc.pid!;
        const lat: number[] = [];
        const cpu0 = cpuMs(pid);
        for (let k = 0; k < BLOCK; k++) {
          if (kind === 'landlock, /tmp changing') churn();
          const t0 = performance.now();
          await c.run(`s-${n++}`, TRUE, { cwd: ws, env, ...params[kind] });
          lat.push(performance.now() - t0);
        }
        const cpu = ((cpuMs(pid) - cpu0) * 1000) / BLOCK;
        if (!keep) return;
        figures[i]![kind].lat.push(...lat);
        figures[i]![kind].cpu.push(cpu);
      };
      for (let b = -2; b < BLOCKS; b++)
        for (const i of servers.keys())
          for (const kind of b % 2 === 0 ? KINDS : [...KINDS].reverse()) await block(i, kind, b >= 0);
      for (const c of clients) c.close();
    } finally {
      await Promise.all(servers.map((s) => stopServer(s)));
      if (churned) rmSync(churned, { force: true });
    }
    const rows: BenchRow[] = [];
    console.log(
      `\nsandboxed starts against unsandboxed (issue 32), ${BLOCKS} blocks of ${BLOCK} each, servers taking turns`,
    );
    console.log(['', 'p50 ms', 'p90 ms', 'ratio p50', 'CPU µs/start', 'Δ CPU µs'].join('\t'));
    for (const [i, t] of targets.entries()) {
      const f = figures[i]!;
      const pl = summary(f.plain.lat, f.plain.cpu);
      for (const kind of KINDS) {
        const x = summary(f[kind].lat, f[kind].cpu);
        const vs = kind === 'plain' ? ['', ''] : [f2(x.p50 / pl.p50), f2(x.cpu - pl.cpu)];
        console.log([`${t.name}, ${kind}`, f2(x.p50), f2(x.p90), vs[0], f2(x.cpu), vs[1]].join('\t'));
        if (kind === 'plain') continue;
        rows.push(
          {
            section: 'landlock-start',
            metric: `${t.name}: ${kind} p50`,
            corral: x.p50,
            reference: pl.p50,
            unit: 'ms',
            ...(kind === 'landlock' ? { target: '≤ 1.2x unsandboxed' } : {}),
          },
          {
            section: 'landlock-start',
            metric: `${t.name}: ${kind}, server CPU per start`,
            corral: x.cpu,
            reference: pl.cpu,
            unit: 'µs',
          },
        );
      }
    }
    return rows;
  } finally {
    rmSync(scratch, { recursive: true, force: true });
    removeBuilds();
  }
}
