/**
 * Issue 31, item 5: without the native addon (CORRAL_NATIVE=0: macOS-like, a failed build, no compiler) a Linux
 * bubblewrap sandbox is still enforced. On cca01b7 every sandboxed start was refused there ("the Linux sandbox needs
 * the native addon"), so CI's no-addon pass ran no sandbox at all. Now bwrap is started through a bash prologue by
 * child_process / node-pty with the whole policy and the seccomp program on a pipe at fd 3
 * (src/sandbox/linux/bwrapLaunch.ts materializeBwrapWithoutAddon), and what only the addon can do refuses the start,
 * naming it. The server runs in its own process with CORRAL_NATIVE=0, as root (bwrap's pid guard) and as uid 65534
 * (bwrap unprivileged); the agent talks to it over the protocol; every check is made from inside the sandbox or on
 * the host.
 */
import assert from 'node:assert/strict';
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { RpcClient } from '../helpers/client.js';
import { until } from '../helpers/server.js';
import {
  chownTree,
  type HostileServer,
  PATH,
  PY,
  runAgent,
  runPlanted,
  sandboxParam,
  scratch,
  startServer,
  type Who,
  whySkip,
} from './sandbox-harness.js';

/** Each attempt prints `<what> OK` or `<what> <errno name>`. */
const PROBE = `
import ctypes, errno, os, socket, sys
def err(e): return errno.errorcode.get(e.errno, str(e.errno))
def attempt(what, f):
    try:
        f(); print(what, 'OK')
    except OSError as e:
        print(what, err(e))
outside, inside = sys.argv[1], sys.argv[2]
attempt('write-outside', lambda: open(outside, 'w').write('x'))
attempt('write-inside', lambda: open(inside, 'w').write('x'))
attempt('unix-dgram', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).close())
attempt('netlink', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close())
attempt('inet', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
libc = ctypes.CDLL(None, use_errno=True)
keyctl = 250 if os.uname().machine == 'x86_64' else 219
def key():
    if libc.syscall(keyctl, 0, -3, 0) < 0: raise OSError(ctypes.get_errno(), 'keyctl')
attempt('keyctl', key)
print('fds', ' '.join(sorted(os.listdir('/proc/self/fd'), key=int)))
`;

for (const who of ['root', 'nobody'] as Who[])
  describe(`a bubblewrap sandbox without the addon (CORRAL_NATIVE=0, server as ${who})`, {
    skip: whySkip(who),
  }, () => {
    let s: ReturnType<typeof scratch>;
    let W: string;
    let O: string;
    let server: HostileServer;
    let c: RpcClient & { sessionId: string };
    let inherited: number;
    before(async () => {
      s = scratch(who);
      W = s.mk('ws');
      O = s.mk('outside');
      const T = s.mk('tmpdir');
      // An fd the server inherits without O_CLOEXEC (as from a careless parent): it must not reach the sandbox.
      inherited = openSync(join(O, 'inherited'), 'w');
      server = await startServer({
        who,
        tmpdir: T,
        env: { CORRAL_NATIVE: '0' },
        inherit: { 200: inherited },
      });
      c = await server.client();
    });
    after(async () => {
      await server?.close();
      closeSync(inherited);
      s?.cleanup();
    });

    for (const tty of [false, true]) {
      test(`writes only inside its roots; seccomp denies what the policy denies; no inherited fd (${tty ? 'tty' : 'pipes'})`, {
        timeout: 60_000,
      }, async () => {
        const outside = join(O, `escape-${tty}`);
        const r = await runPlanted(c, who, W, [`${PY} -c "$PROBE" "${outside}" "${join(W, `in-${tty}`)}"`], {
          tty,
          sandbox: sandboxParam('0.169', { cwd: W }),
          env: { PROBE },
        });
        const out = r.output.replace(/\r/g, '');
        assert.equal(r.sandboxType, 'linuxSeccomp', out);
        assert.match(out, /^write-inside OK$/m, out);
        assert.match(out, /^write-outside (EROFS|EACCES|EPERM|ENOENT)$/m, out);
        assert.ok(!existsSync(outside), 'the write outside the writable roots landed');
        assert.match(out, /^unix-dgram EPERM$/m, out);
        assert.match(out, /^netlink EPERM$/m, out);
        assert.match(out, /^inet EPERM$/m, out);
        assert.match(out, /^keyctl EPERM$/m, out);
        const fds = /^fds (.*)$/m.exec(out)?.[1]?.split(' ').map(Number) ?? [];
        // 0-2, and python's own listing of /proc/self/fd (one more, gone when the listing is done).
        assert.ok(
          fds.every((fd) => fd <= 3),
          `fds beyond stdio reached the sandbox: ${fds.join(' ')}\n${out}`,
        );
        assert.match(out, /^DONE$/m, out);
      });
    }

    test('with the network open, it still cannot write outside', { timeout: 60_000 }, async () => {
      const outside = join(O, 'escape-net');
      const r = await runPlanted(c, who, W, [`echo x > ${outside}; echo "rc=$?"`], {
        tty: false,
        sandbox: sandboxParam('0.169', { cwd: W, network: 'enabled' }),
      });
      assert.match(r.output, /rc=[1-9]/, r.output);
      assert.ok(!existsSync(outside));
    });

    test('what needs the addon is refused per start, naming it', { timeout: 60_000 }, async () => {
      const refusal = (sandbox: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
        c
          .request('process/start', {
            processId: `no-addon-refused-${Math.random()}`,
            argv: ['/bin/true'],
            cwd: W,
            env: { PATH, HTTP_PROXY: 'http://127.0.0.1:9' },
            tty: false,
            arg0: null,
            sandbox,
            ...extra,
          })
          .then(
            () => null,
            (e: { code?: number; message?: string }) => e,
          );
      const managed = await refusal(sandboxParam('0.169', { cwd: W }), { enforceManagedNetwork: true });
      assert.ok(managed, 'a managed-network start must be refused');
      assert.match(managed.message ?? '', /enforceManagedNetwork.*needs the native addon/);
      assert.match(managed.message ?? '', /CORRAL_NATIVE=0/);
      const landlock = await refusal(sandboxParam('0.169', { cwd: W, useLegacyLandlock: true }));
      assert.ok(landlock, 'a Landlock start must be refused');
      assert.match(landlock.message ?? '', /Landlock is not available here/);
      assert.match(landlock.message ?? '', /native addon/);
    });

    test('nothing it started survives the SIGKILLed server', { timeout: 60_000 }, async () => {
      const doomed = await startServer({ who, tmpdir: s.mk('tmpdir2'), env: { CORRAL_NATIVE: '0' } });
      const dc = await doomed.client();
      const pidFile = join(W, 'sleeper.pid');
      chownTree(who, W);
      await dc.request('process/start', {
        processId: 'no-addon-sleeper',
        argv: ['/bin/sh', '-c', `echo $$ > ${pidFile}.tmp; mv ${pidFile}.tmp ${pidFile}; exec sleep 300`],
        cwd: W,
        env: { PATH },
        tty: false,
        arg0: null,
        sandbox: sandboxParam('0.169', { cwd: W }),
      });
      // The pid inside the sandbox's namespace is not the host's: find the sleeper by its namespace pid's file.
      await until(() => existsSync(pidFile), 20_000, 'the sleeper');
      const sleepers = () => hostSleepers(W);
      await until(() => sleepers().length > 0, 10_000, 'the sleeper on the host');
      dc.close();
      process.kill(doomed.pid, 'SIGKILL');
      await until(
        () => sleepers().length === 0,
        10_000,
        `the sandbox (${sleepers()}) to die with the server`,
      );
    });

    test('the sandbox is what process/start says', { timeout: 60_000 }, async () => {
      const r = await runAgent(c, {
        argv: ['/bin/sh', '-c', 'echo ok'],
        cwd: W,
        tty: false,
        sandbox: sandboxParam('seed', { cwd: W }),
      });
      assert.equal(r.sandboxType, 'linuxSeccomp');
      assert.match(r.output, /ok/);
    });
  });

/** Host pids of `sleep 300` processes whose cwd is `dir`. */
function hostSleepers(dir: string): number[] {
  const out: number[] = [];
  for (const name of readdirSafe('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/cmdline`, 'utf8') !== 'sleep\u0000300\u0000') continue;
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      if (stat[stat.lastIndexOf(')') + 2] === 'Z') continue;
      if (readlinkSafe(`/proc/${name}/cwd`) === dir) out.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

function readdirSafe(p: string): string[] {
  try {
    return readdirSync(p);
  } catch {
    return [];
  }
}

function readlinkSafe(p: string): string | null {
  try {
    return readlinkSync(p);
  } catch {
    return null;
  }
}
