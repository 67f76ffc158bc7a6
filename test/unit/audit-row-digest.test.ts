/**
 * The audit chain's row digest (audit/chain.ts rowDigest) hashes the text between blobs in one update: it must give
 * exactly the digest of the encoding it always had (an update per piece), or every chain written before would fail
 * verification. Compared with that encoding, written out here, over values of every type, empty and odd strings
 * (lone surrogates, astral characters, NUL), blobs at the start, middle and end.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { rowDigest } from '../../src/audit/chain.js';

/** The encoding as it was: one update per piece. */
function reference(kind: string, values: readonly unknown[]): string {
  const h = createHash('sha256');
  h.update(`corral-audit-event\0${kind}\0`);
  for (const v of values) {
    if (v === null || v === undefined) h.update('n;');
    else if (typeof v === 'number' || typeof v === 'bigint') h.update(`i${String(v)};`);
    else if (typeof v === 'string') {
      const b = Buffer.from(v, 'utf8');
      h.update(`s${b.length}:`);
      h.update(b);
    } else if (v instanceof Uint8Array) {
      h.update(`b${v.byteLength}:`);
      h.update(v);
    } else h.update(`?${JSON.stringify(v)};`);
  }
  return h.digest('hex');
}

test('rowDigest is the per-piece encoding, byte for byte', () => {
  const strings = [
    '',
    'a',
    'héllo',
    '\u{1F600}x',
    '\uD800',
    '\uDC00',
    'a\uD83D',
    '\uDE00b',
    '\0',
    'x'.repeat(5000),
  ];
  const blobs = [new Uint8Array(0), Uint8Array.from([0, 255, 1]), Buffer.from('\uD800')];
  const pool: unknown[] = [
    ...strings,
    ...blobs,
    null,
    undefined,
    0,
    -0,
    1.5,
    -7,
    Number.NaN,
    2n ** 70n,
    { a: 1 },
    [1, 'x'],
    true,
  ];
  let n = 0;
  // Every pair and triple of neighbours (a lone surrogate beside another, a blob between two strings, …).
  for (const a of pool)
    for (const b of pool) {
      for (const values of [
        [a, b],
        [b, a, b],
        [a, 's\uDBFF', b],
      ]) {
        assert.equal(rowDigest('process-start', values), reference('process-start', values), `${n}`);
        n++;
      }
    }
  assert.equal(rowDigest('network', []), reference('network', []));
  assert.equal(rowDigest('network', pool), reference('network', pool));
});
