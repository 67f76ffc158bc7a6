import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * The built application: the private build of this test run (scripts/test.mjs builds it and names it in CORRAL_DIST,
 * so that a concurrent `npm run build` emptying dist/ cannot pull files from under a running test), else dist/.
 */
export const DIST = process.env.CORRAL_DIST ?? join(ROOT, 'dist');

/**
 * Whether this is the whole suite (`npm run test:all`, CI) rather than the fast tier run before each commit. A file
 * whose cases form a matrix runs all of it here, and in the fast tier only enough of it that every value of every
 * axis meets every attack (e.g. both request shapes and both tty modes, paired rather than crossed).
 */
export const WHOLE_SUITE = process.env.CORRAL_TEST_TIER === 'all';

/**
 * The `corral` command as users run it, from the bundle (what bin/corral.js loads). Starting it takes ~0.1 s to a
 * listening server against ~0.5–0.9 s for src/cli.ts through tsx.
 */
export const CORRAL_BIN = join(DIST, 'cli.js');

/**
 * Node's arguments to run `script`, a TypeScript file under test/fixtures or test/helpers, as a process: its bundle
 * from this test run (scripts/test.mjs makes one for each), or the source through tsx outside such a run. A
 * bundle loads in ~0.3 CPU-s where tsx's loader takes 1–2 CPU-s for the server's modules.
 */
export function tsEntry(script: string): string[] {
  const flat = relative(ROOT, resolve(ROOT, script)).replace(/\.ts$/, '').replaceAll('/', '.');
  const bundle = process.env.CORRAL_DIST ? join(process.env.CORRAL_DIST, `${flat}.mjs`) : null;
  return bundle && existsSync(bundle)
    ? ['--enable-source-maps', bundle]
    : ['--import', 'tsx', resolve(ROOT, script)];
}

export interface Cli {
  proc: ChildProcessWithoutNullStreams;
  /** The first stdout line (the URL), or null for stdio. */
  url: string | null;
  lines: AsyncIterableIterator<string>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr(): string;
  stop(): Promise<void>;
}

/**
 * Runs `corral <args>` (the built bundle, CORRAL_BIN), or `script: true` a script of the repo (`args[0]`); `wrap` runs
 * it through another command. Resolves once the first stdout line is there (unless `stdio`).
 */
export async function startCli(
  args: string[],
  opts: { env?: NodeJS.ProcessEnv; stdio?: boolean; script?: boolean; wrap?: string[] } = {},
): Promise<Cli> {
  // script: args[0] is a script of the repo to run instead of the CLI (scripts/start.mjs).
  const entry = opts.script ? [] : [CORRAL_BIN];
  // wrap: a command that runs it (prlimit, a shell that enters a cgroup first), which gets node and its arguments.
  const [cmd, ...rest] = [...(opts.wrap ?? []), process.execPath, ...entry, ...args] as [string, ...string[]];
  const proc = spawn(cmd, rest, {
    cwd: ROOT,
    env: opts.env ?? process.env,
    stdio: 'pipe',
  });
  let err = '';
  proc.stderr.on('data', (d) => {
    err += d;
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    proc.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const lines = createInterface({ input: proc.stdout })[Symbol.asyncIterator]();
  let url: string | null = null;
  if (!opts.stdio) {
    const first = await lines.next();
    if (first.done) throw new Error(`the CLI printed nothing: ${err}`);
    url = first.value;
  }
  return {
    proc,
    url,
    lines,
    exited,
    stderr: () => err,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      await exited;
    },
  };
}

/**
 * `corral exec-server` on an ephemeral loopback port with `--ws-auth signed-bearer-token`: the shared secret in a 0600
 * file of a fresh directory under ~/.cache, `args` after. `stop` stops it and removes the directory.
 */
export async function startJwtServer(secret: string, args: string[] = []): Promise<Cli> {
  mkdirSync(join(homedir(), '.cache'), { recursive: true });
  const dir = mkdtempSync(join(homedir(), '.cache', 'corral-jwt-'));
  const file = join(dir, 'secret');
  writeFileSync(file, `${secret}\n`, { mode: 0o600 });
  const cli = await startCli([
    'exec-server',
    '--listen',
    'ws://127.0.0.1:0',
    '--ws-auth',
    'signed-bearer-token',
    '--ws-shared-secret-file',
    file,
    ...args,
  ]).catch((e: unknown) => {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  });
  return {
    ...cli,
    async stop() {
      await cli.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
