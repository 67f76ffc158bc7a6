import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import {
  AF,
  AUDIT_ARCH,
  buildSeccompFilter,
  evalSeccomp,
  hostSeccompArch,
  SECCOMP_RET_ALLOW,
  SECCOMP_RET_ENOTSOCK,
  SECCOMP_RET_EPERM,
  SECCOMP_RET_KILL_PROCESS,
  type SeccompArch,
  type SeccompMode,
  SYSCALLS,
} from '../../src/sandbox/linux/seccomp.js';

const fixtures = join(dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'sandbox');
const golden = (arch: string, mode: string) =>
  Buffer.from(readFileSync(join(fixtures, `seccomp-${arch}-${mode}.hex`), 'utf8').replace(/\s+/g, ''), 'hex');

const ARCHES: SeccompArch[] = ['x64', 'arm64'];
const MODES: SeccompMode[] = ['restricted', 'proxy-routed'];

for (const arch of ARCHES) {
  for (const mode of MODES) {
    test(`seccomp golden bytes: ${arch} ${mode}`, () => {
      assert.deepEqual(buildSeccompFilter(arch, mode), golden(arch, mode));
    });
  }
}

test('seccomp layout: arch check first, KILL on mismatch; 8-byte little-endian insns', () => {
  const b = buildSeccompFilter('x64', 'restricted');
  assert.equal(b.length % 8, 0);
  assert.equal(b.length / 8, 36);
  assert.equal(b.subarray(0, 8).toString('hex'), '2000000004000000'); // ld [4] (arch)
  assert.equal(b.readUInt16LE(8), 0x15); // jeq
  assert.equal(b.readUInt32LE(12), 0xc000003e);
  assert.equal(b.readUInt32LE(b.length - 4), SECCOMP_RET_KILL_PROCESS);
});

for (const arch of ARCHES) {
  const nr = SYSCALLS[arch];
  const A = AUDIT_ARCH[arch];
  const other = arch === 'x64' ? AUDIT_ARCH.arm64 : AUDIT_ARCH.x64;
  test(`seccomp semantics (${arch}, restricted)`, () => {
    const f = buildSeccompFilter(arch, 'restricted');
    const ev = (n: number, arg0?: number) => evalSeccomp(f, { arch: A, nr: n, arg0 });
    assert.equal(evalSeccomp(f, { arch: other, nr: 0 }), SECCOMP_RET_KILL_PROCESS);
    assert.equal(evalSeccomp(f, { arch: 0x40000003, nr: 0 }), SECCOMP_RET_KILL_PROCESS); // i386
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
      'io_uring_setup',
      'io_uring_enter',
      'io_uring_register',
    ] as const) {
      assert.equal(ev(nr[s]), SECCOMP_RET_EPERM, s);
    }
    // ENOTSOCK, not EPERM: bash must not mistake stdin for a network connection (and source ~/.bashrc).
    assert.equal(ev(nr.getpeername), SECCOMP_RET_ENOTSOCK);
    assert.equal(ev(nr.recvfrom), SECCOMP_RET_ALLOW);
    assert.equal(ev(nr.socket, AF.UNIX), SECCOMP_RET_ALLOW);
    for (const fam of [AF.INET, AF.INET6, AF.NETLINK, AF.PACKET, AF.VSOCK])
      assert.equal(ev(nr.socket, fam), SECCOMP_RET_EPERM);
    assert.equal(
      ev(nr.socket, 0x100000000 + AF.UNIX),
      SECCOMP_RET_ALLOW,
      'only the low 32 bits are compared',
    );
    assert.equal(ev(nr.socketpair, AF.UNIX), SECCOMP_RET_ALLOW);
    assert.equal(ev(nr.socketpair, AF.INET), SECCOMP_RET_EPERM);
    assert.equal(ev(0 /* read on x64 / io_setup on arm64 */), SECCOMP_RET_ALLOW);
    if (arch === 'x64')
      assert.equal(ev(0x40000000 + nr.socket, AF.UNIX), SECCOMP_RET_EPERM, 'x32 ABI denied');
  });
  test(`seccomp semantics (${arch}, proxy-routed)`, () => {
    const f = buildSeccompFilter(arch, 'proxy-routed');
    const ev = (n: number, arg0?: number) => evalSeccomp(f, { arch: A, nr: n, arg0 });
    assert.equal(evalSeccomp(f, { arch: other, nr: 0 }), SECCOMP_RET_KILL_PROCESS);
    for (const s of ['connect', 'bind', 'sendto', 'recvfrom', 'getsockopt', 'setsockopt'] as const) {
      assert.equal(ev(nr[s]), SECCOMP_RET_ALLOW, s);
    }
    for (const s of [
      'ptrace',
      'process_vm_readv',
      'process_vm_writev',
      'io_uring_setup',
      'io_uring_enter',
      'io_uring_register',
    ] as const) {
      assert.equal(ev(nr[s]), SECCOMP_RET_EPERM, s);
    }
    assert.equal(ev(nr.socket, AF.INET), SECCOMP_RET_ALLOW);
    assert.equal(ev(nr.socket, AF.INET6), SECCOMP_RET_ALLOW);
    for (const fam of [AF.UNIX, AF.NETLINK, AF.PACKET, AF.VSOCK])
      assert.equal(ev(nr.socket, fam), SECCOMP_RET_EPERM);
    assert.equal(ev(nr.socketpair, AF.UNIX), SECCOMP_RET_ALLOW);
    assert.equal(ev(nr.socketpair, AF.INET), SECCOMP_RET_EPERM);
  });
}

test('seccomp arch selection: x64/arm64 only, and must match the kernel', () => {
  assert.equal(hostSeccompArch('x64', 'x86_64'), 'x64');
  assert.equal(hostSeccompArch('arm64', 'aarch64'), 'arm64');
  assert.throws(() => hostSeccompArch('ia32', 'i686'), /unsupported architecture ia32/);
  assert.throws(() => hostSeccompArch('x64', 'aarch64'), /mismatch/);
});
