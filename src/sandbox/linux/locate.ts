import { execFile } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';
import { SandboxSetupError } from '../errors.js';
import type { BwrapFeatures } from './bwrapArgs.js';

export const SYSTEM_BWRAP = '/usr/bin/bwrap';

/** What we know about one bwrap binary, probed once per server process. */
export interface BwrapHost {
  path: string;
  features: BwrapFeatures;
  /** Whether `--proc /proc` works here (the cached preflight, sandbox.md §8.3). */
  proc: boolean;
}

function isExecutable(p: string): boolean {
  try {
    accessSync(p, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** `/usr/bin/bwrap`, else the first `bwrap` on the server's PATH that is not under `cwd`. */
export function findBwrap(cwd?: string, pathEnv = process.env.PATH ?? ''): string | undefined {
  if (isExecutable(SYSTEM_BWRAP)) return SYSTEM_BWRAP;
  for (const dir of pathEnv.split(delimiter)) {
    if (!dir.startsWith('/')) continue;
    if (cwd && (dir === cwd || dir.startsWith(`${cwd}/`))) continue;
    const p = join(dir, 'bwrap');
    if (isExecutable(p)) return p;
  }
  return undefined;
}

function run(file: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(file, args, { timeout: 10_000, env: { PATH: '/usr/bin:/bin' } }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

const cache = new Map<string, Promise<BwrapHost>>();
const known = new Map<string, BwrapHost>();

/** The cached probe result, if a probe already succeeded (used by the side-effect-free preview). */
export function knownBwrap(path: string): BwrapHost | undefined {
  return known.get(path);
}

const PROC_FAILURE = /Can't mount proc on \/newroot\/proc/;

/**
 * Probes a bwrap binary once: `--help` for features, then a preflight with the namespaces we use. A missing binary
 * or a failing preflight is a SandboxSetupError (never an unsandboxed run); failures are not cached.
 */
export function probeBwrap(path: string): Promise<BwrapHost> {
  let p = cache.get(path);
  if (!p) {
    p = doProbe(path);
    cache.set(path, p);
    p.then(
      (h) => known.set(path, h),
      () => cache.delete(path),
    );
  }
  return p;
}

async function doProbe(path: string): Promise<BwrapHost> {
  if (!isExecutable(path)) {
    throw new SandboxSetupError(
      `bubblewrap (bwrap) not found at ${path}: the Linux sandbox is unavailable and the command was not run unsandboxed`,
    );
  }
  const help = await run(path, ['--help']);
  const text = help.stdout + help.stderr;
  const features: BwrapFeatures = { argv0: text.includes('--argv0'), perms: text.includes('--perms') };
  const base = ['--unshare-user', '--unshare-pid', '--unshare-ipc', '--unshare-net', '--ro-bind', '/', '/'];
  const tail = ['--cap-drop', 'ALL', '--', '/bin/true'];
  let r = await run(path, [...base, '--dev', '/dev', '--proc', '/proc', ...tail]);
  if (r.code === 0) return { path, features, proc: true };
  if (PROC_FAILURE.test(r.stderr)) {
    r = await run(path, [...base, '--dev', '/dev', ...tail]);
    if (r.code === 0) return { path, features, proc: false };
  }
  throw new SandboxSetupError(
    `the Linux sandbox cannot start here (bwrap preflight failed: ${r.stderr.trim() || `exit ${r.code}`})`,
  );
}
