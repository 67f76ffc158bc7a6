/**
 * A watch of directories for changes of their entries and attributes (src/platform/native/fswatch.c: inotify), read
 * without blocking: what lets sandbox planning keep what it learned of the filesystem between starts
 * (src/sandbox/fsQuiet.ts). Node's fs.watch delivers events on the event loop, later than the start that must see
 * them; this is read at the start itself. Without the addon, or with CORRAL_FS_WATCH=0 in the server's environment (an
 * operator who does not trust inotify on a filesystem), there is no watch (`fsWatchAbsence` says why) and planning
 * asks the filesystem again at every start.
 */
import { openSync } from 'node:fs';
import { addon, addonAbsence, nativeSwitches } from './addon.js';
import { mountsChanged } from './sandbox.js';

export interface FsWatchCalls {
  /** A new watch instance (an fd, close-on-exec, non-blocking). */
  open(): number;
  /** A watch on the directory `dir` names, never through a symlink at its end: its number, or -errno (fswatch.c). */
  add(fd: number, dir: string): number;
  /** Pending events as [wd, mask, name | null, ...], null when none, -1 when more than `max` or lost (fswatch.c). */
  drain(fd: number, max: number): null | -1 | (number | string | null)[];
  /** An fd on this process's mount table (for `pending`). */
  openMounts(): number;
  /**
   * Without waiting: bit 1 when the watch `fd` has events to drain, bit 2 when the mount table behind `mountsFd`
   * changed (consumed as mountsChanged consumes it); both on an error (fswatch.c fsWatchPending: one system call).
   */
  pending(fd: number, mountsFd: number): number;
}

/** Why there is no watch here (null: there is). */
export const fsWatchAbsence: string | null =
  process.platform !== 'linux'
    ? 'inotify is Linux only'
    : !nativeSwitches.fsWatch
      ? 'turned off (CORRAL_FS_WATCH=0)'
      : !addon
        ? `the native addon is not loaded (${addonAbsence ?? 'unknown'})`
        : !mountsChanged
          ? 'the native addon is an older build'
          : null;

export const fsWatchCalls: FsWatchCalls | null =
  addon && fsWatchAbsence === null && mountsChanged
    ? {
        open: addon.fsWatchOpen.bind(addon),
        add: addon.fsWatchAdd.bind(addon),
        drain: addon.fsWatchDrain.bind(addon),
        openMounts: () => openSync('/proc/self/mountinfo', 'r'),
        pending: addon.fsWatchPending.bind(addon),
      }
    : null;

/**
 * Makes the next lstat of `path` tell what is there now, on a filesystem that answers from a cache of what its server
 * said (FUSE for its attribute timeout, a second by default; NFS): statx with AT_STATX_FORCE_SYNC (fswatch.c
 * fsRevalidate). Planning calls it before every look the watch does not vouch for, where a stale answer ("a
 * directory", of a name a local process turned into a symlink behind the mount a moment ago) would plan the wrong
 * rules. Its own answer is not used (EIO: FUSE dropped an inode whose type changed; the lookup after it is fresh).
 * Without the addon there is no way to ask this from Node: the lstat that follows answers from the cache then
 * (docs/security.md).
 */
export const revalidatePath: (path: string) => void =
  addon && typeof addon.fsRevalidate === 'function'
    ? (path) => {
        addon!.fsRevalidate(path);
      }
    : () => {};
