import { isUnder, type ProtectedPath, type ResolvedPolicy } from '../resolve.js';

/** What bwrap can do (from the cached `bwrap --help` probe). */
export interface BwrapFeatures {
  argv0: boolean;
  perms: boolean;
}

export interface BwrapOptions {
  /** Add `--unshare-net` (network restricted or managed). */
  unshareNet: boolean;
  /** Mount a fresh /proc (omitted when the cached preflight showed it cannot be mounted). */
  proc: boolean;
  /**
   * `--linux-sandbox-pid-namespace`: isolate (default) adds `--unshare-pid`; inherit shares the server's pid namespace
   * (Codex's meaning: the command can signal other processes of the same user), and /proc is then the host's, bound
   * read-only (a fresh proc mount needs a pid namespace of the sandbox's own user namespace).
   */
  pidNamespace?: 'isolate' | 'inherit';
  /** `--new-session` (not for a PTY: the command would lose its controlling terminal). */
  newSession: boolean;
  /** The command's working directory inside the sandbox. */
  chdir: string;
  /** The program to exec and its arguments (argv[1..]). */
  file: string;
  args: string[];
  /** A custom argv[0]: bwrap's `--argv0` where it has one, else through `execShim`. */
  argv0?: string;
  /** The in-sandbox exec shim (`SHIM --argv0 NAME -- FILE ARGS`), bound read-only at its own path. */
  execShim?: string | null | undefined;
  seccompFd?: number;
  /**
   * Transparent TCP: the connect supervisor's channel, passed into the sandbox at this fd; the exec shim (required)
   * runs first inside and installs the supervision filter (`SHIM --fd N --net-notify 3 -- FILE ARGS`).
   */
  netNotifyFd?: number;
  infoFd?: number;
  blockFd?: number;
  features: BwrapFeatures;
  /** Directories whose content the sandbox must not see (the mount-target lock directory): an empty tmpfs each. */
  masks?: string[];
}

export interface BwrapArgs {
  args: string[];
  /** Synthetic mount targets bwrap creates on the host (to be ref-counted and removed afterwards, §8.4.1). */
  syntheticTargets: string[];
  /** Whether a requested arg0 had to be ignored (bwrap < 0.9). */
  argv0Ignored: boolean;
}

function protectArgs(p: ProtectedPath, features: BwrapFeatures, synthetic: Set<string>): string[] {
  const perms = (mode: string) => (features.perms ? ['--perms', mode] : []);
  if (p.state === 'missing') {
    const t = p.mountTarget ?? p.path;
    synthetic.add(t);
    // The mount point holds the name: it cannot be created, replaced or renamed (EEXIST/EBUSY). A fresh tmpfs of
    // mode 0555 refuses writes (EACCES); if the sandbox chmods it first, it writes to its own private tmpfs, never to
    // the host. No --remount-ro: bwrap rereads mountinfo for each bind or remount (~0.15 ms), a plain tmpfs is cheap.
    // The --dir first: the placeholder may be another user's (mountTargets.ts: shares are per user), removed by its
    // owner before bwrap gets here; bwrap then makes it again as a placeholder of this user's (mode 0500, under the
    // share this launch holds, removed with it), not as the plain 0755 mount point --tmpfs would leave behind.
    if (features.perms) return ['--perms', '500', '--dir', t, '--perms', '555', '--tmpfs', t];
    return ['--tmpfs', t, '--remount-ro', t];
  }
  // A dangling symlink: mounting over it would create its target on the host; it cannot be pinned.
  if (p.state === 'symlink') return [];
  if (p.access === 'none') {
    if (p.state === 'dir') return [...perms('000'), '--tmpfs', p.path, '--remount-ro', p.path];
    return ['--ro-bind', '/dev/null', p.path];
  }
  return ['--ro-bind', p.path, p.path];
}

/**
 * The filesystem part of the bwrap argv (sandbox.md §8.4). Pure. Per writable root, shallow → deep: its bind, the
 * binds that pin its directories against renames, then its protected paths (those under a deeper writable root are
 * left to that root: its bind would cover them). The masks come last, so nothing is mounted over them.
 */
export function bwrapFsArgs(
  r: ResolvedPolicy,
  features: BwrapFeatures,
  masks: string[] = [],
): { args: string[]; syntheticTargets: string[] } {
  const a: string[] = [];
  const synthetic = new Set<string>();
  const roots = r.writableRoots;
  const rootWritable = roots.length > 0 && roots[0]!.root === '/';
  if (r.fullWrite || rootWritable) a.push('--bind', '/', '/');
  else if (r.rootReadable) a.push('--ro-bind', '/', '/');
  else {
    a.push('--tmpfs', '/');
    for (const p of r.readableRoots) a.push('--ro-bind', p, p);
  }
  a.push('--dev', '/dev');
  for (const w of roots) {
    if (w.root !== '/') a.push('--bind', w.root, w.root);
    for (const d of w.pinnedDirs) a.push('--bind', d, d);
    const deeper = roots.filter((o) => o.root !== w.root && isUnder(o.root, w.root));
    for (const s of w.readOnlySubpaths) {
      if (deeper.some((o) => isUnder(s.mountTarget ?? s.path, o.root))) continue;
      a.push(...protectArgs(s, features, synthetic));
    }
  }
  for (const u of r.unreadable) a.push(...protectArgs(u, features, synthetic));
  for (const m of masks) a.push('--tmpfs', m);
  return { args: a, syntheticTargets: [...synthetic] };
}

/** The whole bwrap argv after the program name (sandbox.md §8.3). Pure. */
export function bwrapArgs(r: ResolvedPolicy, o: BwrapOptions): BwrapArgs {
  const fs = bwrapFsArgs(r, o.features, o.masks);
  const a: string[] = [];
  if (o.newSession) a.push('--new-session');
  const inheritPid = o.pidNamespace === 'inherit';
  // arg0 (issue 33, item 4): only a real custom one (not the bare program name of a resolved path) needs anything.
  const customArgv0 =
    o.argv0 !== undefined && o.argv0 !== o.file && o.argv0 !== o.file.slice(o.file.lastIndexOf('/') + 1)
      ? o.argv0
      : undefined;
  const argv0Shim = customArgv0 !== undefined && !o.features.argv0 && o.execShim;
  const shim = (argv0Shim || o.netNotifyFd !== undefined) && o.execShim ? o.execShim : undefined;
  a.push('--die-with-parent', ...fs.args);
  // Bound after the policy's own mounts, so that it is there whatever they mask (it is our binary, nothing secret).
  if (shim) a.push('--ro-bind', shim, shim);
  a.push('--unshare-user');
  if (!inheritPid) a.push('--unshare-pid');
  a.push('--unshare-ipc');
  if (o.unshareNet) a.push('--unshare-net');
  if (o.proc) a.push(...(inheritPid ? ['--ro-bind', '/proc', '/proc'] : ['--proc', '/proc']));
  // The host's kernel settings stay read-only (issue 30): bwrap covers /proc/sys only when the directory itself is
  // writable, which it never is (0555), so as root the sandbox could write kernel.core_pattern (a program run as root on
  // the host) even under a read-only policy. sysfs too, where the policy writes a root above it.
  const writesAbove = (p: string) => r.fullWrite || r.writableRoots.some((w) => isUnder(p, w.root));
  if (o.proc || writesAbove('/proc'))
    a.push(
      '--ro-bind',
      '/proc/sys',
      '/proc/sys',
      '--ro-bind-try',
      '/proc/sysrq-trigger',
      '/proc/sysrq-trigger',
    );
  if (writesAbove('/sys')) a.push('--ro-bind-try', '/sys', '/sys');
  a.push('--cap-drop', 'ALL', '--chdir', o.chdir);
  let argv0Ignored = false;
  if (o.argv0 !== undefined && o.argv0 !== o.file && o.features.argv0) a.push('--argv0', o.argv0);
  else if (customArgv0 !== undefined && !argv0Shim) argv0Ignored = true;
  if (o.seccompFd !== undefined) a.push('--seccomp', String(o.seccompFd));
  if (o.infoFd !== undefined) a.push('--info-fd', String(o.infoFd));
  if (o.blockFd !== undefined) a.push('--block-fd', String(o.blockFd));
  if (shim) {
    a.push('--', shim);
    if (o.netNotifyFd !== undefined) a.push('--fd', String(o.netNotifyFd), '--net-notify', '3');
    if (argv0Shim) a.push('--argv0', customArgv0!);
    a.push('--', o.file, ...o.args);
  } else a.push('--', o.file, ...o.args);
  return { args: a, syntheticTargets: fs.syntheticTargets, argv0Ignored };
}
