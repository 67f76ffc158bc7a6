// The panel's one pacing rule (renderer/dom.ts `paced`, issue 38), under Node with requestAnimationFrame standing in
// as a timer: requests coalesce into one run, every view's requests share one frame, a stream of requests runs at
// most once per PACE_MS, an input's render (`ran()`) holds the next paced one back. Only lower bounds are asserted
// on time (a timer never fires early; a loaded machine only makes the gaps longer).
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { PACE_MS, paced } from '../../renderer/dom.js';
import { until } from '../helpers/server.js';

let frames = 0;
/** When the last paced run of any test ran: past 2 × PACE_MS after it no paced frame is pending (a quiet spell). */
let lastRun = 0;
const quiet = () => until(() => performance.now() >= lastRun + 2 * PACE_MS, 5000);
const stamp = (list: number[]) => () => {
  lastRun = performance.now();
  list.push(lastRun);
};

before(() => {
  (globalThis as unknown as { requestAnimationFrame: (f: () => void) => void }).requestAnimationFrame = (
    f,
  ) => {
    frames++;
    setTimeout(f, 16);
  };
});

test('requests coalesce; two views share one frame', async () => {
  const runs = { a: 0, b: 0 };
  const a = paced(() => {
    runs.a++;
    lastRun = performance.now();
  });
  const b = paced(() => runs.b++);
  const before = frames;
  for (let i = 0; i < 100; i++) {
    a();
    b();
  }
  await until(() => runs.a === 1 && runs.b === 1, 5000);
  assert.equal(frames - before, 1, 'one frame for both views');
});

test('a stream of requests runs at most once per PACE_MS; the first after a quiet spell at the next frame', async () => {
  const at: number[] = [];
  const f = paced(stamp(at));
  await quiet();
  const t0 = performance.now();
  f();
  await until(() => at.length === 1, 5000);
  assert.ok(at[0]! - t0 < PACE_MS, `the first ran ${at[0]! - t0} ms after its request, at the next frame`);
  // Requests keep coming: each run waits its turn.
  const stream = setInterval(f, 5);
  await until(() => at.length >= 4, 10_000);
  clearInterval(stream);
  for (let i = 1; i < at.length; i++)
    assert.ok(at[i]! - at[i - 1]! >= PACE_MS - 1, `runs ${i - 1} and ${i} ${at[i]! - at[i - 1]!} ms apart`);
});

test('an input rendered at once (ran) holds the next paced render back', async () => {
  const at: number[] = [];
  const f = paced(stamp(at));
  await quiet();
  const input = performance.now();
  f.ran();
  f();
  await until(() => at.length === 1, 5000);
  assert.ok(at[0]! - input >= PACE_MS - 1, `ran ${at[0]! - input} ms after the input's render`);
});
