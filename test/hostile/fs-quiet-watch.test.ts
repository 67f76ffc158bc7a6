/**
 * The filesystem watch that lets sandbox planning keep its answers between starts (src/sandbox/fsQuiet.ts,
 * src/platform/native/fswatch.c) against what a hostile local process, or a sandboxed command writing where its policy
 * lets it, can do to it: flood a watched directory with changes, make paths deep and directories wide, use names of
 * every size and byte (not UTF-8, newlines), change a watched directory through another path to it (a bind mount,
 * another mount namespace), and hand the native calls malformed input. In every case the answers after the change
 * are a fresh lstat's: the watch may forget, never vouch for what changed.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import {
  closeSync,
  constants,
  mkdirSync,
  openSync,
  renameSync,
  rmSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { addon } from '../../src/platform/addon.js';
import { fsWatchAbsence, fsWatchCalls } from '../../src/platform/fsWatch.js';
import { QuietFs } from '../../src/sandbox/fsQuiet.js';
import { ignoringMounts, inPass, kept, real, scratchDirs, stamp } from '../helpers/quietFs.js';

const fresh = scratchDirs('corral-fs-quiet-hostile-');

describe('the planning watch under hostile input', { skip: fsWatchAbsence ?? false }, () => {
  test('a flood of changes in a watched directory: forgotten, answers fresh', () => {
    const q = new QuietFs(fsWatchCalls);
    const d = fresh();
    const p = join(d, 'target');
    const s = stamp(q, [p]);
    assert.notEqual(s, undefined);
    // Far more events than a drain takes (256: fsQuiet.ts MAX_EVENTS). The kernel's own overflow (beyond
    // fs.inotify.max_queued_events, 16384 by default) ends the same way: the drain says -1.
    for (let i = 0; i < 1500; i++) writeFileSync(join(d, `f${i}`), '');
    mkdirSync(p);
    assert.ok(!inPass(q, () => q.stillQuiet(s)));
    assert.equal(kept(q, p), real(p));
    assert.ok(q.counts().answers < 10, 'everything was forgotten, not handled one by one');
    // And the watch works again after it.
    const s2 = stamp(q, [p]);
    assert.ok(inPass(q, () => q.stillQuiet(s2)));
    rmSync(p, { recursive: true });
    assert.equal(kept(q, p), 'missing');
  });

  test('a stream of names nobody looked at beside many kept answers: the check stays quiet, the answers kept', () => {
    const q = new QuietFs(ignoringMounts(fsWatchCalls!)); // about names: see ignoringMounts
    const d = fresh();
    // 3000 answers kept below one directory, and the name a check looks at beside it.
    mkdirSync(join(d, 'kept'));
    const many = Array.from({ length: 3000 }, (_, i) => join(d, 'kept', `n${i}`));
    const p = join(d, 'target');
    const s = stamp(q, [p, ...many]);
    assert.notEqual(s, undefined);
    const before = q.counts().answers;
    // What a busy /tmp does beside a workspace: names made and removed, in bursts under the drain's bound (256).
    for (let burst = 0; burst < 8; burst++) {
      for (let i = 0; i < 100; i++) {
        writeFileSync(join(d, `busy${i}`), '');
        rmSync(join(d, `busy${i}`));
      }
      assert.ok(
        inPass(q, () => q.stillQuiet(s)),
        `burst ${burst}: nothing looked at changed`,
      );
    }
    assert.equal(q.counts().answers, before, 'no answer dropped');
    // The looked-at name, made among the stream: seen.
    writeFileSync(join(d, 'busy0'), '');
    mkdirSync(p);
    assert.ok(!inPass(q, () => q.stillQuiet(s)));
    assert.equal(kept(q, p), real(p));
  });

  test('deep: a path 400 directories down, a directory half way renamed', () => {
    const q = new QuietFs(fsWatchCalls);
    const d = fresh();
    const parts = Array.from({ length: 400 }, (_, i) => `d${i}`);
    const deep = join(d, ...parts);
    mkdirSync(deep, { recursive: true });
    const p = join(deep, 'f');
    writeFileSync(p, '');
    const s = stamp(q, [p]);
    assert.notEqual(s, undefined, 'every directory on the way is watched');
    const half = join(d, ...parts.slice(0, 200));
    renameSync(half, `${half}-moved`);
    mkdirSync(half);
    assert.ok(!inPass(q, () => q.stillQuiet(s)));
    assert.equal(kept(q, p), 'missing');
    assert.equal(kept(q, p), real(p));
  });

  test('wide: more watched directories than the bound, then changes in the first ones', () => {
    const q = new QuietFs(fsWatchCalls);
    const d = fresh();
    const dirs = Array.from({ length: 2300 }, (_, i) => join(d, `w${i}`));
    for (const x of dirs) mkdirSync(x);
    const files = dirs.map((x) => join(x, 'f'));
    inPass(q, () => {
      for (const f of files) q.lstat(f);
    });
    assert.ok(q.counts().watches <= 2048 + 1, `watches bounded (${q.counts().watches})`);
    for (const x of dirs.slice(0, 50)) writeFileSync(join(x, 'f'), '');
    for (const f of files.slice(0, 60)) assert.equal(kept(q, f), real(f), f);
  });

  test('names: 255 bytes, a newline, bytes that are not UTF-8', () => {
    const q = new QuietFs(fsWatchCalls);
    const d = fresh();
    const long = join(d, 'x'.repeat(255));
    const nl = join(d, 'a\nb');
    assert.equal(kept(q, long), 'missing');
    assert.equal(kept(q, nl), 'missing');
    writeFileSync(long, '');
    writeFileSync(nl, '');
    assert.equal(kept(q, long), real(long));
    assert.equal(kept(q, nl), real(nl));
    // A name inotify reports in bytes that are no UTF-8: the whole directory counts as changed.
    const p = join(d, 'plain');
    const s = stamp(q, [p, long]);
    assert.notEqual(s, undefined);
    const raw = Buffer.concat([Buffer.from(`${d}/`), Buffer.from([0xff, 0xfe, 0x41])]);
    writeFileSync(raw, '');
    assert.ok(!inPass(q, () => q.stillQuiet(s)));
    assert.equal(kept(q, p), real(p));
    // A name whose replacement-character spelling is a path we keep: its answer is dropped too.
    const lookalike = join(d, '\ufffd\ufffdA');
    assert.equal(kept(q, lookalike), real(lookalike));
    rmSync(raw);
    writeFileSync(lookalike, '');
    assert.equal(kept(q, lookalike), real(lookalike));
  });

  test('a change made through a bind mount of the watched directory, and from another mount namespace', (t) => {
    if (process.getuid?.() !== 0) return t.skip('not root');
    const q = new QuietFs(fsWatchCalls);
    const d = fresh();
    const other = fresh();
    mkdirSync(join(d, 'ws'));
    const p = join(d, 'ws/.git');
    const s = stamp(q, [p]);
    try {
      execFileSync('mount', ['--bind', d, other], { stdio: 'ignore' });
    } catch {
      return t.skip('cannot mount here');
    }
    try {
      // The bind mount itself is a mount change: forgotten. Stamp again, then change through the other path.
      const s2 = stamp(q, [p]);
      assert.notEqual(s2, s);
      mkdirSync(join(other, 'ws/.git'));
      assert.ok(!inPass(q, () => q.stillQuiet(s2)), 'an event of the same directory, by another path');
      assert.equal(kept(q, p), real(p));
      assert.notEqual(real(p), 'missing');
    } finally {
      execFileSync('umount', [other], { stdio: 'ignore' });
    }
    const s3 = stamp(q, [p]);
    const r = spawnSync('unshare', ['-m', 'sh', '-c', `rmdir '${p}'`], { stdio: 'ignore' });
    if (r.status !== 0) return t.skip('unshare -m is not available');
    assert.ok(!inPass(q, () => q.stillQuiet(s3)), 'a change from another mount namespace');
    assert.equal(kept(q, p), 'missing');
  });

  test('malformed calls into the native watch are refused, never read out of bounds or block', () => {
    const native = addon!;
    const fd = native.fsWatchOpen();
    try {
      for (const bad of ['', 'relative/dir', `/tmp\u0000/x`, `/${'a'.repeat(5000)}`])
        assert.throws(() => native.fsWatchAdd(fd, bad), TypeError, JSON.stringify(bad.slice(0, 20)));
      assert.throws(() => native.fsWatchAdd(-1, '/'), TypeError);
      assert.throws(() => native.fsWatchDrain(fd, 0), TypeError);
      assert.throws(() => native.fsWatchDrain(-5, 1), TypeError);
      assert.throws(() => native.fsWatchPending(-1, fd), TypeError);
      assert.throws(() => native.fsWatchPending(fd, -1), TypeError);
      assert.throws(() => (native.fsWatchPending as (fd: number) => number)(fd), TypeError);
      // fsRevalidate: a path only (no NUL inside, none longer than PATH_MAX, not empty); what it cannot stat is an errno.
      for (const bad of ['', `/tmp\u0000/x`, `/${'a'.repeat(5000)}`, 7, null])
        assert.throws(
          () => native.fsRevalidate(bad as string),
          TypeError,
          JSON.stringify(String(bad).slice(0, 20)),
        );
      assert.throws(() => (native.fsRevalidate as () => number)(), TypeError);
      assert.equal(native.fsRevalidate('/'), 0);
      assert.equal(native.fsRevalidate('/nonexistent-corral-path/x'), os.constants.errno.ENOENT);
      assert.equal(native.fsRevalidate(`/${'a/'.repeat(2000)}`), os.constants.errno.ENOENT);
      // Nothing pending on a fresh watch; descriptors that are not open: both bits (the caller forgets everything).
      const mounts = openSync('/proc/self/mountinfo', 'r');
      try {
        assert.equal(native.fsWatchPending(fd, mounts), 0);
        assert.equal(native.fsWatchPending(1 << 20, 1 << 20), 3);
      } finally {
        closeSync(mounts);
      }
      // Not an inotify fd: a regular file (blocking: refused), then a non-blocking pipe carrying crafted "events"
      // whose lengths point past what was read.
      const file = openSync(import.meta.filename, 'r');
      try {
        assert.throws(() => native.fsWatchDrain(file, 10), TypeError);
      } finally {
        closeSync(file);
      }
      const fifo = join(fresh(), 'fifo');
      execFileSync('mkfifo', [fifo]);
      const r = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
      const w = openSync(fifo, constants.O_WRONLY);
      try {
        const ev = Buffer.alloc(16 + 8);
        ev.writeInt32LE(1, 0);
        ev.writeUInt32LE(0x100, 4);
        ev.writeUInt32LE(0, 8);
        ev.writeUInt32LE(0xfffffff0, 12); // len far beyond the buffer
        writeSync(w, ev);
        assert.equal(native.fsWatchDrain(r, 10), -1);
        writeSync(w, Buffer.alloc(7, 1)); // a partial event
        assert.equal(native.fsWatchDrain(r, 10), -1);
        assert.equal(native.fsWatchDrain(r, 10), null, 'drained: nothing pending');
      } finally {
        closeSync(r);
        closeSync(w);
      }
      // A directory on a filesystem inotify does not see into, a symlink, a file, a missing path.
      assert.equal(native.fsWatchAdd(fd, '/proc'), -18); // EXDEV
      assert.equal(native.fsWatchAdd(fd, '/proc/self/exe'), -20); // ENOTDIR: never followed
      assert.equal(native.fsWatchAdd(fd, import.meta.filename), -20);
      assert.equal(native.fsWatchAdd(fd, join(fresh(), 'no/such')), -2);
      assert.ok(native.fsWatchAdd(fd, fresh()) > 0);
    } finally {
      closeSync(fd);
    }
  });
});
