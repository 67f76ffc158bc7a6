/**
 * Issue 32: lstat answers kept across planning passes while inotify says nothing they depend on changed
 * (src/sandbox/fsQuiet.ts). A kept answer that outlived a change would give a sandbox the rules of a filesystem that
 * is no longer there; so every case here changes the filesystem between two passes the way a host process (or a
 * sandboxed command writing where it may) can, and checks each answer against a fresh lstat. The last case does it
 * at random, thousands of times. Also: the checks the watch lets planning skip (`scope` / `stillQuiet`), and the
 * fallback without the watch (no addon, not Linux), where nothing is kept.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  renameSync,
  rmSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { fsWatchAbsence, fsWatchCalls } from '../../src/platform/fsWatch.js';
import { QuietFs } from '../../src/sandbox/fsQuiet.js';
import { answer, ignoringMounts, inPass as pass, real, scratchDirs } from '../helpers/quietFs.js';

const fresh = scratchDirs('corral-fs-quiet-');

/** The same Stats object as the pass before: the answer was kept, not asked again. */
function sameObject(q: QuietFs, p: string): boolean {
  const a = pass(q, () => q.lstat(p));
  const b = pass(q, () => q.lstat(p));
  return a === b;
}

describe('kept lstat answers (fsQuiet.ts)', { skip: fsWatchAbsence ?? false }, () => {
  test('an answer is kept while nothing changes, and asked again after a change on the way', () => {
    const q = new QuietFs(fsWatchCalls);
    const d = fresh();
    mkdirSync(join(d, 'a/b'), { recursive: true });
    writeFileSync(join(d, 'a/b/f'), 'x');
    const f = join(d, 'a/b/f');
    assert.ok(sameObject(q, f), 'kept while quiet');
    const before = pass(q, () => answer(q, f));
    // The directory holding it renamed away, another put in its place: the same path names another file now.
    renameSync(join(d, 'a'), join(d, 'old'));
    mkdirSync(join(d, 'a/b'), { recursive: true });
    writeFileSync(join(d, 'a/b/f'), 'y');
    const after1 = pass(q, () => answer(q, f));
    assert.equal(after1, real(f));
    assert.notEqual(after1, before);
  });

  test('created, removed, renamed over, made a symlink: each shows at the next pass', () => {
    const q = new QuietFs(fsWatchCalls);
    const d = fresh();
    const p = join(d, 'x');
    const check = () =>
      assert.equal(
        pass(q, () => answer(q, p)),
        real(p),
      );
    check(); // missing, kept as missing
    writeFileSync(p, '1');
    check();
    unlinkSync(p);
    check();
    mkdirSync(p);
    check();
    rmSync(p, { recursive: true });
    writeFileSync(join(d, 'y'), '2');
    renameSync(join(d, 'y'), p);
    check();
    unlinkSync(p);
    symlinkSync('/', p);
    check();
    chmodSync(d, 0o700);
    check();
  });

  test('a mode changed on the path itself or on a directory above it', () => {
    const q = new QuietFs(fsWatchCalls);
    const d = fresh();
    mkdirSync(join(d, 'a/b'), { recursive: true });
    const p = join(d, 'a/b');
    assert.ok(sameObject(q, p));
    chmodSync(p, 0o500);
    assert.equal(
      pass(q, () => answer(q, p)),
      real(p),
    );
    chmodSync(join(d, 'a'), 0o711);
    writeFileSync(join(p, 'f'), '');
    assert.equal(
      pass(q, () => answer(q, join(p, 'f'))),
      real(join(p, 'f')),
    );
  });

  test('below a missing component: kept as missing until the component appears', () => {
    const q = new QuietFs(fsWatchCalls);
    const d = fresh();
    const p = join(d, 'm/n/o');
    assert.ok(sameObject(q, p));
    assert.equal(
      pass(q, () => answer(q, p)),
      'missing',
    );
    mkdirSync(join(d, 'm/n'), { recursive: true });
    writeFileSync(p, '');
    assert.equal(
      pass(q, () => answer(q, p)),
      real(p),
    );
    assert.notEqual(real(p), 'missing');
  });

  test('below a file: ENOTDIR is asked every time; the file replaced by a directory shows', () => {
    const q = new QuietFs(fsWatchCalls);
    const d = fresh();
    writeFileSync(join(d, 'f'), '');
    const p = join(d, 'f/x');
    assert.equal(
      pass(q, () => answer(q, p)),
      'ENOTDIR',
    );
    unlinkSync(join(d, 'f'));
    mkdirSync(join(d, 'f'));
    writeFileSync(p, '');
    assert.equal(
      pass(q, () => answer(q, p)),
      real(p),
    );
  });

  test('through a symlink: never kept (its target directories are not watched)', () => {
    const q = new QuietFs(fsWatchCalls);
    const d = fresh();
    mkdirSync(join(d, 't1'));
    mkdirSync(join(d, 't2'));
    writeFileSync(join(d, 't1/f'), '');
    symlinkSync(join(d, 't1'), join(d, 'l'));
    const p = join(d, 'l/f');
    assert.ok(!sameObject(q, p), 'asked again every pass');
    // A change in the target directory, which no watch of the way sees.
    unlinkSync(join(d, 't1/f'));
    mkdirSync(join(d, 't1/f'));
    assert.equal(
      pass(q, () => answer(q, p)),
      real(p),
    );
    const s = pass(q, () => {
      const scope = q.scope();
      q.lstat(p);
      return scope.end();
    });
    assert.equal(s, undefined, 'a check that looked through a symlink is not vouched for');
  });

  test('not a path of its own form (relative, `..`, trailing slash): asked, not kept', () => {
    const q = new QuietFs(fsWatchCalls);
    const d = fresh();
    mkdirSync(join(d, 'a'));
    for (const p of [`${d}/a/`, `${d}/a/../a`, `${d}//a`]) assert.ok(!sameObject(q, p), p);
  });

  test('a filesystem inotify does not see into (/proc): asked every time', () => {
    const q = new QuietFs(fsWatchCalls);
    assert.ok(!sameObject(q, '/proc/self/status'));
    assert.ok(!sameObject(q, '/proc/self/fd/0'));
  });

  test('a directory watched before its times are read: a new entry is an event, and the listing is new', () => {
    const q = new QuietFs(fsWatchCalls);
    const d = fresh();
    const mtime = () =>
      pass(q, () => {
        const before = q.watchEntries(d);
        const st = before ? q.lstat(d) : lstatSync(d);
        return { before, mtime: st!.mtimeMs, names: readdirSync(d).length };
      });
    const first = mtime();
    assert.equal(first.before, false, 'a new watch: its times are asked anew');
    assert.equal(mtime().before, true);
    writeFileSync(join(d, 'new'), '');
    const later = mtime();
    assert.equal(later.mtime, lstatSync(d).mtimeMs);
    assert.equal(later.names, 1);
  });

  test('scope / stillQuiet: a check is skipped while nothing it looked at changed, and not after', () => {
    const q = new QuietFs(fsWatchCalls);
    const d = fresh();
    mkdirSync(join(d, 'ws/src'), { recursive: true });
    const looks = [join(d, 'ws'), join(d, 'ws/.git'), join(d, 'ws/src')];
    const check = () =>
      pass(q, () => {
        const s = q.scope();
        for (const p of looks) q.lstat(p);
        q.watchEntries(join(d, 'ws'));
        return s.end();
      });
    const stamp = check();
    assert.notEqual(stamp, undefined);
    assert.ok(
      pass(q, () => q.stillQuiet(stamp)),
      'quiet: the check may be skipped',
    );
    // A change deeper than anything looked at: no watch there, still quiet.
    writeFileSync(join(d, 'ws/src/main.c'), '');
    assert.ok(pass(q, () => q.stillQuiet(stamp)));
    // A protected name appears: an event of the watched workspace.
    mkdirSync(join(d, 'ws/.git'));
    assert.ok(!pass(q, () => q.stillQuiet(stamp)));
    assert.equal(
      pass(q, () => answer(q, join(d, 'ws/.git'))),
      real(join(d, 'ws/.git')),
    );
    // Outside a pass nothing is vouched for.
    assert.equal(q.stillQuiet(q.generation), false);
  });

  test('an event about a name no check looked at leaves a check quiet; one about a name it looked at does not', () => {
    const q = new QuietFs(ignoringMounts(fsWatchCalls!)); // about names: see ignoringMounts
    const d = fresh();
    mkdirSync(join(d, 'ws/src'), { recursive: true });
    mkdirSync(join(d, 'listed'));
    symlinkSync('ws', join(d, 'link'));
    const check = () =>
      pass(q, () => {
        const s = q.scope();
        q.lstat(join(d, 'ws'));
        q.lstat(join(d, 'ws/.git')); // missing: kept as missing
        q.watchEntry(join(d, 'link')); // a link read, no lstat of it
        q.watchEntries(join(d, 'listed'));
        return s.end();
      });
    let stamp = check();
    assert.notEqual(stamp, undefined);
    const quiet = () => pass(q, () => q.stillQuiet(stamp));
    // Busy neighbours: names nobody looked at in directories on the way (a file made in /tmp beside a workspace).
    for (const name of ['other', 'ws2', '.git']) {
      writeFileSync(join(d, name), '');
      rmSync(join(d, name));
    }
    writeFileSync(join(d, 'ws/notes'), '');
    renameSync(join(d, 'ws/notes'), join(d, 'ws/notes2'));
    assert.ok(quiet(), 'changes of names nobody looked at keep the check');
    assert.equal(
      pass(q, () => answer(q, join(d, 'ws'))),
      real(join(d, 'ws')),
    );
    // Each looked-at thing changed in turn: the check is not quiet after any of them.
    const changes: [string, () => void][] = [
      ['a missing name looked at appears', () => mkdirSync(join(d, 'ws/.git'))],
      [
        'a link read is replaced',
        () => {
          unlinkSync(join(d, 'link'));
          symlinkSync('listed', join(d, 'link'));
        },
      ],
      ['a listed directory gets an entry', () => writeFileSync(join(d, 'listed/x'), '')],
      ['a listed directory loses one', () => unlinkSync(join(d, 'listed/x'))],
      ['a directory on the way changes mode', () => chmodSync(join(d, 'ws'), 0o700)],
      ['a directory on the way is renamed', () => renameSync(join(d, 'ws'), join(d, 'ws-old'))],
    ];
    for (const [what, change] of changes) {
      stamp = check();
      assert.ok(quiet(), `quiet before: ${what}`);
      change();
      assert.ok(!quiet(), what);
    }
  });

  test('a mount over a watched path forgets everything', (t) => {
    if (process.getuid?.() !== 0) return t.skip('not root');
    const q = new QuietFs(fsWatchCalls);
    const d = fresh();
    mkdirSync(join(d, 'm'));
    writeFileSync(join(d, 'm/f'), '');
    const p = join(d, 'm/f');
    const stamp = pass(q, () => {
      const s = q.scope();
      q.lstat(p);
      return s.end();
    });
    try {
      execMount(join(d, 'm'));
    } catch {
      return t.skip('cannot mount here');
    }
    try {
      assert.ok(!pass(q, () => q.stillQuiet(stamp)));
      assert.equal(
        pass(q, () => answer(q, p)),
        'missing',
      );
    } finally {
      execUmount(join(d, 'm'));
    }
    assert.equal(
      pass(q, () => answer(q, p)),
      real(p),
    );
  });

  for (const start of [7, 11, 2026, 31337])
    test(`at random (seed ${start}): after any changes every answer is a fresh lstat, and a quiet stamp means no change`, () => {
      const q = new QuietFs(fsWatchCalls);
      const d = fresh();
      const names = ['a', 'b', 'a/b', 'a/c', 'b/a', 'a/b/c', 'b/a/c', 'a/b/c/d', 'l', 'a/l', 'b/l'];
      const paths = names.map((x) => join(d, x));
      // Symlink targets: absolute, relative, dangling, looping, upwards.
      const targets = [d, join(d, 'a'), 'a', 'b/a', 'missing', '..', '../a', 'l', join(d, 'a/b')];
      let seed = start;
      const rnd = (k: number) => {
        seed = (seed * 1103515245 + 12345) & 0x7fffffff;
        return Math.floor((seed / 0x80000000) * k); // the high bits: an LCG's low bits repeat with a short period
      };
      const pick = () => paths[rnd(paths.length)]!;
      const ops: (() => void)[] = [
        () => mkdirSync(pick()),
        () => writeFileSync(pick(), ''),
        () => rmSync(pick(), { recursive: true }),
        () => renameSync(pick(), pick()),
        () => symlinkSync(targets[rnd(targets.length)]!, pick()),
        () => chmodSync(pick(), rnd(2) ? 0o700 : 0o755),
        () => unlinkSync(pick()),
      ];
      let stamp: number | undefined;
      let snapshot: string[] = [];
      let skipped = 0;
      for (let round = 0; round < 1200; round++) {
        const changes = rnd(3); // 0: nothing changes this round
        for (let i = 0; i < changes; i++) {
          try {
            ops[rnd(ops.length)]!();
          } catch {
            // the op did not apply (missing, exists, not empty): the filesystem is as it was
          }
        }
        pass(q, () => {
          const now = paths.map(real);
          if (q.stillQuiet(stamp)) {
            skipped++;
            assert.deepEqual(now, snapshot, `round ${round}: quiet, yet an answer changed`);
          }
          const s = q.scope();
          const got = paths.map((p) => answer(q, p));
          assert.deepEqual(got, now, `round ${round}`);
          stamp = s.end();
          snapshot = now;
        });
      }
      assert.ok(skipped > 100, `the quiet path was taken (${skipped} rounds)`);
    });
});

describe('without a watch (no addon, not Linux)', () => {
  test('nothing is kept and no check is vouched for', () => {
    const q = new QuietFs(null);
    const d = fresh();
    assert.ok(!sameObject(q, d));
    const stamp = pass(q, () => {
      const s = q.scope();
      q.lstat(d);
      return s.end();
    });
    assert.equal(stamp, undefined);
    assert.equal(
      pass(q, () => q.stillQuiet(q.generation)),
      false,
    );
    assert.equal(
      pass(q, () => q.watchEntries(d)),
      false,
    );
  });
});

function execMount(at: string): void {
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'corral-fs-quiet', at], { stdio: 'ignore' });
}
function execUmount(at: string): void {
  execFileSync('umount', [at], { stdio: 'ignore' });
}
