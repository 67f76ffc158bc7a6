/**
 * redactFixed (protocol/monitor.ts): one redaction of a started process's policy summary and metadata, shared by the
 * audit trail and the monitor. It must be exactly redact's answer (secrets and env values out), made once per object
 * and shared by the objects of the same content (each start's summary is an object of its own), frozen all the way
 * down so that no reader can change what the other sends, and never touch the object it redacts.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { REDACTED, redact, redactedJson, redactFixed } from '../../src/protocol/monitor.js';

test('redactFixed is redact, once per object, frozen, the original untouched', () => {
  const summary = {
    sandbox: 'linux-seccomp',
    writableRoots: [{ root: '/w', readOnly: ['/w/.git'] }],
    env: { HOME: '/root', API_TOKEN: 'hunter2' },
    proxy: { authorization: 'Bearer x', port: 8080 },
    nested: { apiKey: 'k', list: [{ password: 'p' }] },
  };
  const before = structuredClone(summary);
  const r = redactFixed(summary);
  assert.deepEqual(r, redact(summary));
  assert.equal((r.env as Record<string, string>).API_TOKEN, REDACTED);
  assert.equal((r.proxy as Record<string, string>).authorization, REDACTED);
  assert.equal(redactFixed(summary), r, 'made once per object');
  assert.deepEqual(summary, before, 'the summary itself is not changed');
  for (const o of [
    r,
    r.writableRoots,
    (r.writableRoots as object[])[0],
    r.nested,
    (r.nested as { list: object[] }).list[0],
  ])
    assert.ok(Object.isFrozen(o));
  assert.throws(() => {
    (r.writableRoots as unknown[]).push('x');
  }, TypeError);
  // Another object with the same content shares the redaction (the next start's summary under the same policy).
  const other = structuredClone(summary);
  assert.equal(redactFixed(other), r);
  assert.equal(redactedJson(other), redactedJson(summary));
  assert.equal(redactedJson(other), JSON.stringify(redact(summary)));
});

test('objects of different content never share a redaction, whatever was kept before', () => {
  const base = { sandbox: 'linux-seccomp', root: '/w', env: { A: 'secret-a' }, token: 't1' };
  const kept = redactFixed(base);
  // A changed secret value redacts to the same text, a changed name or path does not; each is redact's answer.
  const variants = [
    { ...base, token: 't2' },
    { ...base, env: { A: 'secret-b' } },
    { ...base, env: { B: 'secret-a' } },
    { ...base, root: '/x' },
    { ...base, extra: null },
    { root: '/w', sandbox: 'linux-seccomp', env: { A: 'secret-a' }, token: 't1' }, // the same members, in another order
  ];
  for (const v of variants) {
    assert.deepEqual(redactFixed(v), redact(v));
    assert.equal(redactedJson(v), JSON.stringify(redact(v)));
  }
  assert.equal(redactFixed(base), kept);
  // More distinct contents than are kept, then the first again: still redact's answer.
  for (let i = 0; i < 40; i++)
    assert.deepEqual(redactFixed({ ...base, root: `/w${i}` }), redact({ ...base, root: `/w${i}` }));
  assert.deepEqual(redactFixed(structuredClone(base)), redact(base));
});

test('what JSON cannot spell is redacted without the memo: a cycle, a bigint, a text over the bound', () => {
  const cyclic: Record<string, unknown> = { sandbox: 'x', password: 'p' };
  cyclic.self = cyclic;
  const r = redactFixed(cyclic);
  assert.equal(r.password, REDACTED);
  assert.equal((r.self as Record<string, unknown>).password, REDACTED);
  const big = { n: 10n, token: 'x' };
  assert.deepEqual(redactFixed(big), redact(big));
  assert.notEqual(redactFixed({ n: 11n }), redactFixed({ n: 11n }), 'no text: one redaction per object');
  const huge = { roots: Array.from({ length: 4000 }, (_, i) => `/w/${i}`), secret: 's' };
  const a = redactFixed(huge);
  assert.deepEqual(a, redact(huge));
  assert.notEqual(redactFixed(structuredClone(huge)), a, 'over the bound: not kept');
});
