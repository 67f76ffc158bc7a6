/**
 * Issue 30, item 2: a Landlock sandbox whose policy writes `/` must stay in its cgroup (and, the same cause, must not
 * write the host's kernel settings in /proc/sys or /sys). On 42e683e it wrote its pid
 * into the root `cgroup.procs`/`tasks` of every hierarchy (no pids or memory limit any more, and a `setsid` daemon
 * that survived `process/terminate` and the server's SIGKILL), and could open `release_agent` for writing (code
 * execution as root on cgroup v1). Every cgroup mount is now carved out of every writable root, read-only, or the
 * start is refused naming the mount. Without a cgroup (CORRAL_CGROUPS=0, or none writable), a sandboxed command runs
 * under a supervisor, a child subreaper that kills everything the command started (src/platform/native/spawn.c), so
 * the same daemon dies with process/terminate and with the server. The server runs as root in its own process (that
 * is where cgroups are writable here), the agent talks to it over the protocol, and every check is made on the host.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { landlockSupport } from '../../src/sandbox/linux/landlockNative.js';
import type { RpcClient } from '../helpers/client.js';
import { until } from '../helpers/server.js';
import { alive, readPid } from './procs.js';
import {
  type HostileServer,
  PATH,
  PY,
  runPlanted,
  scratch,
  startServer,
  whySkip,
} from './sandbox-harness.js';

/**
 * Tries to leave its cgroup every way cgroupfs offers: its pid into every cgroup.procs and tasks of every cgroup mount
 * (the roots and every cgroup down to 3 levels: its own, its parents, the server's), a new cgroup in each mount,
 * release_agent and notify_on_release opened for writing (never written: on the old code that would change the host).
 * Prints `<what> <path> OK|<errno>` per attempt, then its own /proc/self/cgroup between markers.
 */
const ESCAPE = `
import errno, os
def err(e): return errno.errorcode.get(e.errno, str(e.errno))
mounts = []
for line in open('/proc/self/mountinfo'):
    pre, post = line.split(' - ', 1)
    if post.split()[0] in ('cgroup', 'cgroup2'): mounts.append(pre.split()[4])
print('mounts', len(mounts))
me = str(os.getpid()).encode()
def attempt(what, path, data):
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            if data is not None: os.write(fd, data)
        finally: os.close(fd)
        print(what, path, 'OK')
    except OSError as e:
        print(what, path, err(e))
for m in mounts:
    for top, dirs, files in os.walk(m):
        if top.count('/') - m.count('/') >= 3: dirs[:] = []
        for name in ('cgroup.procs', 'tasks'):
            if name in files: attempt('move', os.path.join(top, name), me)
        for name in ('release_agent', 'notify_on_release', 'cgroup.subtree_control', 'pids.max', 'cgroup.kill'):
            if name in files: attempt('open', os.path.join(top, name), None)
    try:
        os.mkdir(os.path.join(m, 'escape-%d' % os.getpid())); print('mkdir', m, 'OK')
    except OSError as e: print('mkdir', m, err(e))
print('--cgroup--'); print(open('/proc/self/cgroup').read().strip()); print('--end--')
`;

/**
 * Opens kernel settings for writing (never writes: on the old code that would change the host): core_pattern and
 * modprobe run a program as root, binfmt_misc registers an interpreter, sysrq and power/state stop the machine.
 */
const KNOBS = `
import errno, os
for p in ['/proc/sys/kernel/core_pattern', '/proc/sys/kernel/modprobe', '/proc/sys/vm/drop_caches',
          '/proc/sys/fs/binfmt_misc/register', '/proc/sysrq-trigger', '/sys/power/state', '/sys/kernel/uevent_helper',
          '/sys/kernel/mm/transparent_hugepage/enabled', '/sys/module/printk/parameters/time']:
    if not os.path.exists(p): continue
    try:
        os.close(os.open(p, os.O_WRONLY)); print('knob', p, 'OK')
    except OSError as e:
        print('knob', p, errno.errorcode.get(e.errno, str(e.errno)))
`;

/** A daemon that leaves the command's process group and session and tries to leave its cgroup, then lingers. */
const DAEMON = `
import os, sys, time
if os.fork() > 0: sys.exit(0)
os.setsid()
if os.fork() > 0: sys.exit(0)
for line in open('/proc/self/mountinfo'):
    pre, post = line.split(' - ', 1)
    if post.split()[0] not in ('cgroup', 'cgroup2'): continue
    for name in ('cgroup.procs', 'tasks'):
        try:
            with open(os.path.join(pre.split()[4], name), 'w') as f: f.write(str(os.getpid()))
        except OSError: pass
open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); os.rename(sys.argv[1] + '.tmp', sys.argv[1])
for fd in (0, 1, 2): os.close(fd)
time.sleep(300)
`;

/** The 0.169 sandbox object for a policy that writes `/` (or the given roots), under Landlock. */
function writeAll(cwd: string, roots: string[] = ['/']): Record<string, unknown> {
  const entries = roots.map((r) =>
    r === '/'
      ? { path: { type: 'special', value: { kind: 'root' } }, access: 'write' }
      : { path: { type: 'path', path: `file://${r}` }, access: 'write' },
  );
  if (!roots.includes('/'))
    entries.unshift({ path: { type: 'special', value: { kind: 'root' } }, access: 'read' });
  return {
    permissions: { type: 'managed', file_system: { type: 'restricted', entries }, network: 'restricted' },
    cwd: `file://${cwd}`,
    workspaceRoots: [`file://${cwd}`],
    windowsSandboxLevel: 'disabled',
    windowsSandboxProxySettingsMode: 'reconcile',
    useLegacyLandlock: true,
  };
}

function cgroupMounts(): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter((l) => / - cgroup2? /.test(l))
    .map((l) => l.split(' ')[4]!);
}

function skip(): string | false {
  const why = whySkip('root');
  if (why) return why;
  if (landlockSupport().abi < 6)
    return `Landlock ABI ${landlockSupport().abi} < 6 (the plan refuses signals)`;
  if (cgroupMounts().length === 0) return 'no cgroup filesystem is mounted';
  return false;
}

for (const cgroups of [true, false])
  describe(`a Landlock sandbox that writes / ${cgroups ? 'stays in its cgroup' : '(no cgroup)'}`, {
    skip: skip(),
  }, () => {
    const env: Record<string, string> = cgroups ? {} : { CORRAL_CGROUPS: '0' };
    let s: ReturnType<typeof scratch>;
    let T: string;
    let W: string;
    let server: HostileServer;
    let c: RpcClient & { sessionId: string };
    const daemons: number[] = [];
    before(async () => {
      s = scratch('root');
      T = s.mk('tmpdir');
      W = s.mk('ws');
      server = await startServer({ who: 'root', tmpdir: T, env });
      c = await server.client();
    });
    after(async () => {
      for (const pid of daemons) {
        try {
          process.kill(pid, 'SIGKILL'); // only if a check failed: never leave one behind
        } catch {
          // gone, as it should be
        }
      }
      await server?.close();
      s?.cleanup();
    });

    for (const tty of [false, true]) {
      test(`every cgroup file is read-only to it (${tty ? 'tty' : 'pipes'})`, {
        timeout: 60_000,
      }, async () => {
        const r = await runPlanted(c, 'root', W, [`${PY} -c "$ESCAPE"`], {
          tty,
          sandbox: writeAll(W),
          env: { ESCAPE },
        });
        assert.equal(r.guarantees?.backend, 'landlock', r.output);
        const lines = r.output.replace(/\r/g, '').split('\n');
        assert.match(r.output, /^mounts [1-9]/m, r.output);
        const attempts = lines.filter((l) => /^(move|open|mkdir) /.test(l));
        assert.ok(attempts.length >= cgroupMounts().length * 2, r.output);
        const allowed = attempts.filter((l) => / OK$/.test(l));
        assert.deepEqual(allowed, [], 'no cgroup file may be opened for writing');
        for (const l of attempts) assert.match(l, / (EACCES|EPERM|EROFS)$/, l);
        // Still in the command's own cgroup of every hierarchy the server limits it in.
        const own = r.output.replace(/\r/g, '').split('--cgroup--\n')[1]!.split('\n--end--')[0]!;
        const inCommandGroup = own.split('\n').filter((l) => /\/corral-[^/]+\/p-\d+$/.test(l));
        if (cgroups) assert.ok(inCommandGroup.length > 0, `not in a per-command cgroup any more:\n${own}`);
        else assert.deepEqual(inCommandGroup, [], own);
      });
    }

    test('the kernel settings of the host are read-only to it (proc, sysfs)', {
      timeout: 60_000,
    }, async () => {
      const r = await runPlanted(c, 'root', W, [`${PY} -c "$KNOBS"`], {
        tty: false,
        sandbox: writeAll(W),
        env: { KNOBS },
      });
      const attempts = r.output.split('\n').filter((l) => l.startsWith('knob '));
      assert.ok(attempts.length >= 3, r.output);
      assert.deepEqual(
        attempts.filter((l) => / OK$/.test(l)),
        [],
        'no kernel setting may be opened for writing',
      );
    });

    /** Starts a command (as `processId`) whose DAEMON leaves its group; returns the daemon's pid once it runs. */
    async function startDaemon(client: RpcClient, processId: string, tty: boolean): Promise<number> {
      const pidFile = join(W, `${processId}.pid`);
      await client.request('process/start', {
        processId,
        argv: ['/bin/sh', '-c', `${PY} -c "$DAEMON" "${pidFile}"; exec sleep 300`],
        cwd: W,
        env: { PATH, DAEMON },
        tty,
        arg0: null,
        sandbox: writeAll(W),
      });
      await until(() => alive(readPid(pidFile)), 20_000, 'the daemon');
      const pid = readPid(pidFile);
      daemons.push(pid);
      return pid;
    }

    for (const tty of [false, true]) {
      test(`a daemon that left its group and tried to leave its cgroup dies with process/terminate (${tty ? 'tty' : 'pipes'})`, {
        timeout: 60_000,
      }, async () => {
        const processId = `ll-cgroup-daemon-${tty}-${process.pid}`;
        const pid = await startDaemon(c, processId, tty);
        if (cgroups)
          assert.doesNotMatch(
            readFileSync(`/proc/${pid}/cgroup`, 'utf8'),
            /^\d+:pids:\/$/m,
            'it left its cgroup',
          );
        if (!cgroups) {
          // Adopted by the command's supervisor (a child subreaper; once its middle parent has gone), which holds none
          // of the server's fds.
          await until(
            () => {
              const sup = parentOf(pid);
              return sup > 1 && sup !== server.pid && readdirSync(`/proc/${sup}/fd`).length === 0;
            },
            5000,
            `the daemon's parent (${parentOf(pid)}) to be its supervisor, holding no fd`,
          );
        }
        await c.request('process/terminate', { processId });
        await until(() => !alive(pid), 10_000, `the daemon ${pid} to die with process/terminate`);
      });

      test(`a daemon that left its group and tried to leave its cgroup dies with the SIGKILLed server (${tty ? 'tty' : 'pipes'})`, {
        timeout: 60_000,
      }, async () => {
        const doomed = await startServer({ who: 'root', tmpdir: T, env });
        const dc = await doomed.client();
        const pid = await startDaemon(dc, `ll-cgroup-doomed-${tty}-${process.pid}`, tty);
        dc.close();
        process.kill(doomed.pid, 'SIGKILL');
        await until(() => !alive(doomed.pid), 10_000, 'the server to die');
        await until(() => !alive(pid), 10_000, `the daemon ${pid} to die with the server`);
      });
    }

    test('a writable root inside a cgroup mount is refused, naming the mount', {
      timeout: 30_000,
    }, async () => {
      const mount = cgroupMounts()[0]!;
      const err = await c
        .request('process/start', {
          processId: `ll-cgroup-refused-${process.pid}`,
          argv: ['/bin/true'],
          cwd: W,
          env: { PATH },
          tty: false,
          arg0: null,
          sandbox: writeAll(W, [W, mount]),
        })
        .then(
          () => null,
          (e: { code?: number; message?: string }) => e,
        );
      assert.ok(err, 'the start must be refused');
      assert.ok(err.code === -32602 || err.code === -32603, String(err.code));
      assert.match(err.message ?? '', /cgroup mount/);
      assert.ok((err.message ?? '').includes(mount), err.message);
    });
  });

function parentOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}
