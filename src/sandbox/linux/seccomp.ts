/**
 * Seccomp filters generated as raw classic BPF (`struct sock_filter[]`, 8 bytes each, little-endian), the format
 * bwrap's `--seccomp FD` reads (sandbox.md §8.5). Pure: (arch, mode) → Buffer.
 *
 * Program: check the audit arch (mismatch → KILL_PROCESS, which blocks foreign ABIs such as i386 `int 0x80`);
 * on x86_64 deny the x32 ABI (nr ≥ 0x40000000); deny the mode's syscalls; deny creating user namespaces (clone and
 * unshare with CLONE_NEWUSER; clone3, whose flags sit in memory a filter cannot read, gets ENOSYS so that libc falls
 * back to clone); in the network-restricted modes allow socket()/socketpair() only for the mode's address families,
 * and unix sockets only as SOCK_STREAM or SOCK_SEQPACKET; allow everything else.
 *
 * Modes: `restricted` (network off), `proxy-routed` (managed network: only TCP/IP sockets, in the sandbox's own
 * network namespace), `network-enabled` (the network is open; only the interfaces below that no coding agent needs).
 *
 * Why no unix datagram sockets in the restricted modes: a network namespace does not isolate unix sockets bound to a
 * path, and a datagram socket needs no connect(): sendmsg()/sendto()/sendmmsg() with a destination address reach any
 * host socket by its path (journald, syslog, anything listening), SCM_RIGHTS included. Denying sendto but not sendmsg
 * closed one spelling of that; the root is the socket itself. SOCK_RAW is the same kernel object as SOCK_DGRAM for
 * AF_UNIX, so it is denied too. Stream and seqpacket unix sockets stay allowed (socketpair() users such as cargo, make
 * jobservers, Python's multiprocessing need them): they are connection-oriented, so they reach nothing but their
 * peer without connect(), which is denied (restricted) or cannot name a unix path (proxy-routed: no AF_UNIX socket()),
 * and the kernel ignores a destination address on them.
 *
 * The Landlock backend (landlock.ts) runs without namespaces, so its filters add what a namespace or a read-only
 * mount gave bwrap (SeccompExtras): the metadata calls (chmod, chown, utimes, xattrs, inode flags: Landlock does not
 * cover them, and a read-only bind answered EROFS), SysV IPC and POSIX message queues (no IPC namespace), truncate by
 * path (Landlock before ABI 3), and for managed network TCP stream sockets only (Landlock's port rules cover TCP alone)
 * without TCP Fast Open, whose sendto/sendmsg connects without connect(2).
 */

import { NONE, type SeccompArch, SYSCALLS, type SyscallName } from './seccompSyscalls.js';

export { type SeccompArch, SYSCALLS };
export type SeccompMode = 'restricted' | 'proxy-routed' | 'network-enabled';

const BPF_LD_W_ABS = 0x20;
const BPF_ALU_AND_K = 0x54;
const BPF_JMP_JEQ_K = 0x15;
const BPF_JMP_JGE_K = 0x35;
const BPF_JMP_JSET_K = 0x45;
const BPF_RET_K = 0x06;
/** The opcodes of our BPF subset, for programs assembled elsewhere (assembleBpf: the tests' container profiles). */
export const BPF = {
  LD_W_ABS: BPF_LD_W_ABS,
  ALU_AND_K: BPF_ALU_AND_K,
  JEQ_K: BPF_JMP_JEQ_K,
  JGE_K: BPF_JMP_JGE_K,
  JSET_K: BPF_JMP_JSET_K,
  RET_K: BPF_RET_K,
} as const;

export const SECCOMP_RET_KILL_PROCESS = 0x80000000;
export const SECCOMP_RET_ALLOW = 0x7fff0000;
/** SECCOMP_RET_ERRNO | EPERM */
export const SECCOMP_RET_EPERM = 0x00050001;
/**
 * SECCOMP_RET_ERRNO | ENOTSOCK, for `getpeername` in Restricted mode. With EPERM, bash's "started by a remote shell
 * daemon" check (getpeername on stdin failing with anything but ENOTSOCK/ENOTCONN/EINVAL/EBADF) decides stdin is a
 * network connection and sources ~/.bashrc into every sandboxed `bash -c`.
 */
export const SECCOMP_RET_ENOTSOCK = 0x00050000 | 88;
/** SECCOMP_RET_ERRNO | ENOSYS, for clone3: glibc, musl and Go then use clone(), whose flags the filter can check. */
export const SECCOMP_RET_ENOSYS = 0x00050000 | 38;

export const AUDIT_ARCH = { x64: 0xc000003e, arm64: 0xc00000b7 } as const;
export const X32_SYSCALL_BIT = 0x40000000;
export const CLONE_NEWUSER = 0x10000000;

export const AF = { UNIX: 1, INET: 2, INET6: 10, NETLINK: 16, PACKET: 17, VSOCK: 40 } as const;
export const SOCK = { STREAM: 1, DGRAM: 2, RAW: 3, RDM: 4, SEQPACKET: 5, PACKET: 10 } as const;
/** The socket type without SOCK_NONBLOCK / SOCK_CLOEXEC (the kernel's SOCK_TYPE_MASK). */
const SOCK_TYPE_MASK = 0xf;

/**
 * Denied in every mode: kernel interfaces with no use to a coding agent and a record of exploits (as in Docker's
 * default profile): io_uring, perf events, userfaultfd, BPF, the key management calls (a sandbox must not read or
 * add to any keyring; it also gets a fresh session keyring of its own), and setns (with no user namespaces to
 * create there is nothing legitimate to join).
 */
const SURFACE_DENIED: SyscallName[] = [
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
];
/** Denied whenever the network is not open (Codex's Restricted and ProxyRouted modes). */
const PROCESS_DENIED: SyscallName[] = ['ptrace', 'process_vm_readv', 'process_vm_writev'];
/** `recvfrom` stays allowed on purpose (socketpair users such as cargo clippy need it). */
const NETWORK_DENIED: SyscallName[] = [
  'connect',
  'accept',
  'accept4',
  'bind',
  'listen',
  'getsockname',
  'shutdown',
  'sendto',
  'sendmmsg',
  'recvmmsg',
  'getsockopt',
  'setsockopt',
];

export interface SeccompRules {
  denied: SyscallName[];
  /** Denied with ENOTSOCK instead of EPERM. */
  notSocket: SyscallName[];
  /** null: socket() and socketpair() are not filtered (network-enabled). */
  sockets: null | {
    /** Families socket() may create (AF_UNIX only as an allowed unix type). */
    socketFamilies: number[];
    socketpairFamilies: number[];
    /** The unix socket types allowed (no datagrams: see the module comment). */
    unixTypes: number[];
  };
}

const UNIX_TYPES = [SOCK.STREAM, SOCK.SEQPACKET];

export function seccompRules(mode: SeccompMode): SeccompRules {
  if (mode === 'restricted') {
    return {
      denied: [...NETWORK_DENIED, ...PROCESS_DENIED, ...SURFACE_DENIED],
      notSocket: ['getpeername'],
      sockets: { socketFamilies: [AF.UNIX], socketpairFamilies: [AF.UNIX], unixTypes: UNIX_TYPES },
    };
  }
  if (mode === 'proxy-routed') {
    return {
      denied: [...PROCESS_DENIED, ...SURFACE_DENIED],
      notSocket: [],
      sockets: { socketFamilies: [AF.INET, AF.INET6], socketpairFamilies: [AF.UNIX], unixTypes: UNIX_TYPES },
    };
  }
  return { denied: [...SURFACE_DENIED], notSocket: [], sockets: null };
}

/** What the Landlock backend's filters add to a mode (see the module comment). */
export interface SeccompExtras {
  /**
   * `deny`: every call that changes a file's mode, owner, times, extended attributes or inode flags fails (EPERM),
   * wherever the file is; `no-privilege-bits`: they work, but no mode with setuid or setgid can be set.
   */
  metadata?: 'deny' | 'no-privilege-bits';
  /** SysV shared memory, semaphores, message queues and POSIX message queues fail (EPERM). */
  denyHostIpc?: boolean;
  /** truncate(2) by path fails (Landlock before ABI 3 cannot restrict it; ftruncate needs a writable fd). */
  denyPathTruncate?: boolean;
  /** proxy-routed only: AF_INET/AF_INET6 sockets only as TCP streams, and no MSG_FASTOPEN on sends. */
  tcpOnly?: boolean;
}

const METADATA_CALLS: SyscallName[] = [
  'chmod',
  'fchmod',
  'fchmodat',
  'fchmodat2',
  'chown',
  'fchown',
  'lchown',
  'fchownat',
  'utime',
  'utimes',
  'futimesat',
  'utimensat',
  'setxattr',
  'lsetxattr',
  'fsetxattr',
  'removexattr',
  'lremovexattr',
  'fremovexattr',
  'setxattrat',
  'removexattrat',
];
const HOST_IPC_CALLS: SyscallName[] = [
  'shmget',
  'shmat',
  'shmctl',
  'semget',
  'semop',
  'semctl',
  'semtimedop',
  'msgget',
  'msgsnd',
  'msgrcv',
  'msgctl',
  'mq_open',
  'mq_unlink',
  'mq_timedsend',
  'mq_timedreceive',
  'mq_notify',
  'mq_getsetattr',
];
/** The mode argument of chmod-like calls: [call, which argument]. */
const MODE_ARGS: [SyscallName, number][] = [
  ['chmod', 1],
  ['fchmod', 1],
  ['fchmodat', 2],
  ['fchmodat2', 2],
];
export const S_ISUID_ISGID = 0o6000;
/** FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS, FS_IOC_FSSETXATTR (chattr and project ids on an fd opened read-only). */
export const INODE_FLAG_IOCTLS = [0x40086602, 0x40046602, 0x401c5820];
export const MSG_FASTOPEN = 0x20000000;
const IPPROTO_TCP = 6;

/** One instruction with symbolic jump targets (labels) or fall-through (null). */
export interface Insn {
  code: number;
  k: number;
  jt?: string | null;
  jf?: string | null;
  label?: string;
}

/** Assembles instructions with symbolic jumps into `struct sock_filter[]` bytes. */
export function assembleBpf(prog: Insn[]): Buffer {
  const at = new Map<string, number>();
  prog.forEach((ins, i) => {
    if (ins.label) at.set(ins.label, i);
  });
  const buf = Buffer.alloc(prog.length * 8);
  prog.forEach((ins, i) => {
    const off = (target: string | null | undefined): number => {
      if (!target) return 0;
      const to = at.get(target);
      if (to === undefined) throw new Error(`bpf: unknown label ${target}`);
      const rel = to - (i + 1);
      if (rel < 0 || rel > 255) throw new Error(`bpf: jump to ${target} out of range`);
      return rel;
    };
    buf.writeUInt16LE(ins.code, i * 8);
    buf.writeUInt8(off(ins.jt), i * 8 + 2);
    buf.writeUInt8(off(ins.jf), i * 8 + 3);
    buf.writeUInt32LE(ins.k >>> 0, i * 8 + 4);
  });
  return buf;
}

const OFF_NR = 0;
const OFF_ARCH = 4;
/** Low 32 bits of args[0] and args[1] (little-endian). */
const OFF_ARG0 = 16;
const OFF_ARG1 = 24;
const OFF_ARG2 = 32;
const OFF_ARG3 = 40;
const OFF_ARG: Record<number, number> = { 0: OFF_ARG0, 1: OFF_ARG1, 2: OFF_ARG2, 3: OFF_ARG3 };

/** Syscalls a leaf of the dispatch tree compares one by one. */
const LEAF = 4;

/**
 * The syscall dispatch (the number loaded): a binary search over `cases` (sorted by number) by JGE down to leaves of
 * at most LEAF JEQs; a number that is no case goes to `allow`. Not a chain of JEQs: the kernel runs a new filter once
 * for every syscall number to find the ones it may allow without running it (the seccomp action cache), so a chain's
 * length times ~450 numbers was most of what installing it cost (~150 us for the Landlock backend's ~70 cases, against
 * ~45 us as a tree of LEAF 4; bwrap's ~30: ~90 -> ~40 us; measured with seccomp(SECCOMP_SET_MODE_FILTER) in a forked child).
 */
function dispatch(cases: [number, string][]): Insn[] {
  const out: Insn[] = [];
  let n = 0;
  const emit = (part: [number, string][], label?: string) => {
    const first = out.length;
    if (part.length <= LEAF) {
      for (const [i, [k, target]] of part.entries())
        out.push({ code: BPF_JMP_JEQ_K, k, jt: target, jf: i === part.length - 1 ? 'allow' : null });
    } else {
      const mid = part.length >> 1;
      const right = `nr${n++}`;
      out.push({ code: BPF_JMP_JGE_K, k: part[mid]![0], jt: right, jf: null }); // unsigned, as the sort
      emit(part.slice(0, mid));
      emit(part.slice(mid), right);
    }
    if (label) out[first]!.label = label;
  };
  if (cases.length === 0) out.push({ code: BPF_RET_K, k: SECCOMP_RET_ALLOW });
  else emit(cases);
  return out;
}

/**
 * The filter for `arch` in `mode`, as bytes for `bwrap --seccomp FD` (or the Landlock backend's confinement, with
 * its `extras`; without extras the program is exactly bwrap's).
 */
export function buildSeccompFilter(arch: SeccompArch, mode: SeccompMode, extras: SeccompExtras = {}): Buffer {
  const nr = SYSCALLS[arch];
  const rules = seccompRules(mode);
  const has = (name: SyscallName) => nr[name] !== NONE;
  const denied = [
    ...rules.denied,
    ...(extras.metadata === 'deny' ? METADATA_CALLS : []),
    ...(extras.denyHostIpc ? HOST_IPC_CALLS : []),
    ...(extras.denyPathTruncate ? (['truncate'] as SyscallName[]) : []),
  ].filter(has);
  const modeChecks = extras.metadata === 'no-privilege-bits' ? MODE_ARGS.filter(([n]) => has(n)) : [];
  const tcpOnly = extras.tcpOnly === true && mode === 'proxy-routed';
  const p: Insn[] = [];
  p.push({ code: BPF_LD_W_ABS, k: OFF_ARCH });
  p.push({ code: BPF_JMP_JEQ_K, k: AUDIT_ARCH[arch], jt: null, jf: 'kill' });
  p.push({ code: BPF_LD_W_ABS, k: OFF_NR });
  if (arch === 'x64') p.push({ code: BPF_JMP_JGE_K, k: X32_SYSCALL_BIT, jt: 'deny', jf: null });
  // Where each syscall the filter looks at goes; the first entry of a number wins. Everything else is allowed.
  const cases = new Map<number, string>();
  const to = (name: SyscallName, label: string) => {
    if (has(name) && !cases.has(nr[name])) cases.set(nr[name], label);
  };
  for (const name of denied) to(name, 'deny');
  for (const name of rules.notSocket) to(name, 'notsock');
  to('clone3', 'enosys');
  to('clone', 'nsflags');
  to('unshare', 'nsflags');
  for (const [name, arg] of modeChecks) to(name, `mode${arg}`);
  if (extras.metadata === 'deny') to('ioctl', 'ioctl');
  if (tcpOnly) {
    to('sendto', 'flags3');
    to('sendmmsg', 'flags3');
    to('sendmsg', 'flags2');
  }
  const s = rules.sockets;
  if (s) {
    to('socket', 'socket');
    to('socketpair', 'socketpair');
  }
  p.push(...dispatch([...cases].sort((a, b) => (a[0] >>> 0) - (b[0] >>> 0))));
  // clone(flags, …) and unshare(flags): no new user namespace (the flags are args[0] on both architectures).
  p.push({ code: BPF_LD_W_ABS, k: OFF_ARG0, label: 'nsflags' });
  p.push({ code: BPF_JMP_JSET_K, k: CLONE_NEWUSER, jt: 'deny', jf: 'allow' });
  // A mode argument with setuid or setgid: denied.
  for (const arg of [...new Set(modeChecks.map(([, a]) => a))]) {
    p.push({ code: BPF_LD_W_ABS, k: OFF_ARG[arg]!, label: `mode${arg}` });
    p.push({ code: BPF_JMP_JSET_K, k: S_ISUID_ISGID, jt: 'deny', jf: 'allow' });
  }
  if (extras.metadata === 'deny') {
    p.push({ code: BPF_LD_W_ABS, k: OFF_ARG1, label: 'ioctl' });
    for (const cmd of INODE_FLAG_IOCTLS) p.push({ code: BPF_JMP_JEQ_K, k: cmd, jt: 'deny', jf: null });
    p.push({ code: BPF_RET_K, k: SECCOMP_RET_ALLOW });
  }
  if (tcpOnly) {
    for (const arg of [3, 2]) {
      p.push({ code: BPF_LD_W_ABS, k: OFF_ARG[arg]!, label: `flags${arg}` });
      p.push({ code: BPF_JMP_JSET_K, k: MSG_FASTOPEN, jt: 'deny', jf: 'allow' });
    }
  }
  if (s) {
    const families = (label: string, list: number[], inet: string) => {
      p.push({ code: BPF_LD_W_ABS, k: OFF_ARG0, label });
      for (const fam of list) {
        p.push({ code: BPF_JMP_JEQ_K, k: fam, jt: fam === AF.UNIX ? 'unixtype' : inet, jf: null });
      }
      p.push({ code: BPF_RET_K, k: SECCOMP_RET_EPERM });
    };
    families('socket', s.socketFamilies, tcpOnly ? 'inettype' : 'allow');
    families('socketpair', s.socketpairFamilies, 'allow');
    p.push({ code: BPF_LD_W_ABS, k: OFF_ARG1, label: 'unixtype' });
    p.push({ code: BPF_ALU_AND_K, k: SOCK_TYPE_MASK });
    for (const t of s.unixTypes) p.push({ code: BPF_JMP_JEQ_K, k: t, jt: 'allow', jf: null });
    p.push({ code: BPF_RET_K, k: SECCOMP_RET_EPERM });
    if (tcpOnly) {
      // TCP only: SOCK_STREAM (flags masked off) with protocol 0 or IPPROTO_TCP (not SCTP, not MPTCP).
      p.push({ code: BPF_LD_W_ABS, k: OFF_ARG1, label: 'inettype' });
      p.push({ code: BPF_ALU_AND_K, k: SOCK_TYPE_MASK });
      p.push({ code: BPF_JMP_JEQ_K, k: SOCK.STREAM, jt: null, jf: 'deny' });
      p.push({ code: BPF_LD_W_ABS, k: OFF_ARG2 });
      p.push({ code: BPF_JMP_JEQ_K, k: 0, jt: 'allow', jf: null });
      p.push({ code: BPF_JMP_JEQ_K, k: IPPROTO_TCP, jt: 'allow', jf: 'deny' });
    }
  }
  p.push({ code: BPF_RET_K, k: SECCOMP_RET_ALLOW, label: 'allow' });
  p.push({ code: BPF_RET_K, k: SECCOMP_RET_EPERM, label: 'deny' });
  if (rules.notSocket.length > 0) p.push({ code: BPF_RET_K, k: SECCOMP_RET_ENOTSOCK, label: 'notsock' });
  p.push({ code: BPF_RET_K, k: SECCOMP_RET_ENOSYS, label: 'enosys' });
  p.push({ code: BPF_RET_K, k: SECCOMP_RET_KILL_PROCESS, label: 'kill' });
  return assembleBpf(p);
}

/** The architecture to filter for: Node's arch, which must be x64/arm64 and match the kernel's (`uname -m`). */
export function hostSeccompArch(nodeArch: string, machine: string): SeccompArch {
  const expected: Record<string, string> = { x64: 'x86_64', arm64: 'aarch64' };
  const m = expected[nodeArch];
  if (!m)
    throw new Error(`unsupported architecture ${nodeArch} for the Linux sandbox (supported: x64, arm64)`);
  if (machine !== m) {
    throw new Error(`architecture mismatch: node is ${nodeArch} but the kernel reports ${machine}`);
  }
  return nodeArch as SeccompArch;
}

/**
 * A filter's instructions as columns, decoded once per filter (a test evaluates one filter a million times): a
 * filter's bytes are not to change once it has been evaluated.
 */
interface DecodedFilter {
  code: Uint16Array;
  jt: Uint8Array;
  jf: Uint8Array;
  k: Uint32Array;
}
const decodedFilters = new WeakMap<Buffer, DecodedFilter>();

function decodeFilter(filter: Buffer): DecodedFilter {
  let d = decodedFilters.get(filter);
  if (d) return d;
  const n = filter.length / 8;
  d = { code: new Uint16Array(n), jt: new Uint8Array(n), jf: new Uint8Array(n), k: new Uint32Array(n) };
  for (let i = 0; i < n; i++) {
    d.code[i] = filter.readUInt16LE(i * 8);
    d.jt[i] = filter.readUInt8(i * 8 + 2);
    d.jf[i] = filter.readUInt8(i * 8 + 3);
    d.k[i] = filter.readUInt32LE(i * 8 + 4);
  }
  decodedFilters.set(filter, d);
  return d;
}

/** A tiny interpreter of our own BPF subset, for tests and the panel: returns the action for a syscall. */
export function evalSeccomp(
  filter: Buffer,
  data: { arch: number; nr: number; arg0?: number; arg1?: number; arg2?: number; arg3?: number },
): number {
  const { code: codes, jt, jf, k: ks } = decodeFilter(filter);
  const word = (k: number): number => {
    switch (k) {
      case OFF_ARCH:
        return data.arch;
      case OFF_NR:
        return data.nr;
      case OFF_ARG0:
        return (data.arg0 ?? 0) >>> 0;
      case OFF_ARG1:
        return (data.arg1 ?? 0) >>> 0;
      case OFF_ARG2:
        return (data.arg2 ?? 0) >>> 0;
      case OFF_ARG3:
        return (data.arg3 ?? 0) >>> 0;
      default:
        return 0;
    }
  };
  let acc = 0;
  let pc = 0;
  while (pc < codes.length) {
    const code = codes[pc]!;
    const k = ks[pc]!;
    const t = jt[pc]!;
    const f = jf[pc]!;
    pc++;
    if (code === BPF_LD_W_ABS) acc = word(k);
    else if (code === BPF_ALU_AND_K) acc = (acc & k) >>> 0;
    else if (code === BPF_JMP_JEQ_K) pc += acc >>> 0 === k ? t : f;
    else if (code === BPF_JMP_JGE_K) pc += acc >>> 0 >= k ? t : f;
    else if (code === BPF_JMP_JSET_K) pc += (acc & k) !== 0 ? t : f;
    else if (code === BPF_RET_K) return k;
    else throw new Error(`bpf: unsupported opcode ${code}`);
  }
  throw new Error('bpf: fell off the end');
}
