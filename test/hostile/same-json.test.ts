/**
 * The walk that answers a `sandbox` param from the last kept parse (src/protocol/sameJson.ts, used by
 * protocol/sandbox.ts keptSandboxParam and toSandboxParam; issue 32): an agent client's value is compared with the
 * kept one without making its text. What a hostile client sends there: values that differ from the kept policy
 * anywhere (a byte deep in a path, a key's order, a type, a number JSON spells alike), deep (200 000 levels), wide
 * (100 000 members), huge (a 4 MiB string), non-JSON values (in-process callers: undefined, NaN, a class, a toJSON,
 * a cycle). Each must get exactly what a fresh parse gives: `sameJson` may only say true of values whose JSON texts are
 * equal, and must end on every input.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { METHODS } from '../../src/protocol/methods.js';
import { sameJson } from '../../src/protocol/sameJson.js';
import { keptSandboxParam, parseSandboxParam } from '../../src/protocol/sandbox.js';
import { parseParams } from '../../src/server/core/params.js';
import { seedSandbox } from '../helpers/startParams.js';

const spec = METHODS['process/start'];
const base = { processId: 'p', argv: ['/bin/true'], cwd: '/tmp', env: {}, tty: false };
/** What process/start's table makes of `sandbox`: the parse, or the error's message. */
const start = (sandbox: unknown): unknown => {
  try {
    return (
      parseParams(spec.params, { ...base, sandbox }, spec.paramsName, spec.fieldErrors) as {
        sandbox: unknown;
      }
    ).sandbox;
  } catch (e) {
    return `error: ${(e as Error).message}`;
  }
};
const fresh = (sandbox: unknown): unknown => {
  const r = parseSandboxParam(sandbox);
  return r.success ? r.data : 'error';
};
const deep = (n: number, leaf: unknown = {}): unknown => {
  let v = leaf;
  for (let i = 0; i < n; i++) v = { a: v };
  return v;
};
const deepArray = (n: number): unknown => {
  let v: unknown = [];
  for (let i = 0; i < n; i++) v = [v];
  return v;
};

const policy = seedSandbox({
  fileSystemPolicy: {
    kind: 'restricted',
    entries: [
      { path: { type: 'special', value: { kind: 'root' } }, access: 'read' },
      { path: { type: 'path', path: '/tmp/ws/sub' }, access: 'write' },
    ],
  },
});
const copy = <T>(v: T): T => JSON.parse(JSON.stringify(v));

describe('sameJson and the kept sandbox parse under hostile values', () => {
  test('random JSON values and their mutations: true exactly when the texts are equal', () => {
    let seed = 2026;
    const rnd = (k: number) => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return Math.floor((seed / 0x80000000) * k); // the high bits: an LCG's low bits repeat with a short period
    };
    const leaf = (): unknown =>
      [null, true, false, 0, -0, 1, 1.5, 1e21, '', 'a', 'ä', '\u0000', '0', 'true'][rnd(14)];
    const gen = (d: number): unknown => {
      const r = rnd(d > 3 ? 1 : 4);
      if (r === 0) return leaf();
      if (r === 1) return Array.from({ length: rnd(4) }, () => gen(d + 1));
      const o: Record<string, unknown> = {};
      for (let i = rnd(4); i > 0; i--) o[['a', 'b', '1', '__proto__', 'constructor'][rnd(5)]!] = gen(d + 1);
      return o;
    };
    const mutate = (v: unknown): unknown => {
      if (v === null || typeof v !== 'object' || rnd(3) === 0) return rnd(2) ? leaf() : gen(2);
      if (Array.isArray(v)) {
        const a = [...v];
        if (a.length === 0 || rnd(4) === 0) a.push(leaf());
        else a[rnd(a.length)] = mutate(a[rnd(a.length)]);
        return a;
      }
      const entries = Object.entries(v);
      if (entries.length === 0 || rnd(4) === 0) return { ...Object.fromEntries(entries), b: leaf() };
      if (rnd(4) === 0) return Object.fromEntries(entries.reverse());
      const i = rnd(entries.length);
      entries[i] = [entries[i]![0], mutate(entries[i]![1])];
      return Object.fromEntries(entries);
    };
    let equal = 0;
    for (let i = 0; i < 20000; i++) {
      const a = gen(0);
      const b = rnd(3) === 0 ? copy(a) : mutate(copy(a));
      const ta = JSON.stringify(a);
      const tb = JSON.stringify(b);
      // Values from JSON.parse (as every value from the wire): the answer is exact both ways.
      const pa = JSON.parse(ta);
      const pb = JSON.parse(tb);
      assert.equal(sameJson(pa, pb), ta === tb, `${ta} vs ${tb}`);
      if (ta === tb) equal++;
      // Any value at all: true only when the texts are equal.
      if (sameJson(a, b)) assert.equal(ta, tb);
    }
    assert.ok(equal > 3000 && equal < 17000, `both answers were tested (${equal} equal)`);
  });

  test('values JSON spells by rules of its own, cycles and one object on both sides are never the same', () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    const cyclic2: Record<string, unknown> = {};
    cyclic2.self = cyclic2;
    class Box {
      a = 1;
    }
    const holey = [1, 2, 3];
    delete holey[1];
    const pairs: [unknown, unknown][] = [
      [undefined, undefined],
      [{ a: undefined }, { a: undefined }],
      [Number.NaN, Number.NaN],
      [{ a: Number.NaN }, { a: null }],
      [Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY],
      [holey, [1, null, 3]],
      [new Box(), { a: 1 }],
      [
        { a: 1, toJSON: () => 'x' },
        { a: 1, toJSON: () => 'x' },
      ],
      [new Date(0), new Date(0)],
      [cyclic, cyclic2],
      [cyclic, cyclic],
      [policy, policy],
      [() => 1, () => 1],
      [1n, 1n],
      [Symbol.for('x'), Symbol.for('x')],
    ];
    for (const [a, b] of pairs) assert.equal(sameJson(a, b), false, String(a));
  });

  test('deep, wide and huge values against a kept policy: each gets what a fresh parse gives, and ends', () => {
    const kept = start(copy(policy));
    assert.equal(start(copy(policy)), kept, 'kept');
    assert.equal(keptSandboxParam(copy(policy)), kept, 'answered by the walk');
    const cases: [string, unknown][] = [
      ['deep object, 200 000 levels', deep(200_000)],
      ['deep array, 200 000 levels', deepArray(200_000)],
      ['the policy 100 000 levels down a member', { ...copy(policy), sandbox: deep(100_000, 'x') }],
      ['the policy with its entries 50 000 deep', { ...copy(policy), fileSystemPolicy: deep(50_000) }],
      ['wide: 100 000 members', Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`k${i}`, i]))],
      ['wide: 100 000 entries', { ...copy(policy), extra: Array.from({ length: 100_000 }, (_, i) => i) }],
      ['huge: a 4 MiB path', { ...copy(policy), sandboxPolicyCwd: `/${'a'.repeat(4 << 20)}` }],
    ];
    for (const [what, v] of cases) {
      const got = start(v);
      assert.notEqual(got, kept, what);
      if (typeof got !== 'string') assert.deepEqual(got, fresh(v), what);
      assert.equal(start(copy(policy)), kept, `still kept after: ${what}`);
    }
  });

  test('values a byte, a key order, a type or a number away from the kept policy get their own parse', () => {
    const kept = start(copy(policy));
    const p = copy(policy) as Record<string, unknown> & {
      fileSystemPolicy: { entries: { path: { path?: string }; access: string }[] };
    };
    type P = typeof p;
    const variants: [string, (v: P) => unknown][] = [
      [
        'a byte deep in a path',
        (v) => {
          v.fileSystemPolicy.entries[1]!.path.path = '/tmp/ws/suc';
          return v;
        },
      ],
      [
        'an access',
        (v) => {
          v.fileSystemPolicy.entries[1]!.access = 'read';
          return v;
        },
      ],
      [
        'an entry fewer',
        (v) => {
          v.fileSystemPolicy.entries.pop();
          return v;
        },
      ],
      [
        'an entry more',
        (v) => {
          v.fileSystemPolicy.entries.push(v.fileSystemPolicy.entries[0]!);
          return v;
        },
      ],
      ['keys in another order', (v) => Object.fromEntries(Object.entries(v).reverse())],
      ['a member made null', (v) => ({ ...v, sandboxPolicyCwd: null })],
      ['a member made a number', (v) => ({ ...v, sandboxPolicyCwd: 1 })],
      ['a member more', (v) => ({ ...v, useLegacyLandlock: true })],
    ];
    for (const [what, change] of variants) {
      const v = change(copy(p));
      const got = start(v);
      if (JSON.stringify(v) !== JSON.stringify(policy)) assert.notEqual(got, kept, what);
      const want = fresh(copy(v));
      if (want === 'error') assert.match(String(got), /^error: /, what);
      else assert.deepEqual(got, want, what);
    }
    assert.equal(start(copy(policy)), kept);
  });
});
