import { createHash } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, rmdirSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { type Clock, realClock, type Timer } from '../../clock.js';
import { sandboxNative } from '../../platform/sandbox.js';
import { SandboxSetupError } from '../errors.js';

/**
 * Synthetic mount targets (sandbox.md §8.4.1): a missing protected path is held, while a sandbox runs, by an empty
 * placeholder directory on the host (mode 0500: how a placeholder is recognised, see resolve.ts) with a tmpfs of
 * mode 0555 mounted on it in the sandbox (bwrapArgs.ts). Sandboxes share placeholders (every sandbox with /tmp writable uses /tmp/.git),
 * also across Corral servers of the user; the last user removes it. Removing one that another sandbox has mounted
 * would detach that mount there and let that sandbox create the name, so every server holds a shared flock on the
 * name's lock file for as long as it may use the placeholder (platform/native/sandbox.c). The lock files live in one
 * directory per user (in /dev/shm, which sandboxes do not see: bwrap gives them their own /dev; masked as well).
 *
 * Without the addon (Node has no flock) a server counts only its own sandboxes' shares (the same map and linger) and
 * removes a placeholder when its last one ends: servers of the user do not see each other's shares then, so one could
 * remove a placeholder another one's sandbox still has mounted (a cooperation between Corral servers; any process of
 * the user can remove it anyway).
 *
 * A server keeps its share for LINGER_MS after its last sandbox using a placeholder has ended: an agent's commands
 * come one after the other, and a placeholder costs a host mkdir and rmdir. Nothing is protected by it meanwhile
 * (no sandbox runs); it goes when the server exits too.
 */

export const LINGER_MS = 250;

let dir: string | undefined;

/** Where the lock directory of user `uid` is. */
export function lockDirOf(uid: number): string {
  return join(existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir(), `corral-mount-targets-${uid}`);
}

/** The user's lock directory (0700, owned by us), created on first use; refuses one someone else made. */
export function mountTargetLockDir(): string {
  if (dir) return dir;
  const d = lockDirOf(process.geteuid?.() ?? 0);
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

/** The lock file of a mount target (of user `uid`: tests look it up in /proc/locks). */
export function lockFile(target: string, uid?: number): string {
  const d = uid === undefined ? mountTargetLockDir() : lockDirOf(uid);
  return join(d, `${createHash('sha256').update(target).digest('hex').slice(0, 32)}.lock`);
}

interface Share {
  fd: number;
  lock: string;
  users: number;
  /** The pending drop after the last user ended, on the clock of the release that set it. */
  linger?: { timer: Timer; clock: Clock };
}

/** This server's shares, by target. */
const shares = new Map<string, Share>();
let exitHook = false;

const PLACEHOLDER_MODE = 0o500;

/** Holding and releasing a share: the addon's (flock on the lock file), else this server's alone. */
const holder: {
  hold(lock: string, target: string): number;
  release(fd: number, lock: string, target: string): void;
} = sandboxNative
  ? {
      hold: sandboxNative.holdMountTarget.bind(sandboxNative),
      release: sandboxNative.releaseMountTarget.bind(sandboxNative),
    }
  : {
      hold(_lock, target) {
        try {
          mkdirSync(target, { mode: PLACEHOLDER_MODE });
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'EEXIST')
            throw new SandboxSetupError(
              `cannot create the mount point of a missing protected path: ${(e as Error).message}`,
            );
        }
        return -1;
      },
      release(_fd, _lock, target) {
        try {
          const st = lstatSync(target);
          if (st.isDirectory() && (st.mode & 0o7777) === PLACEHOLDER_MODE && st.uid === process.geteuid?.())
            rmdirSync(target);
        } catch {
          // ENOTEMPTY: someone put something there on the host; it is theirs then
        }
      },
    };

function drop(target: string): void {
  const sh = shares.get(target);
  if (!sh) return;
  shares.delete(target);
  sh.linger?.clock.clearTimeout(sh.linger.timer);
  holder.release(sh.fd, sh.lock, target);
}

/**
 * Takes a share of each target (creating its placeholder); the returned function releases them (idempotent). The
 * linger after the last release runs on `clock`.
 */
export function acquireSyntheticTargets(targets: string[], clock: Clock = realClock): () => void {
  const taken: string[] = [];
  const release = () => {
    for (const t of taken.splice(0)) {
      const sh = shares.get(t);
      if (!sh || --sh.users > 0) continue;
      sh.linger = { timer: clock.setTimeout(() => drop(t), LINGER_MS).unref(), clock };
    }
  };
  if (targets.length === 0) return release;
  if (!exitHook) {
    exitHook = true;
    process.once('exit', () => {
      for (const t of [...shares.keys()]) drop(t);
    });
  }
  try {
    for (const target of targets) {
      const sh = shares.get(target);
      if (sh) {
        sh.linger?.clock.clearTimeout(sh.linger.timer);
        sh.linger = undefined;
        sh.users++;
      } else {
        const lock = sandboxNative ? lockFile(target) : '';
        shares.set(target, { fd: holder.hold(lock, target), lock, users: 1 });
      }
      taken.push(target);
    }
  } catch (e) {
    release();
    throw e instanceof SandboxSetupError ? e : new SandboxSetupError((e as Error).message);
  }
  return release;
}
