/**
 * The hot-path bench's sandbox check (test/bench/sameSandbox.ts), fed equal, renumbered, different, empty, malformed,
 * wide and huge mount tables: a bare bwrap compared with the server's must differ in nothing but ids. No principal
 * reaches it at run time (bench code reading what `cat /proc/self/mountinfo` printed in the bench's own sandboxes).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { sameMounts, serverHiddenPaths } from '../bench/sameSandbox.js';

const linux = process.platform === 'linux';
const table = [
  '22 1 8:1 / / ro,nosuid,relatime shared:1 - ext4 /dev/sda1 rw',
  '23 22 0:5 / /dev rw,nosuid - tmpfs tmpfs rw,mode=755',
  '24 22 0:21 / /work/ws rw,relatime - ext4 /dev/sda1 rw',
  '25 24 0:30 / /work/ws/.git ro,relatime - tmpfs tmpfs ro,mode=555',
].join('\n');

test('the same mounts pass, whatever their ids, device numbers and sources', () => {
  sameMounts(table, table);
  const renumbered = table.replace(
    /^(\d+) (\d+) \d+:\d+/gm,
    (_, a, b) => `${Number(a) + 100} ${Number(b) + 100} 0:99`,
  );
  sameMounts(table, renumbered.replace('/dev/sda1', '/dev/other'));
});

test('a missing mount, a mount of other options or another filesystem is a difference, named', () => {
  const lines = table.split('\n');
  assert.throws(
    () => sameMounts(table, lines.slice(0, 3).join('\n')),
    /4 mounts through the server, 3 bare; first difference: "\/work\/ws\/\.git/,
  );
  assert.throws(
    () => sameMounts(table, table.replace('/work/ws rw,relatime', '/work/ws ro,relatime')),
    /"\/work\/ws rw,relatime ext4 rw"/,
  );
  assert.throws(
    () => sameMounts(table, table.replace('- tmpfs tmpfs ro,mode=555', '- ramfs none ro')),
    /\.git/,
  );
  assert.throws(
    () => sameMounts(table, `${table}\n26 22 0:31 / /extra rw - tmpfs tmpfs rw`),
    /first difference: "\/extra/,
  );
});

test('nothing read through the server is no proof: it throws', () => {
  assert.throws(() => sameMounts('', ''), /0 mounts through the server/);
  assert.throws(() => sameMounts('\n\n', table), /not the server's/);
});

test('malformed, huge and wide tables are compared, never crash', () => {
  const odd = ['no separator here', ' - ', '-', 'a b c d e f - x', '\u0000 - \u0000'].join('\n');
  sameMounts(odd, odd);
  assert.throws(() => sameMounts(odd, `${odd}\nmore`), /not the server's/);
  const wide = Array.from({ length: 50_000 }, (_, i) => `${i} 1 0:1 / /m/${i} rw - tmpfs t rw`).join('\n');
  sameMounts(wide, wide);
  const huge = `1 1 0:1 / /${'x'.repeat(4 << 20)} rw - tmpfs t rw`;
  sameMounts(huge, huge);
  assert.throws(() => sameMounts(huge, huge.replace('rw - tmpfs', 'ro - tmpfs')), /not the server's/);
});

test("this process's own mount table equals itself", { skip: !linux && 'Linux only' }, () => {
  const own = readFileSync('/proc/self/mountinfo', 'utf8');
  sameMounts(own, own);
});

test("the hidden paths are the panel token and the audit database's directory, as the server hides them", (t) => {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'corral-same-sandbox-')));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const argv = [
    'node',
    'cli.js',
    'exec-server',
    '--audit-db',
    join(dir, 'db', 'audit.db'),
    '--panel-token-file',
    join(dir, 'token'),
  ];
  assert.deepEqual(serverHiddenPaths(argv), [join(dir, 'token'), join(dir, 'db')]);
  assert.deepEqual(serverHiddenPaths(['node', 'cli.js', 'exec-server']), []);
});
