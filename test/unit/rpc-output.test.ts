import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import { MAX_CHUNK } from '../../src/process/managedProcess.js';
import { encodeOutput, encodeOutputs, OutputLease, outputHead } from '../../src/rpc/output.js';

/** What each notification must be: the text JSON.stringify gives for the same object. */
function expected(
  data: Buffer,
  chunk: number,
  fields: Record<string, string>,
  firstSeq: number,
  stream: string,
) {
  const out: string[] = [];
  for (let off = 0, seq = firstSeq; off < data.length; off += chunk, seq++) {
    const params = { ...fields, seq, stream, chunk: data.subarray(off, off + chunk).toString('base64') };
    out.push(JSON.stringify({ method: 'process/output', params }));
  }
  return out;
}

describe('output notifications (src/rpc/output.ts: the one place their text is built)', () => {
  const fields = { processId: 'p-"ü"\\\n' };
  const head = outputHead('process/output', fields);

  it('are exactly what JSON.stringify gives, for every chunk size, seq width and stream', () => {
    const cases: [number, number, number][] = [
      // [bytes, chunk size, first seq]
      [0, MAX_CHUNK, 1],
      [1, MAX_CHUNK, 1],
      [2, MAX_CHUNK, 9],
      [3, MAX_CHUNK, 99],
      [60, 7, 8], // seqs 8..16 cross a digit boundary
      [MAX_CHUNK - 1, MAX_CHUNK, 999],
      [MAX_CHUNK, MAX_CHUNK, 1],
      [MAX_CHUNK + 1, MAX_CHUNK, 9_999_999_999],
      [64 * 1024, MAX_CHUNK, 5],
      [200_000, 60_000, 1], // messages bigger than an arena's share
    ];
    for (const stream of ['stdout', 'stderr', 'pty'] as const) {
      for (const [bytes, chunk, seq] of cases) {
        const data = randomBytes(bytes);
        const out: Buffer[] = [];
        const total = encodeOutputs(head, seq, stream, data, chunk, out);
        const want = expected(data, chunk, fields, seq, stream);
        assert.deepEqual(
          out.map((b) => b.toString()),
          want,
          `${bytes} bytes in chunks of ${chunk} from seq ${seq} (${stream})`,
        );
        assert.equal(total, Buffer.byteLength(want.join('')));
      }
    }
  });

  it('one chunk, with other fields first (the panel feed), for every length up to 300', () => {
    const monitor = outputHead('monitor/output', { sessionId: 's1', processId: 'p' });
    for (let n = 0; n <= 300; n++) {
      const data = randomBytes(n);
      const want = JSON.stringify({
        method: 'monitor/output',
        params: {
          sessionId: 's1',
          processId: 'p',
          seq: n + 1,
          stream: 'stderr',
          chunk: data.toString('base64'),
        },
      });
      assert.equal(encodeOutput(monitor, n + 1, 'stderr', data).toString(), want, `length ${n}`);
    }
  });

  it('the panel feed’s joined and skipped chunks (firstSeq, skippedBytes) are what JSON.stringify gives', () => {
    const remote = outputHead('monitor/output', { server: 'pod-"1"', sessionId: 's1', processId: 'p' });
    const seqs = [1, 9, 10, 99, 100, 12_345, 9_999_999_999];
    for (const seq of seqs) {
      for (const firstSeq of [0, 1, 7, seq]) {
        for (const skippedBytes of [0, 1, 10, 65_536, 123_456_789]) {
          const data = randomBytes(seq % 97);
          const params: Record<string, unknown> = { server: 'pod-"1"', sessionId: 's1', processId: 'p', seq };
          if (firstSeq > 0) params.firstSeq = firstSeq;
          params.stream = 'pty';
          params.chunk = data.toString('base64');
          if (skippedBytes > 0) params.skippedBytes = skippedBytes;
          const got = encodeOutput(remote, seq, 'pty', data, { firstSeq, skippedBytes }).toString();
          assert.equal(
            got,
            JSON.stringify({ method: 'monitor/output', params }),
            `${seq} ${firstSeq} ${skippedBytes}`,
          );
        }
      }
    }
  });

  it('messages never share bytes: one built later does not change one built earlier', () => {
    const a = encodeOutput(head, 1, 'stdout', Buffer.from('first'));
    const copy = Buffer.from(a);
    for (let i = 0; i < 200; i++) encodeOutput(head, i, 'stdout', randomBytes(4000));
    assert.ok(a.equals(copy));
  });

  describe('leased (a connection’s stdout and stderr: memory carved again once written out)', () => {
    /** One read's notifications under a lease, with copies of their bytes as built. */
    const leased = (data: Buffer, firstSeq = 1) => {
      const lease = new OutputLease();
      const messages: Buffer[] = [];
      encodeOutputs(head, firstSeq, 'stdout', data, MAX_CHUNK, messages, lease);
      return { lease, messages, copies: messages.map((m) => Buffer.from(m)) };
    };

    it('are what JSON.stringify gives, read after read, with the memory reused', () => {
      const arenas = new Set<ArrayBufferLike>();
      for (let i = 0; i < 300; i++) {
        const data = randomBytes(1 + ((i * 7919) % (64 * 1024)));
        const r = leased(data, i * 100 + 1);
        assert.deepEqual(
          r.messages.map((m) => m.toString()),
          expected(data, MAX_CHUNK, fields, i * 100 + 1, 'stdout'),
        );
        for (const m of r.messages) arenas.add(m.buffer);
        r.lease.release();
      }
      // 300 reads of up to 64 KiB (~27 MB of notifications) in the arenas of one or two reads in flight.
      assert.ok(arenas.size <= 3, `${arenas.size} arenas`);
    });

    it('a message is never carved again before its lease is released, whatever is built meanwhile', () => {
      const held = [leased(randomBytes(64 * 1024)), leased(randomBytes(3000), 50)];
      for (let i = 0; i < 500; i++) leased(randomBytes(64 * 1024), 1000 + i).lease.release();
      for (let i = 0; i < 200; i++) encodeOutput(head, i, 'stderr', randomBytes(4000));
      for (const h of held) {
        h.messages.forEach((m, i) => {
          assert.ok(m.equals(h.copies[i]!), `message ${i} changed before its release`);
        });
        h.lease.release();
      }
    });

    it('a lease never released (its connection closed) keeps its messages intact and costs nothing else', () => {
      const lost = leased(randomBytes(64 * 1024));
      for (let i = 0; i < 200; i++) leased(randomBytes(64 * 1024), i).lease.release();
      lost.messages.forEach((m, i) => {
        assert.ok(m.equals(lost.copies[i]!));
      });
    });

    it('release is idempotent: a second call frees nothing another read holds', () => {
      const first = leased(randomBytes(20_000));
      first.lease.release();
      const second = leased(randomBytes(20_000), 9);
      first.lease.release();
      leased(randomBytes(20_000), 99); // would be carved over `second` had the second release counted
      second.messages.forEach((m, i) => {
        assert.ok(m.equals(second.copies[i]!));
      });
      second.lease.release();
    });
  });
});
