/**
 * Issue 35, `--linux-sandbox-transparent-tcp`, its mechanism (src/platform/native/netnotify.c with a SOCKS port): a
 * confined command's connect() to any inet/inet6 destination is held while the server's own socket asks the
 * command's SOCKS5 listener for it (CONNECT to the IP and port read once from the command's memory); granted, that
 * socket replaces the command's fd; refused, ECONNREFUSED. On cca01b7 there was no such path: every such connect was
 * refused (EACCES) or, under bwrap, failed in the empty network namespace. Here a stand-in SOCKS5 listener admits one
 * port and refuses the rest; the denied port's real listener must never see a connection, whatever the command does
 * (a thread rewriting the sockaddr, a flood of connects, a non-blocking connect, IPv6 ::1).
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { netNotifyChannel, netNotifyCounts } from '../../src/platform/netNotify.js';
import { spawnPipedWith } from '../../src/process/spawner.js';
import { closeRuleset } from '../../src/sandbox/linux/landlockNative.js';
import { netNotifySkip, PY, supervisedConfinement } from '../helpers/netNotifyConfined.js';
import { until } from '../helpers/server.js';

const SCRIPT = fileURLToPath(new URL('./netnotify-transparent.py', import.meta.url));
const skip = netNotifySkip();

const ECONNREFUSED = 111;
const EACCES = 13;
let socks: net.Server;
let proxy: net.Server;
let denied: net.Server;
let socksPort = 0;
let proxyPort = 0;
let deniedPort = 0;
/** The allowed destination port: the stand-in proxy grants only it (no listener needed: the proxy answers). */
let allowedPort = 0;
const asked: string[] = [];
let deniedSeen = 0;

/** A SOCKS5 listener (no authentication) that grants CONNECT to allowedPort only, then greets `VIA host port`. */
function socksStandIn(): net.Server {
  return net.createServer((s) => {
    s.on('error', () => {});
    let buf = Buffer.alloc(0);
    let greeted = false;
    s.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      if (!greeted) {
        if (buf.length < 2 || buf.length < 2 + buf[1]!) return;
        assert.deepEqual(
          [...buf.subarray(0, 3)],
          [5, 1, 0],
          'greeting: version 5, one method, no authentication',
        );
        buf = buf.subarray(2 + buf[1]!);
        greeted = true;
        s.write(Buffer.from([5, 0]));
      }
      if (buf.length < 4) return;
      const atyp = buf[3]!;
      const alen = atyp === 1 ? 4 : atyp === 4 ? 16 : -1;
      assert.ok(alen > 0, `address type ${atyp}`);
      if (buf.length < 4 + alen + 2) return;
      const a = buf.subarray(4, 4 + alen);
      const host = atyp === 1 ? [...a].join('.') : (a.toString('hex').match(/.{4}/g) ?? []).join(':');
      const port = buf.readUInt16BE(4 + alen);
      asked.push(`${host} ${port}`);
      if (port === allowedPort) {
        s.write(Buffer.from([5, 0, 0, 1, 127, 0, 0, 1, 0, 0]));
        s.end(`VIA ${host} ${port}`);
      } else s.end(Buffer.from([5, 2, 0, 1, 0, 0, 0, 0, 0, 0]));
    });
  });
}

before(async () => {
  if (skip) return;
  socks = socksStandIn();
  proxy = net.createServer((s) => {
    s.on('error', () => {});
    s.end('PROXY');
  });
  denied = net.createServer((s) => {
    deniedSeen++;
    s.destroy();
  });
  const spare = net.createServer();
  for (const srv of [socks, proxy, denied, spare])
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  socksPort = (socks.address() as net.AddressInfo).port;
  proxyPort = (proxy.address() as net.AddressInfo).port;
  deniedPort = (denied.address() as net.AddressInfo).port;
  allowedPort = (spare.address() as net.AddressInfo).port;
  await new Promise((r) => spare.close(r)); // the stand-in proxy answers for it: nothing listens there
});
after(() => {
  socks?.close();
  proxy?.close();
  denied?.close();
});

/** Runs the client confined (Landlock: no TCP connect; the supervision filter), supervised with transparent TCP. */
async function run(what: string, ...extra: string[]): Promise<Record<string, unknown>> {
  return runVia(socksPort, what, ...extra);
}

async function runVia(via: number, what: string, ...extra: string[]): Promise<Record<string, unknown>> {
  const { rulesetFd, seccomp } = supervisedConfinement();
  const chan = netNotifyChannel();
  let out = '';
  let err = '';
  let exit: Promise<number | null>;
  try {
    const c = spawnPipedWith(
      'native',
      {
        file: PY,
        argv: ['python3', SCRIPT, String(proxyPort), String(allowedPort), String(deniedPort), what, ...extra],
        env: { PATH: '/usr/bin:/bin' },
        cwd: '/',
        confine: { rulesetFd, seccomp, netNotifyFd: chan.childFd },
      },
      { stdin: 'null' },
    );
    c.stdout.on('data', (d: Buffer) => {
      out += d;
    });
    c.stderr.on('data', (d: Buffer) => {
      err += d;
    });
    exit = new Promise((r) => c.onExit((code) => r(code)));
    chan.watch([proxyPort], via);
  } finally {
    chan.close();
    closeRuleset(rulesetFd);
  }
  const code = await exit;
  assert.equal(code, 0, `the client failed (${code}): ${err}`);
  return JSON.parse(out) as Record<string, unknown>;
}

describe('transparent TCP: every connect asked of the SOCKS5 listener', { skip }, () => {
  test('allowed through the proxy, denied ECONNREFUSED, the proxy port direct, ::1, non-blocking', async () => {
    asked.length = 0;
    const seen = deniedSeen;
    const r = await run('basic');
    const via = `VIA 127.0.0.1 ${allowedPort}`;
    assert.equal(r.allowed, via);
    assert.equal(r.denied, ECONNREFUSED, 'refused by the proxy: ECONNREFUSED');
    assert.equal(r.otherLoopback, `VIA 127.0.0.2 ${allowedPort}`, 'the destination asked is the one read');
    assert.equal(r.proxy, 'PROXY', 'a proxy-aware client reaches its proxy as before');
    assert.equal(r.v6, `VIA 0000:0000:0000:0000:0000:0000:0000:0001 ${allowedPort}`);
    assert.equal(r.v6mapped, via, 'an IPv4-mapped destination is asked as IPv4');
    assert.equal(r.port0, EACCES, 'port 0 names no destination');
    assert.deepEqual(r.nonblock, [true, true, 0, via]);
    assert.equal(r.again, 106, 'connected: EISCONN');
    assert.equal(deniedSeen, seen, "the denied port's listener saw nothing");
    assert.deepEqual(
      asked.filter((a) => !a.endsWith(` ${allowedPort}`)),
      [`127.0.0.1 ${deniedPort}`],
    );
  });

  test('a thread rewriting the sockaddr can only ask for another destination, which the proxy decides', async () => {
    const seen = deniedSeen;
    asked.length = 0;
    const r = (await run('race')) as { got: Record<string, number> };
    for (const k of Object.keys(r.got))
      assert.ok(k === `VIA 127.0.0.1 ${allowedPort}` || k === String(ECONNREFUSED), `outcome ${k}`);
    for (const a of asked) assert.ok(a === `127.0.0.1 ${allowedPort}` || a === `127.0.0.1 ${deniedPort}`, a);
    assert.equal(deniedSeen, seen);
  });

  test('a flood of 400 concurrent connects: each answered, none blocks the others', async () => {
    const seen = deniedSeen;
    const before = netNotifyCounts();
    const r = (await run('flood', '400')) as { got: Record<string, number> };
    assert.deepEqual(r.got, { [`VIA 127.0.0.1 ${allowedPort}`]: 200, [ECONNREFUSED]: 200 });
    assert.equal(deniedSeen, seen);
    // The supervisor thread counts a connect after it installed the socket: the command can be done first.
    await until(() => netNotifyCounts().proxied - before.proxied >= 200, 20_000);
    assert.equal(netNotifyCounts().proxied - before.proxied, 200);
    await until(() => netNotifyCounts().watched === 0, 20_000);
  });

  test('a proxy that never answers holds only its own connect (ETIMEDOUT after 10 s), never the supervisor', async () => {
    const held: net.Socket[] = [];
    const stall = net.createServer((s) => {
      held.push(s);
      s.on('error', () => {});
    });
    await new Promise<void>((r) => stall.listen(0, '127.0.0.1', r));
    try {
      const stuck = runVia((stall.address() as net.AddressInfo).port, 'one');
      await until(() => held.length === 1, 5000, 'the stalled exchange began');
      const r = await run('basic'); // another command meanwhile: answered at once
      assert.equal(r.allowed, `VIA 127.0.0.1 ${allowedPort}`);
      assert.equal((await stuck).one, 110, 'the held connect: ETIMEDOUT');
    } finally {
      for (const s of held) s.destroy();
      stall.close();
    }
  });

  test('a hostile SOCKS side: malformed, truncated, split and oversized replies; only a whole success connects', async () => {
    // Each stand-in answers the greeting and the CONNECT with these bytes (written one by one when split).
    const ok = [5, 0, 0, 1, 127, 0, 0, 1, 0, 0];
    const cases: [string, number[] | Buffer, boolean, string | number][] = [
      ['wrong version', [4, 0], false, ECONNREFUSED],
      ['a method we did not offer', [5, 2], false, ECONNREFUSED],
      ['no method', [5, 0xff], false, ECONNREFUSED],
      ['closed after the method', [5, 0], false, ECONNREFUSED],
      ['refused', [5, 0, 5, 2, 0, 1, 0, 0, 0, 0, 0, 0], false, ECONNREFUSED],
      ['unknown address type', [5, 0, 5, 0, 0, 9, 0, 0, 0, 0, 0, 0], false, ECONNREFUSED],
      ['truncated reply', [5, 0, 5, 0, 0, 1, 127], false, ECONNREFUSED],
      [
        'a 255-byte domain bound address, then data',
        [5, 0, 5, 0, 0, 3, 255, ...Buffer.alloc(257), 76],
        false,
        'L',
      ],
      ['a zero-length domain, then data', [5, 0, 5, 0, 0, 3, 0, 0, 0, 90], false, 'Z'],
      ['split byte by byte, then data', [5, 0, ...ok, ...Buffer.from('AFTER')], true, 'AFTER'],
      [
        'IPv6 bound address, then data',
        [5, 0, 5, 0, 0, 4, ...Buffer.alloc(18), ...Buffer.from('V6')],
        false,
        'V6',
      ],
      [
        'a domain bound address, then data',
        [5, 0, 5, 0, 0, 3, 3, 97, 98, 99, 0, 0, ...Buffer.from('DN')],
        false,
        'DN',
      ],
      [
        'success then 1 MiB',
        Buffer.concat([Buffer.from([5, 0, ...ok]), Buffer.alloc(1 << 20, 65)]),
        false,
        'A'.repeat(100),
      ],
    ];
    for (const [label, bytes, split, want] of cases) {
      const hostile = net.createServer((c) => {
        c.on('error', () => {});
        const b = Buffer.from(bytes as number[]);
        if (!split) c.end(b);
        else {
          let i = 0;
          const next = () => {
            if (i >= b.length) return c.end();
            c.write(b.subarray(i, ++i), () => setImmediate(next));
          };
          next();
        }
      });
      await new Promise<void>((r) => hostile.listen(0, '127.0.0.1', r));
      try {
        const r = await runVia((hostile.address() as net.AddressInfo).port, 'one');
        assert.equal(r.one, want, label);
      } finally {
        hostile.close();
      }
    }
    await until(() => netNotifyCounts().watched === 0, 5000);
  });

  test('a SOCKS port that is not an integer 1..65535 is refused, naming it', () => {
    for (const p of [0, 65536, 1.5, '1080']) {
      const chan = netNotifyChannel();
      assert.throws(() => chan.watch([proxyPort], p as number), /socksPort/);
      chan.close();
    }
  });
});
