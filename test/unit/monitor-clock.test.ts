// The monitor feed's once-a-second refresh of byte counts, on a fake clock: due at 1 s of the server's time and not
// before, only for processes whose output grew, and only while someone subscribes.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Monitor } from '../../src/server/monitor/monitor.js';
import { servePanel } from '../../src/server/monitor/panel.js';
import type { Notification } from '../helpers/client.js';
import { FakeClock } from '../helpers/clock.js';
import { startTestServer, type TestServer, until } from '../helpers/server.js';

const clock = new FakeClock();
let ts: TestServer;
let monitor: Monitor;

before(async () => {
  ts = await startTestServer({ tokens: true, clock });
  // Batches go out as soon as the clock moves (batchMs 0): what a refresh marks is sent within the same advance.
  monitor = servePanel(ts.server, { batchMs: 0 });
});
after(async () => {
  monitor.dispose();
  await ts.close();
});

/** A batch that carries process `id` with output counted. */
const grown = (id: string) => (n: Notification) =>
  n.method === 'monitor/batch' &&
  ((n.params.processes ?? []) as { processId: string; bytesOut: number }[]).some(
    (p) => p.processId === id && p.bytesOut > 0,
  );

test('byte counts of running processes are refreshed every second of the server clock, when they grew', async () => {
  const panel = await ts.panel();
  const agent = await ts.client('agent');
  try {
    await panel.request('monitor/subscribe', { output: 'followed' });
    assert.equal(clock.pending, 1, 'the refresh is scheduled once someone subscribes');
    await agent.request('process/start', {
      processId: 'once',
      argv: ['/bin/sh', '-c', 'echo hello; exec sleep 30'],
      cwd: '/tmp',
      env: {},
      tty: false,
    });
    const proc = ts.sessionOf(agent).get('once')!;
    await until(() => proc.bytesOut > 0, 10_000, 'the output');
    /** Moves the clock, then makes a round trip: what the move sent has arrived. */
    const refreshed = async (ms: number) => {
      await clock.advance(ms);
      await panel.request('monitor/follow', {
        sessionId: proc.info.sessionId,
        processId: 'x',
        follow: false,
      });
      return panel.notifications.filter(grown('once')).length;
    };
    // The start's own batch (sent when the clock first moves) may carry the count already: counted from after it.
    const base = await refreshed(0);
    assert.equal(await refreshed(999), base, 'not before a second has passed');
    assert.equal(await refreshed(1), base + 1, 'at one second');
    assert.equal(await refreshed(1000), base + 1, 'no refresh when nothing grew');
    await panel.request('monitor/unsubscribe', {});
    assert.equal(clock.pending, 0, 'no refresh without a subscriber');
    await agent.request('process/terminate', { processId: 'once' });
  } finally {
    panel.close();
    agent.close();
  }
});
