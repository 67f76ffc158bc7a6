import { createHash } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { sandboxNative } from '../../process/spawner.js';
import { SandboxSetupError } from '../errors.js';

/**
 * Synthetic mount targets (sandbox.md §8.4.1): a missing protected path is held, while a sandbox runs, by an empty
 * placeholder directory on the host (mode 0500: how a placeholder is recognised, see resolve.ts) with a read-only
 * tmpfs mounted on it in the sandbox. Sandboxes share placeholders (every sandbox with /tmp writable uses /tmp/.git),
 * also across Corral servers of the user; the last user removes it. Removing one that another sandbox has mounted
 * would detach that mount there and let that sandbox create the name, so every server holds a shared flock on the
 * name's lock file for as long as it may use the placeholder (linux/native/sandbox.c). The lock files live in one
 * directory per user (in /dev/shm, which sandboxes do not see: bwrap gives them their own /dev; masked as well).
 */

let dir: string | undefined;

/** The user's lock directory (0700, owned by us), created on first use; refuses one someone else made. */
export function mountTargetLockDir(): string {
  if (dir) return dir;
  const base = existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
  const d = join(base, `corral-mount-targets-${process.geteuid?.() ?? 0}`);
  try {
    mkdirSync(d, { mode: 0o700 });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
  }
  const st = lstatSync(d);
  if (!st.isDirectory() || st.uid !== (process.geteuid?.() ?? 0) || (st.mode & 0o777) !== 0o700) {
    throw new SandboxSetupError(
      `${d} is not a directory of this user with mode 0700: refusing to share mount points through it`,
    );
  }
  dir = d;
  return d;
}

function lockFile(target: string): string {
  return join(mountTargetLockDir(), `${createHash('sha256').update(target).digest('hex').slice(0, 32)}.lock`);
}

/** Takes a share of each target (creating its placeholder); the returned function releases them (idempotent). */
export function acquireSyntheticTargets(targets: string[]): () => void {
  const native = sandboxNative;
  const held: { fd: number; lock: string; target: string }[] = [];
  const release = () => {
    for (const h of held.splice(0)) native!.releaseMountTarget(h.fd, h.lock, h.target);
  };
  if (targets.length === 0) return release;
  if (!native) throw new SandboxSetupError('missing protected paths need the native addon');
  try {
    for (const target of targets) {
      const lock = lockFile(target);
      held.push({ fd: native.holdMountTarget(lock, target), lock, target });
    }
  } catch (e) {
    release();
    throw e instanceof SandboxSetupError ? e : new SandboxSetupError((e as Error).message);
  }
  return release;
}
