/** The interception CA (issue 34, item 1): what strict verifiers check, checked by them (openssl -x509_strict). */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { test } from 'node:test';
import { ipBytes, LEAF_CACHE_SIZE, MitmCa, pem } from '../../src/network/mitm/ca.js';
import { createMitmTrust } from '../../src/network/mitm/trust.js';
import { formatTag, ownTag, processStartTime } from '../../src/process/serverTag.js';
import { tsEntry } from '../helpers/cli.js';
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
    const tag = formatTag(ownTag());
    for (const p of [bundle, t.caPath]) {
      assert.equal(statSync(p).mode & 0o777, 0o644);
      assert.equal(dirname(p), dir.path);
      assert.ok(basename(p).startsWith(`${tag}.`), p);
      assert.match(basename(p), /^\d+\.\d+\.\d+\.[0-9a-f]{64}\.pem$/);
    }
    const text = readFileSync(bundle, 'latin1');
    assert.ok(text.includes(other.certPem.trim()) && text.includes(t.ca.certPem.trim()));
    assert.doesNotMatch(text, /PRIVATE KEY|junk/);
    const written = readdirSync(dir.path).filter((n) => n.endsWith('.pem') && n !== 'startup.pem');
    assert.equal(written.length, 2, 'the CA certificate and the bundle, nothing else');
    for (const name of written) assert.doesNotMatch(readFileSync(join(dir.path, name), 'latin1'), /PRIVATE/);
    writeFileSync(bundle, 'replaced by someone');
    assert.equal(t.bundlePath(), bundle);
    assert.equal(readFileSync(bundle, 'latin1'), text);
    // The server exiting removes both (and nothing else).
    t.remove();
    assert.deepEqual(readdirSync(dir.path), ['startup.pem']);
    t.remove(); // twice: nothing to do
  } finally {
    dir.cleanup();
  }
});

test("making a trust removes the trust files of servers that are gone, and nobody else's", () => {
  const dir = tempDir('corral-mitm-sweep-');
  try {
    const me = ownTag();
    // A pid that no process has now: a child that has exited and been reaped.
    const gonePid = spawnSync('true').pid!;
    const sha = 'a'.repeat(64);
    const dead = `${formatTag({ ...me, pid: gonePid, startTime: '12345' })}.${sha}.pem`;
    const deadLink = `${formatTag({ ...me, pid: gonePid, startTime: '12346' })}.${sha}.pem`;
    const deadDir = `${formatTag({ ...me, pid: gonePid, startTime: '12347' })}.${sha}.pem`;
    const kept = [
      `${formatTag(me)}.${sha}.pem`, // this process: alive
      `${formatTag({ ...me, pid: process.ppid, startTime: processStartTime(process.ppid)! })}.${sha}.pem`, // alive
      `${formatTag({ ...me, pid: process.ppid, startTime: '1' })}.${sha}.pem`.replace(/^\d+/, '1'), // another pid namespace
      `${sha}.pem`, // an older server's untagged file: whose, nobody can say
      `${formatTag({ ...me, pid: gonePid, startTime: '12348' })}.${sha}.pem.tmp`, // not a trust file's name
      'notes.txt',
      deadDir, // a directory with a trust file's name
    ];
    const target = join(dir.path, 'target.pem');
    writeFileSync(target, 'the link target stays');
    for (const n of kept.filter((n) => n !== deadDir)) writeFileSync(join(dir.path, n), 'x');
    mkdirSync(join(dir.path, deadDir));
    writeFileSync(join(dir.path, dead), 'x');
    symlinkSync(target, join(dir.path, deadLink));
    const t = createMitmTrust({}, dir.path);
    const left = readdirSync(dir.path);
    assert.ok(!left.includes(dead) && !left.includes(deadLink), left.join('\n'));
    for (const n of [...kept, 'target.pem']) assert.ok(left.includes(n), n);
    assert.equal(readFileSync(target, 'utf8'), 'the link target stays');
    t.remove();
  } finally {
    dir.cleanup();
  }
});

test("a server process's trust files go when it exits, whether its loop ends or it calls exit", async () => {
  const tmp = tempDir('corral-mitm-exit-');
  try {
    for (const how of ['return', 'exit']) {
      const r = spawnSync(process.execPath, [...tsEntry('test/helpers/mitmTrustChild.ts'), how], {
        env: { ...process.env, TMPDIR: tmp.path },
        encoding: 'utf8',
      });
      assert.equal(r.status, 0, r.stderr);
      const { files, existed } = JSON.parse(r.stdout) as { files: string[]; existed: boolean[] };
      assert.deepEqual(existed, [true, true]);
      for (const f of files) assert.ok(f.startsWith(`${tmp.path}/corral-ca-`), f);
      for (const f of files) assert.ok(!existsSync(f), `${how}: ${f} is left`);
    }
  } finally {
    tmp.cleanup();
  }
});
