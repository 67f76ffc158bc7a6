/**
 * The server's private directory (masked in every sandbox) and the user's mount-target lock directory: created on the
 * first bwrap launch, removed when the server exits. The private directory holds nothing since the managed network's
 * forwarder and its bridge sockets were removed; it stays, masked and swept, for what a launch must keep from every
 * sandbox (removing it, and its mask, is a follow-up).
 */
import { lstatSync, mkdtempSync, realpathSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { formatTag, ownTag, sweepStaleDirs } from '../../process/serverTag.js';
import { mountTargetLockDir } from './mountTargets.js';

let sharedDir: string | undefined;
let lockDir: string | undefined;

/**
 * Where the server's private directory goes: $XDG_RUNTIME_DIR, else /dev/shm, else the temp dir. Not /tmp when it can
 * be helped: a Landlock sandbox shares the host's filesystem, and Landlock cannot hide a directory inside a writable
 * root such as /tmp (bwrap masks it; /dev/shm is never writable to a Landlock sandbox unless a policy names it).
 */
function privateBase(): string {
  const xdg = process.env.XDG_RUNTIME_DIR;
  if (xdg?.startsWith('/')) return xdg;
  return lstatSync('/dev/shm', { throwIfNoEntry: false })?.isDirectory() ? '/dev/shm' : os.tmpdir();
}

const PRIVATE_PREFIX = 'corral-sandbox-';

/**
 * Removes the private directories that dead servers left (SIGKILL, a crash): once per process, at the first call.
 * The directory's name carries its server's tag (src/process/serverTag.ts), so a live server's is never touched.
 */
export function sweepStalePrivateDirs(): string[] {
  if (swept) return [];
  swept = true;
  return sweepStaleDirs(privateBase(), PRIVATE_PREFIX);
}
let swept = false;

/** The 0700 private directory of this server process (canonical), removed when the process exits. */
export function sharedPrivateDir(): string {
  if (!sharedDir) {
    sweepStalePrivateDirs();
    const dir = realpathSync(mkdtempSync(join(privateBase(), `${PRIVATE_PREFIX}${formatTag(ownTag())}-`)));
    sharedDir = dir;
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  }
  return sharedDir;
}

/** Creates the private directory and finds the lock directory (the first bwrap launch does). */
export function ensurePrivateDirs(): void {
  sharedPrivateDir();
  lockDir = mountTargetLockDir();
}

/** What every bwrap sandbox masks: those two directories, once they exist. */
export function privateMasks(): string[] {
  return [sharedDir, lockDir].filter((d): d is string => d !== undefined);
}
