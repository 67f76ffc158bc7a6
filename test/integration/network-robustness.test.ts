import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import { test } from 'node:test';
import { RawClient, request, startOrigin, startProxy } from './network-helpers.js';

test('x-unix-socket on Linux: an unlisted path is 403 not_allowed (issue 33: 501 before); limited-mode POST → short 403 JSON; relative path → 400; no ring entry', async () => {
  const fx = await startProxy({ mode: 'limited', domains: { localhost: 'allow' } });
  try {
    const get = await request(
      fx.proxy.httpPort,
      'GET http://localhost/ HTTP/1.1\r\nHost: localhost\r\nX-Unix-Socket: /run/docker.sock\r\n\r\n',
    );
    assert.equal(get.status, 403);
    assert.equal(get.body, '{"status":"blocked","host":"unix-socket","reason":"not_allowed"}');
    const post = await request(
      fx.proxy.httpPort,
      'POST http://localhost/ HTTP/1.1\r\nHost: localhost\r\nX-Unix-Socket: /run/docker.sock\r\nContent-Length: 0\r\n\r\n',
    );
    assert.equal(post.status, 403);
    assert.equal(post.body, '{"status":"blocked","host":"unix-socket","reason":"method_not_allowed"}');
    const rel = await request(
      fx.proxy.httpPort,
      'GET http://localhost/ HTTP/1.1\r\nHost: localhost\r\nX-Unix-Socket: docker.sock\r\n\r\n',
    );
    assert.equal(rel.status, 400);
    assert.equal(rel.body, 'invalid x-unix-socket header');
    assert.equal(fx.proxy.blocked().blocked_total, 0);
    assert.ok(
      fx.audits.some(
        (a) => a['server.address'] === 'unix-socket' && a['network.policy.source'] === 'mode_guard',
      ),
    );
  } finally {
    await fx.close();
  }
});

test('random garbage on both ports never crashes the proxy; it keeps answering', async () => {
  const origin = await startOrigin();
  const fx = await startProxy({ domains: { localhost: 'allow' } }, { idleTimeoutMs: 300 });
  try {
    const inputs: Buffer[] = [];
    for (let i = 0; i < 40; i++) inputs.push(randomBytes(1 + ((i * 97) % 3000)));
    inputs.push(Buffer.from('CONNECT \r\n\r\n'), Buffer.from('GET http://[::1/ HTTP/1.1\r\n\r\n'));
    inputs.push(Buffer.from('GET http://localhost:0/ HTTP/1.1\r\nHost: localhost:0\r\n\r\n'));
    inputs.push(Buffer.from('CONNECT localhost:0 HTTP/1.1\r\n\r\n'));
    inputs.push(Buffer.from([5, 1, 0, 5, 1, 0, 3, 255, ...randomBytes(10)]));
    inputs.push(Buffer.from([5, 1, 0, 5, 1, 0, 9, 1, 2, 3]));
    inputs.push(Buffer.from([5, 255, ...randomBytes(255)]));
    for (const [i, bytes] of inputs.entries()) {
      for (const port of [fx.proxy.httpPort, fx.proxy.socksPort!]) {
        const c = await RawClient.open(port);
        c.write(i % 2 === 0 ? bytes : Buffer.concat([Buffer.from([5, 1, 0]), bytes]));
        await c.waitClose();
      }
    }
    const res = await request(
      fx.proxy.httpPort,
      `GET http://localhost:${origin.port}/still HTTP/1.1\r\nHost: localhost:${origin.port}\r\n\r\n`,
    );
    assert.equal(res.status, 200);
  } finally {
    await fx.close();
    await origin.close();
  }
});

test('SOCKS UDP: datagrams to port 0, malformed headers and foreign senders are dropped without harm', async () => {
  const fx = await startProxy({ allow_local_binding: true, domains: { '127.0.0.1': 'allow' } });
  const client = dgram.createSocket('udp4');
  await new Promise<void>((r) => client.bind(0, '127.0.0.1', () => r()));
  try {
    const c = await RawClient.open(fx.proxy.socksPort!);
    c.write(Buffer.from([5, 1, 0, 5, 3, 0, 1, 0, 0, 0, 0, 0, 0]));
    await c.read(2);
    const relay = (await c.read(10)).readUInt16BE(8);
    const sendAll = [
      Buffer.from([0, 0, 0, 1, 127, 0, 0, 1, 0, 0, 1, 2]),
      Buffer.from([0, 0, 0, 3, 200, 1]),
      Buffer.from([1, 1]),
      randomBytes(600),
    ];
    for (const b of sendAll) client.send(b, relay, '127.0.0.1');
    // The control connection still works: closing it tears the association down cleanly.
    c.close();
    const res = await request(fx.proxy.httpPort, 'GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n');
    assert.equal(res.status, 403);
  } finally {
    client.close();
    await fx.close();
  }
});
