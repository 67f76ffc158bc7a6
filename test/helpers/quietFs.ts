/** What the tests of the planning watch (src/sandbox/fsQuiet.ts) share: scratch directories, answers as text, passes. */
import { existsSync, lstatSync, mkdirSync, mkdtempSync, realpathSync, rmSync, type Stats } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';
import type { FsWatchCalls } from '../../src/platform/fsWatch.js';
import type { QuietFs } from '../../src/sandbox/fsQuiet.js';

/**
 * Where scratch directories go that must stay quiet between two starts (a kept Landlock plan, issue 32): not under the
 * temp root. A workspace below /tmp is below a writable temp root of every Landlock policy, which is then planned
 * around it entry by entry (landlock.ts decomposition), so every directory another process makes in /tmp (the other
 * test files, all the time) changes the plan: such a test would wait for quiet that a busy machine never gives.
 */
export const quietTop = existsSync('/var/tmp') ? '/var/tmp' : os.tmpdir();

/** A new empty directory per call, all under one scratch directory (in `under`) removed after the file's tests. */
export function scratchDirs(prefix: string, under = os.tmpdir()): () => string {
  const top = realpathSync(mkdtempSync(join(under, prefix)));
  after(() => rmSync(top, { recursive: true, force: true }));
  let n = 0;
  return () => {
    const d = join(top, `c${n++}`);
    mkdirSync(d);
    return d;
  };
}

/** What a kept answer vouches for (fsQuiet.ts): identity, type, mode, owner. */
export function facts(st: Stats | undefined): string {
  return st ? `${st.dev}:${st.ino}:${st.mode}:${st.uid}:${st.gid}` : 'missing';
}

/** lstatSync's answer as facts, or the error's code. */
export function real(p: string): string {
  try {
    return facts(lstatSync(p, { throwIfNoEntry: false }));
  } catch (e) {
    return (e as NodeJS.ErrnoException).code ?? 'error';
  }
}

/** `q`'s answer as facts, or the error's code (within a pass: see inPass). */
export function answer(q: QuietFs, p: string): string {
  try {
    return facts(q.lstat(p));
  } catch (e) {
    return (e as NodeJS.ErrnoException).code ?? 'error';
  }
}

/** Runs `fn` as one planning pass of `q`. */
export function inPass<T>(q: QuietFs, fn: () => T): T {
  q.beginPass();
  try {
    return fn();
  } finally {
    q.endPass();
  }
}

/** `q`'s answer about `p` in a pass of its own. */
export const kept = (q: QuietFs, p: string): string => inPass(q, () => answer(q, p));

/** A check over `paths` as planning makes one: its stamp, when the watch vouches for every look. */
export function stamp(q: QuietFs, paths: string[]): number | undefined {
  return inPass(q, () => {
    const s = q.scope();
    for (const p of paths) q.lstat(p);
    return s.end();
  });
}

/**
 * The real watch, with the mount table taken as unchanged: for cases about names whose "still quiet" would otherwise
 * depend on whether another test file mounted something meanwhile (any mount in the namespace forgets everything:
 * tested on its own in fs-quiet.test.ts).
 */
export function ignoringMounts(calls: FsWatchCalls): FsWatchCalls {
  return { ...calls, pending: (fd, mountsFd) => calls.pending(fd, mountsFd) & 1 };
}
