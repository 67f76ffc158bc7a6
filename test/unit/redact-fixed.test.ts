/**
 * redactFixed (protocol/monitor.ts): one redaction of a started process's policy summary and metadata, shared by the
 * audit trail and the monitor. It must be exactly redact's answer (secrets and env values out), made once per object,
 * frozen all the way down so that no reader can change what the other sends, and never touch the object it redacts.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { REDACTED, redact, redactFixed } from '../../src/protocol/monitor.js';

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
  // Another object with the same content is redacted on its own (identity, not content).
  const other = structuredClone(summary);
  assert.notEqual(redactFixed(other), r);
  assert.deepEqual(redactFixed(other), r);
});
