/**
 * softLimitIn (src/process/cgroup.ts): the server reads its own soft limits from /proc/self/limits (the pool of
 * prepared cgroups is bounded by `Max open files`, the commands' pids budget by `Max processes`). The text is the
 * kernel's, and whoever could change it (a process allowed to prlimit the server: root or its own uid) could change
 * the limits themselves; still, whatever the text, the reader answers a number or null, in bounded time, never a
 * negative, NaN or a number taken from another row. Fed: the real file, deep (a row's value split over many
 * whitespace runs), wide (100 000 rows), huge (a 4 MiB line) and malformed texts.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { poolBound, softLimitIn } from '../../src/process/cgroup.js';

const HEADER = 'Limit                     Soft Limit           Hard Limit           Units     \n';
const row = (name: string, soft: string, hard = soft) =>
  `${name.padEnd(26)}${soft.padEnd(21)}${hard.padEnd(21)}files\n`;

test('the kernel file of this process: both rows read as numbers or null (unlimited)', {
  skip: process.platform !== 'linux' && 'Linux only',
}, () => {
  const text = readFileSync('/proc/self/limits', 'utf8');
  for (const name of ['Max open files', 'Max processes']) {
    const v = softLimitIn(text, name);
    assert.ok(v === null || (Number.isInteger(v) && v >= 0), `${name}: ${v}`);
  }
});

test('a row read whole, its soft column only; unlimited, missing and malformed values are null', () => {
  const text = HEADER + row('Max processes', '4096', '8192') + row('Max open files', '400', '1024');
  assert.equal(softLimitIn(text, 'Max open files'), 400);
  assert.equal(softLimitIn(text, 'Max processes'), 4096);
  assert.equal(softLimitIn(HEADER + row('Max open files', 'unlimited'), 'Max open files'), null);
  assert.equal(softLimitIn(HEADER, 'Max open files'), null);
  assert.equal(softLimitIn('', 'Max open files'), null);
  for (const bad of ['-5', 'NaN', 'Infinity', '1e400', '12abc', '0x', '\u0000', '١٢٣'])
    assert.equal(softLimitIn(row('Max open files', bad), 'Max open files'), null, bad);
  assert.equal(softLimitIn('Max open files\n', 'Max open files'), null);
  // Another row whose name only starts like it is not it.
  assert.equal(softLimitIn(row('Max open filesystems', '7'), 'Max open files'), null);
  // A value with no spacing before it is not a value of that row.
  assert.equal(softLimitIn('Max open files9\n', 'Max open files'), null);
});

test('deep, wide and huge texts: answered in bounded time, the pool bound stays within 0..64', () => {
  const cases: [string, string][] = [
    ['deep', `Max open files${' \t'.repeat(200_000)}300${' '.repeat(100_000)}600 files\n`],
    ['wide', `${HEADER}${row('Max cpu time', '1').repeat(100_000)}${row('Max open files', '20000')}`],
    ['huge', `Max open files ${'9'.repeat(4 << 20)} 1 files\n`],
    ['garbage', Buffer.alloc(1 << 20, 0xff).toString('latin1')],
  ];
  for (const [what, text] of cases) {
    const t0 = performance.now();
    const v = softLimitIn(text, 'Max open files');
    const ms = performance.now() - t0;
    assert.ok(ms < 2000, `${what}: ${ms} ms`);
    assert.ok(v === null || (Number.isFinite(v) && v >= 0), `${what}: ${v}`);
    const bound = poolBound(v);
    assert.ok(Number.isInteger(bound) && bound >= 0 && bound <= 64, `${what}: ${bound}`);
  }
  assert.equal(softLimitIn(cases[0]![1], 'Max open files'), 300);
  assert.equal(softLimitIn(cases[1]![1], 'Max open files'), 20000);
  // 4 MiB of nines is a finite JS number only as Infinity: null, the whole pool.
  assert.equal(softLimitIn(cases[2]![1], 'Max open files'), null);
});
