/**
 * The redaction memo (src/protocol/monitor.ts redactFixed / redactedJson, issue 32) keys each redaction by its input's
 * JSON text. An agent client reaches it with every process/start's `metadata` (the schema's z.unknown(): any JSON);
 * the server's launch summaries carry the client's policy paths. Fed deep, wide, huge and malformed input, it must
 * answer exactly what redact answers (secrets out), in bounded time, keep nothing over its bound, and never hand one
 * input's redaction to another whose redaction differs.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { REDACTED, redact, redactedJson, redactFixed } from '../../src/protocol/monitor.js';

/** redactFixed and redactedJson of `v` are redact's answer, within `ms`. */
function exact(v: object, name: string, ms = 2000): Record<string, unknown> {
  const t0 = performance.now();
  const r = redactFixed(v);
  const text = redactedJson(v);
  const took = performance.now() - t0;
  assert.ok(took < ms, `${name}: ${took} ms`);
  const want = redact(v);
  assert.deepEqual(r, want, name);
  assert.equal(text, JSON.stringify(want), name);
  return r;
}

/** `{a: {a: … {token: 'secret'} …}}`, `n` levels. */
function nested(n: number): Record<string, unknown> {
  let v: Record<string, unknown> = { token: 'secret' };
  for (let i = 0; i < n; i++) v = { a: v };
  return v;
}

describe('the redaction memo against hostile metadata and summaries', () => {
  test('deep: 2000 levels (kept by text), 5000 (over the text bound) and 200 000 (no text: JSON.stringify overflows)', () => {
    const two = exact(nested(2000), '2000 levels');
    assert.equal(redactFixed(nested(2000)), two, 'the same text: the kept redaction');
    const five = exact(nested(5000), '5000 levels');
    assert.notEqual(redactFixed(nested(5000)), five, 'a text over 16 KiB: not kept');
    // Deeper than JSON.stringify can walk: redacted without the memo, the server goes on.
    const deep = nested(200_000);
    assert.throws(() => JSON.stringify(deep), RangeError);
    exact(deep, '200 000 levels');
    assert.notEqual(redactFixed(nested(200_000)), redactFixed(deep), 'no text: one redaction per object');
  });

  test('wide: 100 000 members, secrets among them, redact as redact and are not kept (over 16 KiB of text)', () => {
    const wide: Record<string, unknown> = {};
    for (let i = 0; i < 100_000; i++) wide[i % 10 === 0 ? `apiKey${i}` : `k${i}`] = `v${i}`;
    const r = exact(wide, '100 000 members');
    assert.equal(r.apiKey0, REDACTED);
    assert.equal(r.k1, 'v1');
    assert.notEqual(redactFixed({ ...wide }), r, 'over the bound: each object redacted on its own');
    const list = { list: Array.from({ length: 100_000 }, (_, i) => ({ password: `p${i}` })) };
    exact(list, '100 000 elements');
  });

  test('huge: a 4 MiB value and a 1 MiB secret name', () => {
    exact({ note: 'x'.repeat(4 << 20) }, '4 MiB value');
    const r = exact({ [`${'n'.repeat(1 << 20)}token`]: 'secret' }, '1 MiB name');
    assert.deepEqual(Object.values(r), [REDACTED]);
  });

  test('malformed: __proto__ as a member, Object.prototype names, odd strings, equal texts of different inputs', () => {
    // JSON.parse makes __proto__ an own member, as the wire does.
    const proto = JSON.parse('{"__proto__":{"token":"s"},"constructor":{"password":"p"},"toString":"x"}');
    const r = exact(proto, '__proto__');
    assert.equal(Object.getPrototypeOf(r), Object.prototype, 'no prototype taken from the input');
    assert.deepEqual(
      Object.keys(r),
      ['__proto__', 'constructor', 'toString'],
      'every member kept as a member',
    );
    assert.match(redactedJson(proto), /^\{"__proto__":\{"token":"‹redacted›"\}/);
    for (const s of ['\u0000', '\ud800', '\u2028', '"\\', '‹redacted›'])
      exact({ [s]: s, secret: s, env: { [s]: s } }, JSON.stringify(s));
    // Inputs whose JSON texts are equal but whose redactions could differ: never a secret through the memo.
    const withSecret = { token: 'hunter2' };
    exact(withSecret, 'a secret');
    exact({ token: 'other' }, 'the same shape, another secret');
    const undef: Record<string, unknown> = { token: undefined, a: 1 };
    const absent = { a: 1 };
    for (const v of [absent, undef, { a: 1, b: undefined }]) {
      const got = redactedJson(v);
      assert.equal(got, JSON.stringify(redact(v)), 'the same text a fresh redaction gives');
      assert.doesNotMatch(got, /hunter2|other/);
    }
    assert.equal(redactedJson({ n: -0, m: Number.NaN }), JSON.stringify(redact({ n: -0, m: Number.NaN })));
  });

  test('many distinct inputs: every answer exact, and the kept ones bounded', () => {
    const first = { token: 'a', path: '/w/0' };
    const kept = redactFixed(first);
    for (let i = 1; i < 1000; i++) exact({ token: 'a', path: `/w/${i}` }, `input ${i}`, 200);
    // The first is long out of the memo (16 kept): a copy of it is redacted anew, equal to the first's.
    const again = redactFixed(structuredClone(first));
    assert.notEqual(again, kept);
    assert.deepEqual(again, kept);
  });
});
