import assert from 'node:assert/strict';
import { test } from 'node:test';
import { compilePatterns, isGlobalWildcard, normalizePattern } from '../../src/network/patterns.js';

const matches = (pattern: string, host: string) => compilePatterns([pattern]).test(host);

test('T10: glob table', () => {
  assert.equal(matches('*.openai.com', 'openai.com'), false);
  assert.equal(matches('*.openai.com', 'a.openai.com'), true);
  assert.equal(matches('*.openai.com', 'a.b.openai.com'), true);
  assert.equal(matches('**.openai.com', 'openai.com'), true);
  assert.equal(matches('**.openai.com', 'x.y.openai.com'), true);
  assert.equal(matches('region*.v2.x', 'foo.region1.v2.x'), false);
  assert.equal(matches('region*.v2.x', 'region1.v2.x'), true);
  assert.equal(matches('region*.v2.x', 'region.v2.x'), true);
  assert.equal(matches('region*.v2.x', 'xregion1.v2.x'), false);
});

test('exact patterns, case and trailing dots; the rest of the glob syntax', () => {
  assert.equal(matches('example.com', 'example.com'), true);
  assert.equal(matches('EXAMPLE.com.', 'example.com'), true);
  assert.equal(matches('example.com', 'a.example.com'), false);
  assert.equal(matches('example.com', 'examplexcom'), false, 'dots are literal');
  assert.equal(matches('a?c.test', 'abc.test'), true);
  assert.equal(matches('[ab]x.test', 'bx.test'), true);
  assert.equal(matches('[!ab]x.test', 'bx.test'), false);
  assert.equal(matches('{foo,bar}.test', 'bar.test'), true);
  assert.equal(matches('{foo,bar}.test', 'baz.test'), false);
  assert.throws(() => compilePatterns(['[abc.test']), /^Error: invalid glob pattern: \[abc\.test$/);
  assert.throws(() => compilePatterns(['{a,b.test']), /invalid glob pattern: \{a,b\.test/);
});

test('global wildcard: *, [*] and **.[*]; * in the allowlist matches everything including IPs', () => {
  assert.equal(isGlobalWildcard('*'), true);
  assert.equal(isGlobalWildcard('[*]'), true);
  assert.equal(isGlobalWildcard('**.[*]'), true);
  assert.equal(isGlobalWildcard('*.example.com'), false);
  assert.equal(matches('*', '127.0.0.1'), true);
  assert.equal(matches('*', '::1'), true);
});

test('IP-literal patterns are canonicalised; Unicode patterns become punycode (§5)', () => {
  assert.equal(normalizePattern('127.1'), '127.0.0.1');
  assert.equal(normalizePattern('[::1]'), '::1');
  assert.equal(normalizePattern('[::ffff:7f00:1]'), '127.0.0.1');
  assert.equal(normalizePattern('bücher.example'), 'xn--bcher-kva.example');
  assert.equal(normalizePattern('*.bücher.example'), '*.xn--bcher-kva.example');
  assert.equal(matches('bücher.example', 'xn--bcher-kva.example'), true);
  const c = compilePatterns(['127.0.0.1', 'a.test', '*.b.test', 'A.TEST']);
  assert.deepEqual(c.patterns, ['127.0.0.1', 'a.test', '*.b.test'], 'duplicates removed');
  assert.deepEqual([...c.exact], ['127.0.0.1', 'a.test']);
  assert.deepEqual([...c.ipLiterals], ['127.0.0.1']);
});
