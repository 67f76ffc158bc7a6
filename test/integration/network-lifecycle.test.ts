import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import { test } from 'node:test';
import { applyProxyEnv, parseManagedNetwork } from '../../src/network/index.js';
import { DEFAULT_IDLE_TIMEOUT_MS } from '../../src/network/proxy.js';
import { until } from '../helpers/server.js';
import { RawClient, request, startOrigin, startProxy } from './network-helpers.js';

function runChild(
  argv: string[],
  env: Record<string, string>,
): Promise<{ stdout: string; code: number | null }> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), { env, stdio: ['ignore', 'pipe', 'inherit'] });
    let stdout = '';
    child.stdout.on('data', (d) => {
      stdout += d;
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ stdout, code }));
  });
}

const parseEnv = (text: string) =>
  Object.fromEntries(
    text
      .split('\n')
      .filter((l) => l.includes('='))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );

test('T1: a child sees exactly the 33 proxy keys; ALL_PROXY socks5h; a stale HTTP_PROXY is overwritten', async () => {
  const fx = await startProxy({ enable_socks5: true, allow_local_binding: false });
  try {
    const env = applyProxyEnv(
      { PATH: process.env.PATH ?? '/usr/bin:/bin', HTTP_PROXY: 'http://stale:1' },
      fx.proxy,
    );
    const { stdout, code } = await runChild(['env'], env);
    assert.equal(code, 0);
    const seen = parseEnv(stdout);
    const proxyKeys = Object.keys(seen).filter((k) => k !== 'PATH');
    assert.equal(proxyKeys.length, 33);
    assert.deepEqual(proxyKeys.sort(), Object.keys(fx.proxy.env).sort());
    assert.equal(seen.HTTP_PROXY, `http://127.0.0.1:${fx.proxy.httpPort}`);
    assert.equal(seen.ALL_PROXY, `socks5h://127.0.0.1:${fx.proxy.socksPort}`);
    assert.equal(
      seen.NO_PROXY,
      'localhost,127.0.0.1,::1,*.local,.local,169.254.0.0/16,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16',
    );
    assert.equal(seen.CODEX_NETWORK_ALLOW_LOCAL_BINDING, '0');
    assert.notEqual(fx.proxy.httpPort, fx.proxy.socksPort);
  } finally {
    await fx.close();
  }
});

test('T2: enable_socks5:false → ALL_PROXY = FTP_PROXY = the HTTP proxy, and no SOCKS listener', async () => {
  const fx = await startProxy({ enable_socks5: false });
  try {
    assert.equal(fx.proxy.socksPort, undefined);
    assert.equal(fx.proxy.env.ALL_PROXY, `http://127.0.0.1:${fx.proxy.httpPort}`);
    assert.equal(fx.proxy.env.FTP_PROXY, `http://127.0.0.1:${fx.proxy.httpPort}`);
    assert.ok(!Object.values(fx.proxy.env).some((v) => v.startsWith('socks5')));
    // The HTTP port speaks HTTP only: a SOCKS greeting is a parse error.
    const c = await RawClient.open(fx.proxy.httpPort);
    c.write(Buffer.from([5, 1, 0]));
    const res = await c.readResponse();
    assert.equal(res.status, 400);
    c.close();
  } finally {
    await fx.close();
  }
});

test('disabled (enabled:false): no proxy, hence no env', () => {
  assert.equal(parseManagedNetwork({ config: { network: { enabled: false } } }), null);
});

test('T20: silent and trickling connections are closed without a byte after the idle timeout (short timeout)', async () => {
  const idle = 400;
  const fx = await startProxy({}, { idleTimeoutMs: idle });
  try {
    const t0 = Date.now();
    const silent = await RawClient.open(fx.proxy.httpPort);
    const trickle = await RawClient.open(fx.proxy.httpPort);
    const socksSilent = await RawClient.open(fx.proxy.socksPort!);
    trickle.write('GET http://a.test/ HTTP/1.1\r\n');
    const timer = setInterval(() => trickle.write('X-Slow: 1\r\n'), 50);
    const [a, b, c] = await Promise.all([silent.waitClose(), trickle.waitClose(), socksSilent.waitClose()]);
    clearInterval(timer);
    const took = Date.now() - t0;
    assert.equal(a.length, 0);
    assert.equal(b.length, 0);
    assert.equal(c.length, 0);
    // Not before the idle timeout (how soon after is the timer's business, and the load's).
    assert.ok(took >= idle - 50, `closed after ${took} ms`);
    // A keep-alive connection that goes quiet after a response is closed too.
    const ka = await RawClient.open(fx.proxy.httpPort);
    ka.write('GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n');
    assert.equal((await ka.readResponse()).status, 403);
    await ka.waitClose();
  } finally {
    await fx.close();
  }
});

test('T20: the default idle timeout is 30 s: silent HTTP and SOCKS5 connections and a trickled head are armed with it', async () => {
  assert.equal(DEFAULT_IDLE_TIMEOUT_MS, 30_000);
  // What each of the proxy's sockets is armed with, seen at the socket: the 30 s are not waited out here (how each
  // timer closes its connection, silent or trickling, is the short-timeout test above, at 400 ms).
  const armed = new Map<net.Socket, number>();
  const setTimeout = net.Socket.prototype.setTimeout;
  net.Socket.prototype.setTimeout = function (this: net.Socket, ms: number, cb?: () => void) {
    armed.set(this, ms);
    return setTimeout.call(this, ms, cb);
  } as typeof setTimeout;
  const fx = await startProxy({});
  try {
    const accepted = (client: RawClient, port: number) =>
      [...armed.keys()].find((s) => s.localPort === port && s.remotePort === client.socket.localPort);
    const silent = await RawClient.open(fx.proxy.httpPort);
    const socks = await RawClient.open(fx.proxy.socksPort!);
    const trickle = await RawClient.open(fx.proxy.httpPort);
    trickle.write('GET http://a.test/ HTTP/1.1\r\n');
    trickle.write('X-Slow: 1\r\n');
    await until(
      () => !!accepted(silent, fx.proxy.httpPort) && !!accepted(socks, fx.proxy.socksPort!),
      5000,
      'the silent connections accepted',
    );
    assert.equal(armed.get(accepted(silent, fx.proxy.httpPort)!), 30_000);
    assert.equal(armed.get(accepted(socks, fx.proxy.socksPort!)!), 30_000);
    // A head split over reads goes to Node's HTTP server, whose headers timeout bounds a trickle (data resets an
    // idle timer, not that one), and whose keep-alive timeout (plus Node's 1 s) a quiet connection between requests.
    const nodeServer = () =>
      (accepted(trickle, fx.proxy.httpPort) as (net.Socket & { server?: unknown }) | undefined)?.server;
    await until(() => nodeServer() instanceof http.Server, 5000, 'the trickled head handed to the Node path');
    const node = nodeServer() as http.Server;
    assert.equal(node.headersTimeout, 30_000);
    assert.equal(node.keepAliveTimeout + 1000, 30_000);
    assert.equal(silent.closed || socks.closed || trickle.closed, false);
    for (const c of [silent, socks, trickle]) c.socket.destroy();
  } finally {
    net.Socket.prototype.setTimeout = setTimeout;
    await fx.close();
  }
});

test('T26: the proxy answers while the child runs; after close() the ports refuse connections', async () => {
  const origin = await startOrigin();
  const fx = await startProxy({ domains: { localhost: 'allow' } });
  try {
    const child = spawn('sleep', ['1'], {
      env: applyProxyEnv({ PATH: process.env.PATH ?? '/bin' }, fx.proxy),
    });
    const exited = new Promise<void>((r) => child.on('close', () => r()));
    const res = await request(
      fx.proxy.httpPort,
      `GET http://localhost:${origin.port}/ HTTP/1.1\r\nHost: localhost:${origin.port}\r\n\r\n`,
    );
    assert.equal(res.status, 200);
    const open = await RawClient.open(fx.proxy.httpPort);
    await exited;
    await fx.proxy.close();
    await open.waitClose();
    for (const port of [fx.proxy.httpPort, fx.proxy.socksPort!]) {
      const err = await new Promise<NodeJS.ErrnoException>((resolve) => {
        const s = net.connect(port, '127.0.0.1');
        s.on('connect', () => resolve(Object.assign(new Error('connected'), { code: 'CONNECTED' })));
        s.on('error', resolve);
      });
      assert.equal(err.code, 'ECONNREFUSED');
    }
  } finally {
    await fx.close();
    await origin.close();
  }
});

test('a Unicode deny entry blocks the punycode wire form', async () => {
  const fx = await startProxy({
    allow_local_binding: true,
    domains: { 'bücher.example': 'deny', '*': 'allow' },
  });
  try {
    const res = await request(
      fx.proxy.httpPort,
      'GET http://xn--bcher-kva.example/ HTTP/1.1\r\nHost: xn--bcher-kva.example\r\n\r\n',
    );
    assert.equal(res.status, 403);
    assert.equal(JSON.parse(res.body).reason, 'denied');
  } finally {
    await fx.close();
  }
});

test('decider hook: not_allowed goes to the decider, inline; allow overrides; deny uses its reason', async () => {
  const origin = await startOrigin();
  const fx = await startProxy({ allow_local_binding: true, domains: { 'rebind.test': 'deny' } });
  try {
    const asked: string[] = [];
    fx.proxy.setDecider(async (req) => {
      asked.push(`${req.protocol} ${req.host}:${req.port} ${req.method}`);
      return req.host === '127.0.0.1' ? 'allow' : { deny: 'user_denied' };
    });
    const ok = await request(
      fx.proxy.httpPort,
      `GET http://127.0.0.1:${origin.port}/ HTTP/1.1\r\nHost: 127.0.0.1:${origin.port}\r\n\r\n`,
    );
    assert.equal(ok.status, 200);
    const allowAudit = fx.audits.at(-1)!;
    assert.equal(allowAudit['network.policy.source'], 'decider');
    assert.equal(allowAudit['network.policy.override'], true);
    const no = await request(
      fx.proxy.httpPort,
      'GET http://localhost:1/ HTTP/1.1\r\nHost: localhost:1\r\n\r\n',
    );
    assert.equal(no.status, 403);
    assert.equal(no.header('x-proxy-error'), 'blocked-by-policy');
    const body = JSON.parse(no.body);
    assert.equal(body.reason, 'user_denied');
    assert.equal(body.source, 'decider');
    assert.equal(body.message, 'Codex blocked this request by network policy.');
    const denied = await request(
      fx.proxy.httpPort,
      'GET http://rebind.test/ HTTP/1.1\r\nHost: rebind.test\r\n\r\n',
    );
    assert.equal(JSON.parse(denied.body).reason, 'denied');
    assert.deepEqual(
      asked,
      [`http 127.0.0.1:${origin.port} GET`, 'http localhost:1 GET'],
      'denied never reaches the decider',
    );
  } finally {
    await fx.close();
    await origin.close();
  }
});

test('a request in flight is not cut by the idle timeout while its upstream is slow', async () => {
  const { createServer } = await import('node:http');
  const slow = createServer((_req, res) => {
    setTimeout(() => res.end('slow'), 1000);
  });
  await new Promise<void>((r) => slow.listen(0, '127.0.0.1', () => r()));
  const port = (slow.address() as net.AddressInfo).port;
  const fx = await startProxy({ domains: { localhost: 'allow' } }, { idleTimeoutMs: 300 });
  try {
    const res = await request(
      fx.proxy.httpPort,
      `GET http://localhost:${port}/ HTTP/1.1\r\nHost: localhost:${port}\r\n\r\n`,
    );
    assert.equal(res.status, 200);
    assert.equal(res.body, 'slow');
  } finally {
    await fx.close();
    slow.closeAllConnections();
    slow.close();
  }
});
