// issue 33, item 6: an HTTP/1.1 upgrade with `x-unix-socket` (network-proxy.md §3.8). An allowed path gets the
// request (origin form, `x-unix-socket` dropped), the daemon's 101 comes back, then both directions are spliced with
// stream backpressure and both ends close together; an unlisted path 403 JSON `not_allowed`; limited mode's method
// rule as for TCP upgrades; every decision audited. Hostile daemons and clients: a socket that never answers, one
// that answers garbage, a 101 followed by a flood to a client that never reads, a swapped link; malformed, deep,
// wide and huge heads. Before (cca01b7): the header was ignored on upgrades, which went to Host as a TCP upgrade.
// The portable (lstat) walk runs the same suite: unix-socket-upgrade-lstat.test.ts.
import assert from 'node:assert/strict';
import { mkdirSync, renameSync, rmSync, symlinkSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { tempDir, until } from '../helpers/server.js';
import { type ProxyFixture, startProxy } from '../integration/network-helpers.js';

const dir = tempDir('corral-unix-upgrade-');
const run = join(dir.path, 'ws', 'run'); // a directory a sandboxed child could own
const echo = join(run, 'echo.sock');
const silent = join(run, 'silent.sock');
const garbage = join(run, 'garbage.sock');
const flood = join(run, 'flood.sock');
const secretDir = join(dir.path, 'secret');
const secret = join(secretDir, 'other.sock'); // another daemon, never listed

/** What each daemon saw: the heads it read, its open connections, bytes the flood daemon got written. */
const seen = {
  heads: [] as string[],
  secretHits: 0,
  open: new Set<net.Socket>(),
  flooded: 0,
  floodBlocked: false,
};
const servers: net.Server[] = [];

/** A raw daemon on a unix socket: reads the request head, then hands the connection to `then`. */
async function daemon(path: string, then: (c: net.Socket, rest: Buffer) => void): Promise<void> {
  const s = net.createServer((c) => {
    seen.open.add(c);
    c.on('close', () => seen.open.delete(c));
    c.on('error', () => {});
    let buf = Buffer.alloc(0);
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      c.off('data', onData);
      seen.heads.push(buf.subarray(0, end).toString('latin1'));
      then(c, buf.subarray(end + 4));
    };
    c.on('data', onData);
  });
  await new Promise<void>((r) => s.listen(path, () => r()));
  servers.push(s);
}

const SWITCH = 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n';

let full: ProxyFixture;
let limited: ProxyFixture;
before(async () => {
  mkdirSync(run, { recursive: true });
  mkdirSync(secretDir, { recursive: true });
  await daemon(echo, (c, rest) => {
    c.write(SWITCH);
    if (rest.length) c.write(rest);
    c.pipe(c);
  });
  await daemon(silent, () => {});
  await daemon(garbage, (c) => c.end(Buffer.from('\x00\xffnot http at all\r\n\r\n\x01', 'latin1')));
  await daemon(flood, (c) => {
    c.write(SWITCH);
    const chunk = Buffer.alloc(64 * 1024, 0x61);
    const more = () => {
      while (!c.destroyed) {
        seen.flooded += chunk.length;
        if (!c.write(chunk)) {
          seen.floodBlocked = true;
          c.once('drain', () => {
            seen.floodBlocked = false;
            more();
          });
          return;
        }
      }
    };
    more();
  });
  await daemon(secret, (c) => {
    seen.secretHits++;
    c.end(SWITCH);
  });
  const listed = Object.fromEntries([echo, silent, garbage, flood].map((p) => [p, 'allow']));
  full = await startProxy({ unix_sockets: listed });
  limited = await startProxy({ mode: 'limited', unix_sockets: listed });
});
after(async () => {
  await Promise.all([full.close(), limited.close()]);
  for (const c of seen.open) c.destroy();
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  dir.cleanup();
});

/** A client on the proxy port that sent `head`; collects what comes back. */
async function client(
  p: ProxyFixture,
  head: string,
): Promise<{ c: net.Socket; got: () => string; closed: () => boolean }> {
  const c = net.connect(p.proxy.httpPort, '127.0.0.1');
  await new Promise<void>((r, j) => c.once('connect', r).once('error', j));
  let got = '';
  let closed = false;
  c.on('data', (d: Buffer) => {
    got += d.toString('latin1');
  });
  c.on('error', () => {});
  c.on('close', () => {
    closed = true;
  });
  c.write(head);
  return { c, got: () => got, closed: () => closed };
}

const upgradeHead = (path: string, method = 'GET', extra = '') =>
  `${method} /chat?room=1 HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nx-unix-socket: ${path}\r\n${extra}\r\n`;
const blocked = (reason: string) => JSON.stringify({ status: 'blocked', host: 'unix-socket', reason });
const lastDecision = (p: ProxyFixture) => {
  const e = p.audits.filter((a) => a['network.policy.scope' as keyof typeof a] === 'non_domain').at(-1);
  return e && [e['network.policy.decision' as keyof typeof e], e['network.policy.reason' as keyof typeof e]];
};
const statusOf = (text: string) => Number(/^HTTP\/1\.[01] (\d{3})/.exec(text)?.[1] ?? 0);
/** Waits for a whole refusal (the proxy closes after it) and returns its status and body. */
async function refusal(p: ProxyFixture, head: string): Promise<{ status: number; body: string }> {
  const r = await client(p, head);
  await until(r.closed, 5000, 'the proxy closes after its answer');
  const text = r.got();
  return { status: statusOf(text), body: text.slice(text.indexOf('\r\n\r\n') + 4) };
}

describe(`x-unix-socket upgrades (${process.env.CORRAL_UNIX_SOCKET_WALK ?? 'platform'} walk)`, {
  skip: process.platform === 'win32' && 'no unix sockets',
}, () => {
  test('an allowed path: the head goes to the socket without x-unix-socket, 101 back, both directions spliced', async () => {
    const heads = seen.heads.length;
    const r = await client(full, upgradeHead(echo));
    await until(() => r.got().includes('\r\n\r\n'), 5000, '101');
    assert.equal(statusOf(r.got()), 101, r.got());
    const head = seen.heads[heads]!;
    assert.match(head, /^GET \/chat\?room=1 HTTP\/1\.1\r\n/);
    assert.match(head, /\r\nUpgrade: websocket/);
    assert.doesNotMatch(head, /x-unix-socket/i);
    assert.deepEqual(lastDecision(full), ['allow', 'allow']);
    assert.deepEqual(full.blocked, []);
    // 4 MiB each way, intact and in order.
    const payload = Buffer.alloc(4 * 1024 * 1024);
    for (let i = 0; i < payload.length; i++) payload[i] = i % 251;
    const start = r.got().length;
    r.c.write(payload);
    await until(() => r.got().length - start >= payload.length, 20_000, 'the echo');
    assert.ok(Buffer.from(r.got().slice(start), 'latin1').equals(payload));
    // Both ends close together: the client goes, the daemon's connection closes.
    const open = seen.open.size;
    r.c.destroy();
    await until(() => seen.open.size < open, 5000, "the daemon's end closes");
  });

  test('an unlisted path is 403 not_allowed, audited, nothing reached; a listed one behind a swapped link is 502', async () => {
    const heads = seen.heads.length;
    const r = await refusal(full, upgradeHead(secret));
    assert.equal(r.status, 403);
    assert.equal(r.body, blocked('not_allowed'));
    assert.deepEqual(lastDecision(full), ['deny', 'not_allowed']);
    assert.deepEqual(full.blocked, []);
    // The listed socket swapped for a link to the other daemon; then its directory swapped for a link.
    renameSync(echo, `${echo}.real`);
    symlinkSync(secret, echo);
    assert.equal((await refusal(full, upgradeHead(echo))).status, 502);
    rmSync(echo);
    renameSync(`${echo}.real`, echo);
    const real = `${run}.real`;
    renameSync(run, real);
    symlinkSync(secretDir, run);
    assert.equal((await refusal(full, upgradeHead(echo))).status, 502);
    rmSync(run);
    renameSync(real, run);
    assert.equal(seen.secretHits, 0, 'the other daemon saw nothing');
    assert.equal(seen.heads.length, heads);
  });

  test('limited mode: a POST upgrade is 403 method_not_allowed before the list, a GET upgrade goes through (as TCP)', async () => {
    const heads = seen.heads.length;
    const w = await refusal(limited, upgradeHead(echo, 'POST'));
    assert.equal(w.status, 403);
    assert.equal(w.body, blocked('method_not_allowed'));
    assert.deepEqual(lastDecision(limited), ['deny', 'method_not_allowed']);
    assert.equal(seen.heads.length, heads);
    const r = await client(limited, upgradeHead(echo));
    await until(() => r.got().includes('\r\n\r\n'), 5000, '101');
    assert.equal(statusOf(r.got()), 101);
    r.c.destroy();
  });

  test('a socket that never answers: the client waits; when it goes, the daemon connection closes too', async () => {
    const heads = seen.heads.length;
    const r = await client(full, upgradeHead(silent));
    await until(() => seen.heads.length > heads, 5000, 'the head at the silent daemon');
    const open = seen.open.size;
    assert.equal(r.got(), '');
    r.c.destroy();
    await until(() => seen.open.size < open, 5000, "the silent daemon's end closes");
  });

  test('a socket that answers garbage and closes: the client gets the bytes and the close; the proxy serves on', async () => {
    const r = await client(full, upgradeHead(garbage));
    await until(r.closed, 5000, 'the close');
    assert.equal(r.got(), '\x00\xffnot http at all\r\n\r\n\x01');
    const again = await client(full, upgradeHead(echo));
    await until(() => statusOf(again.got()) === 101, 5000, 'a later upgrade');
    again.c.destroy();
  });

  test('a 101 then a flood to a client that never reads: the daemon is held back (bounded), both close together', async () => {
    const r = await client(full, upgradeHead(flood));
    r.c.pause(); // never reads
    await until(() => seen.floodBlocked, 20_000, 'the flood daemon blocked by backpressure');
    // What it wrote is bounded by socket buffers and stream high-water marks, not by the flood.
    const at = seen.flooded;
    assert.ok(at < 64 * 1024 * 1024, `${at} bytes went out before the flood was held`);
    const open = seen.open.size;
    r.c.destroy();
    await until(() => seen.open.size < open, 5000, "the flood daemon's end closes");
  });

  test('malformed, deep, wide and huge upgrade heads are answered; nothing reached; the proxy serves on', async () => {
    const heads = seen.heads.length;
    for (const [head, status] of [
      [upgradeHead('relative.sock'), 400],
      [upgradeHead(''), 400],
      [upgradeHead(echo, 'GET', `x-unix-socket: ${secret}\r\n`), 400], // two headers: refused, not guessed
      [upgradeHead(`${run}/../../secret/other.sock`), 403],
      [upgradeHead(`/${'a/'.repeat(4000)}s.sock`), 403],
      [upgradeHead(`/${'x'.repeat(20_000)}`), 431],
      [upgradeHead(echo, 'GET', 'x-a: 1\r\n'.repeat(150)), 431],
    ] as const) {
      const r = await refusal(full, head);
      assert.equal(r.status, status, `${head.slice(0, 60)}: ${r.status} ${r.body.slice(0, 80)}`);
    }
    assert.equal(seen.heads.length, heads);
    assert.equal(seen.secretHits, 0);
    const again = await client(full, upgradeHead(echo));
    await until(() => statusOf(again.got()) === 101, 5000, 'a later upgrade');
    again.c.destroy();
  });
});
