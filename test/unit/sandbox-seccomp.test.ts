import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import {
  AF,
  AUDIT_ARCH,
  buildSeccompFilter,
  CLONE_NEWUSER,
  evalSeccomp,
  hostSeccompArch,
  SECCOMP_RET_ALLOW,
  SECCOMP_RET_ENOSYS,
  SECCOMP_RET_ENOTSOCK,
  SECCOMP_RET_EPERM,
  SECCOMP_RET_KILL_PROCESS,
  type SeccompArch,
  type SeccompMode,
  SOCK,
  SYSCALLS,
} from '../../src/sandbox/linux/seccomp.js';

const fixtures = join(dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'sandbox');
const fixture = (arch: string, mode: string) => join(fixtures, `seccomp-${arch}-${mode}.hex`);
const golden = (arch: string, mode: string) =>
  Buffer.from(readFileSync(fixture(arch, mode), 'utf8').replace(/\s+/g, ''), 'hex');

const ARCHES: SeccompArch[] = ['x64', 'arm64'];
const MODES: SeccompMode[] = ['restricted', 'proxy-routed', 'network-enabled'];

/**
 * The golden files pin the exact bytes each (arch, mode) produces, so that no change to the filters goes unnoticed
 * in review. After a deliberate change, regenerate them with CORRAL_UPDATE_SECCOMP_FIXTURES=1 npm test -- seccomp,
 * and check the semantics below and the live tests (test/integration/sandbox-linux.test.ts, test/hostile/).
 */
for (const arch of ARCHES) {
  for (const mode of MODES) {
    test(`seccomp golden bytes: ${arch} ${mode}`, () => {
      const built = buildSeccompFilter(arch, mode);
      if (process.env.CORRAL_UPDATE_SECCOMP_FIXTURES === '1') {
        writeFileSync(fixture(arch, mode), `${built.toString('hex').replace(/(.{16})(?!$)/g, '$1\n')}\n`);
      }
      assert.deepEqual(built, golden(arch, mode));
    });
  }
}

/**
 * The dispatch became a binary search (seccomp.ts dispatch): every program does what the linear chain it replaced did
 * (fixtures/sandbox/seccomp-linear.json, the previous builder's bytes for every arch, mode and a set of Landlock
 * extras), for every syscall number up to 1023, the x32 range and 0xffffffff, under argument vectors that take every
 * branch that reads an argument (clone/unshare flags, socket families and types, protocols, mode bits, ioctl commands,
 * MSG_FASTOPEN), and under a foreign audit arch.
 */
test('seccomp dispatch: the binary search does what the linear chain did, for every number and argument branch', () => {
  const linear = JSON.parse(readFileSync(join(fixtures, 'seccomp-linear.json'), 'utf8')) as Record<
    string,
    string
  >;
  const numbers = [
    ...Array.from({ length: 1024 }, (_, i) => i),
    0x40000000,
    0x40000001,
    0x4000013f,
    0xffffffff,
  ];
  const vectors = [
    {},
    { arg0: CLONE_NEWUSER },
    { arg0: CLONE_NEWUSER | 0x11 },
    { arg0: AF.UNIX, arg1: SOCK.STREAM },
    { arg0: AF.UNIX, arg1: SOCK.DGRAM | 0x80000 },
    { arg0: AF.UNIX, arg1: SOCK.SEQPACKET },
    { arg0: AF.INET, arg1: SOCK.STREAM, arg2: 0 },
    { arg0: AF.INET6, arg1: SOCK.STREAM | 0x800, arg2: 6 },
    { arg0: AF.INET, arg1: SOCK.STREAM, arg2: 132 },
    { arg0: AF.INET, arg1: SOCK.DGRAM },
    { arg0: AF.NETLINK, arg1: SOCK.RAW },
    { arg1: 0o4755, arg2: 0o2755 },
    { arg1: 0o755, arg2: 0o644 },
    { arg1: 0x40086602 },
    { arg1: 0x401c5820 },
    { arg2: 0x20000000, arg3: 0x20000000 },
    { arg3: 0x20000000 },
  ];
  assert.equal(Object.keys(linear).length, 30);
  for (const [key, hex] of Object.entries(linear)) {
    const [arch, mode, extras] = key.split(' ') as [SeccompArch, SeccompMode, string];
    const before = Buffer.from(hex, 'hex');
    const now = buildSeccompFilter(arch, mode, JSON.parse(extras));
    for (const auditArch of [AUDIT_ARCH[arch], 0x40000003])
      for (const nr of numbers)
        for (const v of vectors) {
          const data = { arch: auditArch, nr, ...v };
          const verdict = evalSeccomp(now, data);
          const was = evalSeccomp(before, data);
          // The message only when they differ: built for each of the ~1M cases it was most of this test's time.
          if (verdict !== was) assert.fail(`${key}: ${JSON.stringify(data)}: ${verdict} where it was ${was}`);
        }
  }
});

test('seccomp layout: arch check first, KILL on mismatch; 8-byte little-endian insns', () => {
  const b = buildSeccompFilter('x64', 'restricted');
  assert.equal(b.length % 8, 0);
  assert.equal(b.length / 8, 60);
  assert.equal(b.subarray(0, 8).toString('hex'), '2000000004000000'); // ld [4] (arch)
  assert.equal(b.readUInt16LE(8), 0x15); // jeq
  assert.equal(b.readUInt32LE(12), 0xc000003e);
  assert.equal(b.readUInt32LE(b.length - 4), SECCOMP_RET_KILL_PROCESS);
});

const SURFACE = [
  'io_uring_setup',
  'io_uring_enter',
  'io_uring_register',
  'perf_event_open',
  'userfaultfd',
  'bpf',
  'add_key',
  'request_key',
  'keyctl',
  'setns',
] as const;

for (const arch of ARCHES) {
  const nr = SYSCALLS[arch];
  const A = AUDIT_ARCH[arch];
  const other = arch === 'x64' ? AUDIT_ARCH.arm64 : AUDIT_ARCH.x64;
  const evaluator = (mode: SeccompMode) => {
    const f = buildSeccompFilter(arch, mode);
    return (n: number, arg0?: number, arg1?: number) => evalSeccomp(f, { arch: A, nr: n, arg0, arg1 });
  };

  for (const mode of MODES) {
    test(`seccomp, every mode (${arch}, ${mode}): foreign ABIs killed; no user namespaces; surface denied`, () => {
      const ev = evaluator(mode);
      const f = buildSeccompFilter(arch, mode);
      assert.equal(evalSeccomp(f, { arch: other, nr: 0 }), SECCOMP_RET_KILL_PROCESS);
      assert.equal(evalSeccomp(f, { arch: 0x40000003, nr: 0 }), SECCOMP_RET_KILL_PROCESS); // i386
      for (const s of SURFACE) assert.equal(ev(nr[s]), SECCOMP_RET_EPERM, s);
      // clone and unshare: CLONE_NEWUSER alone or with anything else is denied; a plain fork or thread is not.
      for (const call of [nr.clone, nr.unshare]) {
        assert.equal(ev(call, CLONE_NEWUSER), SECCOMP_RET_EPERM);
        assert.equal(ev(call, CLONE_NEWUSER | 0x20000 | 17), SECCOMP_RET_EPERM); // | CLONE_NEWNS | SIGCHLD
        assert.equal(ev(call, 0x01200011), SECCOMP_RET_ALLOW); // glibc fork(): CHILD_SETTID | CHILD_CLEARTID | SIGCHLD
      }
      assert.equal(ev(nr.clone, 0x3d0f00), SECCOMP_RET_ALLOW); // pthread_create's flags
      assert.equal(ev(nr.clone3), SECCOMP_RET_ENOSYS, 'clone3 falls back to clone in libc');
      assert.equal(ev(0 /* read on x64 / io_setup on arm64 */), SECCOMP_RET_ALLOW);
      if (arch === 'x64')
        assert.equal(ev(0x40000000 + nr.socket, AF.UNIX), SECCOMP_RET_EPERM, 'x32 ABI denied');
    });
  }

  test(`seccomp semantics (${arch}, restricted)`, () => {
    const ev = evaluator('restricted');
    for (const s of [
      'connect',
      'bind',
      'listen',
      'accept',
      'accept4',
      'sendto',
      'sendmmsg',
      'recvmmsg',
      'getsockopt',
      'setsockopt',
      'getsockname',
      'shutdown',
      'ptrace',
      'process_vm_readv',
      'process_vm_writev',
    ] as const) {
      assert.equal(ev(nr[s]), SECCOMP_RET_EPERM, s);
    }
    // ENOTSOCK, not EPERM: bash must not mistake stdin for a network connection (and source ~/.bashrc).
    assert.equal(ev(nr.getpeername), SECCOMP_RET_ENOTSOCK);
    assert.equal(ev(nr.recvfrom), SECCOMP_RET_ALLOW);
    for (const call of [nr.socket, nr.socketpair]) {
      assert.equal(ev(call, AF.UNIX, SOCK.STREAM), SECCOMP_RET_ALLOW);
      assert.equal(
        ev(call, AF.UNIX, SOCK.SEQPACKET | 0o2000000 | 0o4000),
        SECCOMP_RET_ALLOW,
        'with CLOEXEC|NONBLOCK',
      );
      // Unix datagrams reach host sockets by path without connect(); SOCK_RAW is the same object for AF_UNIX.
      for (const t of [SOCK.DGRAM, SOCK.RAW, SOCK.RDM, SOCK.PACKET, SOCK.DGRAM | 0o2000000, 0])
        assert.equal(ev(call, AF.UNIX, t), SECCOMP_RET_EPERM, `unix type ${t}`);
      for (const fam of [AF.INET, AF.INET6, AF.NETLINK, AF.PACKET, AF.VSOCK])
        assert.equal(ev(call, fam, SOCK.STREAM), SECCOMP_RET_EPERM);
    }
    assert.equal(
      ev(nr.socket, 0x100000000 + AF.UNIX, 0x100000000 + SOCK.STREAM),
      SECCOMP_RET_ALLOW,
      'only the low 32 bits are compared',
    );
  });

  test(`seccomp semantics (${arch}, proxy-routed)`, () => {
    const ev = evaluator('proxy-routed');
    for (const s of [
      'connect',
      'bind',
      'sendto',
      'sendmmsg',
      'recvfrom',
      'getsockopt',
      'setsockopt',
    ] as const) {
      assert.equal(ev(nr[s]), SECCOMP_RET_ALLOW, s);
    }
    for (const s of ['ptrace', 'process_vm_readv', 'process_vm_writev'] as const) {
      assert.equal(ev(nr[s]), SECCOMP_RET_EPERM, s);
    }
    assert.equal(ev(nr.socket, AF.INET, SOCK.STREAM), SECCOMP_RET_ALLOW);
    assert.equal(ev(nr.socket, AF.INET6, SOCK.DGRAM), SECCOMP_RET_ALLOW);
    for (const fam of [AF.UNIX, AF.NETLINK, AF.PACKET, AF.VSOCK])
      assert.equal(ev(nr.socket, fam, SOCK.STREAM), SECCOMP_RET_EPERM);
    assert.equal(ev(nr.socketpair, AF.UNIX, SOCK.STREAM), SECCOMP_RET_ALLOW);
    assert.equal(ev(nr.socketpair, AF.UNIX, SOCK.SEQPACKET), SECCOMP_RET_ALLOW);
    assert.equal(ev(nr.socketpair, AF.UNIX, SOCK.DGRAM), SECCOMP_RET_EPERM);
    assert.equal(ev(nr.socketpair, AF.UNIX, SOCK.RAW), SECCOMP_RET_EPERM);
    assert.equal(ev(nr.socketpair, AF.INET, SOCK.STREAM), SECCOMP_RET_EPERM);
  });

  test(`seccomp semantics (${arch}, network-enabled)`, () => {
    const ev = evaluator('network-enabled');
    for (const s of ['connect', 'bind', 'sendto', 'sendmmsg', 'ptrace', 'process_vm_readv'] as const) {
      assert.equal(ev(nr[s]), SECCOMP_RET_ALLOW, s);
    }
    assert.equal(ev(nr.socket, AF.UNIX, SOCK.DGRAM), SECCOMP_RET_ALLOW, 'the network is open');
    assert.equal(ev(nr.socket, AF.INET, SOCK.STREAM), SECCOMP_RET_ALLOW);
  });
}

test('seccomp arch selection: x64/arm64 only, and must match the kernel', () => {
  assert.equal(hostSeccompArch('x64', 'x86_64'), 'x64');
  assert.equal(hostSeccompArch('arm64', 'aarch64'), 'arm64');
  assert.throws(() => hostSeccompArch('ia32', 'i686'), /unsupported architecture ia32/);
  assert.throws(() => hostSeccompArch('x64', 'aarch64'), /mismatch/);
});
