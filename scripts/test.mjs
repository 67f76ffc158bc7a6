#!/usr/bin/env node
// The test command, in two tiers:
//
//   npm test              the fast tier, run before every commit (goal ≤ 3 min; 324 s measured on the 2-core dev machine): type check
//                         (each layer with its own tsconfig), lint, the layer rules, the protocol reference being
//                         current, then every test file except those in SLOW, with node's test runner (TypeScript
//                         through tsx).
//   npm run test:all      the same checks, then every test file (fast and slow tiers); CI runs this.
//
// `npm test -- unit sandbox` runs only the fast-tier files whose path contains one of the given words (skipping the
// checks); `npm run test:all -- sandbox` does the same over both tiers. Options starting with `--test` go to node's
// test runner (`npm test -- sandbox --test-reporter=tap`).
//
// A file belongs in SLOW only when it cannot be made fast without losing what it proves: its entry says why and what
// it took alone. Measure-heavy checks belong in `npm run bench` (test/bench), or here with the smallest N that still
// fails on the bug it was written for. Every *.test.ts under test/ is in exactly one tier: SLOW names existing files
// only (checked below), everything else is fast.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The slow tier: run by `npm run test:all` (and CI) only. Seconds are wall time alone on the dev machine. */
const SLOW = {
  'test/e2e/codex-clients.test.ts':
    'interop matrix: five released Codex clients, each a real codex process against Corral (~90 s)',
  'test/integration/remote-contract.test.ts':
    "the released Codex 0.169 executor and Corral, each through the registry's real retry schedule " +
    '(0.5 + 1 + 2 + 4 s of backoff, measured against the recording) (~35 s)',
  'test/browser/panel-scale.test.ts':
    'the panel under a flood in Chromium: 3001 processes and 100 MB of output (15 s alone, ~110 s in a loaded run); ' +
    'its speed is `npm run bench -- panel`, the virtual table is unit-tested in renderer-processTable',
  'test/browser/panel-cost.test.ts':
    "what the open panel costs at 250 processes/s (issue 38): 8 s of a paced flood, measured by the page's own " +
    'TaskDuration (~20 s alone); the figures per rate are `npm run bench -- panelCost`',
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

function run(cmd, args) {
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

const stale = Object.keys(SLOW).filter((f) => !existsSync(join(root, f)));
if (stale.length > 0) {
  console.error(
    `scripts/test.mjs: SLOW names files that do not exist (moved? update the list): ${stale.join(', ')}`,
  );
  process.exit(1);
}

if (filters.length === 0) {
  run('npx', ['tsc', '-b']);
  run('npx', ['biome', 'check', '.']);
  run(process.execPath, ['scripts/check-layers.mjs']);
  run(process.execPath, ['--import', 'tsx', 'scripts/protocol-docs.ts', '--check']);
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
// Three files at a time on two cores: most test files wait on processes, sockets and browsers more than they compute
// (alone, their CPU time is about half their wall time), so a third file keeps both cores busy.
run(process.execPath, [
  '--import',
  'tsx',
  '--test',
  '--test-concurrency=3',
  '--test-timeout=300000',
  ...runnerFlags,
  ...files,
]);
