import assert from 'node:assert/strict';
import { test } from 'node:test';
import { canonicalIp, isNonPublicIp, normalizeHost } from '../../src/network/host.js';

test('IPv4 shorthands canonicalise to the dotted quad (§5 item 1, T9)', () => {
  for (const h of [
    '127.0.0.1',
    '127.1',
    '2130706433',
    '0x7f.0.0.1',
    '0x7f000001',
    '0177.0.0.1',
    '127.0.1',
    '127.0.0.1.',
  ]) {
    assert.equal(canonicalIp(h), '127.0.0.1', h);
  }
  assert.equal(canonicalIp('1.2.3'), '1.2.0.3');
  for (const bad of ['256.1', '1.2.3.4.5', '999999999999', 'example.com', '0x1g', ''])
    assert.equal(canonicalIp(bad), null, bad);
});

test('IPv6 canonicalises to compressed lowercase; mapped and compatible forms become IPv4', () => {
  assert.equal(canonicalIp('[::ffff:7f00:1]'), '127.0.0.1');
  assert.equal(canonicalIp('::ffff:127.0.0.1'), '127.0.0.1');
  assert.equal(canonicalIp('0:0:0:0:0:ffff:7f00:1'), '127.0.0.1');
  assert.equal(canonicalIp('::7f00:1'), '127.0.0.1');
  assert.equal(canonicalIp('::1'), '::1');
  assert.equal(canonicalIp('0:0:0:0:0:0:0:1'), '::1');
  assert.equal(canonicalIp('::'), '::');
  assert.equal(canonicalIp('2001:DB8:0:0:1:0:0:1'), '2001:db8::1:0:0:1');
  assert.equal(canonicalIp('fe80::1%25eth0'), 'fe80::1%eth0');
});

test('normalizeHost: trim, brackets, single-colon port, lowercase, trailing dots; rejects invalid characters', () => {
  assert.deepEqual(normalizeHost(' EVIL.EXAMPLE. '), { ok: true, host: 'evil.example', isIp: false });
  assert.deepEqual(normalizeHost('localhost:8080'), { ok: true, host: 'localhost', isIp: false });
  assert.deepEqual(normalizeHost('[::1]:80'), { ok: true, host: '::1', isIp: true });
  assert.deepEqual(normalizeHost('127.1'), { ok: true, host: '127.0.0.1', isIp: true });
  assert.deepEqual(normalizeHost(''), { ok: true, host: '', isIp: false });
  for (const bad of ['a b', 'x\u0001y', 'bücher.example', 'a/b', 'a@b', '256.1', 'tab\there']) {
    assert.equal(normalizeHost(bad).ok, false, JSON.stringify(bad));
  }
});

test('non-public ranges of §3.4', () => {
  const nonPublic = [
    '127.0.0.1',
    '10.1.2.3',
    '172.16.0.1',
    '172.31.255.255',
    '192.168.1.1',
    '169.254.169.254',
    '0.0.0.0',
    '0.1.2.3',
    '100.64.0.1',
    '192.0.0.8',
    '192.0.2.10',
    '198.18.0.1',
    '198.51.100.1',
    '203.0.113.1',
    '224.0.0.1',
    '255.255.255.255',
    '240.0.0.1',
    '::1',
    '::',
    'ff02::1',
    'fc00::1',
    'fd12::1',
    'fe80::1',
    '::ffff:10.0.0.1',
  ];
  for (const ip of nonPublic) assert.equal(isNonPublicIp(ip), true, ip);
  for (const ip of ['8.8.8.8', '172.32.0.1', '100.128.0.1', '2001:4860::8888', '1.1.1.1']) {
    assert.equal(isNonPublicIp(ip), false, ip);
  }
  assert.equal(isNonPublicIp('localhost'), false, 'names are not IPs');
});
