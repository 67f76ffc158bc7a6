// The monitor feed's pace, on a fake clock (issue 38): a change after a quiet spell goes out batchMs later; while
// changes keep coming, one batch per paceMs (each batch costs a panel a message, a parse and a frame whatever it
// carries); live output (a terminal's echo) and the rest of a batch that could not carry everything go at batchMs.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { MonitorSnapshot } from '../../src/protocol/monitor.js';
import type { RpcConnection } from '../../src/rpc/connection.js';
import { outputHead } from '../../src/rpc/output.js';
import { BATCH_MS, Feed, PACE_BATCHES } from '../../src/server/monitor/monitorFeed.js';
import { FakeClock } from '../helpers/clock.js';

interface Proc {
  key: string;
}

/** A feed over plain records, one subscriber whose batches are recorded with the fake clock's time. */
function rig(page = 2000) {
  const clock = new FakeClock(0);
  const sent: { at: number; text: string }[] = [];
  const conn = {
    closed: false,
    send(text: string | Buffer, done: () => void) {
      sent.push({ at: clock.now(), text: String(text) });
      done();
    },
  } as unknown as RpcConnection;
  const feed = new Feed<Proc, never>(
    {
      processJson: (p) => JSON.stringify({ processId: p.key }),
      sessionJson: () => '{}',
      networkJson: (r) => JSON.stringify(r),
      outputHead: (p) => outputHead('monitor/output', { sessionId: 's', processId: p.key }),
      snapshot: () => ({ snapshot: { processes: [] } as unknown as MonitorSnapshot, rest: [] }),
    },
    {
      clock,
      highWaterBytes: 1 << 30,
      lowWaterBytes: 1 << 29,
      counters: () => ({ evicted: 0, forgottenProcesses: 0 }),
      page,
    },
  );
  const { sub } = feed.subscribe(conn, null, true);
  feed.start(sub);
  return { clock, feed, sent };
}

test('defaults: batches 25 ms after a quiet spell, 100 ms apart while changes keep coming', () => {
  const { feed } = rig();
  assert.equal(feed.batchMs, BATCH_MS);
  assert.equal(feed.paceMs, BATCH_MS * PACE_BATCHES);
  assert.equal(feed.paceMs, 100);
});

test('a stream of changes: the first batch at batchMs, then one per paceMs, each carrying what came meanwhile', async () => {
  const { clock, feed, sent } = rig();
  // A process changes every 5 ms for 500 ms.
  for (let t = 0; t < 500; t += 5) {
    feed.process(`p${t}`, { key: `p${t}` });
    await clock.advance(5);
  }
  await clock.advance(1000);
  const times = sent.map((s) => s.at);
  assert.equal(times[0], BATCH_MS, 'the first change after a quiet spell waits batchMs only');
  for (let i = 1; i < times.length; i++)
    assert.ok(
      times[i]! - times[i - 1]! >= feed.paceMs,
      `batches ${i - 1} and ${i} at ${times[i - 1]} and ${times[i]}`,
    );
  // 500 ms of changes in ~6 batches, not 20; every process was sent.
  assert.ok(sent.length <= 7, `${sent.length} batches for 500 ms of changes`);
  const ids = sent.flatMap((s) => [...s.text.matchAll(/"processId":"(p\d+)"/g)].map((m) => m[1]));
  assert.equal(new Set(ids).size, 100);
  // After a quiet spell, the next change goes out batchMs after it again.
  const quietFrom = clock.now();
  feed.process('late', { key: 'late' });
  await clock.advance(1000);
  assert.equal(sent.at(-1)!.at, quietFrom + BATCH_MS);
});

test("live output goes out batchMs after it, even right after a batch (a terminal's echo)", async () => {
  const { clock, feed, sent } = rig();
  feed.process('t', { key: 't' });
  await clock.advance(BATCH_MS);
  assert.equal(sent.length, 1);
  // A process change right after the batch waits for the pace; output coming meanwhile pulls the batch in.
  feed.process('t', { key: 't' });
  await clock.advance(10);
  feed.output('t', { key: 't' }, 1, 'stdout', Buffer.from('echo'));
  await clock.advance(BATCH_MS);
  const second = sent.slice(1);
  assert.deepEqual(second.map((s) => [s.at, JSON.parse(s.text).method]).sort(), [
    [BATCH_MS + 10 + BATCH_MS, 'monitor/batch'],
    [BATCH_MS + 10 + BATCH_MS, 'monitor/output'],
  ]);
});

test('a backlog larger than a batch goes on at batchMs, not at the pace', async () => {
  const { clock, feed, sent } = rig(10);
  for (let i = 0; i < 35; i++) feed.process(`p${i}`, { key: `p${i}` });
  await clock.advance(1000);
  const times = sent.map((s) => s.at);
  assert.deepEqual(times, [BATCH_MS, 2 * BATCH_MS, 3 * BATCH_MS, 4 * BATCH_MS]);
});
