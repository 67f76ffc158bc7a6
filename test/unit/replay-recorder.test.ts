/** The replay recorder's bounds (src/audit/replayRecorder.ts): coalescing, the byte bound, the part bound. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { COALESCE_MS, MAX_REPLAY_PARTS, ReplayRecorder } from '../../src/audit/replayRecorder.js';

test('chunks of one stream within COALESCE_MS join a part; another stream or a later time starts one', () => {
  const r = new ReplayRecorder<string>(1024);
  r.start('p');
  r.output('p', 1000, 'stdout', Buffer.from('ab'));
  r.output('p', 1000 + COALESCE_MS - 1, 'stdout', Buffer.from('cd'));
  r.output('p', 1000 + COALESCE_MS - 1, 'stderr', Buffer.from('E'));
  r.output('p', 2000, 'stderr', Buffer.from('F'));
  r.output('p', 2000, 'stdout', Buffer.alloc(0));
  r.output('other', 2000, 'stdout', Buffer.from('never started'));
  const c = r.take('p')!;
  assert.equal(Buffer.from(c.data).toString(), 'abcdEF');
  assert.deepEqual(c.parts, [
    { at: 1000, stream: 'stdout', bytes: 4 },
    { at: 1000 + COALESCE_MS - 1, stream: 'stderr', bytes: 1 },
    { at: 2000, stream: 'stderr', bytes: 1 },
  ]);
  assert.equal(c.droppedBytes, 0);
  assert.equal(r.take('p'), null, 'forgotten once taken');
  assert.equal(r.take('other'), null);
  assert.equal(r.size, 0);
});

test('the byte bound keeps what fits of the crossing chunk and counts the rest as dropped', () => {
  const r = new ReplayRecorder<number>(10);
  r.start(1);
  r.output(1, 0, 'pty', Buffer.from('123456'));
  r.output(1, 100, 'pty', Buffer.from('789abc'));
  r.output(1, 200, 'pty', Buffer.from('x'.repeat(1000)));
  const c = r.take(1)!;
  assert.equal(Buffer.from(c.data).toString(), '123456789a');
  assert.equal(c.droppedBytes, 2 + 1000);
});

test('the part bound: a flood of tiny chunks at spread times keeps MAX_REPLAY_PARTS parts', () => {
  const r = new ReplayRecorder<number>(1024 * 1024);
  r.start(1);
  const n = MAX_REPLAY_PARTS + 500;
  for (let i = 0; i < n; i++) r.output(1, i * COALESCE_MS, i % 2 ? 'stdout' : 'stderr', Buffer.from('z'));
  const c = r.take(1)!;
  assert.equal(c.parts.length, MAX_REPLAY_PARTS);
  assert.equal(c.data.length, MAX_REPLAY_PARTS);
  assert.equal(c.droppedBytes, 500);
});

test('the bound over every open replay: past it, each process keeps nothing more; a close gives its bytes back', () => {
  const r = new ReplayRecorder<number>(100, 150);
  r.start(1);
  r.start(2);
  r.output(1, 0, 'stdout', Buffer.alloc(100, 1));
  r.output(2, 0, 'stdout', Buffer.alloc(100, 2));
  assert.equal(r.heldBytes, 150);
  const a = r.take(1)!;
  assert.equal(a.data.length, 100);
  assert.equal(a.droppedBytes, 0);
  assert.equal(r.heldBytes, 50);
  r.start(3);
  r.output(3, 0, 'stdout', Buffer.alloc(10, 3));
  const b = r.take(2)!;
  assert.equal(b.data.length, 50);
  assert.equal(b.droppedBytes, 50, 'the cut is marked');
  assert.equal(r.take(3)!.data.length, 10, 'room again after the close');
  r.start(4);
  r.output(4, 0, 'pty', Buffer.alloc(20));
  r.clear();
  assert.equal(r.heldBytes, 0);
  assert.equal(r.size, 0);
});

test('a bound that is not a positive integer is refused', () => {
  assert.throws(() => new ReplayRecorder(0), /positive integer/);
  assert.throws(() => new ReplayRecorder(1.5), /positive integer/);
});
