/**
 * The Landlock backend (issue 17): a Linux sandbox without namespaces, privileges or a setuid helper, for machines
 * where bubblewrap cannot create namespaces (Docker's default profile, CI runners, Ubuntu's AppArmor restriction),
 * or when a start asks for it (`useLegacyLandlock: true`). Pure planning: (resolved policy, host facts) → the
 * Landlock ruleset, the seccomp program and the guarantees that hold; the child applies them right before exec
 * (src/platform/native/confine.c). Nothing here creates files, fds or processes.
 *
 * Landlock only grants: a rule gives rights on a file hierarchy, and nothing can take a right away below it. Every
 * policy element is therefore held exactly, or refused, or (only when the operator accepted that element as weaker,
 * `--sandbox-accept-weaker`) held as far as Landlock goes and reported so:
 *
 * - read-only root, readable roots, writable roots: rules on those hierarchies (exact);
 * - a path with less access inside one with more (a protected `.git` in a writable root, a `none` entry under a
 *   readable root, the server's own files): the enclosing directory gets only the rights valid for its whole
 *   subtree, and each of its other entries gets the rest by a rule of its own, recursively down to the carve-out
 *   ("decomposition"). Exact, at a cost: in such a directory nothing can be created, removed or renamed (a missing
 *   `.codex` cannot be created, but neither can any other new name there), entries made by others later are
 *   read-only to a running sandbox, and an ancestor of a `none` path cannot be listed. A writable root whose top
 *   level is frozen this way gets a private TMPDIR inside a writable temp root. Accepting `protected-names` gives
 *   writable roots whole instead (their .git/.codex/.agents/.aws are then writable);
 * - file metadata (modes, owners, times, xattrs, inode flags): Landlock does not cover it. Denied by seccomp
 *   everywhere (stricter than asked inside writable roots: chmod fails there too), or with `metadata` accepted allowed
 *   everywhere but for setuid/setgid bits;
 * - network restricted: seccomp (unix stream/seqpacket socketpairs only, no connect/bind/sendto: a path unix socket
 *   is reached by connect() or a datagram, which Landlock before ABI 8 does not restrict) plus Landlock's TCP rules
 *   (ABI 4) with no port allowed and the abstract-socket scope (ABI 6);
 * - managed network: Landlock allows no TCP connect; a seccomp user-notification filter sends every connect() to the
 *   server's connect supervisor (src/platform/native/netnotify.c), which installs a socket of its own connected to
 *   the loopback proxy for a connect to it and refuses the rest. Where that cannot run (no addon, Linux < 5.9, a
 *   listener refused) Landlock's port rules would allow the proxy's ports on every address: refused unless
 *   `proxy-port` is accepted. TCP only (seccomp), no listening socket;
 * - processes: no pid namespace. Landlock keeps ptrace (ABI 1) and signals (ABI 6 scope) inside the sandbox's own
 *   domain; before ABI 6 refused unless `signals` is accepted. The process list of the host stays visible (/proc);
 * - IPC: no IPC namespace: SysV IPC and POSIX message queues denied by seccomp unless `host-ipc` is accepted;
 * - devices: only null, zero, full, random, urandom, tty, ptmx and pts, as bwrap's --dev;
 * - kernel filesystems that control the host (issue 30): every mount of cgroup, cgroup2, proc, sysfs and the other
 *   HOST_CONTROL_FS types (host.controlMounts, from /proc/self/mountinfo) is read-only whatever the policy says: a
 *   writable `cgroup.procs`/`tasks` lets a command leave its cgroup (its pids and memory limits, and the kill that
 *   ends it), `release_agent` (cgroup v1) and `/proc/sys/kernel/core_pattern` run a program as root, sysfs suspends
 *   the machine. Only a policy that writes an ancestor (`/`) reaches them: the writable root is decomposed around
 *   each (a carve-out, frozen ancestors and all; writes to /proc/<pid>/… go with it). A policy that asks to write
 *   inside one is refused naming the mount.
 */
import { lstatSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { type ControlMount, outermost } from '../../process/cgroupFs.js';
import type { WeakerGuarantee } from '../../protocol/exec.js';
import { SandboxSetupError } from '../errors.js';
import {
  type Access,
  accessOf,
  byDepthThenPath,
  type ConcreteEntry,
  isUnder,
  PROTECTED_NAMES,
  type ResolvedPolicy,
} from '../resolve.js';
import type { SeccompExtras, SeccompMode } from './seccomp.js';

/** Landlock filesystem access rights (uapi/linux/landlock.h). */
export const FS = {
  EXECUTE: 1 << 0,
  WRITE_FILE: 1 << 1,
  READ_FILE: 1 << 2,
  READ_DIR: 1 << 3,
  REMOVE_DIR: 1 << 4,
  REMOVE_FILE: 1 << 5,
  MAKE_CHAR: 1 << 6,
  MAKE_DIR: 1 << 7,
  MAKE_REG: 1 << 8,
  MAKE_SOCK: 1 << 9,
  MAKE_FIFO: 1 << 10,
  MAKE_BLOCK: 1 << 11,
  MAKE_SYM: 1 << 12,
  REFER: 1 << 13,
  TRUNCATE: 1 << 14,
  IOCTL_DEV: 1 << 15,
} as const;
export const NET = { BIND_TCP: 1, CONNECT_TCP: 2 } as const;
export const SCOPE = { ABSTRACT_UNIX_SOCKET: 1, SIGNAL: 2 } as const;

/** The filesystem rights this ABI knows (all of them are handled: anything not granted is denied). */
export function handledFs(abi: number): number {
  if (abi >= 5) return 0xffff;
  if (abi >= 3) return 0x7fff;
  if (abi >= 2) return 0x3fff;
  return 0x1fff;
}

export const READ = FS.READ_FILE | FS.READ_DIR | FS.EXECUTE;
export const WRITE = 0xffff;
/** What a device of bwrap's --dev gets (execute is meaningless on a device: kept so it never narrows `/`). */
const DEVICE = FS.READ_FILE | FS.WRITE_FILE | FS.IOCTL_DEV | FS.EXECUTE;
/** bwrap's --dev set: what a sandbox may open under /dev. Everything else there: names only. */
export const DEVICES = [
  '/dev/null',
  '/dev/zero',
  '/dev/full',
  '/dev/random',
  '/dev/urandom',
  '/dev/tty',
  '/dev/ptmx',
];
const DEVICE_DIRS = ['/dev/pts'];

export interface ListedEntry {
  name: string;
  /** Symlinks get no rule (a rule acts on what a path resolves to); the kernel checks the real type anyway. */
  symlink: boolean;
}

export interface LandlockHost {
  abi: number;
  accept: ReadonlySet<WeakerGuarantee>;
  network: 'restricted' | 'enabled';
  managed: boolean;
  /** The managed proxy's loopback ports (from the command's proxy variables). */
  proxyPorts: number[];
  /**
   * Managed network: null when the connect supervisor runs here (src/platform/netNotify.ts), else why not. Absent:
   * not asked (an unmanaged start).
   */
  connectSupervisor?: string | null;
  /** The server's own files and directories (canonical, existing), with what each is, for refusals. */
  masks: { path: string; what: string }[];
  /** Writable temp roots (canonical /tmp, the server's TMPDIR) that may hold a private TMPDIR. */
  tmpRoots: string[];
  /** The command's TMPDIR, if it sets one. */
  envTmpdir: string | undefined;
  /** A directory's entries, or null when it cannot be listed (not a directory, no permission). */
  list?: (dir: string) => ListedEntry[] | null;
  /** Whether a path is a directory (false for anything else; null when missing). */
  isDir?: (p: string) => boolean | null;
  /** The host-control mounts (src/process/cgroupFs.ts hostControlMounts): read-only in every plan. */
  controlMounts: readonly ControlMount[];
}

export interface LandlockPlan {
  abi: number;
  handledFs: number;
  handledNet: number;
  scoped: number;
  restrictFlags: number;
  rules: { path: string; rights: number }[];
  connectPorts: number[];
  /**
   * Managed network: connect() is supervised by the server (netnotify.c), which lets these loopback proxy ports be
   * reached, and nothing else; Landlock allows no TCP connect.
   */
  netNotify?: number[];
  seccompMode: SeccompMode;
  seccompExtras: SeccompExtras;
  /** Accepted weaker guarantees that apply to this launch. */
  weaker: WeakerGuarantee[];
  /** Directories where nothing can be created, removed or renamed (decomposed around a carve-out). */
  frozen: string[];
  /** Create the command's TMPDIR in here (a frozen writable temp root) and give it full rights. */
  privateTmpIn?: string;
}

/** Why a host-control filesystem is read-only, for a refusal. */
const WHY_READ_ONLY: Record<string, string> = {
  cgroup: 'writing there moves processes out of their cgroup and its limits',
  cgroup2: 'writing there moves processes out of their cgroup and its limits',
  tmpfs: 'it holds the cgroup hierarchies',
  proc: "its kernel settings (/proc/sys) are the host's",
  sysfs: "its device and kernel settings are the host's",
};

const ACCEPT_HINT = (e: WeakerGuarantee) =>
  `an operator who accepts this can start the server with --sandbox-accept-weaker ${e}`;

function refuse(element: string, why: string): never {
  throw new SandboxSetupError(`landlock sandbox: ${element}: ${why}; the command was not run`);
}

function rightsOf(a: Access): number {
  return a === 'write' ? WRITE : a === 'read' ? READ : 0;
}

function defaultList(dir: string): ListedEntry[] | null {
  try {
    return readdirSync(dir, { withFileTypes: true }).map((d) => ({
      name: d.name,
      symlink: d.isSymbolicLink(),
    }));
  } catch {
    return null;
  }
}

function defaultIsDir(p: string): boolean | null {
  const st = lstatSync(p, { throwIfNoEntry: false });
  return st ? st.isDirectory() : null;
}

/** A protected name (.git, .codex, .agents, .aws) of a writable root or of the cwd in one, or a .git file's gitdir. */
function isProtectedName(e: ConcreteEntry, r: ResolvedPolicy): boolean {
  if (e.access !== 'read') return false;
  if (e.origin === 'carve-out' || e.origin === 'gitdir') return true;
  const parent = dirname(e.path);
  const name = e.path.slice(parent === '/' ? 1 : parent.length + 1);
  return PROTECTED_NAMES.includes(name) && r.writableRoots.some((w) => isUnder(parent, w.root));
}

/**
 * The rules that give every path at most what `want` says and, within that, as much as one rule per hierarchy can:
 * see the module comment ("decomposition"). `points` maps each path where the wanted rights change to them; a path
 * gets the rights of its deepest point.
 */
function decompose(
  points: Map<string, number>,
  list: (dir: string) => ListedEntry[] | null,
  isDir: (p: string) => boolean | null,
): { rules: { path: string; rights: number }[]; frozen: string[] } {
  const rules: { path: string; rights: number }[] = [];
  const frozen: string[] = [];
  const paths = [...points.keys()].sort(byDepthThenPath);
  const want = (p: string): number => {
    for (let q = p; ; q = dirname(q)) {
      const r = points.get(q);
      if (r !== undefined) return r;
      if (q === '/') return 0;
    }
  };
  // A point's rights as a limit on its ancestors: listing them shows a file point's name, nothing of a file.
  const limit = (p: string): number => {
    const r = points.get(p)!;
    return isDir(p) === false ? r | FS.READ_DIR : r;
  };
  const visit = (dir: string, inherited: number) => {
    const here = want(dir);
    const below = paths.filter((p) => p !== dir && isUnder(p, dir));
    let safe = here;
    for (const b of below) safe &= limit(b);
    const grant = safe & ~inherited;
    if (grant !== 0) rules.push({ path: dir, rights: grant });
    const covered = inherited | safe;
    if (below.length === 0) return;
    // The next point (or the directory towards it) in each child of `dir` that holds one.
    const nextStep = (p: string) => {
      let c = p;
      while (dirname(c) !== dir) c = dirname(c);
      return c;
    };
    const steps = [...new Set(below.map(nextStep))];
    if ((here & ~covered) === 0) {
      for (const c of steps) visit(c, covered);
      return;
    }
    // `dir` itself may not have all it wants: each of its entries gets it by a rule of its own, but the carve-outs.
    if ((WRITE & here & ~covered & ~READ) !== 0) frozen.push(dir);
    const entries = list(dir);
    const named = new Set<string>();
    for (const e of entries ?? []) {
      const c = join(dir, e.name);
      named.add(c);
      if (steps.includes(c)) visit(c, covered);
      else if (!e.symlink) rules.push({ path: c, rights: here & ~covered });
    }
    for (const c of steps) if (!named.has(c) && isDir(c) !== null) visit(c, covered); // unlisted: still its own rules
  };
  visit('/', 0);
  return { rules, frozen };
}

/**
 * Plans the Landlock sandbox for a resolved policy, or throws SandboxSetupError naming the element that cannot be
 * held (and how an operator may accept it as weaker, when that is possible).
 */
export function planLandlock(r: ResolvedPolicy, host: LandlockHost): LandlockPlan {
  const { abi, accept } = host;
  const list = host.list ?? defaultList;
  const probe = host.isDir ?? defaultIsDir;
  const types = new Map<string, boolean | null>(); // one look per path and plan: decompose asks per ancestor
  const isDir = (p: string): boolean | null => {
    const known = types.get(p);
    if (known !== undefined) return known;
    const t = probe(p);
    types.set(p, t);
    return t;
  };
  const weaker = new Set<WeakerGuarantee>();

  // Processes: without a pid namespace, only Landlock's signal scope (ABI 6) keeps signals inside the sandbox.
  let scoped = 0;
  if (abi >= 6) scoped = SCOPE.SIGNAL | (host.network === 'enabled' ? 0 : SCOPE.ABSTRACT_UNIX_SOCKET);
  else if (accept.has('signals')) weaker.add('signals');
  else
    refuse(
      'signals (signals)',
      `Landlock ABI ${abi} (< 6) cannot keep the sandbox from signalling every process of this user, the server included; ${ACCEPT_HINT('signals')}`,
    );

  let handledNet = 0;
  let connectPorts: number[] = [];
  let netNotify: number[] | undefined;
  let seccompMode: SeccompMode = host.network === 'restricted' ? 'restricted' : 'network-enabled';
  if (host.managed) {
    if (abi < 4)
      refuse(
        'managed network',
        `it needs Landlock ABI 4 (TCP port rules) and this kernel has ABI ${abi}: without a network namespace nothing else confines TCP`,
      );
    handledNet = NET.BIND_TCP | NET.CONNECT_TCP;
    if (host.connectSupervisor === null) {
      // Landlock allows no TCP connect at all; the server's connect supervisor (netnotify.c) answers a connect to the
      // loopback proxy with a socket of its own and refuses the rest: the proxy is reached on 127.0.0.1 only.
      netNotify = [...new Set(host.proxyPorts)].sort((a, b) => a - b);
    } else {
      if (!accept.has('proxy-port'))
        refuse(
          'managed network (proxy-port)',
          `Landlock's TCP rules have a port but no address, so the proxy's port${host.proxyPorts.length > 1 ? 's' : ''} (${host.proxyPorts.join(', ')}) would be reachable on every host, not only on the loopback proxy, and the connect supervisor that would keep it to the loopback proxy cannot run here (${host.connectSupervisor ?? 'not asked'}); ${ACCEPT_HINT('proxy-port')}`,
        );
      weaker.add('proxy-port');
      connectPorts = [...new Set(host.proxyPorts)].sort((a, b) => a - b);
    }
    seccompMode = 'proxy-routed';
  } else if (host.network === 'restricted' && abi >= 4) {
    handledNet = NET.BIND_TCP | NET.CONNECT_TCP; // no port: on top of seccomp's socket rules
  }

  const protectedNames = accept.has('protected-names');
  const entries = protectedNames ? r.entries.filter((e) => !isProtectedName(e, r)) : r.entries;
  if (protectedNames && entries.length !== r.entries.length) weaker.add('protected-names');

  const points = new Map<string, number>();
  for (const e of entries) points.set(e.path, rightsOf(accessOf(entries, e.path)));
  if (!points.has('/')) points.set('/', rightsOf(accessOf(entries, '/')));
  const explicit = new Set(entries.map((e) => e.path));
  const wantNow = (p: string) => {
    for (let q = p; ; q = dirname(q)) {
      const v = points.get(q);
      if (v !== undefined) return v;
      if (q === '/') return 0;
    }
  };
  // /proc and /dev as bwrap mounts them whatever the policy reads: /proc readable, /dev with its device set only.
  if (!explicit.has('/proc') && (wantNow('/proc') & READ) !== READ) points.set('/proc', READ);
  if (!explicit.has('/dev')) points.set('/dev', FS.READ_DIR);
  for (const d of [...DEVICES, ...DEVICE_DIRS]) {
    if (explicit.has(d) || isDir(d) === null) continue;
    points.set(d, DEVICE_DIRS.includes(d) ? DEVICE | FS.READ_DIR : DEVICE);
  }
  // The server's files: their names may be listed, nothing else; inside a writable root that cannot be held.
  for (const m of host.masks) {
    const w = wantNow(m.path);
    if ((w & ~READ) !== 0) {
      const root = r.writableRoots.find((x) => isUnder(m.path, x.root))?.root ?? m.path;
      refuse(
        "the server's private files",
        `Landlock cannot hide ${m.path} (${m.what}) inside the writable root ${root}: a rule on the root covers it (move it out of the writable roots)`,
      );
    }
    if (w !== 0) points.set(m.path, isDir(m.path) ? w & FS.READ_DIR : 0);
  }
  // Host-control filesystems: read-only (see the module comment). Landlock cannot take a right away below a rule, so
  // a mount inside a writable root becomes a carve-out; a write asked for inside a mount cannot be held at all.
  for (const e of entries) {
    if (e.access !== 'write') continue;
    const m = host.controlMounts
      .filter((c) => isUnder(e.path, c.path))
      .sort((a, b) => b.path.length - a.path.length)[0];
    if (m)
      refuse(
        `a ${m.fsType} filesystem`,
        `${e.path} is writable in the policy but lies in the ${m.fsType} mount ${m.path}, which every sandbox sees read-only (${WHY_READ_ONLY[m.fsType] ?? 'it controls the host'})`,
      );
  }
  for (const m of outermost(host.controlMounts)) {
    const w = wantNow(m.path);
    if ((w & ~READ) !== 0) points.set(m.path, w & READ);
  }

  const { rules, frozen } = decompose(points, list, isDir);
  let privateTmpIn: string | undefined;
  const frozenTmp = host.tmpRoots.filter((t) => frozen.includes(t) && (wantNow(t) & WRITE) === WRITE);
  const envTmp = host.envTmpdir;
  if (frozenTmp.length > 0 && (envTmp === undefined || frozen.includes(envTmp) || envTmp === '/tmp'))
    privateTmpIn = frozenTmp[0];

  const readOnlyArea = !(r.fullWrite && r.writableRoots.some((w) => w.root === '/'));
  const seccompExtras: SeccompExtras = {};
  if (readOnlyArea) {
    seccompExtras.metadata = accept.has('metadata') ? 'no-privilege-bits' : 'deny';
    if (accept.has('metadata')) weaker.add('metadata');
  }
  if (accept.has('host-ipc')) weaker.add('host-ipc');
  else seccompExtras.denyHostIpc = true;
  if (abi < 3) seccompExtras.denyPathTruncate = true;
  if (host.managed) seccompExtras.tcpOnly = true;

  return {
    abi,
    handledFs: handledFs(abi),
    handledNet,
    scoped,
    restrictFlags: 0,
    rules,
    connectPorts,
    ...(netNotify ? { netNotify } : {}),
    seccompMode,
    seccompExtras,
    weaker: [...weaker].sort(),
    frozen,
    ...(privateTmpIn ? { privateTmpIn } : {}),
  };
}
