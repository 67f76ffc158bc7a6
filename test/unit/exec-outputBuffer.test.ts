import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { OutputBuffer, RETAINED_BYTES } from '../../src/process/outputBuffer.js';

const chunk = (seq: number, size: number, stream: 'stdout' | 'stderr' = 'stdout') => ({
  seq,
  stream,
  data: Buffer.alloc(size, seq % 256),
});

describe('OutputBuffer retention and reads (protocol.md §5.3, §5.9)', () => {
  it('retains the newest whole chunks totalling ≤ 1 MiB', () => {
    assert.equal(RETAINED_BYTES, 1024 * 1024);
    const b = new OutputBuffer();
    for (let seq = 1; seq <= 1024; seq++) b.push(chunk(seq, 8192));
    assert.ok(b.retainedBytes <= RETAINED_BYTES);
    const all = b.read(0, null);
    assert.equal(
      all.reduce((s, c) => s + c.data.length, 0),
      b.retainedBytes,
    );
    assert.equal(all.at(-1)!.seq, 1024);
    assert.equal(all.length, 128, '128 × 8192 = exactly 1 MiB');
    assert.equal(all[0]!.seq, 897);
    b.push(chunk(1025, 1));
    const after = b.read(0, null);
    assert.equal(after[0]!.seq, 898, 'a whole chunk is dropped, never a part');
    assert.ok(after.every((c, i) => i === 0 || c.seq === after[i - 1]!.seq + 1));
    assert.ok(after.every((c) => c.data.length === (c.seq === 1025 ? 1 : 8192)));
  });

  it('a single chunk larger than the limit is dropped entirely; the buffer stays ≤ limit', () => {
    const b = new OutputBuffer(10);
    b.push(chunk(1, 4));
    b.push(chunk(2, 11));
    assert.ok(b.retainedBytes <= 10);
    assert.deepEqual(
      b.read(0, null).map((c) => c.seq),
      [],
    );
    b.push(chunk(3, 6));
    b.push(chunk(4, 4));
    assert.deepEqual(
      b.read(0, null).map((c) => c.seq),
      [3, 4],
    );
    b.push(chunk(5, 1));
    assert.deepEqual(
      b.read(0, null).map((c) => c.seq),
      [4, 5],
    );
  });

  it('afterSeq is exclusive; seqs may skip (exited takes a number)', () => {
    const b = new OutputBuffer();
    for (const seq of [1, 2, 4, 5]) b.push(chunk(seq, 3));
    assert.deepEqual(
      b.read(0, null).map((c) => c.seq),
      [1, 2, 4, 5],
    );
    assert.deepEqual(
      b.read(2, null).map((c) => c.seq),
      [4, 5],
    );
    assert.deepEqual(
      b.read(3, null).map((c) => c.seq),
      [4, 5],
    );
    assert.deepEqual(b.read(5, null), []);
    assert.deepEqual(b.read(99, null), []);
  });

  it('maxBytes stops before the chunk that would exceed it, but returns at least one chunk', () => {
    const b = new OutputBuffer();
    b.push(chunk(1, 1));
    b.push(chunk(2, 2));
    b.push(chunk(3, 3));
    for (const max of [0, 1, 2]) {
      assert.deepEqual(
        b.read(0, max).map((c) => c.seq),
        [1],
        `maxBytes ${max}`,
      );
    }
    assert.deepEqual(
      b.read(0, 3).map((c) => c.seq),
      [1, 2],
    );
    assert.deepEqual(
      b.read(0, 5).map((c) => c.seq),
      [1, 2],
    );
    assert.deepEqual(
      b.read(0, 6).map((c) => c.seq),
      [1, 2, 3],
    );
    assert.deepEqual(
      b.read(1, 0).map((c) => c.seq),
      [2],
    );
    assert.deepEqual(
      b.read(0, -1).map((c) => c.seq),
      [1],
    );
  });

  it('since() and text() see only retained chunks, in order', () => {
    const b = new OutputBuffer(6);
    b.push({ seq: 1, stream: 'stdout', data: Buffer.from('aaa') });
    b.push({ seq: 2, stream: 'stderr', data: Buffer.from('bb') });
    b.push({ seq: 3, stream: 'stdout', data: Buffer.from('cc') });
    b.push({ seq: 4, stream: 'stderr', data: Buffer.from('d') });
    assert.deepEqual(
      b.since(0).map((c) => c.seq),
      [2, 3, 4],
    );
    assert.deepEqual(
      b.since(3).map((c) => c.seq),
      [4],
    );
    assert.equal(b.text(['stderr']), 'bbd');
    assert.equal(b.text(['stdout', 'stderr']), 'bbccd');
  });

  it('stays consistent across many compactions', () => {
    const b = new OutputBuffer(100);
    for (let seq = 1; seq <= 20_000; seq++) b.push(chunk(seq, (seq % 7) + 1));
    const r = b.read(0, null);
    assert.ok(b.retainedBytes <= 100);
    assert.equal(
      r.reduce((s, c) => s + c.data.length, 0),
      b.retainedBytes,
    );
    assert.equal(r.at(-1)!.seq, 20_000);
    assert.ok(r.every((c, i) => i === 0 || c.seq === r[i - 1]!.seq + 1));
    assert.ok(b.retainedBytes + ((r[0]!.seq - 1) % 7) + 1 > 100, 'nothing more could have been kept');
  });

  it('keeps a copy: the caller may reuse its buffer (the native pipe reader does)', () => {
    const b = new OutputBuffer();
    const scratch = Buffer.from('first');
    b.pushData(1, 'stdout', scratch);
    scratch.write('XXXXX');
    b.pushData(2, 'stderr', scratch.subarray(0, 2));
    assert.deepEqual(
      b.read(0, null).map((c) => [c.seq, c.stream, c.data.toString()]),
      [
        [1, 'stdout', 'first'],
        [2, 'stderr', 'XX'],
      ],
    );
  });

  it('matches a plain list model through ring wrap-arounds and growth (random sizes, seeded)', () => {
    let state = 12345;
    const rand = (n: number) => {
      state = (state * 1103515245 + 12345) & 0x7fffffff;
      return state % n;
    };
    for (const limit of [50, 1000, 64 * 1024]) {
      const b = new OutputBuffer(limit);
      const model: { seq: number; data: Buffer }[] = [];
      for (let seq = 1; seq <= 3000; seq++) {
        const size = rand(5) === 0 ? rand(limit + 10) : rand(Math.min(limit, 300)) + 1;
        const data = Buffer.alloc(size, seq % 251);
        b.push({ seq, stream: seq % 3 ? 'stdout' : 'stderr', data });
        model.push({ seq, data });
        let total = model.reduce((s, c) => s + c.data.length, 0);
        while (total > limit && model.length > 0) total -= model.shift()!.data.length;
        const got = b.read(0, null);
        assert.deepEqual(
          got.map((c) => c.seq),
          model.map((c) => c.seq),
          `limit ${limit}, after seq ${seq}`,
        );
        assert.ok(got.every((c, i) => c.data.equals(model[i]!.data)));
        assert.equal(b.retainedBytes, total);
      }
    }
  });

  it('pushRead keeps exactly what pushData chunk by chunk keeps (random reads and chunk sizes, seeded)', () => {
    let state = 777;
    const rand = (n: number) => {
      state = (state * 1103515245 + 12345) & 0x7fffffff;
      return state % n;
    };
    for (const [limit, chunk] of [
      [100, 7],
      [1000, 64],
      [64 * 1024, 8192],
      [1024 * 1024, 8192],
    ] as const) {
      const batched = new OutputBuffer(limit);
      const single = new OutputBuffer(limit);
      let seq = 1;
      for (let i = 0; i < 400; i++) {
        const size = rand(8) === 0 ? rand(limit * 2) : rand(Math.min(limit, 4 * chunk)) + 1;
        const data = Buffer.alloc(size);
        for (let k = 0; k < size; k++) data[k] = (seq + k) & 0xff;
        batched.pushRead(seq, 'stdout', data, chunk);
        for (let off = 0; off < size; off += chunk)
          single.pushData(seq++, 'stdout', data.subarray(off, off + chunk));
        data.fill(0); // the caller reuses its buffer: retention must have copied
        const a = batched.read(0, null);
        const b = single.read(0, null);
        assert.deepEqual(
          a.map((c) => c.seq),
          b.map((c) => c.seq),
          `limit ${limit}, read ${i}`,
        );
        assert.ok(
          a.every((c, j) => c.data.equals(b[j]!.data)),
          `bytes, limit ${limit}, read ${i}`,
        );
        assert.equal(batched.retainedBytes, single.retainedBytes);
      }
    }
  });
});
