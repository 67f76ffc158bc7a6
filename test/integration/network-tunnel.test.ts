import assert from 'node:assert/strict';
import dgram from 'node:dgram';
import { after, before, test } from 'node:test';
import { closedPort, RawClient, startEcho, startProxy, waitFor } from './network-helpers.js';

let echo: Awaited<ReturnType<typeof startEcho>>;
let E: number;
before(async () => {
  echo = await startEcho();
  E = echo.port;
});
after(() => echo.close());

test('T15: allowed CONNECT → HTTP/1.1 200 OK + date, pipelined bytes echoed; closed port → 200 then close', async () => {
  const fx = await startProxy({ domains: { localhost: 'allow' } });
  try {
    const c = await RawClient.open(fx.proxy.httpPort);
    c.write(`CONNECT localhost:${E} HTTP/1.1\r\nHost: localhost:${E}\r\n\r\nping\n`);
    const res = await c.readResponse();
    assert.equal(res.statusLine, 'HTTP/1.1 200 OK');
    assert.deepEqual(
      res.headers.map(([k]) => k),
      ['date'],
    );
    assert.equal((await c.read(5)).toString(), 'ping\n');
    c.write('more');
    assert.equal((await c.read(4)).toString(), 'more');
    c.close();
    const audit = fx.audits.find((a) => a['network.transport.protocol'] === 'https_connect');
    assert.equal(audit?.['network.policy.decision'], 'allow');
    assert.equal(audit?.['http.request.method'], 'CONNECT');

    const dead = await closedPort();
    const d = await RawClient.open(fx.proxy.httpPort);
    d.write(`CONNECT localhost:${dead} HTTP/1.1\r\nHost: localhost:${dead}\r\n\r\n`);
    assert.equal((await d.readResponse()).statusLine, 'HTTP/1.1 200 OK');
    await d.waitClose();
  } finally {
    await fx.close();
  }
});

test('T14: limited mode CONNECT with mitm:false → 403 text blocked-by-mitm-required; event http-connect/limited (mitm:true intercepts: network-mitm.test.ts)', async () => {
  const fx = await startProxy({ mode: 'limited', mitm: false, domains: { localhost: 'allow' } });
  try {
    const c = await RawClient.open(fx.proxy.httpPort);
    c.write(`CONNECT localhost:${E} HTTP/1.1\r\nHost: localhost:${E}\r\n\r\n`);
    const res = await c.readResponse();
    assert.equal(res.status, 403);
    assert.equal(res.header('content-type'), 'text/plain');
    assert.equal(res.header('x-proxy-error'), 'blocked-by-mitm-required');
    assert.equal(res.body, 'Codex blocked this request: MITM required for limited HTTPS.');
    c.close();
    const rec = fx.proxy.blocked().events[0]!;
    assert.equal(rec.reason, 'mitm_required');
    assert.equal(rec.protocol, 'http-connect');
    assert.equal(rec.mode, 'limited');
    assert.deepEqual(fx.dials, [], 'no upstream connection');
  } finally {
    await fx.close();
  }
});

test('CONNECT: blocked loopback literal, missing authority, invalid host', async () => {
  const fx = await startProxy({ domains: { localhost: 'allow' } });
  try {
    const c = await RawClient.open(fx.proxy.httpPort);
    c.write(`CONNECT 127.0.0.1:${E} HTTP/1.1\r\n\r\n`);
    const res = await c.readResponse();
    assert.equal(res.status, 403);
    assert.equal(res.body, 'Codex blocked this request: local/private addresses not allowed.');
    c.write('CONNECT :443 HTTP/1.1\r\n\r\n');
    const inv = await c.readResponse();
    assert.equal(inv.status, 400);
    assert.equal(inv.body, 'invalid host');
    c.write('CONNECT localhost:99999 HTTP/1.1\r\n\r\n');
    const auth = await c.readResponse();
    assert.equal(auth.status, 400);
    assert.equal(auth.body, 'missing authority');
    c.close();
    assert.equal(fx.proxy.blocked().blocked_total, 1);
  } finally {
    await fx.close();
  }
});

/** SOCKS5 greeting + CONNECT to a domain or IPv4 target. */
function socksConnect(target: { domain?: string; ipv4?: string; port: number }): Buffer {
  const port = Buffer.alloc(2);
  port.writeUInt16BE(target.port);
  if (target.domain !== undefined) {
    return Buffer.concat([Buffer.from([5, 1, 0, 3, target.domain.length]), Buffer.from(target.domain), port]);
  }
  return Buffer.concat([Buffer.from([5, 1, 0, 1, ...target.ipv4!.split('.').map(Number)]), port]);
}

test('T21: SOCKS5 negotiation, CONNECT by name, blocked CONNECT by IP, BIND', async () => {
  const fx = await startProxy({ domains: { localhost: 'allow' } });
  try {
    assert.ok(fx.proxy.socksPort);
    const S = fx.proxy.socksPort;
    const a = await RawClient.open(S);
    a.write(Buffer.from([5, 1, 2]));
    assert.deepEqual([...(await a.read(2))], [5, 0xff]);
    await a.waitClose();

    const b = await RawClient.open(S);
    b.write(Buffer.from([5, 1, 0]));
    assert.deepEqual([...(await b.read(2))], [5, 0]);
    b.write(socksConnect({ domain: 'LOCALHOST.', port: E }));
    const rep = await b.read(10);
    assert.deepEqual([...rep.subarray(0, 8)], [5, 0, 0, 1, 127, 0, 0, 1]);
    assert.ok(rep.readUInt16BE(8) > 0, 'the local port of the upstream socket');
    b.write('pipe');
    assert.equal((await b.read(4)).toString(), 'pipe');
    b.close();

    const c = await RawClient.open(S);
    c.write(Buffer.concat([Buffer.from([5, 1, 0]), socksConnect({ ipv4: '127.0.0.1', port: E })]));
    assert.deepEqual([...(await c.read(2))], [5, 0]);
    assert.deepEqual([...(await c.read(10))], [5, 2, 0, 1, 0, 0, 0, 0, 0, 0]);
    await c.waitClose();
    const rec = fx.proxy.blocked().events.at(-1)!;
    assert.equal(rec.protocol, 'socks5');
    assert.equal(rec.reason, 'not_allowed_local');
    assert.equal(rec.method, null);
    assert.equal(rec.host, '127.0.0.1');
    assert.equal(rec.port, E);

    const d = await RawClient.open(S);
    d.write(Buffer.from([5, 1, 0, 5, 2, 0, 1, 127, 0, 0, 1, 0, 80]));
    assert.deepEqual([...(await d.read(2))], [5, 0]);
    assert.deepEqual([...(await d.read(2))], [5, 7]);
    d.close();

    const dead = await closedPort();
    const e = await RawClient.open(S);
    e.write(Buffer.concat([Buffer.from([5, 1, 0]), socksConnect({ domain: 'localhost', port: dead })]));
    await e.read(2);
    assert.deepEqual([...(await e.read(2))], [5, 5], 'upstream refused → 05 05');
    e.close();

    const g = await RawClient.open(S);
    g.write(Buffer.from([4, 1, 0, 80, 127, 0, 0, 1, 0]));
    await g.waitClose();
  } finally {
    await fx.close();
  }
});

test('T22: limited mode blocks SOCKS CONNECT with 05 02 / method_not_allowed before the host policy', async () => {
  const fx = await startProxy({ mode: 'limited', domains: { localhost: 'allow' } });
  try {
    const c = await RawClient.open(fx.proxy.socksPort!);
    c.write(Buffer.concat([Buffer.from([5, 1, 0]), socksConnect({ domain: 'localhost', port: E })]));
    assert.deepEqual([...(await c.read(2))], [5, 0]);
    assert.deepEqual([...(await c.read(2))], [5, 2]);
    await c.waitClose();
    const rec = fx.proxy.blocked().events[0]!;
    assert.equal(rec.reason, 'method_not_allowed');
    assert.equal(rec.mode, 'limited');
    assert.equal(rec.protocol, 'socks5');
    assert.deepEqual(fx.dials, []);
  } finally {
    await fx.close();
  }
});

function udpHeader(ip: string, port: number): Buffer {
  const b = Buffer.from([0, 0, 0, 1, ...ip.split('.').map(Number), 0, 0]);
  b.writeUInt16BE(port, 8);
  return b;
}

test('T23 (ours): UDP ASSOCIATE relays allowed datagrams and their replies to the client; blocks are dropped', async () => {
  const target = dgram.createSocket('udp4');
  await new Promise<void>((r) => target.bind(0, '127.0.0.1', () => r()));
  const U = target.address().port;
  target.on('message', (msg, rinfo) =>
    target.send(Buffer.concat([Buffer.from('re:'), msg]), rinfo.port, rinfo.address),
  );
  const blockedTarget = dgram.createSocket('udp4');
  await new Promise<void>((r) => blockedTarget.bind(0, '127.0.0.2', () => r()));
  let blockedSeen = 0;
  blockedTarget.on('message', () => blockedSeen++);
  const V = blockedTarget.address().port;
  const client = dgram.createSocket('udp4');
  await new Promise<void>((r) => client.bind(0, '127.0.0.1', () => r()));
  const fx = await startProxy({
    allow_local_binding: true,
    enable_socks5_udp: true,
    domains: { '127.0.0.1': 'allow' },
  });
  try {
    const c = await RawClient.open(fx.proxy.socksPort!);
    c.write(Buffer.from([5, 1, 0, 5, 3, 0, 1, 0, 0, 0, 0, 0, 0]));
    assert.deepEqual([...(await c.read(2))], [5, 0]);
    const rep = await c.read(10);
    assert.deepEqual([...rep.subarray(0, 8)], [5, 0, 0, 1, 0, 0, 0, 0]);
    const relayPort = rep.readUInt16BE(8);
    const replies: Buffer[] = [];
    client.on('message', (m) => replies.push(m));
    client.send(Buffer.concat([udpHeader('127.0.0.2', V), Buffer.from('nope')]), relayPort, '127.0.0.1');
    client.send(Buffer.concat([udpHeader('127.0.0.1', U), Buffer.from('hello')]), relayPort, '127.0.0.1');
    await waitFor(() => replies.length > 0, 'the UDP reply');
    const r = replies[0]!;
    assert.deepEqual(r.subarray(0, 10), udpHeader('127.0.0.1', U), 'RFC 1928 header with the target address');
    assert.equal(r.subarray(10).toString(), 're:hello');
    await waitFor(() => fx.proxy.blocked().blocked_total === 1, 'the blocked datagram record');
    const rec = fx.proxy.blocked().events[0]!;
    assert.equal(rec.protocol, 'socks5-udp');
    assert.equal(rec.reason, 'not_allowed');
    assert.equal(rec.host, '127.0.0.2');
    // A fragment is dropped; then one more allowed datagram proves ordering and that nothing reached V.
    client.send(
      Buffer.concat([Buffer.from([0, 0, 1]), udpHeader('127.0.0.1', U).subarray(3), Buffer.from('frag')]),
      relayPort,
      '127.0.0.1',
    );
    client.send(Buffer.concat([udpHeader('127.0.0.1', U), Buffer.from('again')]), relayPort, '127.0.0.1');
    await waitFor(() => replies.length > 1, 'the second reply');
    assert.equal(replies[1]!.subarray(10).toString(), 're:again');
    assert.equal(blockedSeen, 0, 'the listener on 127.0.0.2 saw nothing');
    c.close();
  } finally {
    await fx.close();
    target.close();
    blockedTarget.close();
    client.close();
  }
});

test('UDP ASSOCIATE with enable_socks5_udp:false → 05 07; limited mode drops every datagram', async () => {
  const fx = await startProxy({ enable_socks5_udp: false, domains: { localhost: 'allow' } });
  try {
    const c = await RawClient.open(fx.proxy.socksPort!);
    c.write(Buffer.from([5, 1, 0, 5, 3, 0, 1, 0, 0, 0, 0, 0, 0]));
    await c.read(2);
    assert.deepEqual([...(await c.read(2))], [5, 7]);
    c.close();
  } finally {
    await fx.close();
  }
  const lim = await startProxy({
    mode: 'limited',
    allow_local_binding: true,
    domains: { '127.0.0.1': 'allow' },
  });
  const client = dgram.createSocket('udp4');
  await new Promise<void>((r) => client.bind(0, '127.0.0.1', () => r()));
  try {
    const c = await RawClient.open(lim.proxy.socksPort!);
    c.write(Buffer.from([5, 1, 0, 5, 3, 0, 1, 0, 0, 0, 0, 0, 0]));
    await c.read(2);
    const rep = await c.read(10);
    assert.equal(rep[1], 0, 'UDP ASSOCIATE itself succeeds');
    client.send(
      Buffer.concat([udpHeader('127.0.0.1', E), Buffer.from('x')]),
      rep.readUInt16BE(8),
      '127.0.0.1',
    );
    await waitFor(() => lim.proxy.blocked().blocked_total === 1, 'the limited-mode UDP block');
    const rec = lim.proxy.blocked().events[0]!;
    assert.equal(rec.reason, 'method_not_allowed');
    assert.equal(rec.protocol, 'socks5-udp');
    assert.equal(rec.mode, 'limited');
    c.close();
  } finally {
    client.close();
    await lim.close();
  }
});

test('CONNECT to a name with several checked answers falls back to the next one, and to nothing else', async () => {
  const fx = await startProxy(
    { allow_local_binding: true, domains: { 'two.test': 'allow' } },
    { resolver: async (host) => (host === 'two.test' ? ['127.0.0.3', '127.0.0.1'] : []) },
  );
  try {
    const c = await RawClient.open(fx.proxy.httpPort);
    c.write(`CONNECT two.test:${E} HTTP/1.1\r\n\r\nhey`);
    assert.equal((await c.readResponse()).status, 200);
    assert.equal((await c.read(3)).toString(), 'hey');
    c.close();
    assert.deepEqual(fx.dials, [`127.0.0.3:${E}`, `127.0.0.1:${E}`]);
  } finally {
    await fx.close();
  }
});

test('plain-HTTP upgrade (ws:// via the proxy): policy-checked, head forwarded in origin form, then piped', async () => {
  const { createServer } = await import('node:http');
  const seen: { url: string; headers: Record<string, unknown> }[] = [];
  const ws = createServer();
  ws.on('upgrade', (req, sock: import('node:net').Socket, head: Buffer) => {
    seen.push({ url: req.url ?? '', headers: req.headers });
    sock.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n');
    if (head.length) sock.write(head);
    sock.pipe(sock);
  });
  await new Promise<void>((r) => ws.listen(0, '127.0.0.1', () => r()));
  const W = (ws.address() as import('node:net').AddressInfo).port;
  const fx = await startProxy({ domains: { localhost: 'allow' } });
  try {
    const c = await RawClient.open(fx.proxy.httpPort);
    c.write(
      `GET http://localhost:${W}/sock HTTP/1.1\r\nHost: localhost:${W}\r\nConnection: Upgrade\r\nUpgrade: test\r\nProxy-Authorization: x\r\n\r\nearly`,
    );
    const res = await c.readResponse();
    assert.equal(res.status, 101);
    assert.equal((await c.read(5)).toString(), 'early');
    c.write('later');
    assert.equal((await c.read(5)).toString(), 'later');
    c.close();
    assert.equal(seen[0]!.url, '/sock');
    assert.equal(seen[0]!.headers.upgrade, 'test');
    assert.equal(seen[0]!.headers['proxy-authorization'], undefined);
    const d = await RawClient.open(fx.proxy.httpPort);
    d.write(
      `GET http://127.0.0.1:${W}/sock HTTP/1.1\r\nHost: 127.0.0.1:${W}\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n`,
    );
    const blocked = await d.readResponse();
    assert.equal(blocked.status, 403);
    assert.equal(JSON.parse(blocked.body).reason, 'not_allowed_local');
    await d.waitClose();
    assert.equal(seen.length, 1);
    assert.equal(fx.proxy.blocked().events[0]!.host, '127.0.0.1');
  } finally {
    await fx.close();
    ws.close();
  }
});
