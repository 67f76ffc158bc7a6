/**
 * The server's upstream proxies (codex exec-server 0.171, issue 35): `--tcp-upstream-proxy HOST:PORT` for the SOCKS
 * listener's raw TCP, the server's own HTTPS_PROXY / HTTP_PROXY / NO_PROXY for the HTTP listener, and
 * `--proxy-private-ips-via-upstream`. A loopback HTTP CONNECT proxy stands in for the corporate proxy and logs every
 * request: every allowed connection is in its log, no denied one, loopback never. Targets are the stub resolver's
 * names (network-helpers.ts): its one non-loopback answer is a documentation address (non-public, never dialled: the
 * fixture's dialer refuses and records anything off loopback).
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type net from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { Resolver } from '../../src/network/policy.js';
import { type UpstreamSettings, upstreamRoute } from '../../src/network/upstream.js';
import { RawClient, request, startEcho, startProxy, stubResolver } from './network-helpers.js';

/** The corporate proxy: answers CONNECT with 200 and then echoes (it dials nothing); logs each request line. */
async function corporateProxy() {
  const log: string[] = [];
  const server = http.createServer((req, res) => {
    log.push(`${req.method} ${req.url}`);
    res.end(`upstream saw ${req.url}`);
  });
  server.on('connect', (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
    log.push(`CONNECT ${req.url}`);
    socket.write('HTTP/1.1 200 Connection established\r\n\r\n');
    if (head.length) socket.write(head);
    socket.pipe(socket);
    socket.on('error', () => socket.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    log,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** `corp.test` and `intranet.test` resolve as the stub's `public.test` does (no further address is named here). */
const resolver: Resolver = (host, port) =>
  stubResolver(host === 'corp.test' || host === 'intranet.test' ? 'public.test' : host, port);

function socksConnect(name: string, port: number): Buffer {
  const p = Buffer.alloc(2);
  p.writeUInt16BE(port);
  return Buffer.concat([Buffer.from([5, 1, 0, 5, 1, 0, 3, name.length]), Buffer.from(name), p]);
}

/** A SOCKS5 CONNECT through the managed proxy: the reply code, and what an echo of `x` gave back (when 0). */
async function socks(proxyPort: number, name: string, port: number): Promise<{ rep: number; echo?: string }> {
  const c = await RawClient.open(proxyPort);
  try {
    c.write(socksConnect(name, port));
    await c.read(2);
    const head = await c.read(10);
    if (head[1] !== 0) return { rep: head[1]! };
    c.write('x');
    return { rep: 0, echo: (await c.read(1)).toString() };
  } finally {
    c.close();
  }
}

const network = {
  enable_socks5: true,
  allow_upstream_proxy: true,
  allow_local_binding: true,
  domains: {
    'corp.test': 'allow',
    'intranet.test': 'allow',
    'public.test': 'allow',
    '127.0.0.1': 'allow',
    'denied.test': 'deny',
  },
};

describe('--tcp-upstream-proxy and the server’s own upstream variables', () => {
  let corp: Awaited<ReturnType<typeof corporateProxy>>;
  let envProxy: Awaited<ReturnType<typeof corporateProxy>>;
  let echo: Awaited<ReturnType<typeof startEcho>>;
  before(async () => {
    corp = await corporateProxy();
    envProxy = await corporateProxy();
    echo = await startEcho();
  });
  after(async () => {
    await corp.close();
    await envProxy.close();
    await echo.close();
  });

  test('SOCKS raw TCP: every allowed non-local connection goes through it, a denied one never, loopback direct', async () => {
    corp.log.length = 0;
    const upstream: UpstreamSettings = {
      tcp: { host: '127.0.0.1', port: corp.port },
      privateIps: true,
      env: {},
    };
    const fx = await startProxy(network, { resolver, upstream });
    try {
      assert.deepEqual(await socks(fx.proxy.socksPort!, 'corp.test', 443), { rep: 0, echo: 'x' });
      assert.deepEqual(await socks(fx.proxy.socksPort!, 'intranet.test', 22), { rep: 0, echo: 'x' });
      assert.equal((await socks(fx.proxy.socksPort!, 'denied.test', 443)).rep, 2);
      // Loopback stays local: the echo itself answers, the corporate proxy sees nothing.
      assert.deepEqual(await socks(fx.proxy.socksPort!, '127.0.0.1', echo.port), { rep: 0, echo: 'x' });
      assert.deepEqual(corp.log, ['CONNECT corp.test:443', 'CONNECT intranet.test:22']);
      assert.deepEqual(fx.dials, [`127.0.0.1:${echo.port}`], 'only loopback was dialled directly');
      // Each decision audited, the refusal recorded as blocked.
      assert.deepEqual(
        fx.audits.map((a) => [a['server.address'], a['network.policy.decision']]),
        [
          ['corp.test', 'allow'],
          ['intranet.test', 'allow'],
          ['denied.test', 'deny'],
          ['127.0.0.1', 'allow'],
        ],
      );
      assert.deepEqual(
        fx.blocked.map((b) => b.record.host),
        ['denied.test'],
      );
    } finally {
      await fx.close();
    }
  });

  test('without --proxy-private-ips-via-upstream a private destination is dialled directly, never upstream', async () => {
    corp.log.length = 0;
    const fx = await startProxy(network, {
      resolver,
      upstream: { tcp: { host: '127.0.0.1', port: corp.port }, privateIps: false, env: {} },
    });
    try {
      // The fixture's dialer refuses anything off loopback: the dial is recorded and fails (rep != 0).
      assert.notEqual((await socks(fx.proxy.socksPort!, 'corp.test', 443)).rep, 0);
      assert.deepEqual(corp.log, []);
      assert.equal(
        fx.offMachine.length,
        1,
        'dialled directly, as Codex does for a private IP without the flag',
      );
      fx.offMachine.length = 0;
    } finally {
      await fx.close();
    }
  });

  test('HTTP listener: HTTPS_PROXY for CONNECT, HTTP_PROXY for plain http://, NO_PROXY exempts; SOCKS keeps --tcp-upstream-proxy', async () => {
    corp.log.length = 0;
    envProxy.log.length = 0;
    const env = {
      HTTPS_PROXY: `http://127.0.0.1:${envProxy.port}`,
      http_proxy: `http://127.0.0.1:${envProxy.port}`,
      NO_PROXY: 'localhost, .intranet.test:22',
    };
    const fx = await startProxy(network, {
      resolver,
      upstream: { tcp: { host: '127.0.0.1', port: corp.port }, privateIps: true, env },
    });
    try {
      const c = await RawClient.open(fx.proxy.httpPort);
      c.write('CONNECT corp.test:443 HTTP/1.1\r\nHost: corp.test:443\r\n\r\nx');
      assert.equal((await c.readResponse()).status, 200);
      assert.equal((await c.read(1)).toString(), 'x');
      c.close();
      const res = await request(
        fx.proxy.httpPort,
        'GET http://corp.test/p HTTP/1.1\r\nHost: corp.test\r\n\r\n',
      );
      assert.equal(res.body, 'upstream saw http://corp.test/p');
      // NO_PROXY names intranet.test on port 22: that CONNECT is dialled directly (the fixture's dialer refuses it).
      const d = await RawClient.open(fx.proxy.httpPort);
      d.write('CONNECT intranet.test:22 HTTP/1.1\r\nHost: intranet.test:22\r\n\r\n');
      await d.readResponse();
      d.close();
      assert.equal(fx.offMachine.length, 1, 'NO_PROXY: direct');
      fx.offMachine.length = 0;
      // SOCKS still leaves through --tcp-upstream-proxy, NO_PROXY or not (the operator's requirement).
      assert.deepEqual(await socks(fx.proxy.socksPort!, 'intranet.test', 22), { rep: 0, echo: 'x' });
      assert.deepEqual(envProxy.log, ['CONNECT corp.test:443', 'GET http://corp.test/p']);
      assert.deepEqual(corp.log, ['CONNECT intranet.test:22']);
    } finally {
      await fx.close();
    }
  });

  test('a policy with allow_upstream_proxy false uses none of the variables; --tcp-upstream-proxy still applies', async () => {
    corp.log.length = 0;
    envProxy.log.length = 0;
    const fx = await startProxy(
      { ...network, allow_upstream_proxy: false },
      {
        resolver,
        upstream: {
          tcp: { host: '127.0.0.1', port: corp.port },
          privateIps: true,
          env: { HTTPS_PROXY: `http://127.0.0.1:${envProxy.port}` },
        },
      },
    );
    try {
      const c = await RawClient.open(fx.proxy.httpPort);
      c.write('CONNECT corp.test:443 HTTP/1.1\r\nHost: corp.test:443\r\n\r\n');
      await c.readResponse();
      c.close();
      assert.equal(fx.offMachine.length, 1, 'no upstream variable: direct');
      fx.offMachine.length = 0;
      assert.deepEqual(await socks(fx.proxy.socksPort!, 'corp.test', 443), { rep: 0, echo: 'x' });
      assert.deepEqual(envProxy.log, []);
      assert.deepEqual(corp.log, ['CONNECT corp.test:443']);
    } finally {
      await fx.close();
    }
  });

  test('upstreamRoute: localhost and loopback are always local, whatever the flags and NO_PROXY', () => {
    const u = { https: new URL('http://127.0.0.1:1'), privateIps: true };
    for (const [host, addresses] of [
      ['localhost', ['127.0.0.1']],
      ['a.localhost', ['127.0.0.2']],
      ['rebind.test', ['127.0.0.1']],
      ['v6.test', ['::1']],
      ['mapped.test', ['::ffff:127.0.0.1']],
      ['unspecified.test', ['0.0.0.0']],
    ] as const)
      assert.equal(upstreamRoute('tunnel', u, { host, addresses, port: 443 }), undefined, host);
  });
});
