import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { test } from 'node:test';
import { connectVia, mayUseUpstream, upstreamFor, upstreamFromEnv } from '../../src/network/upstream.js';
import { RawClient, request, startEcho, startOrigin, startProxy } from './network-helpers.js';

/** A loopback stand-in for a corporate proxy: records what it is asked, tunnels CONNECTs to loopback targets. */
async function fakeUpstream() {
  const seen: { method: string; url: string; auth: string | undefined }[] = [];
  let connections = 0;
  const server = http.createServer((req, res) => {
    seen.push({ method: req.method ?? '', url: req.url ?? '', auth: req.headers['proxy-authorization'] });
    res.end('from upstream');
  });
  server.on('connection', () => connections++);
  server.on('connect', (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
    seen.push({ method: 'CONNECT', url: req.url ?? '', auth: req.headers['proxy-authorization'] });
    const [host, port] = [req.url!.slice(0, req.url!.lastIndexOf(':')), Number(req.url!.split(':').pop())];
    if (!/^127\./.test(host) && host !== 'localhost') {
      socket.end('HTTP/1.1 403 Forbidden\r\n\r\n');
      return;
    }
    const up = net.connect(port, host === 'localhost' ? '127.0.0.1' : host, () => {
      socket.write('HTTP/1.1 200 Connection established\r\n\r\n');
      if (head.length) up.write(head);
      up.pipe(socket);
      socket.pipe(up);
    });
    up.on('error', () => socket.destroy());
    socket.on('error', () => up.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    url: `http://user:p%40ss@127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    seen,
    get connections() {
      return connections;
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

test('upstream env: http(s) schemes only; tunnel order HTTPS, HTTP, ALL; never for local targets', () => {
  const u = upstreamFromEnv({
    http_proxy: 'http://a:1',
    HTTPS_PROXY: 'socks5://b:2',
    ALL_PROXY: 'https://c:3',
  });
  assert.equal(u.http?.host, 'a:1');
  assert.equal(u.https, undefined, 'socks5 upstreams are ignored');
  assert.equal(upstreamFor('tunnel', u)?.host, 'a:1');
  assert.equal(upstreamFor('http', { all: new URL('http://c:3') })?.host, 'c:3');
  assert.equal(mayUseUpstream('localhost', ['127.0.0.1']), false);
  assert.equal(mayUseUpstream('rebind.test', ['127.0.0.1']), false);
  assert.equal(mayUseUpstream('x.test', []), false);
});

test('connectVia: CONNECT through the upstream with Proxy-Authorization from the URL; non-2xx rejects', async () => {
  const up = await fakeUpstream();
  const echo = await startEcho();
  try {
    const s = await connectVia(new URL(up.url), '127.0.0.1', echo.port);
    s.resume();
    s.write('hi');
    const got = await new Promise<string>((r) => s.once('data', (d) => r(d.toString())));
    assert.equal(got, 'hi');
    s.destroy();
    assert.deepEqual(up.seen[0], {
      method: 'CONNECT',
      url: `127.0.0.1:${echo.port}`,
      auth: `Basic ${Buffer.from('user:p@ss').toString('base64')}`,
    });
    await assert.rejects(connectVia(new URL(up.url), 'refused.test', 443), /upstream proxy answered 403/);
  } finally {
    await up.close();
    await echo.close();
  }
});

test('allow_upstream_proxy: local targets never go upstream (HTTP, CONNECT, SOCKS)', async () => {
  const up = await fakeUpstream();
  const origin = await startOrigin();
  const echo = await startEcho();
  const fx = await startProxy(
    {
      allow_upstream_proxy: true,
      allow_local_binding: true,
      domains: { localhost: 'allow', '127.0.0.1': 'allow' },
    },
    { upstreamEnv: { HTTP_PROXY: up.url, HTTPS_PROXY: up.url, ALL_PROXY: up.url } },
  );
  try {
    const res = await request(
      fx.proxy.httpPort,
      `GET http://localhost:${origin.port}/direct HTTP/1.1\r\nHost: localhost:${origin.port}\r\n\r\n`,
    );
    assert.equal(res.body, 'ok GET /direct');
    const c = await RawClient.open(fx.proxy.httpPort);
    c.write(`CONNECT 127.0.0.1:${echo.port} HTTP/1.1\r\n\r\nx`);
    assert.equal((await c.readResponse()).status, 200);
    assert.equal((await c.read(1)).toString(), 'x');
    c.close();
    const sk = await RawClient.open(fx.proxy.socksPort!);
    const port = Buffer.alloc(2);
    port.writeUInt16BE(echo.port);
    sk.write(Buffer.concat([Buffer.from([5, 1, 0, 5, 1, 0, 3, 9]), Buffer.from('localhost'), port]));
    await sk.read(2);
    assert.equal((await sk.read(10))[1], 0);
    sk.close();
    assert.equal(up.connections, 0, 'the upstream proxy saw nothing');
  } finally {
    await fx.close();
    await up.close();
    await origin.close();
    await echo.close();
  }
});

test('UpstreamAgents: plain HTTP goes to the upstream in absolute form with Proxy-Authorization', async () => {
  const { UpstreamAgents } = await import('../../src/network/upstream.js');
  const up = await fakeUpstream();
  const agents = new UpstreamAgents();
  try {
    const { module, options } = agents.requestOptions(new URL(up.url), 'http://example.test:8080/p?q');
    const body = await new Promise<string>((resolve, reject) => {
      const req = module.request({ ...options, method: 'GET' }, (res) => {
        let b = '';
        res.on('data', (d) => {
          b += d;
        });
        res.on('end', () => resolve(b));
      });
      req.on('error', reject);
      req.end();
    });
    assert.equal(body, 'from upstream');
    assert.deepEqual(up.seen[0], {
      method: 'GET',
      url: 'http://example.test:8080/p?q',
      auth: `Basic ${Buffer.from('user:p@ss').toString('base64')}`,
    });
  } finally {
    agents.destroy();
    await up.close();
  }
});
