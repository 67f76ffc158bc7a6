/** The interception CA (issue 34, item 1): what strict verifiers check, checked by them (openssl -x509_strict). */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { ipBytes, LEAF_CACHE_SIZE, MitmCa, pem } from '../../src/network/mitm/ca.js';
import { createMitmTrust } from '../../src/network/mitm/trust.js';
import { tempDir } from '../helpers/server.js';

test('openssl verify -x509_strict accepts leaves for a name, an IPv4, an IPv6 and a 200-character name', () => {
  const dir = tempDir('corral-mitm-ca-');
  try {
    const ca = new MitmCa();
    writeFileSync(join(dir.path, 'ca.pem'), ca.certPem);
    const hosts = [
      'example.test',
      '127.0.0.1',
      '::1',
      '2001:db8::7:0.0.0.1',
      `${'a'.repeat(60)}.${'b'.repeat(60)}.${'c'.repeat(60)}.test`,
    ];
    const files = hosts.map((h, i) => {
      const p = join(dir.path, `leaf${i}.pem`);
      writeFileSync(p, pem(ca.mintLeaf(h)));
      return p;
    });
    const out = execFileSync(
      'openssl',
      ['verify', '-x509_strict', '-purpose', 'sslserver', '-CAfile', join(dir.path, 'ca.pem'), ...files],
      {
        encoding: 'utf8',
      },
    );
    assert.equal(out.match(/: OK$/gm)?.length, hosts.length, out);
    for (const [i, h] of hosts.entries()) {
      const x = new X509Certificate(readFileSync(files[i]!));
      assert.ok(
        h.includes(':') || /^\d/.test(h) ? x.checkIP(h) : x.checkHost(h),
        `${h}: ${x.subjectAltName}`,
      );
    }
  } finally {
    dir.cleanup();
  }
});

test('the CA and a leaf carry what strict verifiers want: CA constraints, SKI and AKI, serverAuth, ≤ 7 days backdated 1 h', () => {
  const now = Date.UTC(2026, 5, 1, 12);
  const ca = new MitmCa({ now: () => now });
  const text = (der: Buffer) =>
    execFileSync('openssl', ['x509', '-inform', 'DER', '-noout', '-text'], { input: der, encoding: 'utf8' });
  const c = text(ca.certDer);
  assert.match(c, /Basic Constraints: critical\s+CA:TRUE, pathlen:0/);
  assert.match(c, /Key Usage: critical\s+Certificate Sign, CRL Sign/);
  assert.match(c, /Subject Key Identifier/);
  assert.match(c, /Public-Key: \(256 bit\)[\s\S]*NIST CURVE: P-256/);
  const leafDer = ca.mintLeaf('x.test');
  const l = text(leafDer);
  assert.match(l, /Subject Key Identifier/);
  assert.match(l, /Authority Key Identifier/);
  assert.match(l, /Extended Key Usage:\s+TLS Web Server Authentication/);
  assert.match(l, /DNS:x\.test/);
  const x = new X509Certificate(leafDer);
  assert.equal(Date.parse(x.validFrom), now - 3_600_000);
  assert.ok(Date.parse(x.validTo) - Date.parse(x.validFrom) <= 7 * 24 * 3_600_000);
  assert.notEqual(new X509Certificate(ca.mintLeaf('x.test')).serialNumber, x.serialNumber, 'random serials');
  assert.equal(x.ca, false);
});

test('contexts are cached per host in an LRU of bounded size', () => {
  const ca = new MitmCa();
  const a = ca.contextFor('a.test');
  assert.equal(ca.contextFor('a.test'), a);
  for (let i = 0; i < LEAF_CACHE_SIZE + 5; i++) ca.contextFor(`h${i}.test`);
  assert.equal(ca.cachedHosts, LEAF_CACHE_SIZE);
  assert.notEqual(ca.contextFor('a.test'), a, 'the oldest was evicted');
});

test('ipBytes reads canonical IPv4 and IPv6 literals and nothing else', () => {
  assert.deepEqual([...ipBytes('10.1.2.3')!], [10, 1, 2, 3]);
  assert.equal(ipBytes('::1')!.toString('hex'), `${'0'.repeat(30)}01`);
  assert.equal(ipBytes('[fe80::1]')!.toString('hex'), `fe80${'0'.repeat(26)}01`);
  assert.equal(ipBytes('::ffff:1.2.3.4')!.toString('hex'), `${'0'.repeat(20)}ffff01020304`);
  assert.equal(ipBytes('example.test'), null);
});

test('the trust files: the CA certificate and the bundle, 0644, content-addressed, no key; a replaced bundle is rewritten', () => {
  const dir = tempDir('corral-mitm-trust-');
  try {
    const startup = join(dir.path, 'startup.pem');
    const other = new MitmCa();
    writeFileSync(
      startup,
      `junk\n-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n${other.certPem}`,
    );
    const t = createMitmTrust(
      { SSL_CERT_FILE: startup, NODE_EXTRA_CA_CERTS: join(dir.path, 'missing.pem') },
      dir.path,
    );
    const bundle = t.bundlePath();
    for (const p of [bundle, t.caPath]) {
      assert.equal(statSync(p).mode & 0o777, 0o644);
      assert.match(p, /\/[0-9a-f]{64}\.pem$/);
    }
    const text = readFileSync(bundle, 'latin1');
    assert.ok(text.includes(other.certPem.trim()) && text.includes(t.ca.certPem.trim()));
    assert.doesNotMatch(text, /PRIVATE KEY|junk/);
    const written = readdirSync(dir.path).filter((n) => /^[0-9a-f]{64}\.pem$/.test(n));
    assert.equal(written.length, 2, 'the CA certificate and the bundle, nothing else');
    for (const name of written) assert.doesNotMatch(readFileSync(join(dir.path, name), 'latin1'), /PRIVATE/);
    writeFileSync(bundle, 'replaced by someone');
    assert.equal(t.bundlePath(), bundle);
    assert.equal(readFileSync(bundle, 'latin1'), text);
  } finally {
    dir.cleanup();
  }
});
