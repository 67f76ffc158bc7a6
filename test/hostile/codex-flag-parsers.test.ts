/**
 * The parsers issue 35 added, fed deep, wide, huge and malformed input: `--tcp-upstream-proxy HOST:PORT`, the -c
 * override values (TOML where it is, else a literal), --enable / --disable, and the server's NO_PROXY. Each answers
 * at once (no recursion, no super-linear scan), never throws anything but its own refusal, and never widens what it
 * was given (an unparsable NO_PROXY entry exempts nothing; a loopback target never goes upstream).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { configOverrides, parseHostPort, parseOverrideValue } from '../../src/codexFlags.js';
import { noProxyExempts, parseNoProxy, upstreamRoute } from '../../src/network/upstream.js';

// CPU time, not wall time: the bound is about the parser's own work, which a loaded machine does not change.
const fast = (what: string, f: () => void, ms = 500) => {
  const t = process.cpuUsage();
  f();
  const used = process.cpuUsage(t);
  const took = (used.user + used.system) / 1000;
  assert.ok(took < ms, `${what} took ${took.toFixed(0)} ms`);
};

test('HOST:PORT: malformed, huge and tricky inputs get Codex’s reasons, valid ones parse', () => {
  const cases: [string, string | { host: string; port: number }][] = [
    ['', 'missing port'],
    ['host', 'missing port'],
    [':', 'parse port as u16\r\n ↪ cannot parse integer from empty string'],
    [':80', 'parse host from host-with-port\r\n ↪ parse host from string\r\n ↪ Option is None'],
    ['h:', 'parse port as u16\r\n ↪ cannot parse integer from empty string'],
    ['h:+', 'parse port as u16\r\n ↪ invalid digit found in string'],
    ['h:65536', 'parse port as u16\r\n ↪ number too large to fit in target type'],
    [`h:${'9'.repeat(100_000)}`, 'parse port as u16\r\n ↪ number too large to fit in target type'],
    [`h:${'0'.repeat(100_000)}80`, { host: 'h', port: 80 }],
    ['h:0x50', 'parse port as u16\r\n ↪ invalid digit found in string'],
    ['h:８０', 'parse port as u16\r\n ↪ invalid digit found in string'],
    ['::1:80', 'missing brackets for IPv6 address with port (in host-with-port)'],
    ['[::1]:80', { host: '::1', port: 80 }],
    ['[::1', 'parse host from host-with-port\r\n ↪ parse host from string\r\n ↪ Option is None'],
    ['[[::1]]:80', 'parse host from host-with-port\r\n ↪ parse host from string\r\n ↪ Option is None'],
    ['http://proxy:80', 'parse host from host-with-port\r\n ↪ parse host from string\r\n ↪ Option is None'],
    ['user@proxy:80', 'parse host from host-with-port\r\n ↪ parse host from string\r\n ↪ Option is None'],
    ['pro\nxy:80', 'parse host from host-with-port\r\n ↪ parse host from string\r\n ↪ Option is None'],
    ['pro\u0000xy:80', 'parse host from host-with-port\r\n ↪ parse host from string\r\n ↪ Option is None'],
    ['proxy.corp:3128', { host: 'proxy.corp', port: 3128 }],
  ];
  for (const [input, want] of cases) {
    const got = parseHostPort(input);
    assert.deepEqual('error' in got ? got.error : got, want, JSON.stringify(input.slice(0, 40)));
  }
  fast('a 4 MiB host', () => parseHostPort(`${'a'.repeat(4 << 20)}:1`));
  fast('4 MiB of colons', () => parseHostPort(':'.repeat(4 << 20)));
  fast('a 4 MiB IPv6-looking host', () => parseHostPort(`${'1:'.repeat(2 << 20)}:1`));
});

test('-c values: deep, wide, huge and unbalanced TOML is read without recursion; non-TOML is a literal', () => {
  const deep = `${'['.repeat(200_000)}${']'.repeat(200_000)}`;
  fast('200k nested arrays', () => assert.equal(parseOverrideValue(deep).type, 'string'));
  const deepTable = `${'{a='.repeat(100_000)}1${'}'.repeat(100_000)}`;
  fast('100k nested tables', () => assert.equal(parseOverrideValue(deepTable).type, 'string'));
  const wide = `{${Array.from({ length: 4000 }, (_, i) => `f${i}=true`).join(',')}}`;
  fast('a 4000-entry inline table', () => assert.equal(parseOverrideValue(wide).type, 'map'));
  const huge = `{${Array.from({ length: 100_000 }, (_, i) => `f${i}=true`).join(',')}}`;
  fast('a 100k-entry inline table (over 64 KiB: a literal)', () =>
    assert.equal(parseOverrideValue(huge).type, 'string'),
  );
  fast('4 MiB string', () => assert.equal(parseOverrideValue(`"${'x'.repeat(4 << 20)}`).type, 'string'));
  fast('unbalanced', () => assert.equal(parseOverrideValue(`[${'"'.repeat(100_001)}]`).type, 'string'));
  assert.deepEqual(parseOverrideValue('true'), { type: 'boolean', value: true });
  assert.deepEqual(parseOverrideValue('"true"'), { type: 'string', value: 'true' });
  assert.deepEqual(parseOverrideValue('1_000'), { type: 'integer', text: '1000' });
  assert.deepEqual(parseOverrideValue('[1, {'), { type: 'string', value: '[1, {' });
  assert.deepEqual(parseOverrideValue('"\\ud800'), { type: 'string', value: '"\\ud800' });
});

test('-c / --enable / --disable: many overrides and unknown names are sorted without throwing', () => {
  const many = Array.from({ length: 50_000 }, (_, i) => `features.shell_tool=${i % 2 === 0}`);
  fast('50k overrides', () => {
    const o = configOverrides({ config: many, enable: [], disable: [], strict: true });
    assert.equal(o.features.get('shell_tool'), false);
  });
  const odd = [
    '=',
    '==',
    'features.=true',
    'features..x=true',
    'features.__proto__=true',
    'constructor=1',
    'x',
  ];
  const o = configOverrides({ config: odd, enable: [], disable: ['shell_tool'], strict: false });
  assert.deepEqual([...o.features], [['shell_tool', false]]);
  assert.deepEqual(o.ignored, odd);
  assert.equal(Object.getPrototypeOf({}).true, undefined, 'nothing lands on a prototype');
});

test('NO_PROXY: huge, wide and malformed lists are bounded, and nothing malformed exempts anything', () => {
  fast('a 4 MiB NO_PROXY', () => parseNoProxy(`${'a.'.repeat(2 << 20)}test`));
  const wide = Array.from({ length: 100_000 }, (_, i) => `h${i}.test`).join(',');
  fast('100k entries', () => assert.equal(parseNoProxy(wide).entries.length, 1024));
  const junk = parseNoProxy(
    '::::, [, ], 1.2.3.4/99, /8, .., *., a/b:99999, b:99999, [::1]:0, x:y, 127.0.0.1/-1, \u0000',
  );
  assert.equal(junk.all, false);
  for (const host of ['a', 'b', 'x', 'localhost'])
    assert.equal(noProxyExempts(junk, host, [], 80), false, `junk must not exempt ${host}`);
  const n = parseNoProxy('*.corp.test, [::1]:8080, 127.0.0.0/8, intranet.test:22');
  assert.equal(noProxyExempts(n, 'a.corp.test', [], 443), true);
  assert.equal(noProxyExempts(n, 'corp.test', [], 443), true);
  assert.equal(noProxyExempts(n, 'xcorp.test', [], 443), false);
  assert.equal(noProxyExempts(n, 'intranet.test', [], 22), true);
  assert.equal(noProxyExempts(n, 'intranet.test', [], 23), false);
  assert.equal(noProxyExempts(n, 'rebind.test', ['127.9.9.9'], 1), true);
  assert.equal(noProxyExempts(n, 'v6.test', ['::1'], 8080), true);
  assert.equal(noProxyExempts(n, 'v6.test', ['::1'], 8081), false);
});

test('a loopback target never leaves through an upstream, whatever NO_PROXY and the flags say', () => {
  const u = { https: new URL('http://127.0.0.1:1'), privateIps: true, noProxy: parseNoProxy('') };
  for (const addresses of [['127.0.0.1'], ['::1'], ['::ffff:127.0.0.1'], ['0.0.0.0'], ['::']])
    assert.equal(upstreamRoute('tunnel', u, { host: 'x.test', addresses, port: 1 }), undefined);
  assert.equal(
    upstreamRoute('tunnel', u, { host: 'LOCALHOST', addresses: ['127.0.0.1'], port: 1 }),
    undefined,
  );
});
