/**
 * process/start's `sandbox` is parsed once per JSON text (protocol/sandbox.ts toSandboxParam keeps the last few
 * successful parses): a kept parse must be exactly what a fresh parse gives, every caller must get its own copy (a
 * change to one start's sandbox never reaches the next), and a bad value must answer what it always answered, also
 * right after a good value with the same text but for it.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { METHODS } from '../../src/protocol/methods.js';
import { parseSandboxParam } from '../../src/protocol/sandbox.js';
import { parseParams } from '../../src/server/core/params.js';
import { seedSandbox } from '../helpers/startParams.js';

const spec = METHODS['process/start'];
const base = { processId: 'p', argv: ['/bin/true'], cwd: '/tmp', env: {}, tty: false };
const start = (sandbox: unknown) =>
  parseParams(spec.params, { ...base, sandbox }, spec.paramsName, spec.fieldErrors) as {
    sandbox: unknown;
  };
const fresh = (sandbox: unknown) => parseSandboxParam(JSON.parse(JSON.stringify(sandbox))).data;
const errorOf = (sandbox: unknown) => {
  try {
    start(sandbox);
  } catch (e) {
    return (e as Error).message;
  }
  return 'parsed';
};

const seed = seedSandbox({});
/** A 0.169 context: managed permissions with these entries (`[kind or path, access]`). */
const managed = (cwd: string, entries: [string, string][]) => ({
  permissions: {
    type: 'managed',
    file_system: {
      type: 'restricted',
      entries: entries.map(([at, access]) => ({
        path: at.startsWith('/')
          ? { type: 'path', path: `file://${at}` }
          : { type: 'special', value: { kind: at } },
        access,
      })),
    },
  },
  cwd,
});
const ctx169 = managed('/tmp/w', [
  ['root', 'read'],
  ['/tmp/w', 'write'],
]);

test('a kept parse is what a fresh one gives, deeply frozen and shared by the starts that sent its text', () => {
  for (const v of [seed, ctx169, { ...seed, useLegacyLandlock: true }]) {
    const want = fresh(v);
    const a = start(JSON.parse(JSON.stringify(v))).sandbox;
    const b = start(JSON.parse(JSON.stringify(v))).sandbox; // the kept one
    assert.deepEqual(a, want);
    assert.deepEqual(b, want);
    assert.equal(a, b, 'the first start already got the object that is kept');
    // No start can change what the next one gets: every level is frozen, and a write throws (strict mode).
    assert.throws(() => {
      (b as Record<string, unknown>).useLegacyLandlock = 'changed';
    }, TypeError);
    const inner = (b as { fileSystemPolicy?: { entries: unknown[] } }).fileSystemPolicy;
    if (inner) {
      assert.throws(() => inner.entries.push('changed'), TypeError);
      const entry = inner.entries[0] as { access: string };
      assert.throws(() => {
        entry.access = 'write';
      }, TypeError);
    }
    const c = start(JSON.parse(JSON.stringify(v))).sandbox;
    assert.deepEqual(c, want);
  }
});

test('bad values answer as always, before and after a kept good one of nearly the same text', () => {
  const bad = [
    { ...seed, sandbox: 'bogus' },
    { ...seed, sandboxPolicyCwd: 'relative' },
    { ...seed, policy: { type: 'yolo' } },
    { ...ctx169, cwd: 'relative' },
  ];
  const before = bad.map(errorOf);
  for (const m of before) assert.notEqual(m, 'parsed');
  start(seed);
  start(ctx169);
  assert.deepEqual(bad.map(errorOf), before);
  // More distinct good texts than are kept: every one still parses as fresh.
  for (let i = 0; i < 20; i++) {
    const v = { ...seed, sandboxPolicyCwd: `/tmp/w${i}` };
    assert.deepEqual(start(v).sandbox, fresh(v));
    assert.deepEqual(start(v).sandbox, fresh(v));
  }
  assert.deepEqual(bad.map(errorOf), before);
});
