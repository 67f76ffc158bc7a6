/**
 * A hostile repository (issue 12): the attacks are planted in the workspace and run the way an agent runs a
 * repository's scripts, through the exec-server protocol (process/start with the sandbox object Codex 0.169 sends,
 * and with the seed SandboxLaunchConfig), in pipe mode and on a terminal. The server runs in its own process, as root
 * and as uid 65534 (setpriv), started the way a user might start it: holding an inherited fd to a root-only file and
 * to a directory outside the sandbox, and a session keyring with a secret in it. Every check is made on the host:
 * what exists, what was received, what a host process can see afterwards.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  lstatSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import type net from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { landlockSupport } from '../../src/sandbox/linux/landlockNative.js';
import { lockFile } from '../../src/sandbox/linux/mountTargets.js';
import { WHOLE_SUITE } from '../helpers/cli.js';
import type { RpcClient } from '../helpers/client.js';
import { until } from '../helpers/server.js';
import { gone } from '../integration/sandbox-util.js';
import {
  type AgentRun,
  chownTree,
  type HostileServer,
  NOBODY,
  type PolicyOptions,
  PY,
  sandboxParam as policyParam,
  runAgent,
  runPlanted,
  type Shape,
  scratch,
  startServer,
  type Who,
  whySkip,
} from './sandbox-harness.js';

const SHAPES: Shape[] = ['0.169', 'seed'];
const TTYS = [false, true];
const SECRET_FILE_TEXT = 'fd-secret-5f2c9e';
const KEY = { description: 'corral-hostile-secret', secret: 'keyring-secret-8d41a7' };
/** In the server's environment: no sandbox may read it (/proc/<server>/environ). */
const SERVER_ENV_SECRET = 'server-env-secret-3b9f12';

/** Lists the fds this process holds (without opening any itself), then uses fds 200 and 201 if it has them. */
const FD_PROBE = `
import os
held = []
for fd in range(3, 4096):
    try:
        os.fstat(fd); held.append('%d:%s' % (fd, os.readlink('/proc/self/fd/%d' % fd)))
    except OSError:
        pass
print('HELD', held)
for what, fn in (('read200', lambda: open('/proc/self/fd/200').read()),
                 ('write201', lambda: open('/proc/self/fd/201/pwned-' + os.environ['TAG'], 'w').write('x'))):
    try:
        print(what, 'OK', fn())
    except OSError as e:
        print(what, e.strerror)
`;

const KEYRING_PROBE = `
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
keyctl, add_key, request_key = (250, 248, 249) if os.uname().machine == 'x86_64' else (219, 217, 218)
def err(r): return r if r >= 0 else errno.errorcode.get(ctypes.get_errno())
kid = libc.syscall(keyctl, 10, -3, b'user', b'${KEY.description}', 0)  # KEYCTL_SEARCH in @s
print('search', err(kid))
ids = [kid] if kid > 0 else []
try:
    ids += [int(l.split()[0], 16) for l in open('/proc/keys') if '${KEY.description}' in l]
except OSError:
    pass
buf = ctypes.create_string_buffer(256)
for i in ids:
    n = libc.syscall(keyctl, 11, i, buf, 256)  # KEYCTL_READ
    print('read', i, buf.raw[:n].decode() if n > 0 else err(n))
print('add', err(libc.syscall(add_key, b'user', b'corral-hostile-evil', b'evil', 4, -3)))
print('request', err(libc.syscall(request_key, b'user', b'${KEY.description}', None, 0)))
`;

/** What a host process sees in its (the server's) session keyring: the descriptions of its keys. */
const KEYRING_LIST = `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
keyctl = 250 if os.uname().machine == 'x86_64' else 219
buf = (ctypes.c_int32 * 64)()
n = libc.syscall(keyctl, 11, -3, buf, ctypes.sizeof(buf))  # KEYCTL_READ of @s: the key ids
d = ctypes.create_string_buffer(512)
for k in list(buf)[:max(n, 0) // 4]:
    m = libc.syscall(keyctl, 6, k, d, 512)  # KEYCTL_DESCRIBE
    print('KEY', d.value.decode().split(';')[-1])
    r = libc.syscall(keyctl, 11, k, d, 512)
    if r > 0: print('VALUE', d.raw[:r].decode())
`;

/** Every way to get a datagram to a host unix socket by its path. */
const DGRAM_ATTACK = `
import array, ctypes, errno, os, socket
P = os.environ['DGRAM']
U = socket.AF_UNIX
def t(name, fn):
    try:
        fn(); print(name, 'SENT')
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
def pair(kind=socket.SOCK_DGRAM): return socket.socketpair(U, kind)[0]
def connect_send():
    a = pair(); a.connect(P); a.send(b'pair-connect')
class sockaddr_un(ctypes.Structure): _fields_ = [('family', ctypes.c_ushort), ('path', ctypes.c_char * 108)]
class iovec(ctypes.Structure): _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
class msghdr(ctypes.Structure): _fields_ = [('name', ctypes.c_void_p), ('namelen', ctypes.c_uint), ('iov', ctypes.POINTER(iovec)), ('iovlen', ctypes.c_size_t), ('control', ctypes.c_void_p), ('controllen', ctypes.c_size_t), ('flags', ctypes.c_int)]
class mmsghdr(ctypes.Structure): _fields_ = [('hdr', msghdr), ('len', ctypes.c_uint)]
def sendmmsg():
    libc = ctypes.CDLL(None, use_errno=True)
    a = pair(); addr = sockaddr_un(U, P.encode()); data = ctypes.create_string_buffer(b'pair-sendmmsg')
    iov = iovec(ctypes.cast(data, ctypes.c_void_p), 13)
    m = mmsghdr(msghdr(ctypes.cast(ctypes.pointer(addr), ctypes.c_void_p), ctypes.sizeof(addr), ctypes.pointer(iov), 1, None, 0, 0), 0)
    if libc.sendmmsg(a.fileno(), ctypes.byref(m), 1, 0) < 0: raise OSError(ctypes.get_errno(), 'sendmmsg')
t('pair-sendmsg', lambda: pair().sendmsg([b'pair-sendmsg'], [], 0, P))
t('pair-sendto', lambda: pair().sendto(b'pair-sendto', P))
t('pair-connect', connect_send)
t('pair-sendmmsg', sendmmsg)
t('pair-scm-rights', lambda: pair().sendmsg([b'pair-scm-rights'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [os.open('/dev/null', os.O_RDONLY)]))], 0, P))
t('pair-raw', lambda: pair(socket.SOCK_RAW).sendmsg([b'pair-raw'], [], 0, P))
t('pair-seqpacket', lambda: pair(socket.SOCK_SEQPACKET).sendmsg([b'pair-seqpacket'], [], 0, P))
t('socket-dgram', lambda: socket.socket(U, socket.SOCK_DGRAM).sendmsg([b'socket-dgram'], [], 0, P))
t('socket-raw', lambda: socket.socket(U, socket.SOCK_RAW).sendto(b'socket-raw', P))
t('socket-stream', lambda: socket.socket(U, socket.SOCK_STREAM).connect(P))
`;

/** A host datagram socket at a path: counts what arrives until the test sends END, then prints it and exits. */
const DGRAM_RECEIVER = `
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o777)
print('READY', flush=True)
got = []
while True:
    data, anc, flags, addr = s.recvmsg(256, 256)
    if data == b'END': break
    got.append(data.decode(errors='replace') + ('+fds' if anc else ''))
print('GOT', got, flush=True)
`;

/** Kernel interfaces a coding agent has no use for (issue 12, item 8); each probe in a child of its own. */
/** Signals, ptrace and /proc reads at the server (SRV) and at a process of the same user (victim.pid). */
const PROCS_ATTACK = `
import ctypes, errno, os, signal
libc = ctypes.CDLL(None, use_errno=True)
x64 = os.uname().machine == 'x86_64'
def t(name, fn):
    try:
        fn(); print(name, 'OK')
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
def sys(nr, *a):
    r = libc.syscall(nr, *a)
    if r < 0: raise OSError(ctypes.get_errno(), 'syscall %d' % nr)
    return r
for who, pid in (('server', int(os.environ['SRV'])), ('victim', int(open('victim.pid').read()))):
    t(who + '-kill0', lambda: os.kill(pid, 0))
    t(who + '-stop', lambda: os.kill(pid, signal.SIGSTOP))
    t(who + '-pidfd-signal', lambda: sys(424, sys(434, pid, 0), signal.SIGSTOP, None, 0))
    t(who + '-ptrace', lambda: sys(101 if x64 else 117, 16, pid, 0, 0))
    t(who + '-environ', lambda: print(open('/proc/%d/environ' % pid, 'rb').read().decode(errors='replace')))
    t(who + '-mem', lambda: open('/proc/%d/mem' % pid, 'rb').read(1))
    t(who + '-fd-read', lambda: [print(open('/proc/%d/fd/%s' % (pid, n), 'rb').read(64)) for n in os.listdir('/proc/%d/fd' % pid)])
    t(who + '-fd-link', lambda: [print(os.readlink('/proc/%d/fd/%s' % (pid, n))) for n in os.listdir('/proc/%d/fd' % pid)])
    t(who + '-cwd', lambda: print(os.listdir('/proc/%d/cwd/' % pid)))
`;

/** Holds a SysV shared memory segment (mode 0600) with argv[1] in it and prints its id. */
const SHM_HOLDER = `
import ctypes, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget(0, 4096, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
if shmid < 0: sys.exit('shmget: %d' % ctypes.get_errno())
addr = libc.shmat(shmid, None, 0)
ctypes.memmove(addr, sys.argv[1].encode(), len(sys.argv[1]))
def bye(*_):
    libc.shmctl(shmid, 0, None); sys.exit(0)  # IPC_RMID
signal.signal(signal.SIGTERM, bye)
print('SHMID', shmid, flush=True)
signal.pause()
`;

/** Attaches the segment argv[1] and prints what it holds, or the errno. */
const SHM_READER = `
import ctypes, errno, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
addr = libc.shmat(int(sys.argv[1]), None, 0o10000)  # SHM_RDONLY
if addr in (None, ctypes.c_void_p(-1).value): print('shmat', errno.errorcode.get(ctypes.get_errno()))
else: print('GOT', ctypes.string_at(addr, 64).split(b'\\0')[0].decode())
`;

const SURFACE_ATTACK = `
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
x64 = os.uname().machine == 'x86_64'
NR = dict(perf=298, uffd=323, unshare=272, clone=56, clone3=435, bpf=321, io_uring=425, setns=308) if x64 else \\
     dict(perf=241, uffd=282, unshare=97, clone=220, clone3=435, bpf=280, io_uring=425, setns=268)
def perf():
    attr = (ctypes.c_uint8 * 128)(); attr[0] = 1  # PERF_TYPE_SOFTWARE, config 0: PERF_COUNT_SW_CPU_CLOCK
    ctypes.c_uint32.from_buffer(attr, 4).value = 128; attr[40] = 0x60  # size; exclude_kernel | exclude_hv
    return libc.syscall(NR['perf'], attr, 0, -1, -1, 0)
def clone3():
    args = (ctypes.c_uint64 * 11)(); args[0] = 0x10000000; args[4] = 17  # CLONE_NEWUSER, exit_signal SIGCHLD
    return libc.syscall(NR['clone3'], args, 88)
probes = [
    ('perf_event_open', perf),
    ('userfaultfd', lambda: libc.syscall(NR['uffd'], 1 | 0o2000000)),  # UFFD_USER_MODE_ONLY | O_CLOEXEC
    ('unshare-user', lambda: libc.syscall(NR['unshare'], 0x10000000)),
    ('clone-user', lambda: libc.syscall(NR['clone'], 0x10000000 | 17, 0, 0, 0, 0)),
    ('clone3-user', clone3),
    ('io_uring_setup', lambda: libc.syscall(NR['io_uring'], 1, (ctypes.c_uint8 * 120)())),
    ('bpf', lambda: libc.syscall(NR['bpf'], 0, (ctypes.c_uint8 * 64)(), 64)),
    ('setns', lambda: libc.syscall(NR['setns'], os.open('/proc/self/ns/user', os.O_RDONLY), 0)),
]
for name, fn in probes:
    pid = os.fork()
    if pid == 0:
        r = fn()
        if r == 0 and name.startswith('clone'): os._exit(0)  # the child of a clone that went through
        print(name, 'OK' if r >= 0 else errno.errorcode.get(ctypes.get_errno()), flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
`;

function fresh(s: ReturnType<typeof scratch>, name: string): string {
  return s.mk(`${name}-${Math.random().toString(36).slice(2, 8)}`);
}

function exists(p: string): boolean {
  try {
    lstatSync(p);
    return true;
  } catch {
    return false;
  }
}

/**
 * Both Linux backends face the same attacks: bubblewrap, and the Landlock backend (issue 17; asked for with
 * useLegacyLandlock, as a start where namespaces are unavailable gets it with --sandbox-fallback landlock). Its server
 * accepts `proxy-port` (so that the managed-network attacks run: without it such a start is refused, see
 * landlock-fallback.test.ts); everything else is held exactly.
 */
const BACKENDS = ['bwrap', 'landlock'] as const;
type Backend = (typeof BACKENDS)[number];

function whySkipBackend(backend: Backend, who: Who): string | false {
  const why = whySkip(who);
  if (why || backend === 'bwrap') return why;
  return landlockSupport().abi >= 6
    ? false
    : `Landlock ABI 6 is needed here: ${landlockSupport().missing ?? `ABI ${landlockSupport().abi}`}`;
}

for (const backend of BACKENDS)
  for (const who of ['root', 'nobody'] as Who[]) {
    describe(`hostile repository, ${backend}, server as ${who}`, {
      skip: whySkipBackend(backend, who),
    }, () => {
      const sandboxParam = (shape: Shape, o: PolicyOptions) =>
        policyParam(shape, { ...o, useLegacyLandlock: backend === 'landlock' });
      const bwrapOnly =
        backend === 'landlock' ? 'bwrap only: the Landlock backend makes no mount points' : false;
      let s: ReturnType<typeof scratch>;
      let srv: HostileServer;
      let srv2: HostileServer | undefined;
      let c: RpcClient & { sessionId: string };
      let T: string;
      let OUT: string;
      before(async () => {
        s = scratch(who);
        T = s.mk('tmpdir');
        OUT = s.mk('outside');
        const secretPath = join(s.root, 'root-only-secret');
        writeFileSync(secretPath, SECRET_FILE_TEXT, { mode: 0o600 });
        const secretFd = openSync(secretPath, 'r');
        const outFd = openSync(OUT, 'r');
        try {
          srv = await startServer({
            who,
            tmpdir: T,
            inherit: { 200: secretFd, 201: outFd },
            keyring: KEY,
            env: { CORRAL_SERVER_SECRET: SERVER_ENV_SECRET },
            ...(backend === 'landlock' ? { sandbox: { acceptWeaker: ['proxy-port'] } } : {}),
          });
        } finally {
          closeSync(secretFd);
          closeSync(outFd);
        }
        c = await srv.client();
      });
      after(async () => {
        await srv?.close();
        await srv2?.close();
        s?.cleanup();
      });

      for (const shape of SHAPES) {
        for (const tty of TTYS) {
          // The fast tier pairs the axes (0.169 with pipes, seed with a tty): each attack still meets both request
          // shapes and both tty modes; `npm run test:all` crosses them.
          if (!WHOLE_SUITE && SHAPES.indexOf(shape) !== TTYS.indexOf(tty)) continue;
          const mode = `${shape}, ${tty ? 'tty' : 'pipes'}`;

          test(`protected names that are symlinks keep pointing where they did (${mode})`, async () => {
            const W = fresh(s, 'sym');
            const C = fresh(s, 'codexdata');
            s.mk(`${W.slice(s.root.length + 1)}/real-git/hooks`);
            writeFileSync(join(W, 'real-git', 'HEAD'), 'ref: refs/heads/main\n');
            writeFileSync(join(C, 'config.toml'), 'sandbox_mode = "read-only"\n');
            symlinkSync('real-git', join(W, '.git'));
            symlinkSync(C, join(W, '.codex'));
            const r = await runPlanted(
              c,
              who,
              W,
              [
                'mv -f .git .git-moved; rm -f .git; mkdir -p .git/hooks',
                `printf '#!/bin/sh\\necho PWNED\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit`,
                'ln -sfn /tmp .git; ln -sfn "$PWD/evil" .codex; mv -fT real-git .git',
                'echo PWNED > real-git/hooks/post-checkout; echo PWNED > .git/hooks/post-merge',
                'mv -f .codex .codex-moved; rm -f .codex; mkdir -p .codex',
                `echo 'sandbox_mode = "danger-full-access"' > .codex/config.toml`,
                `echo 'approval_policy = "never"' >> .codex/config.toml`,
                'ls -la',
              ],
              { tty, sandbox: sandboxParam(shape, { cwd: W }) },
            );
            assert.equal(r.sandboxType, 'linuxSeccomp');
            assert.match(r.output, /DONE/);
            assert.equal(readlinkSync(join(W, '.git')), 'real-git', r.output);
            assert.equal(readlinkSync(join(W, '.codex')), C, r.output);
            assert.deepEqual(readdirSync(join(W, 'real-git', 'hooks')), [], r.output);
            assert.equal(readFileSync(join(C, 'config.toml'), 'utf8'), 'sandbox_mode = "read-only"\n');
            for (const n of ['.git-moved', '.codex-moved', 'evil'])
              assert.ok(!exists(join(W, n)), `${n}\n${r.output}`);
          });

          test(`protected names cannot be created in any writable root (${mode})`, async () => {
            const W = fresh(s, 'missing');
            const EXTRA = fresh(s, 'extra');
            const r = await runPlanted(
              c,
              who,
              W,
              [
                'for R in "$PWD" "$EXTRA" "$TDIR"; do',
                '  mkdir "$R/.git" && mkdir "$R/.git/hooks"; echo PWNED > "$R/.git/hooks/pre-commit"',
                // A mount point the sandbox can chmod is its own private tmpfs: whatever it writes there, the host never sees.
                '  chmod 755 "$R/.git" && mkdir -p "$R/.git/hooks" && echo PWNED > "$R/.git/hooks/pre-commit" && echo "WROTE PRIVATE"',
                `  mkdir -p "$R/.codex"; echo 'sandbox_mode = "danger-full-access"' > "$R/.codex/config.toml"`,
                '  mkdir -p "$R/agents-src/skills" && mv -fT "$R/agents-src" "$R/.agents"',
                '  echo k > "$R/aws-src"; ln "$R/aws-src" "$R/.aws"; ln -s /tmp "$R/.git"',
                '  python3 -c "import os,sys; os.rename(sys.argv[1] + \'/aws-src\', sys.argv[1] + \'/.aws\')" "$R"',
                'done',
              ],
              { tty, env: { EXTRA, TDIR: T }, sandbox: sandboxParam(shape, { cwd: W, writable: [EXTRA] }) },
            );
            assert.match(r.output, /DONE/);
            for (const R of [W, EXTRA, T]) {
              for (const n of ['.git', '.codex', '.agents', '.aws']) {
                assert.ok(await gone(join(R, n)), `${join(R, n)} exists on the host\n${r.output}`);
              }
            }
          });

          test(`two servers share the mount points of missing names: one ending does not unpin the other (${mode})`, {
            skip: bwrapOnly,
          }, async () => {
            // Server 2 is another Corral server of the same user (the app and a CLI server, say) using the same root.
            const W = fresh(s, 'shared');
            const EXTRA = fresh(s, 'shared-root');
            chownTree(who, W);
            srv2 ??= await startServer({ who, tmpdir: T });
            const c2 = await srv2.client();
            const sandbox = sandboxParam(shape, { cwd: W, writable: [EXTRA] });
            // Server 2's sandbox makes the mount point of EXTRA/.git; then server 1's sandbox starts (finding it there),
            // then server 2's ends: the mount point must stay while server 1's sandbox uses it.
            const b = runAgent(c2, {
              argv: ['/bin/sh', '-c', 'while [ ! -e b-go ]; do sleep 0.02; done'],
              cwd: W,
              tty,
              sandbox,
            });
            let a: Promise<AgentRun> | undefined;
            try {
              await until(() => exists(join(EXTRA, '.git')), 10_000, "server 2's mount point");
              a = runPlanted(
                c,
                who,
                W,
                [
                  'touch a-ready; while [ ! -e a-go ]; do sleep 0.02; done',
                  'mkdir "$EXTRA/.git"; mkdir -p "$EXTRA/.git/hooks"; echo PWNED > "$EXTRA/.git/hooks/pre-commit"',
                ],
                { tty, env: { EXTRA }, sandbox },
              );
              await until(() => exists(join(W, 'a-ready')), 10_000, "server 1's sandbox");
              writeFileSync(join(W, 'b-go'), '');
              assert.equal((await b).exitCode, 0);
              // Server 2 lets its share go (LINGER_MS after its sandbox ended): one flock on the name is left, server 1's.
              const ino = statSync(lockFile(join(EXTRA, '.git'), who === 'nobody' ? NOBODY : 0)).ino;
              const holders = () =>
                readFileSync('/proc/locks', 'utf8')
                  .split('\n')
                  .filter((l) => l.includes('FLOCK') && l.split(/\s+/).some((w) => w.endsWith(`:${ino}`)))
                  .length;
              await until(() => holders() === 1, 10_000, 'server 2 to let go of its share');
              assert.ok(exists(join(EXTRA, '.git')), 'server 2 removed a mount point server 1 still uses');
            } finally {
              writeFileSync(join(W, 'b-go'), '');
              writeFileSync(join(W, 'a-go'), '');
            }
            await b;
            const r = await a!;
            assert.match(r.output, /DONE/);
            assert.ok(await gone(join(EXTRA, '.git')), r.output);
          });

          test(`renaming a parent does not unpin a protected path (${mode})`, async () => {
            const W = fresh(s, 'parent');
            const EXTRA = fresh(s, 'outer');
            const N = s.mk(`${EXTRA.slice(s.root.length + 1)}/a/b/inner`);
            s.mk(`${N.slice(s.root.length + 1)}/.git/hooks`);
            chownTree(who, EXTRA);
            const r = await runPlanted(
              c,
              who,
              W,
              [
                'mv -f "$EXTRA/a" "$EXTRA/a-moved"; mkdir -p "$N/.git/hooks"',
                'echo PWNED > "$N/.git/hooks/pre-commit"; echo PWNED > "$EXTRA/a-moved/b/inner/.git/hooks/x"',
                'mv -f "$EXTRA/a/b" "$EXTRA/a/b-moved"; mv -f "$N" "$N-moved"',
              ],
              { tty, env: { EXTRA, N }, sandbox: sandboxParam(shape, { cwd: W, writable: [EXTRA, N] }) },
            );
            assert.match(r.output, /DONE/);
            assert.deepEqual(readdirSync(join(N, '.git', 'hooks')), [], r.output);
            for (const p of [join(EXTRA, 'a-moved'), join(EXTRA, 'a', 'b-moved'), `${N}-moved`])
              assert.ok(!exists(p), `${p}\n${r.output}`);
          });

          test(`inherited and later-opened fds reach no child (${mode})`, async () => {
            const W = fresh(s, 'fds');
            chownTree(who, W);
            // A terminal the server holds while the probes run: its master fd must not reach them either.
            const holder = runAgent(c, {
              argv: ['/bin/sh', '-c', 'while [ ! -e stop ]; do sleep 0.05; done'],
              cwd: W,
              tty: true,
              sandbox: null,
            });
            const tag = Math.random().toString(36).slice(2, 8);
            try {
              for (const sandbox of [null, sandboxParam(shape, { cwd: W, readOnly: true })]) {
                const r = await runAgent(c, {
                  argv: [PY, '-S', '-c', FD_PROBE],
                  cwd: W,
                  tty,
                  env: { TAG: tag },
                  sandbox,
                });
                assert.match(r.output, /HELD \[\]/, r.output);
                assert.ok(!r.output.includes(SECRET_FILE_TEXT), r.output);
                assert.match(r.output, /read200 No such file or directory/, r.output);
                assert.match(r.output, /write201 No such file or directory/, r.output);
              }
            } finally {
              writeFileSync(join(W, 'stop'), '');
              await holder;
            }
            assert.deepEqual(
              readdirSync(OUT).filter((n) => n.startsWith('pwned')),
              [],
            );
          });

          test(`a sandbox gets a fresh session keyring and no keyring syscalls (${mode})`, async () => {
            const W = fresh(s, 'keys');
            chownTree(who, W);
            // Control: an unsandboxed command shares the server's session keyring and its secret.
            const host = await runAgent(c, { argv: [PY, '-c', KEYRING_LIST], cwd: W, tty, sandbox: null });
            assert.match(host.output, new RegExp(`KEY ${KEY.description}`), host.output);
            const r = await runAgent(c, {
              argv: [PY, '-c', KEYRING_PROBE],
              cwd: W,
              tty,
              sandbox: sandboxParam(shape, { cwd: W, readOnly: true }),
            });
            assert.ok(!r.output.includes(KEY.secret), r.output);
            assert.match(r.output, /search EPERM/, r.output);
            assert.match(r.output, /add EPERM/, r.output);
            assert.match(r.output, /request EPERM/, r.output);
            const afterwards = await runAgent(c, {
              argv: [PY, '-c', KEYRING_LIST],
              cwd: W,
              tty,
              sandbox: null,
            });
            assert.ok(!afterwards.output.includes('corral-hostile-evil'), afterwards.output);
            assert.match(afterwards.output, new RegExp(`VALUE ${KEY.secret}`));
          });

          test(`no datagram reaches a host unix socket by its path (${mode})`, async () => {
            const W = fresh(s, 'dgram');
            chownTree(who, W);
            const cases: [string, Record<string, unknown> | null, boolean][] = [
              ['unsandboxed (control)', null, false],
              ['restricted', sandboxParam(shape, { cwd: W }), false],
              ['managed network', sandboxParam(shape, { cwd: W, enforceManagedNetwork: true }), true],
            ];
            for (const [what, sandbox, managed] of cases) {
              const sock = join(fresh(s, 'sockdir'), 'host.sock');
              const rx = spawn(PY, ['-c', DGRAM_RECEIVER, sock], { stdio: ['ignore', 'pipe', 'inherit'] });
              let out = '';
              rx.stdout.setEncoding('utf8').on('data', (d: string) => {
                out += d;
              });
              const done = new Promise((r) => rx.once('exit', r));
              try {
                await new Promise<void>((resolve) => {
                  const check = () => (out.includes('READY') ? resolve() : rx.stdout.once('data', check));
                  check();
                });
                const r = await runAgent(c, {
                  argv: [PY, '-c', DGRAM_ATTACK],
                  cwd: W,
                  tty,
                  env: { DGRAM: sock, HTTP_PROXY: 'http://127.0.0.1:9' },
                  sandbox,
                  ...(managed && shape === '0.169' ? { enforceManagedNetwork: true } : {}),
                });
                const end = spawn(PY, [
                  '-c',
                  'import socket,sys; socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"END", sys.argv[1])',
                  sock,
                ]);
                await new Promise((res) => end.once('exit', res));
                await done;
                const got = /GOT (.*)/.exec(out)?.[1] ?? '';
                if (sandbox === null)
                  assert.match(got, /pair-sendmsg/, `${what}: the control must arrive\n${r.output}`);
                else assert.equal(got, '[]', `${what}: datagrams reached the host socket\n${r.output}`);
              } finally {
                rx.kill('SIGKILL');
              }
            }
          });

          test(`a sandbox sees none of the server's private files; managed starts all succeed (${mode})`, async () => {
            const W = fresh(s, 'private');
            chownTree(who, W);
            const proxy = http.createServer((req, res) => res.end(`proxied: ${req.method} ${req.url}\n`));
            await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', () => r()));
            const port = (proxy.address() as net.AddressInfo).port;
            const attacker = runAgent(c, {
              argv: [
                '/bin/sh',
                '-c',
                `while [ ! -e stop ]; do for f in /tmp/corral-sandbox-* /tmp/corral-sandbox-*/* /tmp/corral-sandbox-*/*/* /dev/shm/corral-sandbox-*/* /dev/shm/corral-sandbox-*/*/* $XDG_RUNTIME_DIR/corral-sandbox-*/*; do
                 [ -e "$f" ] || continue
                 case "$f" in */corral-sandbox-*/*) case " $seen " in *" $f "*) ;; *) seen="$seen $f"; echo "FOUND $f";; esac;; esac
                 [ -p "$f" ] && { echo '{"child-pid": 1}' > "$f" & }
               done; done; echo STOPPED`,
              ],
              cwd: W,
              tty,
              sandbox: sandboxParam(shape, { cwd: W, readOnly: true }),
              timeoutMs: 120_000,
            });
            try {
              for (let i = 0; i < 15; i++) {
                const r = await runAgent(c, {
                  argv: ['/usr/bin/curl', '-sS', '-m10', `http://example.invalid/start-${i}`],
                  cwd: W,
                  tty: i % 2 === 1,
                  env: { HTTP_PROXY: `http://127.0.0.1:${port}` },
                  sandbox: sandboxParam(shape, { cwd: W, enforceManagedNetwork: true }),
                  ...(shape === '0.169' ? { enforceManagedNetwork: true } : {}),
                });
                assert.equal(r.exitCode, 0, `managed start ${i}: ${r.output}`);
                assert.match(r.output, new RegExp(`proxied: GET http://example.invalid/start-${i}`));
              }
            } finally {
              writeFileSync(join(W, 'stop'), '');
              proxy.close();
            }
            const a = await attacker;
            assert.match(a.output, /STOPPED/);
            assert.ok(!/FOUND/.test(a.output), a.output.split('\n').slice(0, 20).join('\n'));
          });

          test(`what held keeps holding: writes out through /proc, links and mounts; ptrace; /dev/shm (${mode})`, async () => {
            const W = fresh(s, 'held');
            s.mk(`${W.slice(s.root.length + 1)}/.git/hooks`);
            writeFileSync(join(OUT, 'victim'), 'original\n');
            chownTree(who, OUT);
            const tag = `corral-held-${Math.random().toString(36).slice(2, 8)}`;
            const r = await runPlanted(
              c,
              who,
              W,
              [
                'echo x > /proc/self/root"$OUT/via-proc-root"; echo x > /proc/1/cwd/../../"$OUT/via-proc1-cwd"',
                'ln -s "$OUT" out-link; echo x > out-link/via-symlink; ln "$OUT/victim" hard 2>&1; echo PWNED >> hard',
                'echo PWNED >> "$OUT/victim"; umount .git; mount -t tmpfs none .git; mount -o remount,rw,bind /',
                'echo PWNED > .git/hooks/pre-commit; echo x > "/dev/shm/$TAG"',
                `${PY} -c "import ctypes,os; l=ctypes.CDLL(None,use_errno=True); print('ptrace', l.ptrace(16, 1, 0, 0), ctypes.get_errno())"`,
                `${PY} -c "import os; os.chroot('/tmp')" 2>&1 | tail -1`,
              ],
              { tty, env: { OUT, TAG: tag }, sandbox: sandboxParam(shape, { cwd: W }) },
            );
            assert.match(r.output, /DONE/);
            assert.deepEqual(readdirSync(OUT).sort(), ['victim'], r.output);
            assert.equal(readFileSync(join(OUT, 'victim'), 'utf8'), 'original\n');
            assert.deepEqual(readdirSync(join(W, '.git', 'hooks')), [], r.output);
            assert.ok(!exists(join('/dev/shm', tag)), 'the sandbox wrote the host /dev/shm');
            assert.match(r.output, /ptrace -1 1\b/, r.output); // EPERM
            assert.match(r.output, /PermissionError: \[Errno 1\]/, r.output); // chroot
          });

          test(`perf_event_open, userfaultfd, nested user namespaces are denied in every mode (${mode})`, async () => {
            const W = fresh(s, 'surface');
            s.mk(`${W.slice(s.root.length + 1)}/.git/hooks`);
            chownTree(who, W);
            writeFileSync(join(W, 'surface.py'), SURFACE_ATTACK);
            const nested =
              'unshare -Urm sh -c "mount -t tmpfs none .git && mkdir .git/hooks && echo PWNED > .git/hooks/pre-commit"';
            for (const [what, sandbox] of [
              ['restricted', sandboxParam(shape, { cwd: W })],
              ['managed network', sandboxParam(shape, { cwd: W, enforceManagedNetwork: true })],
              ['network enabled', sandboxParam(shape, { cwd: W, network: 'enabled' })],
            ] as const) {
              const r = await runAgent(c, {
                argv: ['/bin/sh', '-c', `${PY} surface.py; ${nested}; echo DONE`],
                cwd: W,
                tty,
                env: { HTTP_PROXY: 'http://127.0.0.1:9' },
                sandbox,
                ...(what === 'managed network' && shape === '0.169' ? { enforceManagedNetwork: true } : {}),
              });
              assert.match(r.output, /DONE/, `${what}: ${r.output}`);
              for (const name of [
                'perf_event_open',
                'userfaultfd',
                'unshare-user',
                'clone-user',
                'io_uring_setup',
              ])
                assert.match(r.output, new RegExp(`^${name} EPERM`, 'm'), `${what}: ${r.output}`);
              assert.match(r.output, /^clone3-user ENOSYS/m, `${what}: ${r.output}`);
              assert.doesNotMatch(r.output, /^\S+ OK/m, `${what}: ${r.output}`);
              assert.deepEqual(readdirSync(join(W, '.git', 'hooks')), []);
            }
          });

          test(`the server and the user's other processes: no signal, no ptrace, nothing from their /proc (${mode})`, async () => {
            const W = fresh(s, 'procs');
            writeFileSync(join(W, 'procs.py'), PROCS_ATTACK);
            chownTree(who, W);
            // A process of the same user outside every sandbox (an agent's own unsandboxed command).
            const victim = runAgent(c, {
              argv: [
                '/bin/sh',
                '-c',
                'echo $$ > victim.pid; while [ ! -e stop ]; do sleep 0.05; done; echo VICTIM-DONE',
              ],
              cwd: W,
              tty: false,
              sandbox: null,
            });
            try {
              await until(() => exists(join(W, 'victim.pid')), 10_000, 'the victim');
              for (const [what, sandbox] of [
                ['restricted', sandboxParam(shape, { cwd: W })],
                ['network enabled', sandboxParam(shape, { cwd: W, network: 'enabled' })],
              ] as const) {
                const r = await runAgent(c, {
                  argv: [PY, '-S', 'procs.py'],
                  cwd: W,
                  tty,
                  env: { SRV: String(srv.pid) },
                  sandbox,
                });
                assert.match(r.output, /^server-kill0 /m, r.output);
                assert.doesNotMatch(r.output, /^\S+ OK/m, `${what}: ${r.output}`);
                assert.ok(!r.output.includes(SERVER_ENV_SECRET), `${what}: ${r.output}`);
                assert.ok(!r.output.includes(SECRET_FILE_TEXT), `${what}: ${r.output}`);
                if (backend === 'landlock') assert.match(r.output, /^server-kill0 EPERM/m, r.output);
              }
              const state = readFileSync(`/proc/${srv.pid}/stat`, 'utf8').split(') ')[1]?.[0];
              assert.notEqual(state, 'T', 'the server was stopped');
            } finally {
              writeFileSync(join(W, 'stop'), '');
            }
            assert.match((await victim).output, /VICTIM-DONE/);
          });

          test(`modes, owners, times and xattrs outside the writable roots stay as they were (${mode})`, async () => {
            const W = fresh(s, 'meta');
            const victim = join(fresh(s, 'meta-out'), 'victim');
            writeFileSync(victim, 'x', { mode: 0o644 });
            chmodSync(victim, 0o644);
            utimesSync(victim, 978307200, 978307200); // 2001-01-01
            chownTree(who, victim);
            chownTree(who, W);
            const r = await runPlanted(
              c,
              who,
              W,
              [
                'chmod 777 "$V"; chmod u+s "$V"; touch -d 2020-01-01 "$V"; chown "$(id -u):$(id -g)" "$V"',
                `${PY} -c "import os,sys; os.setxattr(sys.argv[1], 'user.corral', b'x')" "$V" 2>&1 | tail -1`,
              ],
              { tty, env: { V: victim }, sandbox: sandboxParam(shape, { cwd: W }) },
            );
            assert.match(r.output, /DONE/);
            const st = statSync(victim);
            assert.equal(st.mode & 0o7777, 0o644, r.output);
            assert.equal(st.mtimeMs, 978307200000, r.output);
            const xattrs = execFileSync(
              PY,
              ['-c', 'import os,sys; print(os.listxattr(sys.argv[1]))', victim],
              {
                encoding: 'utf8',
              },
            ).trim();
            assert.equal(xattrs, '[]', r.output);
          });

          test(`what the sandbox sees of the host's processes (${mode})`, {
            skip: tty || shape !== '0.169' ? 'once per server' : false,
          }, async () => {
            const W = fresh(s, 'ps');
            chownTree(who, W);
            const r = await runAgent(c, {
              argv: [
                '/bin/sh',
                '-c',
                'tr "\\0" " " < /proc/$SRV/cmdline; echo; echo PIDS $(ls /proc | grep -c "^[0-9]*$")',
              ],
              cwd: W,
              tty,
              env: { SRV: String(srv.pid) },
              sandbox: sandboxParam(shape, { cwd: W }),
            });
            const pids = Number(/PIDS (\d+)/.exec(r.output)?.[1]);
            if (backend === 'bwrap') {
              // Its own pid namespace: none of the host's processes, the server's command line neither.
              assert.ok(!r.output.includes('server-child'), r.output);
              assert.ok(pids < 10, r.output);
            } else {
              // No pid namespace (README, the Landlock backend's limits): the host's process list and command lines
              // are readable, as to any process of the user; their environment, memory, fds and signals are not.
              assert.ok(r.output.includes('server-child'), r.output);
              assert.ok(pids > 10, r.output);
            }
          });

          test(`a directory moved out from under the workspace takes no write access with it (${mode})`, async () => {
            // The Landlock backend reuses a ruleset for the same rules, and a rule follows the inode its path named:
            // after the host moves W/sub out (to OUT) and makes a new W/sub, a reused ruleset would still let the
            // sandbox write the old one, now outside every writable root.
            const W = fresh(s, 'moved');
            s.mk(`${W.slice(s.root.length + 1)}/.git`);
            s.mk(`${W.slice(s.root.length + 1)}/sub`);
            const moved = join(fresh(s, 'moved-out'), 'sub');
            chownTree(who, W);
            const sandbox = sandboxParam(shape, { cwd: W });
            const write = (target: string) =>
              runAgent(c, {
                argv: ['/bin/sh', '-c', `echo x > "${target}" && echo WROTE; true`],
                cwd: W,
                tty,
                sandbox,
              });
            for (let i = 0; i < 2; i++) assert.match((await write(join(W, 'sub', `a${i}`))).output, /WROTE/);
            renameSync(join(W, 'sub'), moved);
            s.mk(`${W.slice(s.root.length + 1)}/sub`);
            chownTree(who, join(W, 'sub'));
            const out = await write(join(moved, 'b'));
            assert.ok(!exists(join(moved, 'b')), `wrote through a stale rule\n${out.output}`);
            assert.match(
              (await write(join(W, 'sub', 'c'))).output,
              /WROTE/,
              'the new W/sub must be writable',
            );
          });

          test(`the host's SysV shared memory is out of reach (${mode})`, async () => {
            const W = fresh(s, 'shm');
            chownTree(who, W);
            const secret = `shm-secret-${Math.random().toString(36).slice(2, 8)}`;
            const owner =
              who === 'nobody'
                ? ['/usr/bin/setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', '--']
                : [];
            const host = spawn(
              owner[0] ?? PY,
              [...owner.slice(1), ...(owner.length ? [PY] : []), '-c', SHM_HOLDER, secret],
              {
                stdio: ['ignore', 'pipe', 'inherit'],
              },
            );
            let out = '';
            host.stdout.setEncoding('utf8').on('data', (d: string) => {
              out += d;
            });
            try {
              await until(() => /SHMID \d+/.test(out), 10_000, 'the host segment');
              const shmid = /SHMID (\d+)/.exec(out)![1]!;
              const control = await runAgent(c, {
                argv: [PY, '-c', SHM_READER, shmid],
                cwd: W,
                tty,
                sandbox: null,
              });
              assert.ok(control.output.includes(secret), `the control must read it: ${control.output}`);
              const r = await runAgent(c, {
                argv: [PY, '-c', SHM_READER, shmid],
                cwd: W,
                tty,
                sandbox: sandboxParam(shape, { cwd: W, network: 'enabled' }),
              });
              assert.match(r.output, /^shmat (EPERM|EINVAL)/m, r.output);
              assert.ok(!r.output.includes(secret), r.output);
            } finally {
              host.kill('SIGTERM');
            }
          });
        }
      }
    });
  }
