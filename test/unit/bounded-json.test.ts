// The bounded JSON parse (src/protocol/boundedJson.ts): nesting counted outside strings only (escapes respected),
// the bound exact (64 passes, 65 does not), value counts, and measureJson stopping at its bounds without recursing
// past them.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { jsonBoundBroken, measureJson, parseJson } from '../../src/protocol/boundedJson.js';

const nest = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`;

describe('bounded JSON', () => {
  test('depth: 64 levels parse, 65 do not, whatever the length', () => {
    assert.equal(jsonBoundBroken(nest(64)), null);
    assert.match(jsonBoundBroken(nest(65))!, /nesting deeper than 64 levels/);
    assert.match(jsonBoundBroken(`{"pad":"${'x'.repeat(5000)}","a":${nest(65)}}`)!, /deeper than 64/);
    const r = parseJson(nest(100_000));
    assert.equal(r.ok, false);
    assert.equal(!r.ok && r.bound, true);
  });

  test('brackets inside strings are text, escaped quotes and backslashes respected', () => {
    assert.equal(jsonBoundBroken(`["${'['.repeat(1000)}"]`), null);
    assert.equal(jsonBoundBroken(`["\\"${'['.repeat(1000)}"]`), null);
    // An even run of backslashes ends the string: the brackets after it count.
    assert.match(jsonBoundBroken(`["\\\\",${nest(70)}]`)!, /deeper/);
    assert.equal(jsonBoundBroken('["unterminated [[[['), null); // malformed: JSON.parse says so
    const bad = parseJson('["unterminated');
    assert.equal(bad.ok || bad.bound, false);
  });

  test('values: more than the bound refused before parsing', () => {
    const b = { maxDepth: 64, maxValues: 1000 };
    assert.equal(jsonBoundBroken(`[${'0,'.repeat(998)}0]`, b), null);
    assert.match(jsonBoundBroken(`[${'0,'.repeat(1000)}0]`, b)!, /more than 1000 values/);
    assert.match(jsonBoundBroken(`[${'{},'.repeat(600)}{}]`, b)!, /more than 1000 values/);
  });

  test('measureJson: size, values and depth, stopping at a bound', () => {
    const m = measureJson({ a: ['xy', 1, null, { b: true }] }, { maxDepth: 8, maxValues: 100 });
    assert.deepEqual([m.values, m.depth, m.broken], [7, 3, null]);
    assert.ok(m.bytes >= JSON.stringify({ a: ['xy', 1, null, { b: true }] }).length - 4);
    const deep = JSON.parse(nest(50_000)) as unknown;
    assert.match(measureJson(deep, { maxDepth: 12, maxValues: 1e6 }).broken!, /deeper than 12/);
    const wide = Array.from({ length: 10_000 }, () => ({}));
    assert.match(measureJson(wide, { maxDepth: 12, maxValues: 4096 }).broken!, /more than 4096 values/);
    assert.equal(measureJson(JSON.parse('{"__proto__":{"x":1}}'), { maxDepth: 4, maxValues: 10 }).values, 3);
  });
});
