/** nameThisThread (src/platform/threadName.ts): what the kernel shows for the calling thread. */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { nameThisThread, THREAD_NAME_MAX } from '../../src/platform/threadName.js';

const linux = process.platform === 'linux';
const comm = () => readFileSync('/proc/thread-self/comm', 'utf8').trim();

test('names the calling thread, cut to 15 bytes of printable ASCII', {
  skip: !linux && 'Linux only',
}, (t) => {
  const was = comm();
  t.after(() => nameThisThread(was));
  assert.equal(nameThisThread('corral-test'), true);
  assert.equal(comm(), 'corral-test');
  assert.equal(nameThisThread('a-name-well-over-fifteen-bytes'), true);
  assert.equal(comm(), 'a-name-well-ove');
  assert.equal(comm().length, THREAD_NAME_MAX);
  assert.equal(nameThisThread('tab\there-é\n'), true);
  assert.equal(comm(), 'tab?here-??');
});
