/**
 * A copy of the built Corral whose better-sqlite3 does not load, as a user meets it: its native binding built for
 * another Node ABI (what Electron without a rebuild sees), or the package missing. dist/ and package.json are copied;
 * every other package is a symlink to the real one; better-sqlite3 is a copy of its JavaScript with a binding whose
 * NODE_MODULE_VERSION was changed (a real dlopen, refused by Node), or absent.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { cpSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DIST } from '../helpers/cli.js';
import { tempDir } from '../helpers/server.js';

const ROOT = join(import.meta.dirname, '..', '..');
const BINDING = join('build', 'Release', 'better_sqlite3.node');

export type BrokenDriver = 'other-abi' | 'missing';

/** This Node's module ABI (process.versions.modules), and the one an 'other-abi' install's binding says it was built for. */
export const OUR_ABI = Number(process.versions.modules);
export const OTHER_ABI = OUR_ABI + 1;

/**
 * The binding's bytes as if built for the Node ABI `abi`: the node_module struct's nm_version and the exported
 * `node_register_module_v<ABI>` initializer name (Node looks for both) say `abi`.
 */
function withAbi(binding: string, abi: number): Buffer {
  const bytes = readFileSync(binding);
  const ours = Buffer.from(`node_register_module_v${process.versions.modules}\0`);
  const theirs = Buffer.from(`node_register_module_v${abi}\0`);
  if (ours.length !== theirs.length) throw new Error('ABI numbers of different lengths');
  let renamed = 0;
  for (let i = bytes.indexOf(ours); i >= 0; i = bytes.indexOf(ours, i + 1)) {
    theirs.copy(bytes, i);
    renamed++;
  }
  if (renamed === 0) throw new Error(`no node_register_module_v${process.versions.modules} in ${binding}`);
  // `_module` is the struct NODE_MODULE registers at dlopen; its first field is nm_version.
  const symbol = execFileSync('nm', [binding], { encoding: 'utf8' })
    .split('\n')
    .find((l) => / d _ZL7_module$/.test(l));
  if (!symbol) throw new Error(`no _module symbol in ${binding}`);
  const address = Number.parseInt(symbol.split(' ')[0]!, 16);
  const data = execFileSync('readelf', ['-S', '--wide', binding], { encoding: 'utf8' })
    .split('\n')
    .find((l) => / \.data\s/.test(l));
  const [, addr, off] = data!.match(/\.data\s+PROGBITS\s+([0-9a-f]+)\s+([0-9a-f]+)/)!;
  const at = address - Number.parseInt(addr!, 16) + Number.parseInt(off!, 16);
  const version = bytes.readInt32LE(at);
  if (version !== Number(process.versions.modules))
    throw new Error(`nm_version at ${at} is ${version}, not ${process.versions.modules}`);
  bytes.writeInt32LE(abi, at);
  return bytes;
}

export interface BrokenInstall {
  /** The copied dist/cli.js. */
  cli: string;
  cleanup(): void;
}

export function brokenSqliteInstall(kind: BrokenDriver): BrokenInstall {
  const dir = tempDir('corral-nosqlite-');
  cpSync(DIST, join(dir.path, 'dist'), { recursive: true });
  cpSync(join(ROOT, 'package.json'), join(dir.path, 'package.json'));
  // The spawner's addon (src/process/spawner.ts finds it under the package root).
  symlinkSync(join(ROOT, 'build'), join(dir.path, 'build'));
  const modules = join(dir.path, 'node_modules');
  mkdirSync(modules);
  for (const name of readdirSync(join(ROOT, 'node_modules'))) {
    if (name !== 'better-sqlite3') symlinkSync(join(ROOT, 'node_modules', name), join(modules, name));
  }
  if (kind === 'other-abi') {
    const real = join(ROOT, 'node_modules', 'better-sqlite3');
    const copy = join(modules, 'better-sqlite3');
    cpSync(join(real, 'package.json'), join(copy, 'package.json'));
    cpSync(join(real, 'lib'), join(copy, 'lib'), { recursive: true });
    mkdirSync(join(copy, 'build', 'Release'), { recursive: true });
    writeFileSync(join(copy, BINDING), withAbi(join(real, BINDING), OTHER_ABI));
  }
  return { cli: join(dir.path, 'dist', 'cli.js'), cleanup: dir.cleanup };
}

export interface RunningCli {
  child: ChildProcess;
  stdout: string[];
  stderr(): string;
  exit: Promise<number | null>;
  stop(): Promise<void>;
}

/** Runs `node <cli> <args>` with `env`, collecting its output lines. */
export function runCli(cli: string, args: string[], env: NodeJS.ProcessEnv): RunningCli {
  const child = spawn(process.execPath, [cli, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
  const stdout: string[] = [];
  let err = '';
  child.stdout!.on('data', (d: Buffer) => stdout.push(...d.toString().split('\n').filter(Boolean)));
  child.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
  });
  const exit = new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
  return {
    child,
    stdout,
    stderr: () => err,
    exit,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exit;
    },
  };
}
