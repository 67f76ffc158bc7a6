/**
 * TLS interception (issue 34): limited mode over HTTPS through the managed proxy, on loopback only, against an
 * HTTPS origin with its own CA (openssl-made). The proxy trusts that CA because its trust is built from an
 * environment naming it (as `SSL_CERT_FILE=… corral serve`); clients trust the bundle the child would be given.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { CA_BUNDLE_ENV_KEYS } from '../../src/network/env.js';
import { createMitmTrust, type MitmTrust } from '../../src/network/mitm/trust.js';
import { defaultDialer } from '../../src/network/proxy.js';
import { connectVia, exchange, socksConnect as socksTo, tlsOver } from '../helpers/mitmClient.js';
import { tempDir } from '../helpers/server.js';
import { startTlsOrigin, type TlsOrigin } from '../helpers/tlsOrigin.js';
import { type ProxyFixture, startProxy } from './network-helpers.js';

const run = promisify(execFile);

describe('TLS interception (mitm) in limited mode', () => {
  let dir: { path: string; cleanup(): void };
  let origin: TlsOrigin;
  let trust: MitmTrust;
  let f: ProxyFixture;

  before(async () => {
    dir = tempDir('corral-mitm-');
    origin = await startTlsOrigin(dir.path);
    trust = createMitmTrust({ SSL_CERT_FILE: origin.caPath }, dir.path);
    f = await startProxy(
      {
        mode: 'limited',
        mitm: true,
        domains: { '127.0.0.1': 'allow', localhost: 'allow' },
        enable_socks5: true,
      },
      { mitmTrust: trust },
    );
  });
  after(async () => {
    await f.close();
    await origin.close();
    dir.cleanup();
  });

  const authority = () => `127.0.0.1:${origin.port}`;
  const bundle = () => readFileSync(trust.bundlePath());

  test('the child env points every CA variable at one bundle: system roots + startup CA files + the Corral CA', () => {
    const path = trust.bundlePath();
    for (const k of CA_BUNDLE_ENV_KEYS) assert.equal(f.proxy.env[k], path, k);
    const text = readFileSync(path, 'latin1');
    assert.ok(text.includes(trust.ca.certPem.trim()), 'the Corral CA');
    assert.ok(text.includes(readFileSync(origin.caPath, 'latin1').trim()), 'the startup CA file');
    assert.ok((text.match(/BEGIN CERTIFICATE/g)?.length ?? 0) > 50, 'the system roots');
    assert.doesNotMatch(text, /PRIVATE KEY/);
  });

  test('GET is forwarded over verified TLS and audited as https with method and path; POST is 403 method_not_allowed', async () => {
    const { socket, head } = await connectVia(f.proxy.httpPort, authority());
    assert.match(head, /^HTTP\/1\.1 200 OK/);
    const s = await tlsOver(socket, '127.0.0.1', bundle());
    assert.equal(s.alpnProtocol, 'http/1.1');
    const leaf = s.getPeerX509Certificate();
    assert.ok(leaf?.checkIssued(new (await import('node:crypto')).X509Certificate(trust.ca.certPem)));
    const res = await exchange(s, `GET /a/b?token=s3cret HTTP/1.1\r\nhost: ${authority()}\r\n`);
    assert.match(res, /^HTTP\/1\.1 200 OK/);
    assert.match(res, /ok GET \/a\/b\?token=s3cret$/);
    const ev = f.audits.find((e) => e['network.transport.protocol'] === 'https' && e['url.path'] === '/a/b');
    assert.ok(ev, JSON.stringify(f.audits));
    assert.equal(ev['http.request.method'], 'GET');
    assert.equal(ev['network.intercepted'], true);
    assert.equal(ev['network.policy.decision'], 'allow');
    assert.doesNotMatch(JSON.stringify(f.audits), /s3cret/, 'no query in the audit');

    const before = origin.seen.length;
    const c2 = await connectVia(f.proxy.httpPort, authority());
    const s2 = await tlsOver(c2.socket, '127.0.0.1', bundle());
    const post = await exchange(
      s2,
      `POST /p HTTP/1.1\r\nhost: ${authority()}\r\ncontent-length: 2\r\n`,
      'hi',
    );
    assert.match(post, /^HTTP\/1\.1 403 /);
    assert.match(post, /x-proxy-error: blocked-by-method-policy/);
    const body = JSON.parse(post.slice(post.indexOf('\r\n\r\n') + 4));
    assert.equal(body.reason, 'method_not_allowed');
    assert.equal(body.source, 'mode_guard');
    assert.equal(origin.seen.length, before, 'the POST never reached the origin');
    const blocked = f.blocked.at(-1)?.record;
    assert.equal(blocked?.protocol, 'https');
    assert.equal(blocked?.method, 'POST');
    assert.equal(blocked?.mode, 'limited');
  });

  test('Host mismatch is 400 host mismatch, nested CONNECT 405, TRACE 405; none reaches the origin', async () => {
    const before = origin.seen.length;
    const ask = async (head: string) => {
      const { socket } = await connectVia(f.proxy.httpPort, authority());
      const s = await tlsOver(socket, '127.0.0.1', bundle());
      return exchange(s, head);
    };
    const mismatch = await ask('GET / HTTP/1.1\r\nhost: localhost\r\n');
    assert.match(mismatch, /^HTTP\/1\.1 400 [\s\S]*\r\n\r\nhost mismatch$/);
    const otherPort = await ask(`GET / HTTP/1.1\r\nhost: 127.0.0.1:${origin.port + 1}\r\n`);
    assert.match(otherPort, /host mismatch$/);
    const absolute = await ask(`GET https://localhost:${origin.port}/ HTTP/1.1\r\nhost: ${authority()}\r\n`);
    assert.match(absolute, /host mismatch$/);
    const nested = await ask(`CONNECT 127.0.0.1:22 HTTP/1.1\r\nhost: 127.0.0.1:22\r\n`);
    assert.match(nested, /^HTTP\/1\.1 405 /);
    const trace = await ask(`TRACE / HTTP/1.1\r\nhost: ${authority()}\r\n`);
    assert.match(trace, /^HTTP\/1\.1 405 /);
    assert.equal(origin.seen.length, before);
  });

  test('curl and python3 (VERIFY_X509_STRICT) through the proxy: GET 200, POST 403', async () => {
    const env = { ...process.env, ...f.proxy.env, NO_PROXY: '', no_proxy: '' };
    const url = `https://${authority()}/curl`;
    const get = await run('curl', ['-sS', '-m', '10', url], { env });
    assert.equal(get.stdout, 'ok GET /curl');
    const post = await run(
      'curl',
      ['-sS', '-m', '10', '-o', '/dev/null', '-w', '%{http_code}', '-d', 'x', url],
      { env },
    );
    assert.equal(post.stdout, '403');
    const py = [
      'import ssl, urllib.request, os',
      "ctx = ssl.create_default_context(cafile=os.environ['SSL_CERT_FILE'])",
      'ctx.verify_flags |= ssl.VERIFY_X509_STRICT',
      "h = urllib.request.ProxyHandler({'https': os.environ['HTTPS_PROXY']})",
      'o = urllib.request.build_opener(h, urllib.request.HTTPSHandler(context=ctx))',
      `print(o.open('https://${authority()}/py').read().decode())`,
      'try:',
      `    o.open(urllib.request.Request('https://${authority()}/py', data=b'x', method='POST'))`,
      'except urllib.error.HTTPError as e:',
      '    print(e.code)',
    ].join('\n');
    const r = await run('python3', ['-c', py], { env });
    assert.equal(r.stdout, 'ok GET /py\n403\n');
  });

  test('a name (localhost) gets a leaf with a DNS SAN', async () => {
    const { socket } = await connectVia(f.proxy.httpPort, `localhost:${origin.port}`);
    const s = await tlsOver(socket, 'localhost', bundle());
    assert.match(s.getPeerX509Certificate()?.subjectAltName ?? '', /DNS:localhost/);
    assert.match(await exchange(s, `GET /n HTTP/1.1\r\nhost: localhost:${origin.port}\r\n`), /ok GET \/n$/);
  });

  test('an upstream not trusted by the server (only the Corral CA would vouch for it) is a 502', async () => {
    const bare = createMitmTrust({}, dir.path);
    const g = await startProxy(
      { mode: 'limited', mitm: true, domains: { '127.0.0.1': 'allow' } },
      { mitmTrust: bare },
    );
    try {
      const { socket } = await connectVia(g.proxy.httpPort, authority());
      const s = await tlsOver(socket, '127.0.0.1', readFileSync(bare.bundlePath()));
      const res = await exchange(s, `GET / HTTP/1.1\r\nhost: ${authority()}\r\n`);
      assert.match(res, /^HTTP\/1\.1 502 [\s\S]*upstream failure$/);
    } finally {
      await g.close();
    }
  });

  test('mitm:false in limited mode keeps the 403 mitm_required', async () => {
    const g = await startProxy({ mode: 'limited', mitm: false, domains: { '127.0.0.1': 'allow' } });
    try {
      const { head } = await connectVia(g.proxy.httpPort, authority());
      assert.match(head, /^HTTP\/1\.1 403 [\s\S]*x-proxy-error: blocked-by-mitm-required/);
      assert.equal(g.proxy.env.SSL_CERT_FILE, undefined, 'no CA variables without interception');
    } finally {
      await g.close();
    }
  });
});

describe('TLS interception over SOCKS5', () => {
  test('SOCKS5 CONNECT to port 443 in limited mode is intercepted (other ports stay refused)', async () => {
    const dir = tempDir('corral-mitm-socks-');
    const origin = await startTlsOrigin(dir.path);
    const trust = createMitmTrust({ SSL_CERT_FILE: origin.caPath }, dir.path);
    // Port 443 is dialled at the origin's port: nothing here may bind 443.
    const f = await startProxy(
      { mode: 'limited', mitm: true, domains: { localhost: 'allow' }, enable_socks5: true },
      {
        mitmTrust: trust,
        dialer: (t) => defaultDialer({ ...t, port: t.port === 443 ? origin.port : t.port }),
      },
    );
    try {
      const socksConnect = (port: number) => socksTo(f.proxy.socksPort!, 'localhost', port);
      const ok = await socksConnect(443);
      assert.equal(ok.reply[3], 0, `success reply: ${ok.reply.toString('hex')}`);
      const t = await tlsOver(ok.s, 'localhost', readFileSync(trust.bundlePath()));
      assert.match(await exchange(t, 'GET /s HTTP/1.1\r\nhost: localhost\r\n'), /ok GET \/s$/);
      const refused = await socksConnect(origin.port);
      assert.equal(refused.reply[3], 2, 'another port: 05 02 as before');
    } finally {
      await f.close();
      await origin.close();
      dir.cleanup();
    }
  });
});
