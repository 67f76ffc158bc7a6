/**
 * What every bwrap sandbox masks of the server's own (an empty tmpfs each): the user's mount-target lock directory,
 * found on the first bwrap launch. And the sweep of the private directories older servers made (`corral-sandbox-*`,
 * for the managed network's forwarder and its bridge sockets, both gone): the ones that servers killed before they
 * could remove them, or of an older version, are removed once per process.
 */
import { lstatSync } from 'node:fs';
import os from 'node:os';
import { sweepStaleDirs } from '../../process/serverTag.js';
import { mountTargetLockDir } from './mountTargets.js';

let lockDir: string | undefined;

/** Where older servers put their private directory: $XDG_RUNTIME_DIR, else /dev/shm, else the temp dir. */
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

/** Finds the lock directory (the first bwrap launch does): from then on it is masked. */
export function ensureMaskedDirs(): void {
  lockDir = mountTargetLockDir();
}

/** What every bwrap sandbox masks: the lock directory, once found. */
export function maskedDirs(): string[] {
  return lockDir ? [lockDir] : [];
}
