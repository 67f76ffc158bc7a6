/**
 * What sandbox planning learned of the filesystem, kept between starts while the kernel says nothing it depends on
 * changed (issue 32: an agent's commands come one after another under one policy; checking a kept policy resolution,
 * plan and the server's own paths asked ~30 `statx`/`readlink` of every start, ~150 µs of a Landlock start's ~600 over
 * an unsandboxed one).
 *
 * The signal is inotify (src/platform/fsWatch.ts), read without blocking at the start of each planning pass
 * (fsProbe.ts inOnePass: `sync`). The kernel queues an event as part of the system call that made the change, so a
 * change completed before the read is in it. An lstat answer of a path `p` depends on the entries of every directory
 * on the way to it, their attributes (search permission) and `p`'s own attributes, and on the mounts. So:
 *
 * - an answer is kept only when every directory from `/` down to `dirname(p)` is watched (each added after its
 *   parent, before the lstat: a component replaced after its parent's watch began is an event of the parent), or the
 *   way stops at a missing or non-directory component below watched ones (creating it is an event of its watched
 *   parent). A symlink on the way (the lstat would follow it, to directories nobody watches), a filesystem whose
 *   changes inotify does not see (NFS, FUSE, 9p, SMB, proc, sysfs: fswatch.c local_fs), a directory that cannot be
 *   watched (permissions, the watch limit): not kept, asked every time;
 * - an event of directory `D` about its entry `n` (created, removed, renamed, attributes) drops the answers about
 *   `D/n` and everything below it, and `D`'s own (its times changed); an event of `D` itself (attributes, removed,
 *   renamed, its watch gone) drops everything at and below `D`; a name inotify cannot give exactly (not UTF-8) counts
 *   as the whole directory;
 * - a change of the mount table (fswatch.c fsWatchPending), a lost event (queue overflow), more events than a drain
 *   takes (MAX_EVENTS), or more answers or watches than the bounds below: everything is forgotten.
 *
 * Kept answers vouch for what lstat says of a path's identity, type, mode and owner. A directory's times only once it
 * is watched itself (`watchEntries` before the lstat: a change of its entries is an event of its own watch, not of
 * its parent's): the listings (dirListing.ts) and the empty-placeholder check (fsProbe.ts) do that. Not a file's size
 * or times: writes are no event here (IN_MODIFY is not asked for, so a busy log beside a workspace does not wake the
 * watch), and nothing that keeps answers reads them.
 *
 * On top of the answers, a `generation`: it moves when a drain's events dropped something kept (an answer, the state
 * of a directory on the way, an entry whose link was read) or changed the entries of a directory whose listing was
 * asked for (`watchEntries`), and whenever everything is forgotten. A check whose looks were all kept answers or
 * watched listings (`scope`) and that passed at generation g still passes while the generation is g: resolveCache.ts,
 * landlockReuse.ts and landlockLaunch.ts then skip the check itself. An event about an entry nobody looked at (a
 * file made in /tmp, on the way to a workspace below it) moves nothing: every look a check made is one of those
 * records until the generation moves, so no event that leaves them all in place can change what the check found. The
 * directory's own answer goes with any event of its entries (its times changed) without moving the generation: an
 * answer vouches for a directory's times only to a reader that asked for its listing, which is such a record.
 *
 * What a watch costs: the kernel makes an event of every change in a watched directory (a few hundred bytes of queue,
 * bounded by fs.inotify.max_queued_events; beyond, one overflow event), and a drain reads them. A process that floods
 * a watched directory with changes only makes the server ask the filesystem again, as it did without the watch.
 */
import { closeSync, lstatSync, type Stats } from 'node:fs';
import { dirname, normalize } from 'node:path';
import { type FsWatchCalls, fsWatchCalls, revalidatePath } from '../platform/fsWatch.js';

const IN_UNMOUNT = 0x2000;
const IN_Q_OVERFLOW = 0x4000;
const IN_IGNORED = 0x8000;
const ENOENT = 2;
const ENOTDIR = 20;

/** Events taken in one drain; more (a flood) and everything is forgotten instead of handled one by one. */
const MAX_EVENTS = 256;
/** Answers kept; more and everything is forgotten. */
const MAX_ANSWERS = 8192;
/** Directories watched; more and the watch instance is closed (the kernel frees every watch) and made anew. */
const MAX_WATCHES = 2048;

/** A directory's state: its watch (> 0), UNDER_MISSING or NOT_WATCHABLE. */
const UNDER_MISSING = 0;
const NOT_WATCHABLE = -1;

function plainAbsolute(p: string): boolean {
  return p === '/' || (p.startsWith('/') && !p.endsWith('/') && normalize(p) === p);
}

function under(path: string, prefix: string): boolean {
  return (
    prefix === '/' || path === prefix || (path.startsWith(prefix) && path.charCodeAt(prefix.length) === 47)
  );
}

export class QuietFs {
  private fd = -1;
  private mountsFd = -1;
  /**
   * Directory path → its watch (> 0: it and every directory above it are watched), UNDER_MISSING (the way to it
   * stops at a missing or non-directory component below watched ones: nothing can be there while they say nothing)
   * or NOT_WATCHABLE.
   */
  private readonly dirs = new Map<string, number>();
  /** Watch → the directory path it was added for. */
  private readonly watched = new Map<number, string>();
  /** Path → its lstat (undefined: missing), taken after its directories were watched. */
  private readonly answers = new Map<string, Stats | undefined>();
  /** Entries whose link was read (watchEntry) without an lstat answer: a change of them must move the generation. */
  private readonly entries = new Set<string>();
  /** Directories whose listing or times were asked for (watchEntries): any change of their entries counts. */
  private readonly listed = new Set<string>();
  private inPass = false;
  /** Looks in this pass that no watch vouches for (see scope). */
  private uncovered = 0;
  /** Moves whenever a drain had events or everything was forgotten (see the module comment). */
  generation = 0;

  constructor(private readonly calls: FsWatchCalls | null) {}

  /** Whether a watch is available at all. */
  get enabled(): boolean {
    return this.calls !== null;
  }

  /** At the start of a planning pass: takes every pending event (and mount change) into account. */
  beginPass(): void {
    this.inPass = true;
    const c = this.calls;
    if (!c) return;
    try {
      if (this.fd < 0) {
        this.fd = c.open();
        this.mountsFd = c.openMounts();
        this.forget();
        return;
      }
      // One system call when nothing changed (the usual start): whether there are events, or the mounts changed.
      const pending = c.pending(this.fd, this.mountsFd);
      if (pending & 2) {
        this.forget();
        c.drain(this.fd, MAX_EVENTS); // whatever it says, it is forgotten
        return;
      }
      if ((pending & 1) === 0) return;
      const events = c.drain(this.fd, MAX_EVENTS);
      if (events === null) return;
      if (events === -1) {
        this.forget();
        return;
      }
      let changed = false;
      for (let i = 0; i + 2 < events.length; i += 3)
        if (this.onEvent(events[i] as number, events[i + 1] as number, events[i + 2] as string | null))
          changed = true;
      if (changed) this.generation++;
    } catch {
      // the watch failed (fd limit, no /proc): nothing is kept
      this.close();
    }
  }

  endPass(): void {
    this.inPass = false;
  }

  /** Takes one event into account; whether it dropped or changed something a check may have looked at. */
  private onEvent(wd: number, mask: number, name: string | null): boolean {
    if (mask & (IN_Q_OVERFLOW | IN_UNMOUNT)) {
      this.forget();
      return true;
    }
    const dir = this.watched.get(wd);
    if (dir === undefined) return false; // a watch of before the last forget: nothing kept depends on it
    if (mask & IN_IGNORED) this.watched.delete(wd);
    if (name === null || name.includes('/') || mask & IN_IGNORED) return this.drop(dir);
    this.answers.delete(dir); // its entries changed, and with them its times (see the module comment)
    const dropped = this.drop(dir === '/' ? `/${name}` : `${dir}/${name}`);
    return dropped || this.listed.has(dir);
  }

  /** Drops every answer, directory state and record at or below `prefix`; whether there was any. */
  private drop(prefix: string): boolean {
    // Every directory above a record has a state (covers walks up to `/` before a record is made, and a state goes
    // only with everything below it): with neither a record nor a state at `prefix`, nothing is below it either. So
    // a flood of names nobody looked at costs a few lookups each, not a walk over everything kept.
    if (
      !this.dirs.has(prefix) &&
      !this.answers.has(prefix) &&
      !this.entries.has(prefix) &&
      !this.listed.has(prefix)
    )
      return false;
    let any = false;
    for (const p of this.answers.keys())
      if (under(p, prefix)) {
        this.answers.delete(p);
        any = true;
      }
    for (const d of this.dirs.keys())
      if (under(d, prefix)) {
        this.dirs.delete(d);
        any = true;
      }
    for (const set of [this.entries, this.listed])
      for (const p of set)
        if (under(p, prefix)) {
          set.delete(p);
          any = true;
        }
    return any;
  }

  /** Forgets every answer, directory state and record (the watches stay, and are found again by their directories). */
  private forget(): void {
    this.answers.clear();
    this.dirs.clear();
    this.entries.clear();
    this.listed.clear();
    this.generation++;
    if (this.watched.size > MAX_WATCHES) this.close();
  }

  private close(): void {
    for (const fd of [this.fd, this.mountsFd]) {
      try {
        if (fd >= 0) closeSync(fd);
      } catch {
        // already gone
      }
    }
    this.fd = -1;
    this.mountsFd = -1;
    this.watched.clear();
    this.answers.clear();
    this.dirs.clear();
    this.entries.clear();
    this.listed.clear();
    this.generation++;
  }

  /**
   * Whether the directory `dir` and every one above it are watched (adding the missing watches, from the top down),
   * or the way to it stops at a missing or non-directory component below watched ones.
   */
  private covers(dir: string): boolean {
    const known = this.dirs.get(dir);
    if (known !== undefined) return known !== NOT_WATCHABLE;
    const c = this.calls;
    if (!c || this.fd < 0) return false;
    // The directories on the way that have no state yet, from the deepest known one (or `/`) down.
    const todo: string[] = [];
    let state: number | undefined;
    for (let d = dir; ; d = dirname(d)) {
      state = this.dirs.get(d);
      if (state !== undefined) break;
      todo.push(d);
      if (d === '/') break;
    }
    for (let i = todo.length - 1; i >= 0; i--) {
      const d = todo[i]!;
      if (state === NOT_WATCHABLE || state === UNDER_MISSING) {
        this.dirs.set(d, state);
        continue;
      }
      const wd = c.add(this.fd, d);
      if (wd > 0) {
        state = wd;
        this.watched.set(wd, d);
        // Its times are vouched for from now on (its entries' changes are its events): an answer of before goes.
        this.answers.delete(d);
      } else if (wd === -ENOENT) {
        state = UNDER_MISSING;
      } else if (wd === -ENOTDIR) {
        // A file (nothing is below it while its watched directory says nothing) or a symlink (the way goes on
        // elsewhere, unwatched). Asked after the failed watch: a change since is an event of the parent.
        let st: Stats | undefined;
        try {
          st = lstatSync(d, { throwIfNoEntry: false });
        } catch {
          st = undefined;
        }
        state = st && !st.isSymbolicLink() && !st.isDirectory() ? UNDER_MISSING : NOT_WATCHABLE;
      } else {
        state = NOT_WATCHABLE;
      }
      this.dirs.set(d, state);
    }
    if (this.dirs.size > MAX_ANSWERS || this.watched.size > MAX_WATCHES) {
      this.forget();
      return false;
    }
    return state !== NOT_WATCHABLE;
  }

  /** lstat(p) (undefined when missing; errors as lstatSync's): the kept answer while nothing changed, else asked. */
  lstat(p: string): Stats | undefined {
    if (this.inPass && this.fd >= 0) {
      const kept = this.answers.get(p);
      if (kept !== undefined || this.answers.has(p)) return kept;
      if (plainAbsolute(p) && this.covers(dirname(p))) {
        const st = lstatSync(p, { throwIfNoEntry: false }); // an error: not kept, and uncovered (below)
        this.answers.set(p, st);
        if (this.answers.size > MAX_ANSWERS) this.forget();
        return st;
      }
    }
    this.uncovered++;
    return freshLstat(p);
  }

  /**
   * Before reading the directory `dir`'s entries or its times: watches it (else the look is uncovered). True when it
   * was watched already, so that an answer about it kept or asked in this pass vouches for its times; false when its
   * times must be asked anew (lstatSync, not the pass's answer: that may be one kept from before its watch).
   */
  watchEntries(dir: string): boolean {
    if (!(this.inPass && this.fd >= 0 && plainAbsolute(dir))) {
      this.uncovered++;
      return false;
    }
    const before = this.dirs.get(dir);
    if (!this.covers(dir)) {
      this.uncovered++;
      return false;
    }
    this.listed.add(dir);
    this.bound();
    return before !== undefined && before > 0 && this.dirs.get(dir) === before;
  }

  /**
   * Whether a look at the path `p` in this pass is one the watch vouches for (adding the watches on the way, as the
   * lstat would): then its kept answer goes with any change of `p` itself, and a reader needs no listing of its
   * directory to notice one.
   */
  vouchesFor(p: string): boolean {
    return this.inPass && this.fd >= 0 && plainAbsolute(p) && this.covers(dirname(p));
  }

  /** Before reading what the entry `p` is (a symlink's target): whether a watch vouches for it. */
  watchEntry(p: string): void {
    if (!(this.inPass && this.fd >= 0 && plainAbsolute(p) && this.covers(dirname(p)))) {
      this.uncovered++;
      return;
    }
    this.entries.add(p);
    this.bound();
  }

  /** More records than MAX_ANSWERS: everything is forgotten (the generation moves). */
  private bound(): void {
    if (this.entries.size + this.listed.size > MAX_ANSWERS) this.forget();
  }

  /** How many looks no watch vouched for, so far (a caller that keeps answers itself compares it around a look). */
  get unwatchedLooks(): number {
    return this.uncovered;
  }

  /** A look no watch vouches for (a file's content, the kernel's own path walk through symlinks). */
  lookUnwatched(): void {
    this.uncovered++;
  }

  /**
   * Brackets a check: `end()` gives the generation at which every look it made was vouched for by the watch (then the
   * same check passes while `generation` stays that), or undefined.
   */
  scope(): { end(): number | undefined } {
    const before = this.uncovered;
    const gen = this.generation;
    const live = this.inPass && this.fd >= 0;
    return {
      end: () => (live && this.uncovered === before && this.generation === gen ? gen : undefined),
    };
  }

  /** Whether a check that `scope` vouched for at `stamp` still holds (nothing watched changed since). */
  stillQuiet(stamp: number | undefined): boolean {
    return stamp !== undefined && this.inPass && this.fd >= 0 && stamp === this.generation;
  }

  /** Counts for tests and the doctor: answers kept, directories watched. */
  counts(): { answers: number; watches: number; generation: number } {
    return {
      answers: this.answers.size + this.entries.size + this.listed.size,
      watches: this.watched.size,
      generation: this.generation,
    };
  }
}

/** The process's one instance (the planning passes of every start share it). */
export const quietFs = new QuietFs(fsWatchCalls);

/**
 * lstat(p) as the filesystem says it now (undefined when missing; errors as lstatSync's), for a look the watch does
 * not vouch for: a FUSE or NFS mount is made to ask its server again first (revalidatePath), instead of answering from
 * what it cached up to a second ago.
 */
export function freshLstat(p: string): Stats | undefined {
  revalidatePath(p);
  return lstatSync(p, { throwIfNoEntry: false });
}
