/**
 * The fd-relative file calls of confined fs/* (src/platform/native/fsat.c): openat2 with RESOLVE_BENEATH and no
 * symlinks, so a path cannot leave the directory it is resolved in, whatever a sandboxed process does to the tree
 * meanwhile. Node has no openat2: without the addon sandboxed fs/* is refused, saying why (by design; unsandboxed
 * fs/* uses Node's fs).
 */
import { type Addon, addon, addonAbsence } from './addon.js';
import { errnoError, errnoName } from './errno.js';

/** statx of an fd (fsat.c fsStat). `ident` ("dev:ino") names the inode, whatever path reaches it. */
export interface FdStat {
  ident: string;
  /** st_mode, type bits included. */
  mode: number;
  size: number;
  mtimeMs: number;
  /** 0 when the filesystem does not report it. */
  birthtimeMs: number;
  nlink: number;
  uid: number;
}

/**
 * The fd-relative calls of the addon (src/platform/native/fsat.c) that confined fs/* is built on. Every `name` is one
 * path component (no "/", not "." or ".."); calls that return a number give an fd or 0 on success and -errno on
 * failure; the others throw an Error with `code`.
 */
export interface NativeFs {
  /** O_PATH fd of "/". */
  openRoot(): number;
  /**
   * openat2(dirfd, name, flags | O_NOFOLLOW | O_CLOEXEC) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
   * RESOLVE_NO_MAGICLINKS: with O_PATH a symlink is opened itself, otherwise it is ELOOP.
   */
  openAt(dirfd: number, name: string, flags: number, mode?: number): number;
  stat(fd: number): FdStat;
  /** A close-on-exec duplicate of fd (or -errno). */
  dup(fd: number): number;
  /** The target of the symlink an O_PATH fd refers to. */
  readlink(fd: number): string;
  mkdirAt(dirfd: number, name: string, mode: number): number;
  unlinkAt(dirfd: number, name: string, isDir: boolean): number;
  symlinkAt(target: string, dirfd: number, name: string): number;
  /** The entries of the directory fd refers to (d_type values), at most max + 1 of them. */
  readDir(fd: number, max: number): { name: string; type: number }[];
}

/** Whether confined fs/* can run here; when not, why (sandboxed fs/* requests are then refused with that reason). */
export type NativeFsAvailability = { available: true; fs: NativeFs } | { available: false; reason: string };

type Calls = Pick<
  Addon,
  | 'fsOpenRoot'
  | 'fsOpenAt'
  | 'fsStat'
  | 'fsDup'
  | 'fsReadlink'
  | 'fsMkdirAt'
  | 'fsUnlinkAt'
  | 'fsSymlinkAt'
  | 'fsReadDir'
>;

function wrap(c: Calls): NativeFs {
  return {
    openRoot: () => c.fsOpenRoot(),
    openAt: (dirfd, name, flags, mode = 0) => c.fsOpenAt(dirfd, name, flags, mode),
    stat(fd) {
      const r = c.fsStat(fd);
      if (typeof r === 'number') throw errnoError(r, 'statx');
      return {
        ident: r[0],
        mode: r[1],
        size: r[2],
        mtimeMs: r[3],
        birthtimeMs: r[4],
        nlink: r[5],
        uid: r[6],
      };
    },
    dup: (fd) => c.fsDup(fd),
    readlink(fd) {
      const r = c.fsReadlink(fd);
      if (typeof r === 'number') throw errnoError(r, 'readlinkat');
      return r;
    },
    mkdirAt: (dirfd, name, mode) => c.fsMkdirAt(dirfd, name, mode),
    unlinkAt: (dirfd, name, isDir) => c.fsUnlinkAt(dirfd, name, isDir),
    symlinkAt: (target, dirfd, name) => c.fsSymlinkAt(target, dirfd, name),
    readDir(fd, max) {
      const r = c.fsReadDir(fd, max);
      if (typeof r === 'number') throw errnoError(r, 'getdents64');
      const out: { name: string; type: number }[] = [];
      for (let i = 0; i < r.length; i += 2) out.push({ name: r[i] as string, type: r[i + 1] as number });
      return out;
    },
  };
}

function load(): NativeFsAvailability {
  if (!addon) return { available: false, reason: addonAbsence ?? 'the native addon is not loaded' };
  const probe = addon.fsProbe();
  if (probe !== 0)
    return {
      available: false,
      reason: `openat2 does not work on this kernel (${errnoName(probe)}; needs Linux 5.6+)`,
    };
  return { available: true, fs: wrap(addon) };
}

/** Decided once, at load. */
export const nativeFs: NativeFsAvailability = load();
