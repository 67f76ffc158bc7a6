/**
 * What the receipts cost the hot path (issue 37): `npm run bench -- receipts`. start→closed of `/bin/true` and
 * batches of 64, with per-command usage collection (the cgroup's usage files, src/process/usage.ts) and the audit
 * hash chain (src/audit/chain.ts) on and off, in one run: four builds of this checkout's sources, started fresh in
 * every round and taking turns, each round begun by the next (RECEIPTS_ROUNDS, default 5; medians over the rounds), each as `exec-server` runs by
 * default (a token, the audit database, a cgroup per command) plus a panel credential (the monitor feed on):
 *   - on:        src/cli.ts and src/audit/worker.ts as they are;
 *   - usage off: no cgroup usage read at exit and no baseline / peak reset when a pooled cgroup is handed out again
 *                (ProcessCgroup.usage answers null, so a command's usage is its reap's rusage, which wait4 returns
 *                anyway; CgroupUsage.recycle does nothing). The usage files are still opened once per new cgroup;
 *   - chain off: the audit worker stores the rows and appends no chain entry, signs no checkpoint
 *                (ChainWriter.extend / checkpoint do nothing);
 *   - off:       both.
 * The switches are this bench's own: each "off" build is an entry written here that replaces those prototype
 * methods before it imports src/cli.ts (or src/audit/worker.ts), bundled like the real CLI. Nothing in the server
 * reads a setting to turn either off (a database without its chain would not verify: `corral audit verify`).
 * After each run the variant's database is read back to show the switch did what it says (chain rows, usage source).
 *
 * Per server and round: 20 warm-up then 200 measured `true` start→closed (p50, p99); 5 warm-up then 10 measured
 * batches of 64 concurrent `true` (/s) with the server's CPU over them (all its threads, the audit worker included:
 * the chain's hashing is there, off the event loop) per process. The ratio column is on / off. Last, the chain's
 * own cost in the audit worker's commit, measured in this process (chainCommitCost).
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { build } from 'esbuild';
import { ChainWriter } from '../../src/audit/chain.js';
import { openAuditStore } from '../../src/audit/openStore.js';
import { agentRecords } from './audit.bench.js';
import { BenchClient, pct, startServer, stopServer } from './exec.bench.js';
import { corralServerArgv, trueBatches, trueStarts } from './hotpath.bench.js';
import type { BenchRow } from './types.js';

const root = join(import.meta.dirname, '..', '..');
const cache = join(root, '.cache', 'receipts');
const ROUNDS = Number(process.env.RECEIPTS_ROUNDS ?? 5);

/** The replaced methods (see the header): what an "off" build runs before the real entry. */
const USAGE_OFF = `
import { ProcessCgroup } from './src/process/processCgroup.ts';
import { CgroupUsage } from './src/process/usage.ts';
ProcessCgroup.prototype.usage = function () { return null; };
CgroupUsage.prototype.recycle = function () {};
`;
const CHAIN_OFF = `
import { ChainWriter } from './src/audit/chain.ts';
ChainWriter.prototype.extend = function () {};
ChainWriter.prototype.checkpoint = function () {};
`;

interface Variant {
  name: string;
  usage: boolean;
  chain: boolean;
}

const VARIANTS: Variant[] = [
  { name: 'on', usage: true, chain: true },
  { name: 'usage off', usage: false, chain: true },
  { name: 'chain off', usage: true, chain: false },
  { name: 'off', usage: false, chain: false },
];

/** Bundles one variant: cli.js and audit/worker.js (where the trail looks for its worker) in a directory of its own. */
async function buildVariant(v: Variant, out: string): Promise<string> {
  const common = {
    absWorkingDir: root,
    bundle: true,
    sourcemap: false,
    logLevel: 'error',
    target: 'node20',
    platform: 'node',
    format: 'esm',
    packages: 'external',
  } as const;
  const entry = (patch: string, real: string, file: string) =>
    build({
      ...common,
      stdin: {
        contents: `${patch}\nawait import('${real}');\n`,
        resolveDir: root,
        loader: 'ts',
        sourcefile: file,
      },
      outfile: join(out, file),
    });
  await entry(v.usage ? '' : USAGE_OFF, './src/cli.ts', 'cli.js');
  await entry(v.chain ? '' : CHAIN_OFF, './src/audit/worker.ts', join('audit', 'worker.js'));
  return join(out, 'cli.js');
}

interface Round {
  p50: number;
  p99: number;
  concRate: number;
  cpuUsPerProc: number;
}

async function measure(argv: [string, ...string[]], tag: string): Promise<Round> {
  const s = await startServer(argv[0], argv.slice(1));
  const pid = s.proc.pid!;
  try {
    const c = await BenchClient.open(s.url);
    const lat = await trueStarts(c, tag);
    const conc = await trueBatches(c, pid, tag, 5);
    c.close();
    return { p50: pct(lat, 50), p99: pct(lat, 99), concRate: conc.concRate, cpuUsPerProc: conc.cpuPerProc };
  } finally {
    await stopServer(s);
  }
}

/** What the variant's database holds: chain entries, and the usage source of its processes. */
async function readBack(db: string): Promise<string> {
  const { default: Database } = await import('better-sqlite3');
  const d = new Database(db, { readonly: true });
  try {
    const chain = d.prepare('SELECT count(*) FROM chain').pluck().get() as number;
    const sources = d
      .prepare(
        "SELECT json_extract(usage, '$.source') AS s, count(*) AS n FROM processes GROUP BY s ORDER BY n DESC",
      )
      .all() as { s: string | null; n: number }[];
    return `chain entries ${chain}; usage ${sources.map((x) => `${x.s ?? 'none'} ${x.n}`).join(', ')}`;
  } finally {
    d.close();
  }
}

/**
 * The chain's own cost where it runs, the audit worker's commit: batches of 334 processes' start, exit and close
 * (~1000 records, what one flush of a busy server carries) into a signing store, with ChainWriter.extend as it is and
 * replaced by nothing, taking turns (2 warm-up, 10 measured each). µs of the worker thread per process.
 */
function chainCommitCost(dir: string): { on: number; off: number } {
  const store = openAuditStore(join(dir, 'commit.db'), { sign: true });
  const extend = ChainWriter.prototype.extend;
  const on: number[] = [];
  const off: number[] = [];
  const t0 = Date.now();
  try {
    let from = 0;
    for (let k = 0; k < 24; k++) {
      const chained = k % 2 === 0;
      ChainWriter.prototype.extend = chained ? extend : () => {};
      const batch = agentRecords(from, 334, t0);
      from += 334;
      const t = performance.now();
      store.write(batch);
      if (k >= 4) (chained ? on : off).push(((performance.now() - t) * 1000) / 334);
    }
  } finally {
    ChainWriter.prototype.extend = extend;
    store.close();
  }
  return { on: median(on), off: median(off) };
}

const median = (v: number[]) =>
  pct(
    [...v].sort((a, b) => a - b),
    50,
  );
const f2 = (v: number) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));

export async function run(): Promise<BenchRow[]> {
  if (process.platform !== 'linux')
    return [{ section: 'receipts', metric: 'skipped (not Linux)', corral: 'n/a', unit: '' }];
  mkdirSync(cache, { recursive: true });
  const scratch = mkdtempSync(join(cache, 'run-'));
  try {
    const panelToken = join(scratch, 'panel.token');
    writeFileSync(panelToken, `panel-${process.pid}-${'x'.repeat(24)}\n`, { mode: 0o600 });
    const targets: { v: Variant; db: string; argv: [string, ...string[]] }[] = [];
    for (const v of VARIANTS) {
      const dir = join(scratch, v.name.replace(/\W/g, '_'));
      const cli = await buildVariant(v, dir);
      const db = join(dir, 'state', 'audit.db');
      mkdirSync(join(dir, 'state'), { recursive: true });
      targets.push({
        v,
        db,
        argv: corralServerArgv(cli, db, panelToken),
      });
    }
    const rounds = new Map<string, Round[]>(VARIANTS.map((v) => [v.name, []]));
    // The first turn of a round goes to each variant in turn (a round's first server meets a colder machine).
    for (let r = 0; r < ROUNDS; r++)
      for (const t of targets.map((_, i) => targets[(i + r) % targets.length]!)) {
        const started = performance.now();
        rounds.get(t.v.name)!.push(await measure(t.argv, `r${r}`));
        process.stderr.write(
          `receipts: round ${r + 1}/${ROUNDS} ${t.v.name} ${((performance.now() - started) / 1000).toFixed(1)} s\n`,
        );
      }
    const sum = (name: string) => {
      const rs = rounds.get(name)!;
      return {
        p50: median(rs.map((x) => x.p50)),
        p99: median(rs.map((x) => x.p99)),
        concRate: median(rs.map((x) => x.concRate)),
        cpuUsPerProc: median(rs.map((x) => x.cpuUsPerProc)),
      };
    };
    const figures = new Map(VARIANTS.map((v) => [v.name, sum(v.name)]));
    const checks = await Promise.all(targets.map((t) => readBack(t.db).catch((e: Error) => e.message)));

    const header = ['', 'usage', 'chain', 'p50 ms', 'p99 ms', '64-conc /s', 'CPU µs / proc', 'database'];
    const rows = targets.map((t, i) => {
      const f = figures.get(t.v.name)!;
      return [
        t.v.name,
        t.v.usage ? 'on' : 'off',
        t.v.chain ? 'on' : 'off',
        f2(f.p50),
        f2(f.p99),
        f2(f.concRate),
        f2(f.cpuUsPerProc),
        checks[i]!,
      ];
    });
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
    const line = (cells: string[]) =>
      cells
        .map((c, i) => (i === 0 || i === 7 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)))
        .join('  ')
        .trimEnd();
    console.log(
      `\nreceipts (issue 37): usage collection and the hash chain on / off, ${ROUNDS} rounds, medians`,
    );
    console.log(line(header));
    console.log(widths.map((w) => '-'.repeat(w)).join('  '));
    for (const r of rows) console.log(line(r));

    const commit = chainCommitCost(scratch);
    console.log(
      `\naudit worker, one commit of 334 processes (start, exit, close): ${f2(commit.on)} µs per process chained, ${f2(commit.off)} µs without the chain (${f2(commit.on - commit.off)} µs of the worker thread per process, off the event loop)`,
    );

    const on = figures.get('on')!;
    const section = 'receipts (issue 37): on vs off';
    const pair = (metric: string, off: string, pick: (f: typeof on) => number, unit: string): BenchRow => ({
      section,
      metric: `${metric}, on vs ${off}`,
      corral: Math.round(pick(on) * 100) / 100,
      reference: Math.round(pick(figures.get(off)!) * 100) / 100,
      unit,
      target: 'within noise',
    });
    return [
      {
        section,
        metric: 'audit worker commit per process, chain on vs off',
        corral: Math.round(commit.on),
        reference: Math.round(commit.off),
        unit: 'µs',
        target: 'off the event loop',
      },
      ...['off', 'usage off', 'chain off'].flatMap((off) => [
        pair('start→closed p50', off, (f) => f.p50, 'ms'),
        pair('start→closed p99', off, (f) => f.p99, 'ms'),
        pair('64 concurrent `true`', off, (f) => f.concRate, '/s'),
        pair('server CPU per process', off, (f) => f.cpuUsPerProc, 'µs'),
      ]),
    ];
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}
