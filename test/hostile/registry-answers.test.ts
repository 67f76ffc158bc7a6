// A hostile environment registry (issue 30 item 5): it may answer with any executor URL, redirect, or send any
// bytes. Where the registration credential goes is the executor's decision: the registry's own host and port, or a
// --relay-host the user named; ws:// only when the registry itself is http:// on loopback. Everything else fails
// registration naming the URL and why, with nothing sent there (a trap listener on 127.0.0.2, also loopback, records
// every connection). Every answer is bounded (size, time), parsed with zod, and fails as a RegistryError.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { type AddressInfo, createServer as createNetServer, type Server as NetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { bearerAuth } from '../../src/remote/auth.js';
import { startDirectExecutor } from '../../src/remote/direct.js';
import {
  MAX_RESPONSE_BYTES,
  parseRelayHost,
  RegistryClient,
  RegistryError,
} from '../../src/remote/registry.js';
import { ExecServer } from '../../src/server/execServer.js';
import { CORRAL_BIN, ROOT } from '../helpers/cli.js';
import { until } from '../helpers/server.js';

const BEARER = 'registration-secret-7f3a9c0d1e2b';
const ENV = 'env-hostile';

/** A listener on 127.0.0.2 that records whether anything connected and what it sent. */
interface Trap {
  port: number;
  connections: number;
  bytes(): string;
  close(): Promise<void>;
}

async function startTrap(host = '127.0.0.2'): Promise<Trap> {
  let seen = '';
  const trap: Trap = {
    port: 0,
    connections: 0,
    bytes: () => seen,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
  const server: NetServer = createNetServer((s) => {
    trap.connections++;
    s.on('data', (d) => {
      seen += d.toString('latin1');
    });
    s.on('error', () => {});
    // Never answers: a dial that got here would hang on the handshake, not fail fast.
  });
  server.listen(0, host);
  await once(server, 'listening');
  trap.port = (server.address() as AddressInfo).port;
  return trap;
}

type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void;

/** A registry on 127.0.0.1 whose answer the test decides. */
async function startRegistry(
  handler: Handler,
): Promise<{ url: string; port: number; server: Server; hits: string[] }> {
  const hits: string[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => {
      body += d;
    });
    req.on('end', () => {
      hits.push(`${req.method} ${req.url} ${req.headers.authorization ?? ''}`);
      handler(req, res, body);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  return { url: `http://127.0.0.1:${port}`, port, server, hits };
}

const ok = (url: string) => ({
  environment_id: ENV,
  transport: 'direct_jsonrpc_v1',
  registration_id: 'reg-1',
  url,
});

const json = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(typeof body === 'string' ? body : JSON.stringify(body));
};

async function registerError(
  base: string,
  opts: ConstructorParameters<typeof RegistryClient>[3] = {},
): Promise<RegistryError> {
  const client = new RegistryClient(base, ENV, bearerAuth(BEARER), opts);
  try {
    await client.register();
  } catch (e) {
    assert.ok(e instanceof RegistryError, `not a RegistryError: ${(e as Error).stack}`);
    return e;
  }
  throw new Error('the registration succeeded');
}

/** `corral exec-server --remote BASE … --registration-bearer-stdin`, run to its exit: its code and stderr. */
async function runExecutor(base: string, extra: string[] = [], env = process.env) {
  const child = spawn(
    process.execPath,
    [
      CORRAL_BIN,
      'exec-server',
      '--remote',
      base,
      '--environment-id',
      ENV,
      '--remote-transport',
      'direct',
    ].concat(['--registration-bearer-stdin', '--no-audit', ...extra]),
    { cwd: ROOT, stdio: ['pipe', 'ignore', 'pipe'], env },
  );
  child.stdin.end(`${BEARER}\n`);
  let stderr = '';
  child.stderr.on('data', (d) => {
    stderr += d;
  });
  const [code] = (await once(child, 'exit')) as [number | null];
  return { code, stderr };
}

let trap: Trap;
const servers: Server[] = [];
before(async () => {
  trap = await startTrap();
});
after(async () => {
  await trap.close();
  for (const s of servers) s.close();
});

const RAW_CONTROL = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

describe('a hostile registry cannot send the registration credential elsewhere', () => {
  it('the real CLI: url ws://127.0.0.2:PORT/relay fails registration, naming the URL and why; the trap saw nothing', async () => {
    const connected = trap.connections;
    const reg = await startRegistry((_q, res) => json(res, 200, ok(`ws://127.0.0.2:${trap.port}/relay?x=1`)));
    servers.push(reg.server);
    const { code, stderr } = await runExecutor(reg.url);
    assert.notEqual(code, 0, stderr);
    assert.match(stderr, new RegExp(`ws://127\\.0\\.0\\.2:${trap.port}/relay`), stderr);
    assert.match(stderr, /not the registry's host .*--relay-host/, stderr);
    assert.doesNotMatch(stderr, /x=1/, 'the query (which may hold a credential) is not printed');
    assert.equal(reg.hits.length, 1, 'registered once, with the bearer');
    assert.match(reg.hits[0]!, new RegExp(BEARER));
    assert.equal(trap.connections, connected, 'something connected to the URL the registry named');
  });

  it('every spelling of another host or port is refused before any connection', async () => {
    const connected = trap.connections;
    let variants: string[] = [];
    // The registry answers variant i to a registration under the base path /v/i.
    const reg = await startRegistry((req, res) =>
      json(res, 200, ok(variants[Number(/^\/v\/(\d+)\//.exec(req.url!)?.[1])] ?? '')),
    );
    servers.push(reg.server);
    const p = trap.port;
    variants = [
      `wss://127.0.0.2:${p}/relay`,
      `ws://127.0.0.2:${p}/relay`,
      `ws://0x7f000002:${p}/relay`,
      `ws://127.2:${p}/`,
      `ws://2130706434:${p}/`,
      `ws://[::ffff:127.0.0.2]:${p}/`,
      `ws://localhost:${reg.port}/relay`, // the same port under another name is another host
      `ws://127.0.0.1:${p}/relay`, // the registry's host on another port
      `ws://127.0.0.1/relay`,
      `ws://${BEARER}:x@127.0.0.1:${reg.port}/relay`, // user info
      `http://127.0.0.1:${reg.port}/relay`,
      `ws:127.0.0.2:${p}`,
      ` ws://127.0.0.2:${p}/ `,
    ];
    for (const [i, v] of variants.entries()) {
      const client = new RegistryClient(`${reg.url}/v/${i}`, ENV, bearerAuth(BEARER));
      const err = await client.register().then(
        () => null,
        (e: unknown) => e,
      );
      assert.ok(err instanceof RegistryError, `accepted ${v}`);
      assert.match(err.message, /executor URL|wss:\/\/|user info/, `${v}: ${err.message}`);
      assert.doesNotMatch(err.message, new RegExp(BEARER), 'the message never quotes the credential');
    }
    assert.equal(trap.connections, connected);
  });

  it('--relay-host HOST:PORT allows that host: the link is dialled there, and only there', async () => {
    const reg = await startRegistry((_q, res) => json(res, 200, ok(`ws://127.0.0.2:${trap.port}/relay`)));
    servers.push(reg.server);
    const server = new ExecServer({ resumeGraceMs: 100 });
    const auth = bearerAuth(BEARER);
    const registry = new RegistryClient(reg.url, ENV, auth, {
      relayHosts: [parseRelayHost(`127.0.0.2:${trap.port}`)],
    });
    const executor = startDirectExecutor(server, { registry, auth, log: server.log, initialRetryMs: 50 });
    try {
      await until(() => trap.connections > 0 && trap.bytes().includes('\r\n\r\n'), 10_000);
      assert.match(trap.bytes(), /^GET \/relay HTTP\/1\.1/);
      assert.match(trap.bytes(), new RegExp(`authorization: Bearer ${BEARER}`, 'i'));
    } finally {
      executor.stop();
      await executor.done.catch(() => {});
      await server.shutdown();
    }
    // The same host on another port, or without the port (443), is still refused.
    for (const allowed of ['127.0.0.2:1', '127.0.0.2']) {
      const err = await registerError(reg.url, { relayHosts: [parseRelayHost(allowed)] });
      assert.match(err.message, /--relay-host/);
    }
  });

  it('--relay-host takes HOST or HOST:PORT only', () => {
    assert.deepEqual(parseRelayHost('Relay.Example.TEST'), { hostname: 'relay.example.test', port: null });
    assert.deepEqual(parseRelayHost('[::1]:9'), { hostname: '[::1]', port: 9 });
    assert.deepEqual(parseRelayHost('0x7f.1:80'), { hostname: '127.0.0.1', port: 80 });
    for (const bad of ['', ' ', 'a/b', 'u@h', 'h?x', 'h#x', 'h:99999', 'h:x', 'wss://h', 'a b', 'h\\x'])
      assert.throws(() => parseRelayHost(bad), RegistryError, bad);
  });

  it('an https registry never gets a ws:// link, even to a --relay-host on loopback (the real CLI, a real TLS registry)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'corral-tls-'));
    try {
      execFileSync(
        'openssl',
        [
          'req',
          '-x509',
          '-newkey',
          'ec',
          '-pkeyopt',
          'ec_paramgen_curve:prime256v1',
          '-nodes',
          '-keyout',
          join(dir, 'key.pem'),
          '-out',
          join(dir, 'cert.pem'),
          '-days',
          '1',
          '-subj',
          '/CN=127.0.0.1',
          '-addext',
          'subjectAltName=IP:127.0.0.1',
        ],
        { stdio: 'ignore' },
      );
      const hits: string[] = [];
      const tls = createHttpsServer(
        { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) },
        (req, res) => {
          hits.push(`${req.method} ${req.url}`);
          req.resume();
          req.on('end', () => json(res, 200, ok(`ws://127.0.0.2:${trap.port}/relay`)));
        },
      );
      tls.listen(0, '127.0.0.1');
      await once(tls, 'listening');
      const port = (tls.address() as AddressInfo).port;
      const connected = trap.connections;
      try {
        const { code, stderr } = await runExecutor(
          `https://127.0.0.1:${port}`,
          ['--relay-host', `127.0.0.2:${trap.port}`],
          { ...process.env, NODE_EXTRA_CA_CERTS: join(dir, 'cert.pem') },
        );
        assert.notEqual(code, 0, stderr);
        assert.deepEqual(hits, [`POST /cloud/environment/${ENV}/direct/register`], stderr);
        assert.match(
          stderr,
          new RegExp(`ws://127\\.0\\.0\\.2:${trap.port}/relay: the registry is https://`),
          stderr,
        );
        assert.equal(trap.connections, connected);
      } finally {
        tls.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('registry redirects: only a 307/308 within its origin is followed, re-signed', () => {
  it('a redirect to another host or port, in any status, is refused naming it; nothing is sent there', async () => {
    const connected = trap.connections;
    for (const status of [301, 302, 303, 307, 308]) {
      for (const target of [
        `http://127.0.0.2:${trap.port}/steal`,
        `//127.0.0.2:${trap.port}/steal`,
        `https://127.0.0.2:${trap.port}/steal`,
      ]) {
        const reg = await startRegistry((_q, res) => {
          res.writeHead(status, { location: target });
          res.end();
        });
        servers.push(reg.server);
        const err = await registerError(reg.url);
        assert.match(
          err.message,
          new RegExp(`HTTP ${status} redirecting to https?://127\\.0\\.0\\.2:${trap.port}/steal`),
        );
        assert.match(err.message, /not followed/);
        assert.equal(reg.hits.length, 1);
      }
    }
    assert.equal(trap.connections, connected);
  });

  it('a redirect at the link handshake is not followed: the executor retries its own URL, nothing reaches the target', async () => {
    const connected = trap.connections;
    const reg = await startRegistry((req, res) =>
      json(res, 200, ok(`ws://127.0.0.1:${req.socket.localPort}/relay`)),
    );
    servers.push(reg.server);
    let upgrades = 0;
    reg.server.on('upgrade', (_req, socket) => {
      upgrades++;
      // The executor drops the link as soon as it reads the 302: its reset of our side is expected, not a failure.
      socket.on('error', () => {});
      socket.end(
        `HTTP/1.1 302 Found\r\nLocation: ws://127.0.0.2:${trap.port}/steal\r\nContent-Length: 0\r\n\r\n`,
      );
    });
    const server = new ExecServer({ resumeGraceMs: 100 });
    const auth = bearerAuth(BEARER);
    const registry = new RegistryClient(reg.url, ENV, auth);
    const executor = startDirectExecutor(server, {
      registry,
      auth,
      log: server.log,
      initialRetryMs: 20,
      maxRetryMs: 40,
    });
    try {
      await until(() => upgrades >= 3, 10_000);
    } finally {
      executor.stop();
      await executor.done.catch(() => {});
      await server.shutdown();
    }
    assert.equal(trap.connections, connected);
  });

  it('a same-origin 307 is followed with the body, re-signed; 303 and loops are refused', async () => {
    const bodies: string[] = [];
    const reg = await startRegistry((req, res, body) => {
      bodies.push(body);
      if (req.url!.startsWith('/old/')) {
        res.writeHead(307, { location: req.url!.replace('/old/', '/new/') });
        return res.end();
      }
      if (req.url!.startsWith('/loop/')) {
        res.writeHead(308, { location: req.url });
        return res.end();
      }
      if (req.url!.startsWith('/see/')) {
        res.writeHead(303, { location: '/new/' });
        return res.end();
      }
      json(res, 200, ok(`ws://127.0.0.1:${(req.socket.localPort ?? 0) as number}/relay`));
    });
    servers.push(reg.server);
    const r = await new RegistryClient(`${reg.url}/old`, ENV, bearerAuth(BEARER)).register();
    assert.equal(r.url.href, `ws://127.0.0.1:${reg.port}/relay`);
    assert.deepEqual(reg.hits.slice(-2), [
      `POST /old/cloud/environment/${ENV}/direct/register Bearer ${BEARER}`,
      `POST /new/cloud/environment/${ENV}/direct/register Bearer ${BEARER}`,
    ]);
    assert.deepEqual(bodies, ['{"transport":"direct_jsonrpc_v1"}', '{"transport":"direct_jsonrpc_v1"}']);
    assert.match((await registerError(`${reg.url}/loop`)).message, /more than 3 redirects/);
    assert.match((await registerError(`${reg.url}/see`)).message, /HTTP 303 .*only 307 and 308/);
  });
});

describe('hostile registry answers: bounded, validated, never a crash', () => {
  const cases: [string, Handler, RegExp][] = [
    ['malformed JSON', (_q, res) => json(res, 200, '{"url": "ws://'), /invalid JSON/],
    ['not an object', (_q, res) => json(res, 200, '[1,2,3]'), /incomplete direct connection data/],
    ['null', (_q, res) => json(res, 200, 'null'), /incomplete/],
    ['empty', (_q, res) => json(res, 200, ''), /invalid JSON/],
    ['url a number', (_q, res) => json(res, 200, { ...ok('x'), url: 5 }), /url: /],
    ['url an object', (_q, res) => json(res, 200, { ...ok('x'), url: { href: 'ws://127.0.0.2/' } }), /url: /],
    [
      'registration_id an array',
      (_q, res) => json(res, 200, { ...ok('x'), registration_id: ['r'] }),
      /registration_id/,
    ],
    [
      'url 60 KB',
      (_q, res) => json(res, 200, ok(`ws://127.0.0.1/${'a'.repeat(60_000)}`)),
      /url is longer than 8192/,
    ],
    [
      '30 000 nested arrays as the url',
      (_q, res) =>
        json(
          res,
          200,
          `{"environment_id":"${ENV}","transport":"direct_jsonrpc_v1","registration_id":"r","url":${'['.repeat(30_000)}${']'.repeat(30_000)}}`,
        ),
      /url: /,
    ],
    [
      '60 000 nested arrays as the body',
      (_q, res) => json(res, 200, `${'['.repeat(60_000)}${']'.repeat(60_000)}`),
      /larger than|incomplete/,
    ],
    [
      'wide: 3000 keys',
      (_q, res) => json(res, 200, Object.fromEntries(Array.from({ length: 3000 }, (_, i) => [`k${i}`, i]))),
      /incomplete/,
    ],
    [
      'a body larger than the cap, streamed',
      (_q, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        const chunk = Buffer.alloc(64 * 1024, 0x20);
        let n = 0;
        const pump = () => {
          while (n++ < 200) if (!res.write(chunk)) return void res.once('drain', pump);
          res.end();
        };
        res.on('error', () => {});
        pump();
      },
      /larger than 65536 bytes/,
    ],
    [
      'a declared Content-Length above the cap',
      (_q, res) => {
        res.writeHead(200, { 'content-length': String(MAX_RESPONSE_BYTES * 100) });
        res.write('{');
      },
      /larger than/,
    ],
    [
      'an error body with terminal controls and 30 KB of message',
      (_q, res) =>
        json(res, 500, {
          error: { code: '\u001b]0;pwned\u0007', message: `\u202e\u009b31m${'m'.repeat(30_000)}\u2028x` },
        }),
      /HTTP 500/,
    ],
    [
      'a wrong environment id',
      (_q, res) => json(res, 200, { ...ok('ws://127.0.0.1/'), environment_id: 'other' }),
      /different environment id/,
    ],
    [
      'a wrong transport',
      (_q, res) => json(res, 200, { ...ok('ws://127.0.0.1/'), transport: '\u001b[2J' }),
      /unsupported direct transport "\\u001b\[2J"/,
    ],
  ];
  for (const [name, handler, expect] of cases) {
    it(name, async () => {
      const reg = await startRegistry(handler);
      servers.push(reg.server);
      const err = await registerError(reg.url);
      assert.match(err.message, expect);
      assert.doesNotMatch(err.message, RAW_CONTROL, 'raw terminal controls in the message');
      assert.ok(err.message.length < 2000, `a ${err.message.length}-character message`);
    });
  }

  it('a registry that trickles its answer is cut at the deadline', async () => {
    const reg = await startRegistry((_q, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      const t = setInterval(() => res.write(' '), 20);
      res.on('close', () => clearInterval(t));
    });
    servers.push(reg.server);
    const started = Date.now();
    const err = await registerError(reg.url, { timeoutMs: 500 });
    assert.match(err.message, /did not answer within 500 ms/);
    assert.ok(err.retryable);
    assert.ok(Date.now() - started < 5000);
  });

  it('the relay check holds on every dial, not only at registration', () => {
    const reg = new RegistryClient('http://127.0.0.1:9', ENV, bearerAuth(BEARER));
    assert.throws(() => reg.checkRelayUrl('ws://127.0.0.2:9/'), /--relay-host/);
    assert.equal(reg.checkRelayUrl('ws://127.0.0.1:9/r?q').href, 'ws://127.0.0.1:9/r?q');
    assert.equal(reg.checkRelayUrl('wss://127.0.0.1:9/r').href, 'wss://127.0.0.1:9/r');
  });
});
