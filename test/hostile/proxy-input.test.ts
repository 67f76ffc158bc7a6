// The managed proxy's parsers (the fast path's head reader, Node's path behind it, the SOCKS5 handshake) fed deep,
// wide, huge and malformed requests, on the proxy's ports and through the hand-over a sandbox's in-namespace listener
// uses (issue 31, items 2 and 3: `ProxyRoute.accept`, refusals answered on the fast path). What holds for every input:
// a refusal is decided and recorded exactly once per request it answers (one deny audit per 403 / SOCKS 05 02), no
// byte of a refused or unreadable request reaches the origin, nothing is dialled but the allowed loopback origin, and
// the proxy still serves afterwards.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { until } from '../helpers/server.js';
import { type ProxyFixture, startOrigin, startProxy } from '../integration/network-helpers.js';

type Origin = Awaited<ReturnType<typeof startOrigin>>;
let origin: Origin;
let fx: ProxyFixture;
const handed: net.Server[] = [];
/** Where each input is sent: the proxy's ports, and loopback listeners that hand each connection to `accept`. */
const entries: { name: string; http: number; socks: number }[] = [];

/** A listener like the in-namespace one (managedNet.ts): half-open allowed, each connection handed to `accept`. */
async function handOver(accept: (s: net.Socket) => void): Promise<number> {
  const srv = net.createServer({ allowHalfOpen: true }, accept);
  handed.push(srv);
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  return (srv.address() as net.AddressInfo).port;
}

before(async () => {
  origin = await startOrigin();
  fx = await startProxy({
    enable_socks5: true,
    allow_local_binding: true,
    domains: { '127.0.0.1': 'allow', 'blocked.test': 'deny' },
  });
  const route = fx.proxy.route;
  entries.push(
    { name: 'the proxy ports', http: fx.proxy.httpPort, socks: fx.proxy.socksPort! },
    {
      name: 'handed over (in-namespace path)',
      http: await handOver((s) => route.http.accept(s)),
      socks: await handOver((s) => route.socks!.accept(s)),
    },
  );
});

after(async () => {
  for (const s of handed) s.close();
  await fx.close();
  await origin.close();
});

/** Writes `bytes`, half-closes, and reads everything until the proxy closes (bounded: the proxy must close). */
function exchange(port: number, bytes: Buffer | string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    const parts: Buffer[] = [];
    const timer = setTimeout(() => {
      s.destroy();
      reject(new Error(`the proxy did not close within 20 s; got ${Buffer.concat(parts).subarray(0, 200)}`));
    }, 20_000);
    s.on('data', (d: Buffer) => parts.push(d));
    s.on('error', () => {}); // a reset is an answer too
    s.on('close', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(parts));
    });
    s.on('connect', () => {
      // The proxy may answer and close before it has read everything: a write into a closed socket is fine.
      s.end(bytes);
    });
  });
}

const denies = (protocol: string) =>
  fx.audits.filter(
    (a) =>
      a['network.policy.decision'] === 'deny' &&
      a['network.transport.protocol'] === protocol &&
      a['server.address'] !== 'unix-socket',
  ).length;

const count403 = (out: Buffer) => out.toString('latin1').split('HTTP/1.1 403 ').length - 1;

function assertOriginClean(): void {
  for (const r of origin.requests) {
    assert.ok(
      !/blocked/.test(r.url),
      `a refused target reached the origin: ${r.method} ${r.url.slice(0, 80)}`,
    );
    assert.ok(!/blocked/.test(String(r.headers.host ?? '')), 'a refused Host reached the origin');
  }
  assert.deepEqual(fx.offMachine, []);
  for (const d of fx.dials) assert.equal(d, `127.0.0.1:${origin.port}`, `dialled ${d}`);
}

async function stillServes(port: number): Promise<void> {
  const out = await exchange(
    port,
    `GET http://127.0.0.1:${origin.port}/alive HTTP/1.1\r\nHost: 127.0.0.1:${origin.port}\r\n\r\n`,
  );
  assert.match(out.toString('latin1'), /^HTTP\/1\.1 200 [\s\S]*ok GET \/alive$/);
}

const P = () => origin.port;
const refusedGet = (path = '/x', extra = '') =>
  `GET http://blocked.test${path} HTTP/1.1\r\nHost: blocked.test\r\n${extra}\r\n`;

/** Each input, and how many requests in it the proxy can read as refused ones (each answered 403, recorded once). */
const HTTP_INPUTS: { name: string; bytes: () => Buffer | string }[] = [
  { name: 'wide: 500 pipelined refusals in one write', bytes: () => refusedGet().repeat(500) },
  {
    name: 'wide: 500 refusals alternating fast-path and Node-path heads',
    bytes: () =>
      Array.from({ length: 500 }, (_, i) =>
        refusedGet(`/${i}`, i % 2 ? 'Connection: keep-alive, x-other\r\n' : ''),
      ).join(''),
  },
  { name: 'wide: 10 000 header lines', bytes: () => refusedGet('/', 'X-A: b\r\n'.repeat(10_000)) },
  { name: 'deep: a 40 KB path of 20 000 segments', bytes: () => refusedGet(`/${'a/'.repeat(20_000)}`) },
  {
    name: 'deep: 10 000 nested brackets in a header value',
    bytes: () => refusedGet('/', `X-Deep: ${'['.repeat(10_000)}${']'.repeat(10_000)}\r\n`),
  },
  { name: 'huge: a 1 MiB request target', bytes: () => refusedGet(`/${'a'.repeat(1 << 20)}`) },
  { name: 'huge: a 1 MiB header value', bytes: () => refusedGet('/', `X-Huge: ${'a'.repeat(1 << 20)}\r\n`) },
  {
    name: 'huge: Content-Length 10^15 with no body',
    bytes: () => refusedGet('/', 'Content-Length: 999999999999999\r\n'),
  },
  {
    name: 'huge: a 64 KiB body on a refused POST, then an allowed request on the same connection',
    bytes: () =>
      `POST http://blocked.test/p HTTP/1.1\r\nHost: blocked.test\r\nContent-Length: 65536\r\n\r\n${'b'.repeat(65536)}` +
      `GET http://127.0.0.1:${P()}/after HTTP/1.1\r\nHost: 127.0.0.1:${P()}\r\n\r\n`,
  },
  {
    name: 'malformed: Host names an allowed origin, the target a refused one',
    bytes: () => `GET http://blocked.test/ HTTP/1.1\r\nHost: 127.0.0.1:${P()}\r\n\r\n`,
  },
  {
    name: 'malformed: two Host headers',
    bytes: () => `GET http://blocked.test/ HTTP/1.1\r\nHost: 127.0.0.1:${P()}\r\nHost: blocked.test\r\n\r\n`,
  },
  {
    name: 'malformed: userinfo that looks like the allowed origin',
    bytes: () => `GET http://127.0.0.1:${P()}@blocked.test/ HTTP/1.1\r\nHost: blocked.test\r\n\r\n`,
  },
  {
    name: 'malformed: a fragment that hides the refused authority',
    bytes: () => `GET http://blocked.test#@127.0.0.1:${P()}/ HTTP/1.1\r\nHost: blocked.test\r\n\r\n`,
  },
  {
    name: 'malformed: Content-Length and Transfer-Encoding smuggling a refused request',
    bytes: () =>
      `POST http://127.0.0.1:${P()}/s HTTP/1.1\r\nHost: 127.0.0.1:${P()}\r\nContent-Length: 4\r\n` +
      `Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n${refusedGet()}`,
  },
  {
    name: 'malformed: two Content-Length values smuggling a refused request',
    bytes: () =>
      `POST http://127.0.0.1:${P()}/s HTTP/1.1\r\nHost: 127.0.0.1:${P()}\r\nContent-Length: 0\r\n` +
      `Content-Length: ${refusedGet().length}\r\n\r\n${refusedGet()}`,
  },
  { name: 'malformed: bare LF line ends', bytes: () => refusedGet().replaceAll('\r\n', '\n') },
  { name: 'malformed: NUL in the request line', bytes: () => 'GET http://blocked.test/\0 HTTP/1.1\r\n\r\n' },
  { name: 'malformed: a byte above 0x7f in a header', bytes: () => refusedGet('/', 'X-Bin: \x80\xff\r\n') },
  { name: 'malformed: an obs-fold header', bytes: () => refusedGet('/', 'X-Fold: a\r\n b\r\n') },
  { name: 'malformed: a lower-case method', bytes: () => 'post http://blocked.test/ HTTP/1.1\r\n\r\n' },
  { name: 'malformed: no version', bytes: () => 'GET http://blocked.test/\r\n\r\n' },
  {
    name: 'malformed: 64 KiB of random bytes',
    bytes: () => Buffer.from(Array.from({ length: 65536 }, (_, i) => (i * 7919) & 0xff)),
  },
];

describe('the HTTP proxy against hostile request heads', () => {
  for (const input of HTTP_INPUTS) {
    test(input.name, async () => {
      for (const e of entries) {
        const before = denies('http');
        const out = await exchange(e.http, input.bytes());
        const answered = count403(out);
        assert.equal(
          denies('http') - before,
          answered,
          `${e.name}: ${answered} refusals answered, ${denies('http') - before} recorded`,
        );
        assertOriginClean();
        await stillServes(e.http);
      }
    });
  }
  test('the refusal counts that must be exact are exact', async () => {
    for (const e of entries) {
      assert.equal(count403(await exchange(e.http, refusedGet().repeat(500))), 500, e.name);
      const mixed = await exchange(e.http, HTTP_INPUTS[1]!.bytes());
      assert.equal(count403(mixed), 500, e.name);
    }
  });
});

const greeting = Buffer.from([5, 1, 0]);
const connectDomain = (host: Buffer, port = 80) =>
  Buffer.concat([Buffer.from([5, 1, 0, 3, host.length]), host, Buffer.from([port >> 8, port & 0xff])]);

const SOCKS_INPUTS: { name: string; bytes: () => Buffer; refusals: number }[] = [
  {
    name: 'a refused CONNECT',
    bytes: () => Buffer.concat([greeting, connectDomain(Buffer.from('blocked.test'))]),
    refusals: 1,
  },
  {
    name: 'wide: 255 methods, none of them no-auth',
    bytes: () => Buffer.from([5, 255, ...Array.from({ length: 255 }, (_, i) => i + 1)]),
    refusals: 0,
  },
  {
    name: 'huge: a 255-byte domain not allowed',
    bytes: () => Buffer.concat([greeting, connectDomain(Buffer.alloc(255, 0x61))]),
    refusals: 1,
  },
  {
    name: 'huge: 1 MiB after the greeting',
    bytes: () => Buffer.concat([greeting, Buffer.alloc(1 << 20, 5)]),
    refusals: 0,
  },
  {
    name: 'deep: 10 000 greetings back to back',
    bytes: () => Buffer.concat(Array.from({ length: 10_000 }, () => greeting)),
    refusals: 0,
  },
  { name: 'malformed: version 4', bytes: () => Buffer.from([4, 1, 0, 80, 127, 0, 0, 1, 0]), refusals: 0 },
  {
    name: 'malformed: a NUL in the domain',
    bytes: () => Buffer.concat([greeting, connectDomain(Buffer.from('blocked.test\0.127.0.0.1'))]),
    refusals: 0,
  },
  {
    name: 'malformed: address type 9',
    bytes: () => Buffer.concat([greeting, Buffer.from([5, 1, 0, 9, 1, 2, 3, 4, 0, 80])]),
    refusals: 0,
  },
  {
    name: 'malformed: a truncated request',
    bytes: () => Buffer.concat([greeting, Buffer.from([5, 1, 0, 3, 200, 0x61])]),
    refusals: 0,
  },
  {
    name: 'malformed: BIND to the allowed origin',
    bytes: () => Buffer.concat([greeting, Buffer.from([5, 2, 0, 1, 127, 0, 0, 1, P() >> 8, P() & 0xff])]),
    refusals: 0,
  },
];

/** A CONNECT to the allowed origin gets 05 00 and a tunnel that carries a request and its answer. */
function socksStillServes(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ port, host: '127.0.0.1' });
    let got = Buffer.alloc(0);
    const timer = setTimeout(() => {
      s.destroy();
      reject(new Error(`no answer through SOCKS5; got ${got.toString('latin1')}`));
    }, 20_000);
    s.on('error', reject);
    s.on('data', (d: Buffer) => {
      got = Buffer.concat([got, d]);
      if (/ok GET \/socks$/.test(got.toString('latin1'))) {
        clearTimeout(timer);
        s.destroy();
        assert.deepEqual([...got.subarray(0, 4)], [5, 0, 5, 0]);
        resolve();
      }
    });
    s.on('connect', () =>
      s.write(
        Buffer.concat([
          greeting,
          Buffer.from([5, 1, 0, 1, 127, 0, 0, 1, P() >> 8, P() & 0xff]),
          Buffer.from('GET /socks HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'),
        ]),
      ),
    );
  });
}

describe('the SOCKS5 proxy against hostile handshakes', () => {
  for (const input of SOCKS_INPUTS) {
    test(input.name, async () => {
      for (const e of entries) {
        const before = denies('socks5_tcp');
        const out = await exchange(e.socks, input.bytes());
        assert.equal(denies('socks5_tcp') - before, input.refusals, `${e.name}: refusals recorded`);
        if (input.refusals > 0) {
          // 05 00 (no auth chosen), then 05 02 (connection not allowed).
          assert.deepEqual([...out.subarray(0, 4)], [5, 0, 5, 2], e.name);
        }
        assertOriginClean();
        await socksStillServes(e.socks);
      }
    });
  }
});

test('a client that pipelines refusals and never reads: the proxy stops reading, its answers stay bounded, none lost', async () => {
  let server: net.Socket | undefined;
  const port = await handOver((s) => {
    server = s;
    fx.proxy.route.http.accept(s);
  });
  const before = denies('http');
  const c = net.connect({ port, host: '127.0.0.1' });
  await new Promise((r) => c.once('connect', r));
  // 4 MiB of requests (~75 000) whose answers (~25 MiB) far exceed what the sockets can buffer.
  const batch = refusedGet().repeat(1000);
  const total = Math.ceil((4 << 20) / batch.length) * 1000;
  for (let i = 0; i < total / 1000; i++) c.write(batch);
  const state = () =>
    `paused ${server?.isPaused()}, answers waiting ${server?.writableLength}, decided ${denies('http') - before} of ${total}`;
  // Wait until the proxy has stopped: paused, with answers the client is not taking, and deciding nothing more over
  // three looks in a row.
  let last = -1;
  let still = 0;
  await until(
    () => {
      const now = denies('http');
      still = now === last ? still + 1 : 0;
      last = now;
      return server?.isPaused() === true && server.writableLength > 0 && still >= 3;
    },
    30_000,
    'the proxy to stop reading',
  ).catch((e: Error) => {
    throw new Error(`${e.message}: ${state()}`);
  });
  assert.ok(server!.writableLength < 2 << 20, state());
  assert.ok(denies('http') - before < total, 'requests the proxy has not read are not decided');
  // Now read: every request is answered 403 and recorded exactly once.
  let answered = 0;
  let tail = '';
  c.on('data', (d: Buffer) => {
    const text = tail + d.toString('latin1');
    answered += text.split('HTTP/1.1 403 ').length - 1;
    tail = text.slice(-12);
  });
  await until(() => answered === total, 60_000, `${total} answers`);
  assert.equal(denies('http') - before, total);
  c.destroy();
  assertOriginClean();
});
