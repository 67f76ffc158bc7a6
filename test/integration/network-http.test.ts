import assert from 'node:assert/strict';
import type net from 'node:net';
import { after, before, test } from 'node:test';
import {
  closedPort,
  RawClient,
  request,
  startEcho,
  startOrigin,
  startProxy,
  waitFor,
} from './network-helpers.js';

const SEED = {
  not_allowed: 'Codex blocked this request: domain not in allowlist (this is not a denylist block).',
  not_allowed_local: 'Codex blocked this request: local/private addresses not allowed.',
  denied: 'Codex blocked this request: domain denied by policy.',
  method_not_allowed: 'Codex blocked this request: method not allowed in limited mode.',
};

let origin: Awaited<ReturnType<typeof startOrigin>>;
let P: number;
before(async () => {
  origin = await startOrigin();
  P = origin.port;
});
after(() => origin.close());

const get = (url: string, extra = '') => `GET ${url} HTTP/1.1\r\nHost: ${new URL(url).host}\r\n${extra}\r\n`;

function assertBlockedJson(
  res: Awaited<ReturnType<typeof request>>,
  want: { host: string; reason: keyof typeof SEED; tag: string; port: number; source?: string },
) {
  assert.equal(res.statusLine, 'HTTP/1.1 403 Forbidden');
  assert.deepEqual(
    res.headers
      .map(([k]) => k)
      .filter((k) => ['content-type', 'x-proxy-error', 'content-length', 'date'].includes(k)),
    ['content-type', 'x-proxy-error', 'content-length', 'date'],
    'header order as observed on Codex',
  );
  assert.equal(res.header('content-type'), 'application/json');
  assert.equal(res.header('x-proxy-error'), want.tag);
  assert.equal(
    res.body,
    JSON.stringify({
      status: 'blocked',
      host: want.host,
      reason: want.reason,
      decision: 'deny',
      source: want.source ?? 'baseline_policy',
      protocol: 'http',
      port: want.port,
      message: SEED[want.reason],
    }),
  );
}

test('T3: allowed localhost is forwarded; proxy-authorization stripped; no blocked event; an allow audit event', async () => {
  const fx = await startProxy({ domains: { localhost: 'allow' } });
  try {
    const before = origin.requests.length;
    const res = await request(
      fx.proxy.httpPort,
      get(
        `http://localhost:${P}/a?q=1`,
        'Proxy-Authorization: Basic eDp5\r\nX-Keep: yes\r\nConnection: close\r\n',
      ),
    );
    assert.equal(res.status, 200);
    assert.equal(res.body, 'ok GET /a?q=1');
    assert.equal(res.header('X-Origin-Case'), 'Kept', 'upstream header case preserved');
    const seen = origin.requests[before]!;
    assert.equal(seen.headers.host, `localhost:${P}`);
    assert.equal(seen.headers['x-keep'], 'yes');
    assert.equal(seen.headers['proxy-authorization'], undefined);
    assert.equal(seen.headers.via, undefined);
    assert.equal(fx.proxy.blocked().blocked_total, 0);
    assert.equal(fx.blocked.length, 0);
    const audit = fx.audits.at(-1)!;
    assert.equal(audit['network.policy.decision'], 'allow');
    assert.equal(audit['network.policy.reason'], 'allow');
    assert.equal(audit['network.policy.source'], 'baseline_policy');
    assert.equal(audit['network.policy.scope'], 'domain');
    assert.equal(audit['network.transport.protocol'], 'http');
    assert.equal(audit['server.address'], 'localhost');
    assert.equal(audit['server.port'], P);
    assert.equal(audit['http.request.method'], 'GET');
    assert.match(audit['client.address'], /^127\.0\.0\.1:\d+$/);
    assert.equal(audit['network.policy.override'], false);
    assert.equal(audit['conversation.id'], 'conv-1');
    assert.equal(audit['app.version'], '9.9.9');
    assert.equal(audit.processId, 'proc-test');
    assert.equal(JSON.stringify(audit).includes('/a?q=1'), false, 'no path or query in audit events');
  } finally {
    await fx.close();
  }
});

test('T4: a loopback literal is not_allowed_local, with the exact JSON, record and log line', async () => {
  const fx = await startProxy({ domains: { localhost: 'allow' } });
  try {
    const res = await request(fx.proxy.httpPort, get(`http://127.0.0.1:${P}/`));
    assertBlockedJson(res, {
      host: '127.0.0.1',
      reason: 'not_allowed_local',
      tag: 'blocked-by-allowlist',
      port: P,
    });
    const snap = fx.proxy.blocked();
    assert.equal(snap.blocked_total, 1);
    const rec = snap.events[0]!;
    assert.deepEqual(Object.keys(rec), [
      'host',
      'reason',
      'client',
      'method',
      'mode',
      'protocol',
      'decision',
      'source',
      'port',
      'timestamp',
    ]);
    assert.equal(rec.protocol, 'http');
    assert.equal(rec.method, 'GET');
    assert.equal(rec.mode, null);
    assert.equal(rec.decision, 'deny');
    assert.equal(rec.source, 'baseline_policy');
    assert.equal(rec.port, P);
    assert.ok(Math.abs(rec.timestamp - Date.now() / 1000) < 5, 'unix seconds');
    assert.equal(fx.logs.length, 1);
    assert.equal(fx.logs[0], `CODEX_NETWORK_POLICY_VIOLATION ${JSON.stringify(rec)}`);
    assert.equal(fx.blocked[0]!.processId, 'proc-test');
    assert.deepEqual(fx.blocked[0]!.record, rec);
    assert.equal(fx.audits.at(-1)!['network.policy.reason'], 'not_allowed_local');
    assert.deepEqual(fx.dials, []);
  } finally {
    await fx.close();
  }
});

test('T5/T6: allowlisted names resolving locally, failing or hanging are not_allowed_local (fail closed)', async () => {
  const fx = await startProxy({
    domains: { 'rebind.test': 'allow', 'hang.test': 'allow', 'err.test': 'allow' },
  });
  try {
    for (const host of ['rebind.test', 'err.test']) {
      const res = await request(fx.proxy.httpPort, get(`http://${host}:${P}/`));
      assertBlockedJson(res, { host, reason: 'not_allowed_local', tag: 'blocked-by-allowlist', port: P });
    }
    const t0 = Date.now();
    const res = await request(fx.proxy.httpPort, get(`http://hang.test:${P}/`));
    const took = Date.now() - t0;
    assertBlockedJson(res, {
      host: 'hang.test',
      reason: 'not_allowed_local',
      tag: 'blocked-by-allowlist',
      port: P,
    });
    // Held for the resolve timeout, then refused (its exact length: test/unit/network-policy.test.ts, on a fake clock).
    assert.ok(took >= 1900, `hang.test took ${took} ms (2 s timeout)`);
    assert.deepEqual(fx.dials, [], 'nothing dialled');
  } finally {
    await fx.close();
  }
});

test('T7: with ALB, an address not on the allowlist is not_allowed and never dialled', async () => {
  const listener = await startEcho('127.0.0.2');
  const fx = await startProxy({ domains: { localhost: 'allow' }, allow_local_binding: true });
  try {
    const res = await request(fx.proxy.httpPort, get(`http://127.0.0.2:${listener.port}/`));
    assertBlockedJson(res, {
      host: '127.0.0.2',
      reason: 'not_allowed',
      tag: 'blocked-by-allowlist',
      port: listener.port,
    });
    assert.equal(listener.connections, 0);
    assert.deepEqual(fx.dials, []);
  } finally {
    await fx.close();
    await listener.close();
  }
});

test('T8: denied host (case, trailing dot) → 403 JSON; blocked CONNECT → 403 text and the connection stays open', async () => {
  const fx = await startProxy({ domains: { 'evil.example': 'deny', '**.example.com': 'allow' } });
  const c = await RawClient.open(fx.proxy.httpPort);
  try {
    c.write('GET http://EVIL.EXAMPLE./ HTTP/1.1\r\nHost: EVIL.EXAMPLE.\r\n\r\n');
    assertBlockedJson(await c.readResponse(), {
      host: 'evil.example',
      reason: 'denied',
      tag: 'blocked-by-denylist',
      port: 80,
    });
    c.write('CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n');
    const res = await c.readResponse();
    assert.equal(res.statusLine, 'HTTP/1.1 403 Forbidden');
    assert.equal(res.header('content-type'), 'text/plain');
    assert.equal(res.header('x-proxy-error'), 'blocked-by-denylist');
    assert.equal(res.body, SEED.denied);
    assert.equal(res.header('connection'), undefined);
    // Still open: a further request on the same connection is answered.
    c.write('GET http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n');
    assert.equal((await c.readResponse()).status, 403);
    assert.ok(c.isOpen);
    const recs = fx.proxy.blocked().events;
    assert.equal(recs[1]!.protocol, 'http-connect');
    assert.equal(recs[1]!.method, 'CONNECT');
    assert.equal(recs[1]!.port, 443);
  } finally {
    c.close();
    await fx.close();
  }
});

test('T9 (ours): IPv4 shorthands and mapped IPv6 of a denied 127.0.0.1 are all denied', async () => {
  const fx = await startProxy({ allow_local_binding: true, domains: { '*': 'allow', '127.0.0.1': 'deny' } });
  try {
    for (const host of ['2130706433', '127.1', '[::ffff:7f00:1]', '0x7f.0.0.1', '0177.0.0.1']) {
      const res = await request(
        fx.proxy.httpPort,
        `GET http://${host}:${P}/ HTTP/1.1\r\nHost: ${host}:${P}\r\n\r\n`,
      );
      assertBlockedJson(res, { host: '127.0.0.1', reason: 'denied', tag: 'blocked-by-denylist', port: P });
    }
    assert.deepEqual(fx.dials, []);
  } finally {
    await fx.close();
  }
});

test('T11: domains null: localhost not_allowed_local, a resolver-stub name not_allowed, no dial and no lookup', async () => {
  const fx = await startProxy({ domains: null });
  try {
    assertBlockedJson(await request(fx.proxy.httpPort, get(`http://localhost:${P}/`)), {
      host: 'localhost',
      reason: 'not_allowed_local',
      tag: 'blocked-by-allowlist',
      port: P,
    });
    assertBlockedJson(await request(fx.proxy.httpPort, get('http://public.test/')), {
      host: 'public.test',
      reason: 'not_allowed',
      tag: 'blocked-by-allowlist',
      port: 80,
    });
    assert.deepEqual(fx.dials, []);
  } finally {
    await fx.close();
  }
});

test('an allowlisted name resolving to a TEST-NET address is blocked by the guard, never dialled', async () => {
  const fx = await startProxy({ domains: { 'public.test': 'allow' } });
  try {
    assertBlockedJson(await request(fx.proxy.httpPort, get('http://public.test/')), {
      host: 'public.test',
      reason: 'not_allowed_local',
      tag: 'blocked-by-allowlist',
      port: 80,
    });
    assert.deepEqual(fx.dials, []);
  } finally {
    await fx.close();
  }
});

test('resolve once and pin: an allowed name is dialled at the checked address only', async () => {
  const fx = await startProxy({ allow_local_binding: true, domains: { 'rebind.test': 'allow' } });
  try {
    const res = await request(fx.proxy.httpPort, get(`http://rebind.test:${P}/pin`, 'Connection: close\r\n'));
    assert.equal(res.status, 200);
    assert.equal(res.body, 'ok GET /pin');
    assert.deepEqual(fx.dials, [`127.0.0.1:${P}`]);
  } finally {
    await fx.close();
  }
});

test('T12: ALB with 127.0.0.1 allowed: 200 for it, not_allowed for localhost; env says ALB=1', async () => {
  const fx = await startProxy({ allow_local_binding: true, domains: { '127.0.0.1': 'allow' } });
  try {
    const ok = await request(fx.proxy.httpPort, get(`http://127.0.0.1:${P}/`));
    assert.equal(ok.status, 200);
    assertBlockedJson(await request(fx.proxy.httpPort, get(`http://localhost:${P}/`)), {
      host: 'localhost',
      reason: 'not_allowed',
      tag: 'blocked-by-allowlist',
      port: P,
    });
    assert.equal(fx.proxy.env.CODEX_NETWORK_ALLOW_LOCAL_BINDING, '1');
  } finally {
    await fx.close();
  }
});

test('T13: limited mode allows GET/HEAD/OPTIONS; POST and post → method_not_allowed; a denied host stays denied', async () => {
  const fx = await startProxy({ mode: 'limited', domains: { localhost: 'allow', 'evil.example': 'deny' } });
  const c = await RawClient.open(fx.proxy.httpPort);
  try {
    for (const m of ['GET', 'HEAD', 'OPTIONS']) {
      c.write(`${m} http://localhost:${P}/ HTTP/1.1\r\nHost: localhost:${P}\r\n\r\n`);
      const res = await c.readResponse({ noBody: m === 'HEAD' });
      assert.equal(res.status, 200, m);
    }
    for (const m of ['POST', 'post']) {
      c.write(`${m} http://localhost:${P}/ HTTP/1.1\r\nHost: localhost:${P}\r\nContent-Length: 2\r\n\r\nhi`);
      const res = await c.readResponse();
      assertBlockedJson(res, {
        host: 'localhost',
        reason: 'method_not_allowed',
        tag: 'blocked-by-method-policy',
        port: P,
        source: 'mode_guard',
      });
    }
    // A lower-case method token cannot be parsed by Node: the proxy answers it itself and closes.
    await c.waitClose();
    const denied = await request(
      fx.proxy.httpPort,
      'POST http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\nContent-Length: 0\r\n\r\n',
    );
    assertBlockedJson(denied, {
      host: 'evil.example',
      reason: 'denied',
      tag: 'blocked-by-denylist',
      port: 80,
    });
    const recs = fx.proxy.blocked().events;
    assert.equal(recs[0]!.reason, 'method_not_allowed');
    assert.equal(recs[0]!.mode, 'limited');
    assert.equal(recs[1]!.method, 'post');
    assert.equal(recs[1]!.reason, 'method_not_allowed');
    const lowerDenied = await request(
      fx.proxy.httpPort,
      'post http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n',
    );
    assertBlockedJson(lowerDenied, {
      host: 'evil.example',
      reason: 'denied',
      tag: 'blocked-by-denylist',
      port: 80,
    });
    assert.equal(recs[0]!.source, 'mode_guard');
    assert.equal(recs.at(-1)!.mode, null);
  } finally {
    c.close();
    await fx.close();
  }
});

test('T16: Host header must match the absolute target; no event', async () => {
  const fx = await startProxy({ domains: { localhost: 'allow' } });
  try {
    for (const host of ['evil.example', 'localhost']) {
      const res = await request(
        fx.proxy.httpPort,
        `GET http://localhost:${P}/ HTTP/1.1\r\nHost: ${host}\r\n\r\n`,
      );
      assert.equal(res.status, 400);
      assert.equal(res.header('content-type'), 'text/plain');
      assert.equal(res.body, 'Host header does not match request target');
    }
    const ok = await request(fx.proxy.httpPort, `GET http://localhost/ HTTP/1.1\r\nHost: localhost\r\n\r\n`);
    assert.notEqual(ok.status, 400, 'a header without a port matches the default port');
    assert.equal(fx.proxy.blocked().blocked_total, 0);
  } finally {
    await fx.close();
  }
});

test('T17 (ours): origin-form → 400 absolute-form required; no Host → 400 missing host; no event, no dial', async () => {
  const fx = await startProxy({ domains: { localhost: 'allow' } });
  try {
    const res = await request(fx.proxy.httpPort, `GET / HTTP/1.1\r\nHost: localhost:${P}\r\n\r\n`);
    assert.equal(res.status, 400);
    assert.equal(res.header('content-type'), 'text/plain');
    assert.equal(res.body, 'absolute-form request target required');
    const missing = await request(fx.proxy.httpPort, 'GET / HTTP/1.1\r\n\r\n');
    assert.equal(missing.status, 400);
    assert.equal(missing.body, 'missing host');
    assert.equal(fx.proxy.blocked().blocked_total, 0);
    assert.deepEqual(fx.dials, []);
  } finally {
    await fx.close();
  }
});

test('hosts with control characters, spaces or non-ASCII are rejected (400)', async () => {
  const fx = await startProxy({ domains: { '*': 'allow' }, allow_local_binding: true });
  try {
    for (const bad of ['a%20b.test', 'x_y!.test', 'b\xfccher.example']) {
      const c = await RawClient.open(fx.proxy.httpPort);
      c.write(Buffer.from(`GET http://${bad}/ HTTP/1.1\r\n\r\n`, 'latin1'));
      const res = await c.readResponse();
      c.close();
      assert.equal(res.status, 400, bad);
    }
    assert.deepEqual(fx.dials, []);
  } finally {
    await fx.close();
  }
});

test('an authority that URL parsers read differently (a backslash before the @) is not a target: 400, no dial', async () => {
  // Here the host is what follows the last @ (127.0.0.1); a WHATWG URL parser reads evil.test. Neither is dialled.
  const origin = await startOrigin();
  const fx = await startProxy({ domains: { '127.0.0.1': 'allow' }, allow_local_binding: true });
  try {
    const res = await request(
      fx.proxy.httpPort,
      `GET http://evil.test\\@127.0.0.1:${origin.port}/ HTTP/1.1\r\n\r\n`,
    );
    assert.equal(res.status, 400);
    assert.deepEqual(fx.dials, []);
    assert.equal(origin.requests.length, 0);
  } finally {
    await fx.close();
    await origin.close();
  }
});

test('T18: garbage and a TLS ClientHello get 400, empty body, connection: close', async () => {
  const fx = await startProxy({});
  try {
    for (const bytes of [
      Buffer.from('HELLO\r\n\r\n'),
      Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]),
    ]) {
      const c = await RawClient.open(fx.proxy.httpPort);
      c.write(bytes);
      const res = await c.readResponse();
      assert.equal(res.status, 400);
      assert.equal(res.body, '');
      assert.equal(res.header('connection'), 'close');
      await c.waitClose();
    }
    assert.equal(fx.proxy.blocked().blocked_total, 0);
  } finally {
    await fx.close();
  }
});

test('T19: 16 KiB header → 431; 101 headers → 431; 100 headers pass; 64 KiB URI → 414; 16 KiB URI → 431', async () => {
  const fx = await startProxy({ domains: { localhost: 'allow' } });
  try {
    const base = `http://localhost:${P}/`;
    const big = await request(
      fx.proxy.httpPort,
      `GET ${base} HTTP/1.1\r\nHost: localhost:${P}\r\nX-Big: ${'a'.repeat(16 * 1024)}\r\n\r\n`,
    );
    assert.equal(big.status, 431);
    const h8 = await request(
      fx.proxy.httpPort,
      `GET ${base} HTTP/1.1\r\nHost: localhost:${P}\r\nX-Big: ${'a'.repeat(8 * 1024)}\r\n\r\n`,
    );
    assert.equal(h8.status, 200, '8 KiB of headers is fine');
    const lines = (n: number) => Array.from({ length: n }, (_, i) => `X-H${i}: v`).join('\r\n');
    const h101 = await request(
      fx.proxy.httpPort,
      `GET ${base} HTTP/1.1\r\nHost: localhost:${P}\r\n${lines(100)}\r\n\r\n`,
    );
    assert.equal(h101.status, 431);
    const h100 = await request(
      fx.proxy.httpPort,
      `GET ${base} HTTP/1.1\r\nHost: localhost:${P}\r\n${lines(99)}\r\n\r\n`,
    );
    assert.equal(h100.status, 200);
    const uri64 = await request(
      fx.proxy.httpPort,
      `GET ${base}${'u'.repeat(64 * 1024)} HTTP/1.1\r\nHost: localhost:${P}\r\n\r\n`,
    );
    assert.equal(uri64.status, 414);
    const uri16 = await request(
      fx.proxy.httpPort,
      `GET ${base}${'u'.repeat(16 * 1024)} HTTP/1.1\r\nHost: localhost:${P}\r\n\r\n`,
    );
    assert.equal(uri16.status, 431);
    const uriHuge = await request(
      fx.proxy.httpPort,
      `GET ${base}${'u'.repeat(400 * 1024)} HTTP/1.1\r\nHost: localhost:${P}\r\n\r\n`,
    );
    assert.equal(uriHuge.status, 414);
    const headersHuge = await request(
      fx.proxy.httpPort,
      `GET ${base} HTTP/1.1\r\nHost: localhost:${P}\r\n${Array.from({ length: 50 }, (_, i) => `X-${i}: ${'h'.repeat(8000)}`).join('\r\n')}\r\n\r\n`,
    );
    assert.equal(headersHuge.status, 431);
  } finally {
    await fx.close();
  }
});

test('T24: 205 blocks keep the last 200 (oldest is #6) and blocked_total = 205', async () => {
  const fx = await startProxy({});
  const c = await RawClient.open(fx.proxy.httpPort);
  try {
    for (let i = 1; i <= 205; i++) {
      c.write(`GET http://h${i}.test/ HTTP/1.1\r\nHost: h${i}.test\r\n\r\n`);
      assert.equal((await c.readResponse()).status, 403);
    }
    const snap = fx.proxy.blocked();
    assert.equal(snap.events.length, 200);
    assert.equal(snap.blocked_total, 205);
    assert.equal(snap.events[0]!.host, 'h6.test');
    assert.equal(snap.events[199]!.host, 'h205.test');
    assert.equal(fx.proxy.blocked().events.length, 200, 'a snapshot does not consume');
    assert.equal(fx.blocked.length, 205);
    assert.equal(fx.blocked.at(-1)!.blocked_total, 205);
    assert.ok(fx.logs.every((l) => l.startsWith('CODEX_NETWORK_POLICY_VIOLATION {')));
    const drained = fx.proxy.drainBlocked();
    assert.equal(drained.events.length, 200);
    assert.equal(fx.proxy.blocked().events.length, 0);
    assert.equal(fx.proxy.blocked().blocked_total, 205);
  } finally {
    c.close();
    await fx.close();
  }
});

test('upstream failure → 502 upstream failure; keep-alive evaluates each request on its own', async () => {
  const dead = await closedPort();
  const fx = await startProxy({ domains: { localhost: 'allow' } });
  const c = await RawClient.open(fx.proxy.httpPort);
  try {
    c.write(get(`http://localhost:${dead}/`));
    const res = await c.readResponse();
    assert.equal(res.status, 502);
    assert.equal(res.body, 'upstream failure');
    c.write(get(`http://localhost:${P}/x`));
    assert.equal((await c.readResponse()).status, 200);
    c.write(get(`http://127.0.0.1:${P}/x`));
    assert.equal((await c.readResponse()).status, 403);
  } finally {
    c.close();
    await fx.close();
  }
});

test('request bodies are streamed to the origin (content-length and chunked)', async () => {
  const seen: string[] = [];
  const { createServer } = await import('node:http');
  const srv = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => {
      body += d;
    });
    req.on('end', () => {
      seen.push(body);
      res.end(`got ${body.length}`);
    });
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const port = (srv.address() as net.AddressInfo).port;
  const fx = await startProxy({ domains: { localhost: 'allow' } });
  const c = await RawClient.open(fx.proxy.httpPort);
  try {
    c.write(
      `POST http://localhost:${port}/ HTTP/1.1\r\nHost: localhost:${port}\r\nContent-Length: 5\r\n\r\nhello`,
    );
    const a = await c.readResponse({ bodyToClose: false });
    assert.equal(a.status, 200);
    c.write(
      `POST http://localhost:${port}/ HTTP/1.1\r\nHost: localhost:${port}\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n`,
    );
    const b = await c.readResponse();
    assert.equal(b.status, 200);
    assert.deepEqual(seen, ['hello', 'abcde']);
  } finally {
    c.close();
    await fx.close();
    srv.closeAllConnections();
    srv.close();
  }
});

test('https:// absolute-form: the proxy speaks TLS to the checked address, with SNI, and verifies the certificate', async () => {
  const { execFileSync } = await import('node:child_process');
  const { mkdtempSync, readFileSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const tls = await import('node:tls');
  const dir = mkdtempSync(join(tmpdir(), 'corral-net-tls-'));
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-days',
      '1',
      '-subj',
      '/CN=localhost',
      '-keyout',
      join(dir, 'key.pem'),
      '-out',
      join(dir, 'cert.pem'),
    ],
    { stdio: 'ignore' },
  );
  const hellos: (string | false | null)[] = [];
  const server = tls.createServer({
    key: readFileSync(join(dir, 'key.pem')),
    cert: readFileSync(join(dir, 'cert.pem')),
  });
  server.on('tlsClientError', (_e, s) => hellos.push((s as import('node:tls').TLSSocket).servername));
  server.on('secureConnection', (s) => hellos.push(s.servername));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as net.AddressInfo).port;
  const fx = await startProxy({ domains: { localhost: 'allow' } });
  try {
    const res = await request(
      fx.proxy.httpPort,
      `GET https://localhost:${port}/ HTTP/1.1\r\nHost: localhost:${port}\r\n\r\n`,
    );
    assert.equal(res.status, 502, 'an untrusted certificate is an upstream failure');
    assert.equal(res.body, 'upstream failure');
    assert.deepEqual(fx.dials, [`127.0.0.1:${port}`]);
    await waitFor(() => hellos.length > 0, 'the origin to see the handshake');
    assert.deepEqual(hellos, ['localhost'], 'one TLS handshake with SNI localhost');
  } finally {
    await fx.close();
    server.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
