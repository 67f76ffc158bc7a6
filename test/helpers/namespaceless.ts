/**
 * Where namespaces fail as they do in containers, on this machine, with no container engine (issue 17's test
 * environments): a command is run
 *  - `userns-max-0`: inside a user namespace whose user.max_user_namespaces is 0 (the sysctl is per user namespace:
 *    its root may lower it), so bwrap's clone(CLONE_NEWUSER) fails with ENOSPC;
 *  - `container-seccomp`: under a Docker-like seccomp profile assembled with our own BPF generator (src/sandbox/linux/
 *    seccomp.ts): unshare, mount, umount2, pivot_root, setns, the keyring calls, bpf, perf_event_open and userfaultfd
 *    fail with EPERM, clone with any namespace flag fails with EPERM, clone3 with ENOSYS (as Docker's default
 *    profile answers them), so bwrap cannot create a namespace.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { landlockSupport } from '../../src/sandbox/linux/landlockNative.js';
import {
  AUDIT_ARCH,
  assembleBpf,
  BPF,
  type Insn,
  SECCOMP_RET_ALLOW,
  SECCOMP_RET_ENOSYS,
  SECCOMP_RET_EPERM,
  SECCOMP_RET_KILL_PROCESS,
  type SeccompArch,
  SYSCALLS,
} from '../../src/sandbox/linux/seccomp.js';

export type NoNamespaces = 'userns-max-0' | 'container-seccomp';
export const NO_NAMESPACE_ENVS: NoNamespaces[] = ['userns-max-0', 'container-seccomp'];

/** The system python (root's pyenv shims are not readable by every user). */
const PY = '/usr/bin/python3';

/** Why these environments cannot be made here (false when they can). */
export function whyNoNamespacesSkip(): string | false {
  if (process.platform !== 'linux') return 'Linux only';
  if (process.getuid?.() !== 0) return 'needs root (a user namespace whose root lowers max_user_namespaces)';
  if (!existsSync('/usr/bin/unshare')) return 'util-linux unshare is missing';
  if (!existsSync(PY)) return `${PY} is missing`;
  if (landlockSupport().abi === 0) return `no Landlock here: ${landlockSupport().missing}`;
  return false;
}

const MORE: Record<SeccompArch, { mount: number; umount2: number; pivot_root: number }> = {
  x64: { mount: 165, umount2: 166, pivot_root: 155 },
  arm64: { mount: 40, umount2: 39, pivot_root: 41 },
};
/** CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET */
const CLONE_NS_FLAGS = 0x20000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000;

/** A Docker-like default profile's namespace and kernel-surface denials, as BPF. */
export function dockerLikeFilter(arch: SeccompArch = os.arch() === 'arm64' ? 'arm64' : 'x64'): Buffer {
  const nr = SYSCALLS[arch];
  const denied = [
    nr.unshare,
    nr.setns,
    nr.keyctl,
    nr.add_key,
    nr.request_key,
    nr.bpf,
    nr.perf_event_open,
    nr.userfaultfd,
    MORE[arch].mount,
    MORE[arch].umount2,
    MORE[arch].pivot_root,
  ];
  const p: Insn[] = [
    { code: BPF.LD_W_ABS, k: 4 },
    { code: BPF.JEQ_K, k: AUDIT_ARCH[arch], jt: null, jf: 'kill' },
    { code: BPF.LD_W_ABS, k: 0 },
    ...denied.map((n) => ({ code: BPF.JEQ_K, k: n, jt: 'eperm', jf: null })),
    { code: BPF.JEQ_K, k: nr.clone3, jt: 'enosys', jf: null },
    { code: BPF.JEQ_K, k: nr.clone, jt: 'clone', jf: null },
    { code: BPF.RET_K, k: SECCOMP_RET_ALLOW },
    { code: BPF.LD_W_ABS, k: 16, label: 'clone' },
    { code: BPF.JSET_K, k: CLONE_NS_FLAGS, jt: 'eperm', jf: null },
    { code: BPF.RET_K, k: SECCOMP_RET_ALLOW },
    { code: BPF.RET_K, k: SECCOMP_RET_EPERM, label: 'eperm' },
    { code: BPF.RET_K, k: SECCOMP_RET_ENOSYS, label: 'enosys' },
    { code: BPF.RET_K, k: SECCOMP_RET_KILL_PROCESS, label: 'kill' },
  ];
  return assembleBpf(p);
}

/** Installs the BPF program in file argv[1] on itself (no_new_privs unless root), then execs argv[2:]. */
const SECCOMP_EXEC = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
data = open(sys.argv[1], 'rb').read()
class fprog(ctypes.Structure): _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_char_p)]
prog = fprog(len(data) // 8, data)
if os.geteuid() != 0 and libc.prctl(38, 1, 0, 0, 0) != 0: sys.exit('no_new_privs: %d' % ctypes.get_errno())
if libc.syscall(317 if os.uname().machine == 'x86_64' else 277, 1, 0, ctypes.byref(prog)) != 0:
    sys.exit('seccomp: %d' % ctypes.get_errno())
os.execv(sys.argv[2], sys.argv[2:])
`;

/** The argv prefix that runs a command (absolute path first) in environment `kind`; `dir` holds its files. */
export function noNamespacesArgv(kind: NoNamespaces, dir: string): string[] {
  if (kind === 'userns-max-0') {
    return [
      '/usr/bin/unshare',
      '--user',
      '--map-root-user',
      '--mount',
      '/bin/sh',
      '-c',
      'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"',
      'sh',
    ];
  }
  const bpf = join(dir, 'container-profile.bpf');
  writeFileSync(bpf, dockerLikeFilter());
  return [PY, '-c', SECCOMP_EXEC, bpf];
}

/** What bwrap says in that environment when it cannot create its namespaces. */
export const BWRAP_FAILURE: Record<NoNamespaces, RegExp> = {
  'userns-max-0': /ENOSPC|max_\*_namespaces/,
  'container-seccomp': /No permissions to create|Operation not permitted|creating new namespace/i,
};

/** Runs argv in the environment and returns its stdout (a check that the environment is what it claims). */
export function inNoNamespaces(kind: NoNamespaces, dir: string, argv: string[]): string {
  const pre = noNamespacesArgv(kind, dir);
  return execFileSync(pre[0]!, [...pre.slice(1), ...argv], { encoding: 'utf8' });
}
