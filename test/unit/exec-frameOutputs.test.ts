import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import { MAX_CHUNK } from '../../src/process/managedProcess.js';
import { base64Into, frameOutputs } from '../../src/process/spawner.js';
import { textFraming } from '../../src/server/wsListener.js';

/** What the frames must be: one text frame per chunk holding the notification JSON.stringify would produce. */
function expected(data: Buffer, chunk: number, processId: string, firstSeq: number, stream: string): Buffer {
  const out: Buffer[] = [];
  for (let off = 0, seq = firstSeq; off < data.length; off += chunk, seq++) {
    const payload = Buffer.from(
      JSON.stringify({
        method: 'process/output',
        params: { processId, seq, stream, chunk: data.subarray(off, off + chunk).toString('base64') },
      }),
    );
    const header = Buffer.alloc(textFraming.headerLength(payload.length));
    textFraming.writeHeader(header, 0, payload.length);
    out.push(header, payload);
  }
  return Buffer.concat(out);
}

describe('native output framing (the server hot path)', {
  skip: frameOutputs ? false : 'addon not built',
}, () => {
  const processId = 'p-"ü"';
  const prefix = Buffer.from(
    `{"method":"process/output","params":{"processId":${JSON.stringify(processId)},"seq":`,
  );
  const fields = (stream: string) => Buffer.from(`,"stream":"${stream}","chunk":"`);

  it('writes exactly the frames JSON.stringify + RFC 6455 framing give, for every size class and seq width', () => {
    const cases: [number, number, number][] = [
      // [bytes, chunk size, first seq]
      [1, MAX_CHUNK, 1],
      [2, MAX_CHUNK, 9],
      [3, MAX_CHUNK, 99],
      [60, 7, 8], // payloads < 126 bytes: 2-byte headers; seqs 8..16 cross a digit boundary
      [MAX_CHUNK - 1, MAX_CHUNK, 999],
      [MAX_CHUNK, MAX_CHUNK, 1],
      [MAX_CHUNK + 1, MAX_CHUNK, 9_999_999_999],
      [64 * 1024, MAX_CHUNK, 5],
      [200_000, 60_000, 1], // payloads ≥ 65536 bytes: 10-byte headers
    ];
    for (const [bytes, chunk, seq] of cases) {
      const data = randomBytes(bytes);
      const want = expected(data, chunk, processId, seq, 'stderr');
      const dst = Buffer.alloc(want.length + 20, 0xee);
      const n = frameOutputs!(data, chunk, prefix, seq, fields('stderr'), dst, 7);
      assert.equal(n, want.length, `${bytes} bytes`);
      assert.ok(dst.subarray(7, 7 + n).equals(want), `${bytes} bytes in chunks of ${chunk} from seq ${seq}`);
      assert.equal(dst[6], 0xee);
      assert.equal(dst[7 + n], 0xee, 'nothing written past the frames');
    }
  });

  it('writes nothing and throws a RangeError when the destination is too small', () => {
    const data = randomBytes(100);
    const need = expected(data, MAX_CHUNK, processId, 1, 'stdout').length;
    const dst = Buffer.alloc(need - 1, 0xee);
    assert.throws(() => frameOutputs!(data, MAX_CHUNK, prefix, 1, fields('stdout'), dst, 0), RangeError);
    assert.ok(dst.every((b) => b === 0xee));
  });

  it('base64Into matches Buffer.toString for every length up to 300', () => {
    for (let n = 0; n <= 300; n++) {
      const src = randomBytes(n);
      const dst = Buffer.alloc(410);
      const w = base64Into!(src, dst, 3);
      assert.equal(dst.toString('latin1', 3, 3 + w), src.toString('base64'), `length ${n}`);
    }
  });
});
