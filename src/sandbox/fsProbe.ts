/**
 * The filesystem as sandbox resolution sees it (resolve.ts, fsAccess.ts): an injectable probe of what a path is, and
 * path canonicalisation through it (following links the way the kernel does, reporting the links it went through).
 */
import { readdirSync, readFileSync, readlinkSync, realpathSync, type Stats } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { freshLstat, quietFs } from './fsQuiet.js';

/** The lstat of each path asked within the current pass (inOnePass), or null outside one. */
let pass: Map<string, ({ st: Stats | undefined } | { err: unknown }) & { unwatched?: true }> | null = null;
/** The real wall clock when the current pass began: every lstat of the pass was made after it. */
let passStart = 0;

/**
 * Runs `fn` with every lstat made through lstatInPass answered once per path: one start's planning and its checks
 * of what it was made from then see the filesystem at one instant, and ask about each path once (the policy
 * resolution's questions, the plan's types and the rules' inodes overlap). Nothing the pass covers may create,
 * remove or rename a file. Nested calls share the outer pass.
 */
export function inOnePass<T>(fn: () => T): T {
  if (pass) return fn();
  pass = new Map();
  passStart = Date.now();
  quietFs.beginPass(); // what changed since the last pass (fsQuiet.ts): answers kept across passes drop with it
  try {
    return fn();
  } finally {
    pass = null;
    quietFs.endPass();
  }
}

/**
 * lstat(p) (undefined when it does not exist), once per path within a pass (inOnePass); errors as lstatSync's. A path
 * asked again in the pass is a look again for the planning watch too: one the watch did not vouch for the first time
 * is counted as unwatched again, so that a check (fsQuiet.ts scope) that only meets it in the pass's answers is not
 * vouched for either.
 */
export function lstatInPass(p: string): Stats | undefined {
  if (!pass) return freshLstat(p);
  let got = pass.get(p);
  if (!got) {
    const before = quietFs.unwatchedLooks;
    try {
      got = { st: quietFs.lstat(p) }; // kept from an earlier pass while nothing it depends on changed
    } catch (err) {
      got = { err };
    }
    if (quietFs.unwatchedLooks !== before) got.unwatched = true;
    pass.set(p, got);
  } else if (got.unwatched) quietFs.lookUnwatched();
  if ('err' in got) throw got.err;
  return got.st;
}

/**
 * Within a pass: the real wall clock when it began (every lstatInPass answer was made after it: a bound for
 * comparisons with the filesystem's times, see dirListing.ts); outside one: now.
 */
export function lstatTime(): number {
  return pass ? passStart : Date.now();
}

/**
 * realpath(p), from the pass's lstats when it is in one: a normalised absolute path whose every component exists and
 * is no symlink, every one but the last a directory, is its own realpath; the components' lstats are mostly asked in
 * the pass anyway (the policy resolution traces the same paths), so this costs no system call where realpath(3) makes
 * one readlink per component. Any other path (a link on the way, a missing component, `.`/`..`): realpath(3).
 * Throws as realpathSync.native does.
 */
export function realpathInPass(p: string): string {
  if (pass && p.startsWith('/') && (p === '/' || (normalize(p) === p && !p.endsWith('/')))) {
    let plain = true;
    for (let at = p === '/' ? -1 : p.indexOf('/', 1); plain; at = p.indexOf('/', at + 1)) {
      const prefix = at < 0 ? p : p.slice(0, at);
      let st: Stats | undefined;
      try {
        st = lstatInPass(prefix);
      } catch {
        st = undefined;
      }
      plain = st !== undefined && !st.isSymbolicLink() && (at < 0 || st.isDirectory());
      if (at < 0) break;
    }
    if (plain) return p;
  }
  if (pass) quietFs.lookUnwatched(); // through symlinks or missing components: no watch vouches for the walk
  return realpathSync.native(p); // the kernel's own walk (the JS one lstats every component)
}

/** The filesystem facts resolution needs; injectable so resolution stays a pure function in tests. */
export interface FsProbe {
  /** The type of the path itself (no link following), or null when it does not exist. */
  kind(p: string): 'dir' | 'file' | 'symlink' | 'other' | null;
  /** realpath, or null when it cannot be resolved. */
  realpath(p: string): string | null;
  /** A small text file's content, or null. */
  readText(p: string): string | null;
  /** A symlink's target as stored, or null. Without it, symlinks are resolved (realpath) but not reported. */
  readlink?(p: string): string | null;
}

export const realFsProbe: FsProbe = {
  kind(p) {
    try {
      // No exception for the common missing path (.codex, .agents, …): building one costs more than the lstat.
      const at = lstatTime();
      const st = lstatInPass(p);
      if (!st) return null;
      if (st.isSymbolicLink()) return 'symlink';
      // An empty directory of mode 0500 is the placeholder of a missing protected path (linux/mountTargets.ts),
      // maybe another server's: missing, so that this launch takes its share of it rather than bind it as it is (its
      // owner removes it when its last sandbox ends, and bwrap then finds a bind's source gone).
      if (st.isDirectory()) return (st.mode & 0o7777) === 0o500 && isPlaceholder(p, st, at) ? null : 'dir';
      if (st.isFile()) return 'file';
      return 'other';
    } catch {
      return null;
    }
  },
  realpath(p) {
    try {
      return realpathInPass(p);
    } catch {
      return null;
    }
  },
  readText(p) {
    // A file's content: no watch vouches for it (writes are no event here, and a shared mapping writes without one).
    quietFs.lookUnwatched();
    try {
      return readFileSync(p, 'utf8').slice(0, 4096);
    } catch {
      return null;
    }
  },
  readlink(p) {
    quietFs.watchEntry(p); // a symlink's target never changes; replacing the link is an event of its directory
    try {
      return readlinkSync(p);
    } catch {
      return null;
    }
  },
};

/**
 * Placeholders seen empty (a path → the directory's `dev:ino:ctime:mtime` then): every start of a policy asks again
 * about each of its protected names, and a bwrap sandbox leaves a placeholder for each missing one (issue 32: a
 * readdir is four system calls). Adding or removing an entry changes the directory's ctime and mtime, so while they
 * hold it is still empty; as in dirListing.ts, only times older than RACY_MS at the lstat count (a coarse clock may
 * leave them equal across a change in the same tick), and a younger directory is read again.
 */
const emptyDirs = new Map<string, string>();
const RACY_MS = 50;
const MAX_EMPTY_DIRS = 64;

/**
 * Whether the directory `p` of mode 0500 (lstat `given`, taken at or after `at`) is a placeholder: it has no entries,
 * or it is gone since the lstat (its last user removed it: missing either way), or this user cannot list it (another
 * user's placeholder, e.g. a root server's seen by a server of uid 65534: mode 0500 lets only its owner read it, and
 * whatever it holds, no process of this user, the sandboxed command included, can see or reach it).
 */
function isPlaceholder(p: string, given: Stats, at: number): boolean {
  // Its entries and times are what counts: watched from here on (fsQuiet.ts), and its times asked now when the given
  // answer was kept from before its watch began.
  let st = given;
  if (!quietFs.watchEntries(p)) {
    try {
      const now = freshLstat(p);
      if (!now) return true; // gone since the lstat: missing
      st = now;
    } catch {
      return false;
    }
  }
  const token = `${st.dev}:${st.ino}:${st.ctimeMs}:${st.mtimeMs}`;
  if (emptyDirs.get(p) === token) return true;
  let empty: boolean;
  try {
    empty = readdirSync(p).length === 0;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    emptyDirs.delete(p);
    return code === 'ENOENT' || code === 'EACCES';
  }
  emptyDirs.delete(p);
  if (empty && Math.max(st.ctimeMs, st.mtimeMs) < at - RACY_MS) {
    emptyDirs.set(p, token);
    if (emptyDirs.size > MAX_EMPTY_DIRS) emptyDirs.delete(emptyDirs.keys().next().value!);
  }
  return empty;
}

/** `probe` with every answer kept (for the span of one resolution). */
export function memoProbe(probe: FsProbe): FsProbe {
  const memo = <T>(fn: (p: string) => T) => {
    const seen = new Map<string, T>();
    return (p: string) => {
      if (seen.has(p)) return seen.get(p)!;
      const v = fn(p);
      seen.set(p, v);
      return v;
    };
  };
  const m: FsProbe = {
    kind: memo((p) => probe.kind(p)),
    realpath: memo((p) => probe.realpath(p)),
    readText: memo((p) => probe.readText(p)),
  };
  if (probe.readlink) m.readlink = memo((p) => probe.readlink!(p));
  return m;
}

/**
 * Resolves `p` component by component like the kernel does, reporting every symlink it goes through (their own
 * paths, not their targets) and where it ends: the canonical form of `canonicalize`. Without `probe.readlink` it is
 * canonicalize and reports nothing.
 */
export function trace(p: string, probe: FsProbe): { path: string; links: string[] } {
  if (!probe.readlink) return { path: canonicalize(p, probe), links: [] };
  const links: string[] = [];
  let parts = normalize(p).split('/').filter(Boolean);
  let cur = '/';
  let hops = 0;
  while (parts.length > 0) {
    const name = parts.shift()!;
    if (name === '.') continue;
    if (name === '..') {
      cur = dirname(cur);
      continue;
    }
    const next = join(cur, name);
    const k = probe.kind(next);
    if (k === 'symlink') {
      const target = probe.readlink(next);
      if (target === null || ++hops > 40) return { path: join(next, ...parts), links };
      if (!links.includes(next)) links.push(next);
      parts = [...target.split('/').filter(Boolean), ...parts];
      if (target.startsWith('/')) cur = '/';
      continue;
    }
    if (k === null) return { path: join(next, ...parts), links }; // the rest does not exist: taken as written
    cur = next;
  }
  return { path: cur, links };
}

/** Canonical form: realpath of the longest existing ancestor, plus the rest. */
export function canonicalize(p: string, probe: FsProbe): string {
  const abs = normalize(p);
  let head = abs;
  const tail: string[] = [];
  for (;;) {
    const real = probe.realpath(head);
    if (real !== null) return tail.length ? join(real, ...tail.reverse()) : real;
    const parent = dirname(head);
    if (parent === head) return abs;
    tail.push(head.slice(parent === '/' ? 1 : parent.length + 1));
    head = parent;
  }
}
