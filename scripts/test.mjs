#!/usr/bin/env node
// The test command, in two tiers:
//
//   npm test              the fast tier, run before every commit (goal ≤ 3 min; 2.6–3.8 min on the 2-core dev machine, as fast as it runs that day): type check
//                         (each layer with its own tsconfig), lint, the layer rules, the protocol reference being
//                         current, then every test file except those in SLOW, with node's test runner.
//   npm run test:all      the same checks, then every test file (fast and slow tiers); CI runs this.
//
// The test files run bundled: esbuild turns the selected files into JavaScript under node_modules/.cache/corral-tests
// (one bundle per file, shared chunks, ~1 s for all of them), and node runs that without a loader. Loading the server's
// ~200 TypeScript modules through tsx's loader hooks cost each test process 1–1.5 CPU-s, about a third of the tests'
// CPU on this 2-core machine where they are CPU-bound. A test file keeps its own `import.meta` (url, dirname,
// filename are those of its .ts source, so fixtures and helper scripts resolve as before); the code under test sees
// the bundle's place, as in the shipped bundle (dist/cli.js), and finds the audit worker and the panel beside it: the
// run builds the application into the same directory, and the tests start the CLI from there (CORRAL_DIST). The
// scripts under test/fixtures and test/helpers that tests start as processes are bundled too (tsEntry in
// test/helpers/cli.ts). Stack traces name the .ts sources (source maps). `npm run test:all` tells the files it is
// the whole suite (CORRAL_TEST_TIER=all): a file whose cases form a matrix crosses every axis there, and in the fast
// tier pairs them (WHOLE_SUITE in test/helpers/cli.ts).
//
// `npm test -- unit sandbox` runs only the fast-tier files whose path contains one of the given words (skipping the
// checks); `npm run test:all -- sandbox` does the same over both tiers. Options starting with `--test` go to node's
// test runner (`npm test -- sandbox --test-reporter=tap`).
//
// A file belongs in SLOW only when it cannot be made fast without losing what it proves: its entry says why and what
// it took alone. Measure-heavy checks belong in `npm run bench` (test/bench), or here with the smallest N that still
// fails on the bug it was written for. Every *.test.ts under test/ is in exactly one tier: SLOW names existing files
// only (checked below), everything else is fast.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'esbuild';
import { buildApp, nodeBundle } from './build.mjs';

/** The slow tier: run by `npm run test:all` (and CI) only. Seconds are wall time alone on the dev machine. */
const SLOW = {
  'test/e2e/codex-clients.test.ts':
    'interop matrix: five released Codex clients, each a real codex process against Corral (~90 s)',
  'test/integration/remote-contract.test.ts':
    "the released Codex 0.169 executor and Corral, each through the registry's real retry schedule " +
    "(0.5 + 1 + 2 + 4 s of backoff, measured against the recording), and the Noise relay's 10 s pause after 8 " +
    "failed handshakes probed on the real 0.171 executor and on Corral's (~57 s)",
  'test/browser/panel-scale.test.ts':
    'the panel under a flood in Chromium: 3001 processes and 100 MB of output (15 s alone, ~110 s in a loaded run); ' +
    'its speed is `npm run bench -- panel`, the virtual table is unit-tested in renderer-processTable',
  'test/browser/panel-cost.test.ts':
    'what the open panel costs at 250 processes/s and under 100 approval prompts/s (issue 38): 8 s floods, ' +
    "measured by the page's own TaskDuration and thread time (~40 s alone, four cases); the figures per rate are " +
    '`npm run bench -- panelCost`',
  'test/integration/codex-flags-contract.test.ts':
    "codex 0.171's recorded command-line contract: 25 command lines, each a real `corral exec-server` started and " +
    'read to its exit (~45 s); the flag parsers themselves are hostile-tested in the fast tier (codex-flag-parsers)',
  'test/integration/protocol-cli.test.ts':
    'the CLI end to end: each case a real `corral` process started, connected to and stopped (~37 s in a loaded run)',
  'test/hostile/fs-races.test.ts':
    'a race: 3000 RENAME_EXCHANGE attempts per fs/* method (300 never lost the race, so N cannot shrink), ~33 s',
  'test/integration/cgroup-server.test.ts':
    'servers that die (SIGKILLed servers and their cgroups swept by the next one, each a real server process) ~32 s',
  'test/integration/fleet-cli.test.ts':
    'the fleet from the command line: several real `corral serve` processes joined and restarted (~25 s)',
  'test/hostile/selftest.test.ts':
    "`corral selftest`'s whole battery, and again with holes reintroduced (~44 s loaded); each case's attack is also a " +
    'fast-tier hostile test of its own',
  'test/integration/cgroup-cpu.test.ts':
    'measures CPU shares: six busy loops per case hold both cores for ~15 s, slowing every test beside them',
  'test/unit/check-layers.test.ts':
    'tests of the layer checker itself (planted trees, the checker run on each, ~8 CPU-s); ' +
    '`npm test` runs the checker on the tree',
  'test/unit/protocol-docs.test.ts':
    'tests of the protocol reference generator and its --check (run on copies, ~14 CPU-s); ' +
    '`npm test` runs the check on docs/',
};

/** Slow-tier files that measure the page's CPU: run after the rest, alone (their entry in SLOW says what they take). */
const ALONE = {
  'test/browser/panel-cost.test.ts':
    'asserts the page CPU per second under floods against a 10%-of-a-core budget',
};
/**
 * The fast tier's longest files, started first (seconds of their suites in a quiet run four at a time on the 2-core
 * dev machine; only the order matters): a long file started last would run alone at the end while the other slots
 * are empty.
 */
const HEAVY = {
  'test/hostile/sandbox-escapes.test.ts': 34,
  'test/integration/audit-cli.test.ts': 26,
  'test/hostile/inbound-fuzz.test.ts': 26,
  'test/integration/cli-openai-credentials.test.ts': 22,
  'test/integration/audit-store.test.ts': 19,
  'test/browser/fleet.test.ts': 19,
  'test/browser/panel.test.ts': 16,
  'test/integration/remote-auth.test.ts': 16,
  'test/integration/server-trust.test.ts': 13,
  'test/hostile/audit-replay.test.ts': 13,
  'test/integration/audit-driver.test.ts': 12,
  'test/hostile/proxy-input.test.ts': 12,
  'test/hostile/netnotify-transparent.test.ts': 11,
  'test/integration/approvals-project.test.ts': 11,
  'test/integration/landlock-fallback.test.ts': 10,
};

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const all = args.includes('--all');
const runnerFlags = args.filter((a) => a.startsWith('--test'));
const filters = args.filter((a) => !a.startsWith('-'));

function walk(dir) {
  const files = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) files.push(...walk(p));
    else if (name.endsWith('.test.ts')) files.push(relative(root, p));
  }
  return files;
}

const stale = [...Object.keys(SLOW), ...Object.keys(ALONE), ...Object.keys(HEAVY)].filter(
  (f) => !existsSync(join(root, f)),
);
if (stale.length > 0) {
  console.error(
    `scripts/test.mjs: SLOW, ALONE or HEAVY names files that do not exist (moved? update the list): ${stale.join(', ')}`,
  );
  process.exit(1);
}

if (filters.length === 0) {
  // The four checks at once (each prints when it ends): TypeScript 7 (the Go compiler, package alias typescript-go)
  // makes the same check as TypeScript 5.9 in a third of the CPU (13 against 42 CPU-s cold here, multi-threaded);
  // TypeScript 5.9 stays as `typescript` for the scripts that use its API.
  const checks = await Promise.all([
    check(process.execPath, ['node_modules/typescript-go/bin/tsc', '-b']),
    check(process.execPath, ['node_modules/@biomejs/biome/bin/biome', 'check', '.']),
    check(process.execPath, ['scripts/check-layers.mjs']),
    check(process.execPath, ['--import', 'tsx', 'scripts/protocol-docs.ts', '--check']),
  ]);
  const failed = checks.find((c) => c !== 0);
  if (failed !== undefined) process.exit(failed);
}
const matching = walk(join(root, 'test'))
  .filter((f) => filters.length === 0 || filters.some((w) => f.includes(w)))
  .sort();
const files = all ? matching : matching.filter((f) => !(f in SLOW));
const leftOut = matching.filter((f) => !files.includes(f));
if (filters.length > 0 && leftOut.length > 0)
  console.log(
    `# slow tier, not run (npm run test:all -- ${filters.join(' ')} runs them): ${leftOut.join(', ')}`,
  );
if (files.length === 0) {
  console.error(`no ${all ? '' : 'fast-tier '}test files match ${filters.join(' ')}`);
  process.exit(1);
}
if (filters.length === 0)
  console.log(
    all
      ? `# all tiers: ${files.length} test files`
      : `# fast tier: ${files.length} test files (${leftOut.length} slow ones: npm run test:all)`,
  );
process.env.CORRAL_TEST_TIER = all ? 'all' : 'fast';
const bundles = await bundle(files, scripts());
const failuresFile = join(dirname(bundles[0].out), 'failures.jsonl');
/** What each runTests call's failures file held. */
const failures = [];
// Files at a time: CORRAL_TEST_CONCURRENCY, else two more than the cores (test files wait on processes, sockets and
// browsers part of the time; on the 2-core dev machine, quiet, the fast tier's test phase took 228 s at 3, 209 s at 4,
// 210 s at 5: past 4 the cores are the limit); one more than the cores for the whole suite, whose slow tier measures
// (CPU shares, the panel's cost, five Codex CLIs) and is not to be crowded. The longest files start first, so that none
// of them is the last one running.
bundles.sort((a, b) => weight(b.source) - weight(a.source));
const concurrency = Number(process.env.CORRAL_TEST_CONCURRENCY) || availableParallelism() + (all ? 1 : 2);
// The files in ALONE run after the others, one at a time: what they measure is the page's own CPU, which grows on
// a machine the other files crowd (stop 42's CI: the prompt stack at 119.8 ms/s beside them, ~100 alone).
const crowd = bundles.filter((b) => !(b.source in ALONE));
const alone = bundles.filter((b) => b.source in ALONE);
const status = [
  crowd.length > 0 ? runTests(concurrency, crowd) : 0,
  alone.length > 0 ? runTests(1, alone) : 0,
];
process.exitCode = status.find((s) => s !== 0) ?? 0;
printFailures(bundles);

/**
 * node's test runner over these bundles, so many files at a time; its exit status. Beside the usual report (or the
 * one asked for with --test-reporter), every failed or cancelled test is written to `failuresFile`, printed at the end.
 */
function runTests(filesAtOnce, list) {
  const ownReporter = runnerFlags.some((f) => f.startsWith('--test-reporter'));
  const reporters = ownReporter
    ? []
    : [
        `--test-reporter=${process.stdout.isTTY ? 'spec' : 'tap'}`,
        '--test-reporter-destination=stdout',
        `--test-reporter=${join(root, 'scripts', 'test-failures-reporter.mjs')}`,
        `--test-reporter-destination=${failuresFile}`,
      ];
  const r = spawnSync(
    process.execPath,
    [
      '--enable-source-maps',
      '--test',
      `--test-concurrency=${filesAtOnce}`,
      '--test-timeout=300000',
      ...reporters,
      ...runnerFlags,
      ...list.map((b) => b.out),
    ],
    { cwd: root, stdio: 'inherit' },
  );
  // The destination file is written anew by each run: keep what this one found.
  if (existsSync(failuresFile)) failures.push(readFileSync(failuresFile, 'utf8'));
  return r.status ?? 1;
}

/** The failed and cancelled tests of the whole run, last, named by their .ts source (a long log is often cut). */
function printFailures(list) {
  const lines = failures.join('').split('\n').filter(Boolean);
  if (lines.length === 0) return;
  const sourceOf = new Map(list.map((b) => [relative(root, b.out), b.source]));
  console.log(`\n# ${lines.length} test(s) failed or were cancelled:`);
  for (const line of lines) {
    const f = JSON.parse(line);
    console.log(`#   ${f.what}: ${sourceOf.get(f.file) ?? f.file} › ${f.test}\n#     ${f.message}`);
  }
}

/** Bundles the test files into node_modules/.cache/corral-tests, each file keeping its own `import.meta`. */
async function bundle(sources, children) {
  // A directory per run (two runs at once must not replace each other's files), removed when the run ends; one
  // left by a run that was killed is removed by the next run.
  const cache = join(root, 'node_modules', '.cache', 'corral-tests');
  mkdirSync(cache, { recursive: true });
  for (const name of readdirSync(cache)) {
    if (!alive(Number(name))) rmSync(join(cache, name), { recursive: true, force: true });
  }
  const outdir = join(cache, String(process.pid));
  process.on('exit', () => rmSync(outdir, { recursive: true, force: true }));
  // The application as `npm run build` makes it (cli.js, audit/worker.js, renderer/), here rather than in dist/: a
  // build started meanwhile (another run, an engineer) empties dist/, and this run's processes must not see that.
  // The tests start the CLI from here (CORRAL_DIST; test/helpers/cli.ts), and the code under test, bundled beside
  // it, finds the audit worker and the panel next to itself.
  await buildApp(outdir);
  process.env.CORRAL_DIST = outdir;
  const ownImportMeta = {
    name: 'own-import-meta',
    setup(b) {
      b.onLoad({ filter: new RegExp(`^${escapeRegExp(join(root, 'test'))}[\\\\/].*\\.ts$`) }, (args) => ({
        loader: 'ts',
        contents: readFileSync(args.path, 'utf8')
          .replaceAll('import.meta.url', JSON.stringify(pathToFileURL(args.path).href))
          .replaceAll('import.meta.dirname', JSON.stringify(dirname(args.path)))
          .replaceAll('import.meta.filename', JSON.stringify(args.path)),
      }));
    },
  };
  await build({
    absWorkingDir: root,
    // Flat names (test/unit/x.test.ts → test.unit.x.test.mjs): every bundle sits beside the application build, so
    // code under test that was bundled into an entry rather than a shared chunk also finds the worker and the panel.
    entryPoints: Object.fromEntries([...sources, ...children].map((f) => [flatName(f), f])),
    outdir,
    outExtension: { '.js': '.mjs' },
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    // The pure-JavaScript packages inlined, as in the application build (scripts/build.mjs): each test process
    // loads them from its bundle instead of resolving and compiling them from node_modules.
    ...nodeBundle,
    sourcemap: 'linked',
    plugins: [ownImportMeta, ...nodeBundle.plugins],
    logLevel: 'warning',
  });
  return sources.map((source) => ({ source, out: join(outdir, `${flatName(source)}.mjs`) }));
}

function escapeRegExp(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** Every TypeScript file under test/fixtures and test/helpers: what a test may start as a process of its own. */
function scripts() {
  const all = [];
  const under = (dir) => {
    for (const name of readdirSync(dir)) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) under(p);
      else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) all.push(relative(root, p));
    }
  };
  under(join(root, 'test', 'fixtures'));
  under(join(root, 'test', 'helpers'));
  return all.sort();
}

/** test/unit/x.test.ts → test.unit.x.test (the same in test/helpers/cli.ts's tsEntry) */
function flatName(file) {
  return file.replace(/\.ts$/, '').replaceAll('/', '.');
}

/** Whether a process with this pid exists (a run's directory is named after its pid). */
function alive(pid) {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return e.code === 'EPERM';
  }
}

/** Seconds a file took alone (measured on the dev machine), for the files that take longest; the rest count 0. */
function weight(file) {
  return HEAVY[file] ?? 0;
}

/** Runs a check with its output held until it ends, so that checks running at once do not interleave. */
function check(cmd, args) {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    const out = [];
    child.stdout.on('data', (d) => out.push(d));
    child.stderr.on('data', (d) => out.push(d));
    child.on('close', (code, signal) => {
      process.stdout.write(Buffer.concat(out));
      if (code !== 0) console.error(`check failed: ${[cmd, ...args].join(' ')} (${signal ?? code})`);
      resolve(code ?? 1);
    });
  });
}
