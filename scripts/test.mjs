#!/usr/bin/env node
// The test command: type check (each layer with its own tsconfig), lint, the layer rules, the protocol reference
// being current, then every test file with node's test runner (TypeScript through tsx).
// `npm test -- unit sandbox` runs only the test files whose path contains one of the given words.
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const filters = process.argv.slice(2).filter((a) => !a.startsWith('-'));

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

if (filters.length === 0) {
  run('npx', ['tsc', '-b']);
  run('npx', ['biome', 'check', '.']);
  run(process.execPath, ['scripts/check-layers.mjs']);
  run(process.execPath, ['--import', 'tsx', 'scripts/protocol-docs.ts', '--check']);
}
const files = walk(join(root, 'test'))
  .filter((f) => !f.includes('/bench/'))
  .filter((f) => filters.length === 0 || filters.some((w) => f.includes(w)))
  .sort();
if (files.length === 0) {
  console.error(`no test files match ${filters.join(' ')}`);
  process.exit(1);
}
run(process.execPath, [
  '--import',
  'tsx',
  '--test',
  '--test-concurrency=2',
  '--test-timeout=300000',
  ...files,
]);
