// TLS interception (issue 34) under attack, on loopback only. Each attack of the issue: what a client inside the
// tunnel sends to get past the checks (a nested CONNECT, another Host, two Hosts, TRACE, an upgrade in limited mode,
// a POST), what it sends instead of TLS (garbage, silence, a stalled or oversized handshake), how many tunnels it
// opens (256, then 503), what the inner parser is fed (deep, wide, huge, malformed, pipelined), and how a hook's or
// the broker's secrets could leak (a CR/LF in a prefix, a dummy sent elsewhere). On the old code (cca01b7) every
// limited-mode CONNECT was a 403 mitm_required, so none of these tunnels opened and every test here fails there.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { NetworkConfigError } from '../../src/network/config.js';
import { parseManagedNetwork } from '../../src/network/managedNetwork.js';
import { CredentialBroker } from '../../src/network/mitm/broker.js';
import { HANDSHAKE_TIMEOUT_MS, MAX_INTERCEPTED_TUNNELS } from '../../src/network/mitm/interceptor.js';
import { createMitmTrust, type MitmTrust } from '../../src/network/mitm/trust.js';
import { connectVia, exchange, tlsOver } from '../helpers/mitmClient.js';
import { tempDir, until } from '../helpers/server.js';
import { startTlsOrigin, type TlsOrigin } from '../helpers/tlsOrigin.js';
import { type ProxyFixture, startProxy } from '../integration/network-helpers.js';

let dir: { path: string; cleanup(): void };
let origin: TlsOrigin;
let trust: MitmTrust;
let f: ProxyFixture;
const HANDSHAKE_MS = 400;

before(async () => {
  dir = tempDir('corral-mitm-hostile-');
  origin = await startTlsOrigin(dir.path, { names: ['hooked.test'] });
  trust = createMitmTrust({ SSL_CERT_FILE: origin.caPath }, dir.path);
  f = await startProxy(
    { mode: 'limited', mitm: true, enable_socks5: true, domains: { '127.0.0.1': 'allow' } },
    { mitmTrust: trust, mitmTimeouts: { handshakeMs: HANDSHAKE_MS } },
  );
});
after(async () => {
  await f.close();
  await origin.close();
  dir.cleanup();
});

const authority = () => `127.0.0.1:${origin.port}`;

/** One intercepted exchange: CONNECT, TLS trusting the bundle, the raw request, the whole answer. */
async function inside(head: string, body = ''): Promise<string> {
  const { socket } = await connectVia(f.proxy.httpPort, authority());
  const s = await tlsOver(socket, '127.0.0.1', readFileSync(trust.bundlePath()));
  return exchange(s, head, body);
}

/** Resolves with what arrived once the proxy closed `s` (the test's own bound is the runner's). */
function closed(s: net.Socket): Promise<Buffer> {
  const parts: Buffer[] = [];
  s.on('data', (d: Buffer) => parts.push(d));
  s.resume();
  return new Promise((r) => s.once('close', () => r(Buffer.concat(parts))));
}

describe('requests inside an intercepted tunnel', () => {
  test('another Host, two Hosts, an absolute-form target elsewhere (userinfo trick included): 400 host mismatch, origin untouched', async () => {
    const before = origin.seen.length;
    const a = authority();
    for (const head of [
      'GET / HTTP/1.1\r\nhost: localhost\r\n',
      `GET / HTTP/1.1\r\nhost: ${a}\r\nhost: evil.test\r\n`,
      `GET / HTTP/1.1\r\nhost: evil.test\r\nhost: ${a}\r\n`,
      `GET https://evil.test/ HTTP/1.1\r\nhost: ${a}\r\n`,
      `GET https://${a}@evil.test/ HTTP/1.1\r\nhost: ${a}\r\n`,
      `GET http://${a}/ HTTP/1.1\r\nhost: ${a}\r\n`,
      `GET / HTTP/1.1\r\nhost: 127.0.0.1:${origin.port}0\r\n`,
    ]) {
      const res = await inside(head);
      assert.match(res, /^HTTP\/1\.1 400 [\s\S]*host mismatch$/, head);
    }
    assert.match(await inside('GET / HTTP/1.1\r\n'), /^HTTP\/1\.1 400 [\s\S]*missing host$/);
    assert.equal(origin.seen.length, before);
  });

  test('nested CONNECT 405; TRACE 405; TRACK, lowercase methods and CL+TE smuggling are parse errors; POST/PUT/DELETE 403', async () => {
    const before = origin.seen.length;
    const a = authority();
    assert.match(await inside(`CONNECT ${a} HTTP/1.1\r\nhost: ${a}\r\n`), /^HTTP\/1\.1 405 /);
    assert.match(await inside(`TRACE / HTTP/1.1\r\nhost: ${a}\r\n`), /^HTTP\/1\.1 405 /);
    assert.match(await inside(`TRACK / HTTP/1.1\r\nhost: ${a}\r\n`), /^HTTP\/1\.1 400 /);
    assert.match(await inside(`get / HTTP/1.1\r\nhost: ${a}\r\n`), /^HTTP\/1\.1 400 /);
    assert.match(
      await inside(
        `GET / HTTP/1.1\r\nhost: ${a}\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n`,
        '0\r\n\r\n',
      ),
      /^HTTP\/1\.1 400 /,
    );
    for (const m of ['POST', 'PUT', 'DELETE', 'PATCH']) {
      const res = await inside(`${m} /w HTTP/1.1\r\nhost: ${a}\r\ncontent-length: 1\r\n`, 'x');
      assert.match(res, /^HTTP\/1\.1 403 [\s\S]*"reason":"method_not_allowed"/, m);
    }
    assert.equal(origin.seen.length, before, 'nothing refused reached the origin');
  });

  test('a WebSocket upgrade in limited mode is 403 method_not_allowed and never reaches the origin', async () => {
    const before = origin.seen.length;
    const a = authority();
    const res = await inside(
      `GET /ws HTTP/1.1\r\nhost: ${a}\r\nupgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n`,
    );
    assert.match(res, /^HTTP\/1\.1 403 [\s\S]*method_not_allowed/);
    assert.equal(origin.seen.length, before);
  });

  test('huge, wide, deep and pipelined heads: 431, 414, 400 as on the proxy port; a deep path is forwarded intact, its audit bounded', async () => {
    const a = authority();
    assert.match(
      await inside(`GET / HTTP/1.1\r\nhost: ${a}\r\nx-big: ${'a'.repeat(17_000)}\r\n`),
      /^HTTP\/1\.1 431 /,
    );
    const wide = Array.from({ length: 101 }, (_, i) => `x-h${i}: v\r\n`).join('');
    assert.match(await inside(`GET / HTTP/1.1\r\nhost: ${a}\r\n${wide}`), /^HTTP\/1\.1 431 /);
    assert.match(await inside(`GET /${'u'.repeat(70_000)} HTTP/1.1\r\nhost: ${a}\r\n`), /^HTTP\/1\.1 414 /);
    assert.match(await inside('\x00\x01\x02 garbage\r\n'), /^HTTP\/1\.1 400 /);
    const deep = `/${'a/'.repeat(6000)}end`;
    assert.match(await inside(`GET ${deep} HTTP/1.1\r\nhost: ${a}\r\n`), /^HTTP\/1\.1 200 /);
    assert.equal(origin.seen.at(-1)!.url, deep);
    const ev = f.audits.findLast((e) => e['network.transport.protocol'] === 'https');
    assert.ok((ev?.['url.path']?.length ?? 0) <= 2048, 'the audit keeps a bounded path');
    const { socket } = await connectVia(f.proxy.httpPort, a);
    const s = await tlsOver(socket, '127.0.0.1', readFileSync(trust.bundlePath()));
    const n = 200;
    const reqs = Array.from({ length: n }, (_, i) => `GET /p${i} HTTP/1.1\r\nhost: ${a}\r\n\r\n`).join('');
    const all = await exchange(s, `${reqs}GET /last HTTP/1.1\r\nhost: ${a}\r\n`);
    assert.equal(all.match(/HTTP\/1\.1 200 /g)?.length, n + 1);
    assert.match(all, /ok GET \/p0[\s\S]*ok GET \/p199[\s\S]*ok GET \/last$/);
  });
});

describe('what a client sends instead of TLS', () => {
  test('garbage, a fake 16 MiB TLS record, a stalled ClientHello, silence: closed (silence at the handshake timeout), nothing dialled', async () => {
    assert.equal(
      HANDSHAKE_TIMEOUT_MS,
      10_000,
      'the production handshake bound (this proxy runs it at 400 ms)',
    );
    const dialsBefore = f.dials.length;
    const cases: (Buffer | null)[] = [
      Buffer.from('GET / HTTP/1.1\r\nhost: x\r\n\r\n'),
      Buffer.concat([Buffer.from([0x16, 0x03, 0x01, 0xff, 0xff]), Buffer.alloc(70_000, 0x41)]),
      Buffer.from([0x16, 0x03, 0x01, 0x00, 0x80, 0x01, 0x00]),
      null,
    ];
    for (const bytes of cases) {
      const { socket } = await connectVia(f.proxy.httpPort, authority());
      const t0 = Date.now();
      const done = closed(socket);
      if (bytes) socket.write(bytes);
      const got = await done;
      assert.doesNotMatch(got.toString('latin1'), /HTTP\/1\.1 200/, 'no plaintext answer');
      if (bytes === null || bytes.length === 7)
        assert.ok(Date.now() - t0 >= HANDSHAKE_MS - 20, 'held to the timeout');
    }
    assert.equal(f.dials.length, dialsBefore, 'nothing was dialled for a tunnel that never completed TLS');
  });

  test(`${MAX_INTERCEPTED_TUNNELS} tunnels in their handshake, then 503; one closing frees its place`, async () => {
    const g = await startProxy(
      { mode: 'limited', mitm: true, domains: { '127.0.0.1': 'allow' } },
      { mitmTrust: trust },
    );
    const open: net.Socket[] = [];
    try {
      for (let i = 0; i < MAX_INTERCEPTED_TUNNELS; i++) {
        const c = await connectVia(g.proxy.httpPort, authority());
        assert.match(c.head, /^HTTP\/1\.1 200 /);
        open.push(c.socket);
      }
      const over = await connectVia(g.proxy.httpPort, authority());
      assert.match(over.head, /^HTTP\/1\.1 503 /);
      over.socket.destroy();
      const gone = new Promise((r) => open[0]!.once('close', r));
      open[0]!.destroy();
      await gone;
      let head = '';
      await until(async () => {
        const c = await connectVia(g.proxy.httpPort, authority());
        head = c.head;
        if (/^HTTP\/1\.1 200 /.test(head)) open.push(c.socket);
        else c.socket.destroy();
        return /^HTTP\/1\.1 200 /.test(head);
      });
    } finally {
      for (const s of open) s.destroy();
      await g.close();
    }
  });

  test('a client offering only h2 by ALPN is refused in the handshake (the proxy speaks http/1.1 only)', async () => {
    const { socket } = await connectVia(f.proxy.httpPort, authority());
    const tls = await import('node:tls');
    const err = await new Promise<Error | null>((resolve) => {
      const s = tls.connect({
        socket,
        ca: readFileSync(trust.bundlePath()),
        host: '127.0.0.1',
        ALPNProtocols: ['h2'],
      });
      s.once('secureConnect', () => {
        resolve(s.alpnProtocol === 'h2' ? new Error('h2 negotiated') : null);
        s.destroy();
      });
      s.once('error', (e) => resolve(e));
    });
    // Either the handshake fails, or it completes without h2: never h2.
    assert.ok(err === null || !/h2 negotiated/.test(err.message), String(err));
  });
});

describe('secrets in hooks and the broker', () => {
  test('a hook whose prefix, header name or host smuggles CR/LF is refused as a config error naming the field', () => {
    const cfg = (hook: Record<string, unknown>) => ({
      config: { network: { enabled: true, mitm: true, mitm_hooks: [hook] } },
    });
    const bad: [Record<string, unknown>, RegExp][] = [
      [
        {
          host: 'a.test',
          actions: {
            inject_request_headers: [{ name: 'x', secret_env_var: 'S', prefix: 'Bearer \r\nx-evil: 1 ' }],
          },
        },
        /mitm_hooks|prefix|CR/,
      ],
      [
        { host: 'a.test', actions: { inject_request_headers: [{ name: 'x\r\ny', secret_env_var: 'S' }] } },
        /header name/,
      ],
      [{ host: 'a.test\r\nb', actions: {} }, /host/],
      [{ host: 'a.test', actions: { inject_request_headers: [{ name: 'x' }] } }, /exactly one of/],
      [{ host: 'a.test', match: { body: { any: 1 } } }, /body is not supported/],
    ];
    for (const [hook, re] of bad) {
      assert.throws(
        () => parseManagedNetwork(cfg(hook)),
        (e: unknown) => e instanceof NetworkConfigError && re.test(e.message),
        JSON.stringify(hook),
      );
    }
  });

  test('a secret holding CR/LF is refused at the start; a listed secret never appears in a record', async () => {
    await assert.rejects(
      startProxy(
        {
          mode: 'full',
          mitm_hooks: [
            {
              host: 'hooked.test',
              actions: { inject_request_headers: [{ name: 'x', secret_env_var: 'S' }] },
            },
          ],
        },
        { mitmTrust: trust, secretEnv: { CORRAL_MITM_SECRET_ENV: 'S', S: 'ok\r\nx-evil: 1' } },
      ),
      /CR, LF or NUL/,
    );
  });
});

describe('what the agent or the sandboxed command could try against the secrets', () => {
  test("a hook naming the server's own variables or files (traversal included) fails the start unless the operator listed them", async () => {
    const hook = (inject: Record<string, unknown>) => ({
      mode: 'full',
      mitm_hooks: [{ host: 'hooked.test', actions: { inject_request_headers: [{ name: 'x', ...inject }] } }],
    });
    const env = {
      CORRAL_TOKEN: 'server-secret',
      CORRAL_MITM_SECRET_ENV: 'OTHER',
      CORRAL_MITM_SECRET_FILES: `${dir.path}/ok`,
    };
    for (const inject of [
      { secret_env_var: 'CORRAL_TOKEN' },
      { secret_file: '/etc/shadow' },
      { secret_file: `${dir.path}/ok/../ca.key` },
      { secret_file: `${dir.path}/okay-sibling` },
    ]) {
      await assert.rejects(
        startProxy(hook(inject), { mitmTrust: trust, secretEnv: env }),
        /not listed|is not under/,
        JSON.stringify(inject),
      );
    }
  });

  test('a hooked host: a request that matches no hook is 403 mitm_hook_denied, even in limited mode for a GET', async () => {
    const g = await startProxy(
      {
        mode: 'limited',
        mitm: true,
        domains: { '127.0.0.1': 'allow' },
        mitm_hooks: [{ host: '127.0.0.1', match: { path_prefixes: ['/only/'] } }],
      },
      { mitmTrust: trust },
    );
    try {
      const before = origin.seen.length;
      const { socket } = await connectVia(g.proxy.httpPort, authority());
      const s = await tlsOver(socket, '127.0.0.1', readFileSync(trust.bundlePath()));
      const res = await exchange(s, `GET /elsewhere HTTP/1.1\r\nhost: ${authority()}\r\n`);
      assert.match(res, /^HTTP\/1\.1 403 [\s\S]*"reason":"mitm_hook_denied"/);
      assert.equal(origin.seen.length, before);
    } finally {
      await g.close();
    }
  });

  test('a brokered dummy sent to lookalike hosts, twice, in two headers, or as plain HTTP off loopback: the real value never goes', () => {
    const real = `gho_${'Kx9'.repeat(12)}`;
    const b = new CredentialBroker({ plaintext: false });
    const env: Record<string, string> = { GITHUB_TOKEN: real, OPENAI_API_KEY: 'sk-abcdefghijklmnop1234' };
    b.virtualize(env);
    const d = env.GITHUB_TOKEN!;
    const one = ['Authorization', `Bearer ${d}`];
    for (const host of [
      'github.com.evil.test',
      'evilgithub.com',
      'ghe.com.evil.test',
      'api.openai.com',
      'github.co',
    ]) {
      assert.equal(b.rewrite(host, one, 'tls'), undefined, host);
    }
    assert.equal(
      b.rewrite('github.com', ['Authorization', `${d} ${d}`], 'tls'),
      undefined,
      'the dummy twice',
    );
    assert.equal(
      b.rewrite('github.com', ['Authorization', `${d} ${env.OPENAI_API_KEY}`], 'tls'),
      undefined,
      'two dummies',
    );
    assert.equal(b.rewrite('github.com', [...one, 'authorization', 'x'], 'tls'), undefined, 'two headers');
    assert.equal(b.rewrite('github.com', ['x-token', d], 'tls'), undefined, 'not in Authorization');
    assert.equal(b.rewrite('github.com', one, 'plain'), undefined, 'plain HTTP off loopback');
    assert.equal(
      b.rewrite('api.openai.com', ['authorization', `Bearer ${env.OPENAI_API_KEY}`], 'tls')?.credential,
      'OPENAI_API_KEY',
    );
    assert.ok(!JSON.stringify(env).includes(real));
  });
});
