import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import { MAX_CHUNK } from '../../src/process/managedProcess.js';
import { encodeOutput, encodeOutputs, outputHead } from '../../src/rpc/output.js';

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
});
