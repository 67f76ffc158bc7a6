/**
 * fsProbe.ts. realpathInPass: within a pass it answers from the pass's lstats for a plain path (every component
 * there, no symlink, directories on the way) and otherwise from realpath(3); either way it must answer exactly what
 * realpath(3) answers (or throw as it does), in a pass and outside one, for every shape of path. kind(): a placeholder
 * kept as empty is missing only until an entry appears in it.
 */
import assert from 'node:assert/strict';
import {
  chmodSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  realpathSync,
  rmdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fsWatchAbsence } from '../../src/platform/fsWatch.js';
import { inOnePass, lstatInPass, realFsProbe, realpathInPass } from '../../src/sandbox/fsProbe.js';
import { quietFs } from '../../src/sandbox/fsQuiet.js';
import { until } from '../helpers/server.js';

function answer(f: () => string): string {
  try {
    return f();
  } catch (e) {
    return `throws ${(e as NodeJS.ErrnoException).code}`;
  }
}

test('realpathInPass answers as realpath(3) for plain, linked, missing and odd paths, in a pass and out', () => {
  const root = realpathSync(mkdtempSync(join(tmpdir(), 'corral-realpath-')));
  try {
    mkdirSync(join(root, 'a', 'b'), { recursive: true });
    writeFileSync(join(root, 'a', 'f'), 'x');
    symlinkSync(join(root, 'a'), join(root, 'link')); // a directory link on the way
    symlinkSync('b', join(root, 'a', 'rel')); // a relative link as the last component
    symlinkSync(join(root, 'nowhere'), join(root, 'dangling'));
    symlinkSync('loop', join(root, 'loop'));
    const paths = [
      '/',
      root,
      join(root, 'a'),
      join(root, 'a', 'b'),
      join(root, 'a', 'f'),
      join(root, 'link'),
      join(root, 'link', 'b'),
      join(root, 'link', 'f'),
      join(root, 'a', 'rel'),
      join(root, 'dangling'),
      join(root, 'loop'),
      join(root, 'missing'),
      join(root, 'missing', 'b'),
      join(root, 'a', 'f', 'under-a-file'), // ENOTDIR
      `${join(root, 'a', 'b')}/`,
      `${root}/a/./b`,
      `${root}/a/b/..`,
      `${root}/link/..`, // .. after a link: the link's target's parent
      `${root}//a`,
      'relative/path',
      '',
    ];
    for (const p of paths) {
      const want = answer(() => realpathSync.native(p));
      assert.equal(
        answer(() => realpathInPass(p)),
        want,
        `outside a pass: ${JSON.stringify(p)}`,
      );
      // In a pass: alone, and after the pass has looked at other paths first (its lstats answer the walk).
      assert.equal(
        inOnePass(() => answer(() => realpathInPass(p))),
        want,
        `in a pass: ${JSON.stringify(p)}`,
      );
      assert.equal(
        inOnePass(() => {
          for (const q of paths) answer(() => realpathInPass(q));
          return answer(() => realpathInPass(p));
        }),
        want,
        `in a pass after the others: ${JSON.stringify(p)}`,
      );
    }
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('a placeholder (an empty directory of mode 0500) is missing to kind() only while it is empty', async () => {
  const root = realpathSync(mkdtempSync(join(tmpdir(), 'corral-placeholder-')));
  try {
    const d = join(root, '.codex');
    mkdirSync(d, { mode: 0o500 });
    chmodSync(d, 0o500);
    assert.equal(realFsProbe.kind(d), null, 'a fresh placeholder');
    // Settled (its times older than the racy window): kept as empty from here on, while its times hold.
    const settled = () => Date.now() > Math.max(lstatSync(d).ctimeMs, lstatSync(d).mtimeMs) + 60;
    await until(settled, 5000, 'settled times');
    assert.equal(realFsProbe.kind(d), null);
    assert.equal(
      inOnePass(() => realFsProbe.kind(d)),
      null,
    );
    writeFileSync(join(d, 'planted'), 'x'); // root writes into a 0500 directory
    assert.equal(realFsProbe.kind(d), 'dir', 'an entry added to a kept empty placeholder');
    assert.equal(
      inOnePass(() => realFsProbe.kind(d)),
      'dir',
    );
    rmSync(join(d, 'planted'));
    assert.equal(realFsProbe.kind(d), null, 'empty again');
    await until(settled, 5000, 'settled times');
    assert.equal(realFsProbe.kind(d), null);
    mkdirSync(join(d, 'sub'));
    assert.equal(
      inOnePass(() => realFsProbe.kind(d)),
      'dir',
      'a directory added',
    );
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('a placeholder removed between its lstat and its listing is missing, not a directory to bind', () => {
  const root = realpathSync(mkdtempSync(join(tmpdir(), 'corral-placeholder-')));
  try {
    const d = join(root, '.agents');
    mkdirSync(d, { mode: 0o500 });
    chmodSync(d, 0o500);
    // The pass's lstat of it (taken on the way) says a directory of mode 0500; then its last user removes it.
    const kind = inOnePass(() => {
      realpathInPass(d);
      rmdirSync(d);
      return realFsProbe.kind(d);
    });
    assert.equal(kind, null);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('a path the pass asked before a check began is a look of that check too: unwatched stays unwatched', () => {
  // The pass keeps each answer, and a check that begins later in it (the kept ruleset's, after the planning's) meets
  // the path only there: a look the watch did not vouch for (proc: no inotify there) must still count against it.
  const stampOf = (p: string) =>
    inOnePass(() => {
      lstatInPass(p);
      const s = quietFs.scope();
      lstatInPass(p);
      return s.end();
    });
  assert.equal(stampOf('/proc/self/status'), undefined);
  if (fsWatchAbsence === null) {
    const dir = realpathSync(mkdtempSync(join(tmpdir(), 'corral-pass-look-')));
    try {
      assert.notEqual(stampOf(dir), undefined, 'a watched path: vouched for (the control)');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
});
