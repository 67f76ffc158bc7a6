/**
 * Issue 33, item 3: a Landlock command under managed-network enforcement, its connect() supervised by the server
 * (src/platform/native/netnotify.c; the filter and the listener hand-over in confine.c). On cca01b7 there was no such
 * supervisor (the combination was refused; a Landlock port rule for the proxy would have opened that port on every
 * host). Here the two pieces are driven directly, as the server will drive them: a Python attacker
 * (netnotify-attack.py) runs confined (Landlock denying every TCP connect, the proxy-routed TCP-only seccomp filter,
 * the supervision filter) through the native spawner and through the sandbox launcher (terminals), and tries: the
 * proxy (reached: a socket of the server's, the stand-in proxy greets it), other ports and loopback addresses, IPv6,
 * a thread rewriting the sockaddr during the call, another thread closing the fd during the call, malformed lengths
 * and pointers, sendto/sendmsg with a destination, netlink/raw/packet/UDP sockets, and a flood of connects. The other
 * listener must never see a connection; nothing is left supervised after the command exits.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { netNotifyChannel, netNotifyCounts } from '../../src/platform/netNotify.js';
import { sandboxLauncher } from '../../src/platform/sandbox.js';
import { spawnPipedWith } from '../../src/process/spawner.js';
import { closeRuleset } from '../../src/sandbox/linux/landlockNative.js';
import { netNotifySkip, PY, supervisedConfinement } from '../helpers/netNotifyConfined.js';
import { until } from '../helpers/server.js';

const SCRIPT = fileURLToPath(new URL('./netnotify-attack.py', import.meta.url));
const skip = netNotifySkip();

const EACCES = 13;
const EPERM = 1;
let proxy: net.Server;
let other: net.Server;
let proxyPort = 0;
let otherPort = 0;
let otherSeen = 0;
let proxySeen = 0;

before(async () => {
  if (skip) return;
  proxy = net.createServer((s) => {
    proxySeen++;
    s.on('error', () => {});
    s.end('PROXY');
  });
  other = net.createServer((s) => {
    otherSeen++;
    s.destroy();
  });
  for (const srv of [proxy, other]) await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  proxyPort = (proxy.address() as net.AddressInfo).port;
  otherPort = (other.address() as net.AddressInfo).port;
});
after(() => {
  proxy?.close();
  other?.close();
});

type Way = 'native' | 'launcher';

/** Runs the attacker confined, its connects supervised with the proxy's port; its JSON result and exit code. */
async function attack(way: Way, what: string, ...extra: string[]): Promise<Record<string, unknown>> {
  const { rulesetFd, seccomp } = supervisedConfinement();
  const chan = netNotifyChannel();
  const args = [SCRIPT, String(proxyPort), String(otherPort), what, ...extra];
  let out = '';
  let err = '';
  let exit: Promise<number | null>;
  try {
    if (way === 'native') {
      const confine = { rulesetFd, seccomp, netNotifyFd: chan.childFd };
      const c = spawnPipedWith(
        'native',
        { file: PY, argv: ['python3', ...args], env: { PATH: '/usr/bin:/bin' }, cwd: '/', confine },
        { stdin: 'null' },
      );
      c.stdout.on('data', (d: Buffer) => {
        out += d;
      });
      c.stderr.on('data', (d: Buffer) => {
        err += d;
      });
      exit = new Promise((r) => c.onExit((code) => r(code)));
    } else {
      const c = spawn(
        sandboxLauncher!,
        [
          '--fd',
          '3',
          '--fd',
          '4',
          '--net-notify',
          '3',
          '--landlock',
          '4',
          '--seccomp',
          seccomp.toString('hex'),
          '--',
          PY,
          ...args,
        ],
        { stdio: ['ignore', 'pipe', 'pipe', chan.childFd, rulesetFd], env: { PATH: '/usr/bin:/bin' } },
      );
      assert.ok(c.stdout && c.stderr);
      c.stdout.on('data', (d: Buffer) => {
        out += d;
      });
      c.stderr.on('data', (d: Buffer) => {
        err += d;
      });
      exit = new Promise((r) => c.on('close', (code) => r(code)));
    }
    chan.watch([proxyPort]);
  } finally {
    chan.close();
    closeRuleset(rulesetFd);
  }
  const code = await exit;
  assert.equal(code, 0, `the attacker failed (${code}): ${err}`);
  return JSON.parse(out) as Record<string, unknown>;
}

describe('Landlock + managed network: the connect supervisor', { skip }, () => {
  for (const way of ['native', 'launcher'] as Way[]) {
    test(`${way}: only the proxy is reached, as the server's own socket; everything else EACCES`, async () => {
      const seenBefore = otherSeen;
      const proxiedBefore = proxySeen;
      const before = netNotifyCounts();
      const r = await attack(way, 'basic');
      assert.equal(r.proxy, 'PROXY');
      assert.equal(r.other, EACCES, 'another port on loopback');
      assert.equal(r.otherLoopback, EACCES, 'the proxy port on another loopback address');
      assert.equal(r.v6loop, EACCES, '[::1] is not the proxy endpoint');
      assert.equal(r.v6mapped, 'PROXY', '::ffff:127.0.0.1 is');
      // non-blocking: EINPROGRESS, then connected; O_NONBLOCK and FD_CLOEXEC as the command's fd had them
      assert.deepEqual(r.nonblock, [115, 0, true, true]);
      assert.equal(r.nonblockGreet, 'PROXY');
      // asked again while connecting: EALREADY (or, done already, EISCONN/0); once connected: EISCONN
      assert.deepEqual(r['asked again'], [115, true, 106]);
      assert.equal(r.again, 106, 'connect on a connected socket: EISCONN');
      assert.equal(otherSeen, seenBefore, 'the other listener saw nothing');
      const now = netNotifyCounts();
      assert.equal(now.proxied - before.proxied, 5);
      await until(() => proxySeen - proxiedBefore === 5, 5000); // the stand-in proxy saw each of them
      await until(() => netNotifyCounts().watched === 0, 5000); // nothing left supervised
    });

    test(`${way}: sendto with a destination, UDP, netlink, raw and packet sockets are refused`, async () => {
      const r = await attack(way, 'sockets');
      assert.deepEqual(r, {
        udp: EPERM,
        netlink: EPERM,
        raw: EPERM,
        packet: EPERM,
        unixdgram: EPERM,
        sendtoTcp: EACCES,
        sendmsgFastopen: EPERM,
      });
    });

    test(`${way}: malformed lengths, pointers and fds get EACCES, EINVAL or EBADF; the supervisor goes on`, async () => {
      const seen = otherSeen;
      const r = (await attack(way, 'malformed')) as { results: [number | string, number][]; after: unknown };
      const byCase = Object.fromEntries(r.results.map(([k, e]) => [String(k), e]));
      // Only 16 (sockaddr_in) or more can name the proxy: every shorter length is refused; beyond a sockaddr_storage
      // (128) EINVAL, as connect(2) answers.
      for (const n of ['0', '1', '2', '3', '8', '15', 'null', 'unmapped']) assert.equal(byCase[n], EACCES, n);
      assert.equal(byCase['128'], 0, 'a whole sockaddr_storage holding the proxy');
      for (const n of ['200', '4096', '2147483647', '4294967295']) assert.equal(byCase[n], 22, n);
      assert.equal(byCase.badfd, 9, 'a fd the command does not have: EBADF');
      assert.equal(byCase.pipe, EACCES, 'not a socket');
      assert.equal(r.after, 'PROXY');
      assert.equal(otherSeen, seen);
    });

    test(`${way}: a thread rewriting the sockaddr during the call never reaches another port`, async () => {
      const seen = otherSeen;
      const r = (await attack(way, 'race')) as { got: Record<string, number> };
      for (const k of Object.keys(r.got)) assert.ok(k === 'PROXY' || k === String(EACCES), `outcome ${k}`);
      assert.equal(otherSeen, seen, 'the other listener saw nothing');
    });

    test(`${way}: a thread closing the fd during the call; the supervisor goes on`, async () => {
      const seen = otherSeen;
      const r = (await attack(way, 'closer')) as { got: Record<string, number>; after: unknown };
      for (const k of Object.keys(r.got)) assert.ok(['0', '9', String(EACCES)].includes(k), `outcome ${k}`);
      assert.equal(r.after, 'PROXY');
      assert.equal(otherSeen, seen);
    });

    test(`${way}: a flood of 400 concurrent connects`, async () => {
      const seen = otherSeen;
      const r = (await attack(way, 'flood', '400')) as { got: Record<string, number> };
      // Every connect is made on a thread of its own (not the thread-group leader): half to the proxy, half elsewhere.
      assert.deepEqual(r.got, { PROXY: 200, [`other:${EACCES}`]: 200 });
      assert.equal(otherSeen, seen);
    });
  }
});

describe('the connect supervisor: malformed inputs', { skip }, () => {
  test('the channel: no fd, a pipe instead of a listener, many fds, garbage bytes: each dropped, nothing left watched', async () => {
    const cases = [
      'os.close(3)',
      's.send(b"x" * 65536)',
      'r, w = os.pipe(); socket.send_fds(s, [b"L"], [r, w])',
      'fds = [os.pipe()[0] for _ in range(64)]; socket.send_fds(s, [b"L"], fds[:250])',
    ];
    for (const line of cases) {
      const chan = netNotifyChannel();
      const c = spawn(PY, ['-c', `import os, socket\ns = socket.socket(fileno=3)\n${line}`], {
        stdio: ['ignore', 'ignore', 'pipe', chan.childFd],
      });
      let err = '';
      c.stderr?.on('data', (d: Buffer) => {
        err += d;
      });
      chan.watch([proxyPort]);
      chan.close();
      const code = await new Promise((r) => c.on('close', r));
      assert.equal(code, 0, `${line}: ${err}`);
      await until(() => netNotifyCounts().watched === 0, 5000, `nothing left watched after ${line}`);
    }
  });

  test('netNotifyWatch and the launcher refuse malformed arguments, naming them', async () => {
    for (const ports of [[], [0], [65536], [1.5], ['80'], Array.from({ length: 9 }, (_, i) => 1000 + i)]) {
      const chan = netNotifyChannel();
      assert.throws(() => chan.watch(ports as number[]), /netNotifyWatch/);
      chan.close();
    }
    const run = (args: string[]) =>
      new Promise<{ code: number | null; err: string }>((resolve) => {
        const c = spawn(sandboxLauncher!, [...args, '--', '/bin/true'], {
          stdio: ['ignore', 'ignore', 'pipe'],
        });
        let err = '';
        c.stderr!.on('data', (d: Buffer) => {
          err += d;
        });
        c.on('close', (code) => resolve({ code, err }));
      });
    // Without --landlock (bwrap's transparent TCP) the channel must be the one moved fd, 3.
    const alone = await run(['--fd', '0', '--fd', '1', '--net-notify', '3']);
    assert.equal(alone.code, 127);
    assert.match(alone.err, /--net-notify needs --landlock, or without it must name the one moved fd, 3/);
    const notSocket = await run(['--fd', '0', '--net-notify', '3']);
    assert.equal(notSocket.code, 127, 'a channel that is not a socket: the command is not run');
    assert.match(notSocket.err, /seccomp listener/);
    const misplaced = await run([
      '--fd',
      '0',
      '--fd',
      '1',
      '--net-notify',
      '4',
      '--landlock',
      '4',
      '--seccomp',
      '06000000ffff0f7f',
    ]);
    assert.equal(misplaced.code, 127);
    assert.match(misplaced.err, /--net-notify must name the moved fd just before the --landlock one/);
    const junk = await run(['--net-notify', 'x']);
    assert.equal(junk.code, 127);
    assert.match(junk.err, /bad argument/);
  });
});
