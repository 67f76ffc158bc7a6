// Pure helpers of the panel (no DOM needed): the run form's command-line splitting and argv display.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fmtBytes, shellJoin, shellSplit, textToB64 } from '../../renderer/dom.js';

test('shellSplit splits like a POSIX shell for words and quotes', () => {
  assert.deepEqual(shellSplit(`ls -la  "my dir" 'it''s' a\\ b ""`), [
    'ls',
    '-la',
    'my dir',
    'its',
    'a b',
    '',
  ]);
  assert.deepEqual(shellSplit(`echo "a \\"q\\" \\$HOME"`), ['echo', 'a "q" $HOME']);
  assert.deepEqual(shellSplit('   '), []);
  assert.throws(() => shellSplit(`echo "open`), /unterminated quote/);
});

test('shellJoin quotes only what needs it, and round-trips through shellSplit', () => {
  const argv = ['/bin/sh', '-c', `echo 'hi' "there" $X`, 'plain', 'a b', ''];
  assert.equal(shellJoin(['ls', '-la', '/tmp']), 'ls -la /tmp');
  assert.deepEqual(shellSplit(shellJoin(argv)), argv);
});

test('textToB64 encodes UTF-8; fmtBytes', () => {
  assert.equal(textToB64('héllo\n'), Buffer.from('héllo\n').toString('base64'));
  assert.equal(fmtBytes(512), '512 B');
  assert.equal(fmtBytes(1536), '1.5 KiB');
  assert.equal(fmtBytes(3 * 1024 * 1024), '3.0 MiB');
});
