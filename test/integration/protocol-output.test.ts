// Conformance: output ordering, chunking, retention, backpressure and long-poll (protocol.md §3.6, §5.8, §5.9;
// checklist items 16, 17, 27).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { HIGH_WATER_BYTES } from '../../src/server/core/session.js';
import type { Notification } from '../helpers/client.js';
import { FakeClock } from '../helpers/clock.js';
import { serverSuite, startTestServer, until } from '../helpers/server.js';
import { startParams as params } from '../helpers/startParams.js';

interface ReadResult {
  chunks: { seq: number; stream: string; chunk: string }[];
  nextSeq: number;
  exited: boolean;
  closed: boolean;
}

describe('protocol output ordering and backpressure (§5.8, §5.9)', () => {
  const s = serverSuite();

  it('16: 8 MiB with the client pausing its socket until the server holds: nothing lost, chunks ≤ 8192, no seq gap, ≤ 1 MiB retained', async () => {
    const c = await s.ts.client();
    const data = randomBytes(8 * 1024 * 1024);
    const file = `${s.dir.path}/8mib.bin`;
    writeFileSync(file, data);
    await c.request('process/start', params('big', ['cat', file]));
    c.ws.pause();
    // Paused until the server is holding output for it: its queue at the backpressure mark, or everything read.
    const session = s.ts.sessionOf(c);
    await until(
      () => session.conn!.queuedBytes >= HIGH_WATER_BYTES || session.get('big')?.bytesOut === data.length,
      20_000,
      'the server to hold output for the paused client',
    );
    c.ws.resume();
    const events = await c.collect('big', 30_000);
    const outs = events.filter((n) => n.method === 'process/output');
    assert.deepEqual(
      events.map((n) => n.params.seq),
      events.map((_, i) => i + 1),
      'seqs contiguous from 1',
    );
    assert.equal(events.at(-1)!.method, 'process/closed', 'closed is last');
    assert.equal(events.filter((n) => n.method === 'process/exited').length, 1);
    const bufs = outs.map((n) => Buffer.from(n.params.chunk as string, 'base64'));
    for (const b of bufs) assert.ok(b.length > 0 && b.length <= 8192, `chunk of ${b.length} bytes`);
    assert.ok(Buffer.concat(bufs).equals(data), 'every byte delivered in order');

    const rr = await c.request<ReadResult>('process/read', { processId: 'big', afterSeq: 0 });
    const retained = rr.chunks.map((ch) => Buffer.from(ch.chunk, 'base64'));
    const total = retained.reduce((s, b) => s + b.length, 0);
    assert.ok(total <= 1024 * 1024, `retained ${total} bytes`);
    assert.ok(total > 1024 * 1024 - 8192, `retention keeps close to 1 MiB (${total})`);
    const lastOut = outs.at(-1)!.params.seq as number;
    assert.equal(rr.chunks.at(-1)!.seq, lastOut, 'the newest chunk is retained');
    for (let i = 1; i < rr.chunks.length; i++) {
      const prev = rr.chunks[i - 1]!.seq;
      const cur = rr.chunks[i]!.seq;
      // exited may sit between two output seqs; chunks are otherwise consecutive
      assert.ok(cur === prev + 1 || (cur === prev + 2 && events[prev]!.method === 'process/exited'));
    }
    const bySeq = new Map(outs.map((n) => [n.params.seq as number, n.params.chunk as string]));
    for (const ch of rr.chunks)
      assert.equal(ch.chunk, bySeq.get(ch.seq), `retained chunk ${ch.seq} is whole`);
    assert.ok(Buffer.concat(retained).equals(data.subarray(data.length - total)));
    c.close();
  });

  it('backpressure: an endless writer with a stalled client is paused (bounded memory), and resumes losslessly', async () => {
    const c = await s.ts.client();
    await c.request('process/start', params('endless', ['cat', '/dev/zero']));
    const proc = () => s.ts.sessionOf(c).get('endless')!;
    c.ws.pause();
    await until(() => proc().bytesOut > 4 * 1024 * 1024, 10_000, 'output to flow');
    await new Promise((r) => setTimeout(r, 1500));
    const plateau = proc().bytesOut;
    await new Promise((r) => setTimeout(r, 1000));
    const later = proc().bytesOut;
    assert.ok(later - plateau < 1024 * 1024, `still producing while stalled: ${plateau} → ${later}`);
    assert.ok(later < 48 * 1024 * 1024, `${later} bytes produced while the client read nothing`);
    c.ws.resume();
    await until(() => proc().bytesOut > later + 16 * 1024 * 1024, 10_000, 'output to resume');
    await c.request('process/terminate', { processId: 'endless' });
    const events = await c.collect('endless', 30_000);
    assert.deepEqual(
      events.map((n) => n.params.seq),
      events.map((_, i) => i + 1),
    );
    const delivered = events
      .filter((n) => n.method === 'process/output')
      .reduce((sum, n) => sum + Buffer.from(n.params.chunk as string, 'base64').length, 0);
    assert.equal(delivered, proc().bytesOut, 'every produced byte was delivered');
    c.close();
  });

  it('17: a background grandchild holding stdout open: exited before the last output, closed last', async () => {
    const c = await s.ts.client();
    const trigger = `${s.dir.path}/release-gc`;
    const script = `(while [ ! -e ${trigger} ]; do sleep 0.02; done; printf late) & printf early; exit 0`;
    await c.request('process/start', params('gc', ['/bin/sh', '-c', script]));
    await c.waitFor((n) => n.method === 'process/exited' && n.params.processId === 'gc');
    assert.equal(c.output('gc'), 'early');
    const rr = await c.request<ReadResult>('process/read', { processId: 'gc', afterSeq: 0 });
    assert.equal(rr.exited, true);
    assert.equal(rr.closed, false, 'the grandchild still holds stdout');
    writeFileSync(trigger, '');
    const events = await c.collect('gc');
    assert.deepEqual(
      events.map((n) => [n.method, n.params.seq]),
      [
        ['process/output', 1],
        ['process/exited', 2],
        ['process/output', 3],
        ['process/closed', 4],
      ],
    );
    assert.equal(c.output('gc'), 'earlylate');
    c.close();
  });

  it('27: a parked process/read (waitMs 2000) does not delay a later request on the same connection', async () => {
    // On a clock the test moves: the read cannot end by its timeout while the later requests are answered.
    const clock = new FakeClock();
    const local = await startTestServer({ clock });
    try {
      const c = await local.client();
      await c.request('process/start', params('quiet', ['sleep', '30']));
      let answered = false;
      const parked = c
        .request<ReadResult>('process/read', { processId: 'quiet', afterSeq: 0, waitMs: 2000 })
        .then((r) => {
          answered = true;
          return r;
        });
      const meta = await c.request<{ isDirectory: boolean }>('fs/getMetadata', { path: '/' });
      assert.equal(meta.isDirectory, true);
      await c.request('process/start', params('other', ['/bin/sh', '-c', 'printf x']));
      await c.collect('other');
      assert.equal(answered, false, 'the read is still parked');
      await clock.advance(1999);
      await c.request('process/write', { processId: 'none', chunk: '' });
      assert.equal(answered, false, 'still parked at 1999 ms');
      await clock.advance(1);
      const r = await parked;
      assert.deepEqual(r.chunks, []);
      await c.request('process/terminate', { processId: 'quiet' });
    } finally {
      await local.close();
    }
  });

  it('process/start immediately followed by process/read of the same id (0.120 client) never sees unknown id', async () => {
    const c = await s.ts.client();
    const starts: Promise<unknown>[] = [];
    const reads: Promise<ReadResult>[] = [];
    for (let i = 0; i < 20; i++) {
      starts.push(c.request('process/start', params(`sr${i}`, ['/bin/sh', '-c', 'printf x'])));
      reads.push(c.request<ReadResult>('process/read', { processId: `sr${i}`, afterSeq: 0, waitMs: 3000 }));
    }
    await Promise.all(starts);
    for (const r of await Promise.all(reads)) assert.ok(r.chunks.length > 0 || r.exited);
    c.close();
  });

  it('start responses precede first notifications while another process floods the socket', async () => {
    const c = await s.ts.client();
    await c.request('process/start', params('flood', ['head', '-c', String(4 * 1024 * 1024), '/dev/zero']));
    const ids = Array.from({ length: 20 }, (_, i) => `fast${i}`);
    await Promise.all(ids.map((id) => c.request('process/start', params(id, ['/bin/sh', '-c', 'printf y']))));
    await c.collect('flood', 30_000);
    for (const id of ids) {
      await c.collect(id);
      const parsed = c.frames.map(
        (f) =>
          JSON.parse(f) as { id?: number; result?: { processId?: string }; params?: Notification['params'] },
      );
      const resp = parsed.findIndex((m) => m.id !== undefined && m.result?.processId === id);
      const first = parsed.findIndex((m) => m.params?.processId === id);
      assert.ok(resp >= 0 && first > resp, `${id}: response ${resp}, first notification ${first}`);
    }
    c.close();
  });
});
