/**
 * The proxy's raw-socket fast path for plain absolute-form HTTP/1.1 (src/network/fastpath.ts): response framing
 * (chunked, close-delimited, HEAD, 304, large Content-Length), keep-alive with upstream reuse, pipelining, and a
 * request body — each compared with what the origin actually sent.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type net from 'node:net';
import { after, before, test } from 'node:test';
import { RawClient, startProxy } from './network-helpers.js';

const big = randomBytes(1024 * 1024);
let server: http.Server;
let P = 0;
let connections = 0;

before(async () => {
  server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (d: Buffer) => chunks.push(d));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      switch (req.url) {
        case '/chunked':
          res.writeHead(200, { 'content-type': 'text/plain' });
          res.write('first,');
          res.write('second,');
          res.end('third');
          break;
        case '/close': {
          // close-delimited: no content-length, no chunking (HTTP/1.0-style body)
          const s = res.socket as net.Socket;
          s.write('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\nuntil-close');
          s.end();
          break;
        }
        case '/not-modified':
          res.writeHead(304, { etag: '"x"' });
          res.end();
          break;
        case '/big':
          res.writeHead(200, { 'content-length': big.length });
          res.end(req.method === 'HEAD' ? undefined : big);
          break;
        case '/echo':
          res.writeHead(200, { 'content-length': body.length, 'x-method': req.method ?? '' });
          res.end(body);
          break;
        default:
          res.writeHead(200, { 'content-length': 2 });
          res.end('ok');
      }
    });
  });
  server.on('connection', () => connections++);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  P = (server.address() as net.AddressInfo).port;
});

after(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});

/** GET (or another method) through the proxy with Node's own client: a real HTTP parser checks the framing. */
function viaProxy(
  proxyPort: number,
  path: string,
  opts: { method?: string; body?: Buffer; agent?: http.Agent } = {},
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port: proxyPort,
        method: opts.method ?? 'GET',
        path: `http://localhost:${P}${path}`,
        headers: { host: `localhost:${P}` },
        agent: opts.agent ?? false,
      },
      (res) => {
        const parts: Buffer[] = [];
        res.on('data', (d: Buffer) => parts.push(d));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(parts) }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}

test('fast path: chunked, close-delimited, 304, HEAD and 1 MiB bodies arrive exactly as the origin sent them', async () => {
  const fx = await startProxy({ domains: { localhost: 'allow' } });
  try {
    const chunked = await viaProxy(fx.proxy.httpPort, '/chunked');
    assert.equal(chunked.status, 200);
    assert.equal(chunked.body.toString(), 'first,second,third');
    const closeDelimited = await viaProxy(fx.proxy.httpPort, '/close');
    assert.equal(closeDelimited.status, 200);
    assert.equal(closeDelimited.body.toString(), 'until-close');
    const notModified = await viaProxy(fx.proxy.httpPort, '/not-modified');
    assert.equal(notModified.status, 304);
    assert.equal(notModified.body.length, 0);
    const head = await viaProxy(fx.proxy.httpPort, '/big', { method: 'HEAD' });
    assert.equal(head.status, 200);
    assert.equal(head.headers['content-length'], String(big.length));
    assert.equal(head.body.length, 0);
    const large = await viaProxy(fx.proxy.httpPort, '/big');
    assert.ok(large.body.equals(big), 'the 1 MiB body arrives byte for byte');
    const posted = await viaProxy(fx.proxy.httpPort, '/echo', {
      method: 'POST',
      body: Buffer.from('payload'),
    });
    assert.equal(posted.headers['x-method'], 'POST');
    assert.equal(posted.body.toString(), 'payload');
  } finally {
    await fx.close();
  }
});

test('fast path: keep-alive on both sides reuses one upstream connection; each request is still evaluated', async () => {
  const fx = await startProxy({ domains: { localhost: 'allow' } });
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const before = connections;
    for (let i = 0; i < 20; i++) {
      const r = await viaProxy(fx.proxy.httpPort, `/n${i}`, { agent });
      assert.equal(r.body.toString(), 'ok');
    }
    assert.ok(connections - before <= 2, `upstream connections opened: ${connections - before}`);
    assert.ok(fx.audits.filter((a) => a['network.policy.decision'] === 'allow').length >= 20);
  } finally {
    agent.destroy();
    await fx.close();
  }
});

test('fast path: pipelined requests on one connection are answered in order; a blocked one in the middle too', async () => {
  const fx = await startProxy({ domains: { localhost: 'allow', 'evil.example': 'deny' } });
  const c = await RawClient.open(fx.proxy.httpPort);
  try {
    const get = (url: string, host: string) => `GET ${url} HTTP/1.1\r\nHost: ${host}\r\n\r\n`;
    c.write(
      get(`http://localhost:${P}/one`, `localhost:${P}`) +
        get('http://evil.example/x', 'evil.example') +
        get(`http://localhost:${P}/echo`, `localhost:${P}`),
    );
    const first = await c.readResponse();
    assert.equal(first.status, 200);
    assert.equal(first.body, 'ok');
    const second = await c.readResponse();
    assert.equal(second.status, 403);
    assert.equal(second.header('x-proxy-error'), 'blocked-by-denylist');
    assert.equal(JSON.parse(second.body).reason, 'denied');
    const third = await c.readResponse();
    assert.equal(third.status, 200);
    assert.equal(third.body, '');
  } finally {
    c.close();
    await fx.close();
  }
});

test('fast path: a refusal is decided, recorded and answered there, once, with the bytes the Node path sends', async () => {
  const fx = await startProxy({ domains: { localhost: 'allow', 'blocked.test': 'deny' } });
  const c = await RawClient.open(fx.proxy.httpPort);
  try {
    const refused = (extra = '') =>
      `GET http://blocked.test/x HTTP/1.1\r\nHost: blocked.test\r\n${extra}\r\n`;
    // The first is the fast path's simple case; the second carries a Connection option the fast path does not read,
    // so the Node path (llhttp, request.ts) answers it: the two answers must be the same bytes but for the date.
    c.write(refused());
    const fast = await c.readResponse();
    c.write(refused('Connection: keep-alive, x-other\r\n'));
    const node = await c.readResponse();
    const shape = (r: typeof fast) => ({
      statusLine: r.statusLine,
      headers: r.headers.map(([k, v]) => [k, k === 'date' ? '<date>' : v]),
      body: r.body,
    });
    assert.deepEqual(shape(fast), shape(node));
    assert.equal(fast.status, 403);
    assert.equal(fast.header('x-proxy-error'), 'blocked-by-denylist');
    // A refused HEAD gets the headers alone; a refused POST's body is dropped; the connection serves on.
    c.write('HEAD http://blocked.test/h HTTP/1.1\r\nHost: blocked.test\r\n\r\n');
    const head = await c.readResponse({ noBody: true });
    assert.equal(head.status, 403);
    c.write(
      'POST http://blocked.test/p HTTP/1.1\r\nHost: blocked.test\r\nContent-Length: 7\r\n\r\npayload' +
        `GET http://localhost:${P}/after HTTP/1.1\r\nHost: localhost:${P}\r\n\r\n`,
    );
    assert.equal((await c.readResponse()).status, 403);
    const after = await c.readResponse();
    assert.equal(after.status, 200);
    assert.equal(after.body, 'ok');
    // Each of the four refusals recorded exactly once (ring and audit), and none reached the dialer.
    const denied = fx.audits.filter((a) => a['network.policy.decision'] === 'deny');
    assert.equal(denied.length, 4);
    assert.equal(fx.blocked.length, 4);
    assert.ok(fx.dials.every((d) => !d.startsWith('blocked.test')));
  } finally {
    c.close();
    await fx.close();
  }
});
