/** Reading and writing cgroupfs: the mounts, our own cgroups, small files read again through open descriptors. */
import { accessSync, closeSync, constants, openSync, readFileSync, readSync, writeFileSync } from 'node:fs';
import { mountsChanged } from '../platform/sandbox.js';

// ---------------------------------------------------------------------------------------------------------------
// Reading the system

/** A cgroup could not be made, opened or limited. */
export class CgroupError extends Error {}

export interface MountInfo {
  root: string;
  mountPoint: string;
  fsType: string;
  superOptions: string[];
}

export function unescapeMount(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)));
}

export function readMounts(): MountInfo[] {
  let text: string;
  try {
    text = readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return [];
  }
  return parseMounts(text);
}

/** The lines of /proc/<pid>/mountinfo. */
export function parseMounts(text: string): MountInfo[] {
  const out: MountInfo[] = [];
  for (const line of text.split('\n')) {
    const [pre, post] = line.split(' - ');
    if (!pre || !post) continue;
    const f = pre.split(' ');
    const g = post.split(' ');
    if (f.length < 5 || g.length < 3) continue;
    out.push({
      root: unescapeMount(f[3]!),
      mountPoint: unescapeMount(f[4]!),
      fsType: g[0]!,
      superOptions: g[2]!.split(','),
    });
  }
  return out;
}

/**
 * Filesystems through which a process controls the host or its own limits (issue 30): cgroups (leaving one's cgroup;
 * v1 `release_agent`), proc (`/proc/sys`: `kernel.core_pattern` runs a program as root, `/proc/sysrq-trigger`), sysfs
 * (`/sys/power/state`, module parameters, …), and the other kernel interfaces mounted on their own. Never writable
 * in a sandbox: the Landlock plan carves every one of them out of every writable root (src/sandbox/linux/landlock.ts).
 */
export const HOST_CONTROL_FS: ReadonlySet<string> = new Set([
  'cgroup',
  'cgroup2',
  'proc',
  'sysfs',
  'securityfs',
  'debugfs',
  'tracefs',
  'configfs',
  'bpf',
  'pstore',
  'efivarfs',
  'binfmt_misc',
  'fusectl',
]);

/** A mount of a HOST_CONTROL_FS filesystem (or the tmpfs at /sys/fs/cgroup that holds the v1 hierarchies). */
export interface ControlMount {
  path: string;
  fsType: string;
}

/**
 * Every mount of a HOST_CONTROL_FS filesystem in this mount namespace, nested ones included, plus /sys/fs/cgroup when
 * it is a mount of its own. Asked at every sandboxed start: with the addon, a poll() of the descriptor kept open on
 * the mount table says whether anything was mounted, unmounted, moved or remounted since it was last read (~1 µs);
 * only then (and without the addon, always) is the table read again through that descriptor (a pread from 0 makes
 * the kernel write it anew: ~15 µs against ~50 µs to open, read and parse it), and parsed only when its text changed.
 */
export function hostControlMounts(): ControlMount[] {
  // The kernel says whether any mount changed since the table was last read through the kept descriptor: one poll.
  if (mountsSeen && mountInfoFd >= 0 && mountsChanged && !mountsChanged(mountInfoFd))
    return mountsSeen.mounts.map((m) => ({ ...m }));
  const n = mountTable();
  const seen = mountsSeen;
  if (n >= 0 && seen && seen.bytes.length === n && SCRATCH.compare(seen.bytes, 0, n, 0, n) === 0)
    return seen.mounts.map((m) => ({ ...m }));
  let text: string;
  try {
    text = n >= 0 ? SCRATCH.toString('utf8', 0, n) : readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    text = '';
  }
  const mounts: ControlMount[] = [];
  for (const m of parseMounts(text)) {
    if (!HOST_CONTROL_FS.has(m.fsType) && m.mountPoint !== '/sys/fs/cgroup') continue;
    if (!mounts.some((x) => x.path === m.mountPoint)) mounts.push({ path: m.mountPoint, fsType: m.fsType });
  }
  if (n >= 0) mountsSeen = { bytes: Buffer.from(SCRATCH.subarray(0, n)), mounts };
  return mounts.map((m) => ({ ...m }));
}

/** The mounts of `mounts` that lie below no other of them. */
export function outermost(mounts: readonly ControlMount[]): ControlMount[] {
  return mounts.filter((m) => !mounts.some((o) => o.path !== m.path && isBelow(m.path, o.path)));
}

function isBelow(p: string, dir: string): boolean {
  return dir === '/' ? p !== '/' : p.startsWith(`${dir}/`);
}

/**
 * Where cgroup (v1) and cgroup2 filesystems are mounted, plus /sys/fs/cgroup when it is a mount of its own (the tmpfs
 * holding the v1 hierarchies); none below another. Every sandbox sees them read-only (bwrap: bwrapLaunch.ts).
 */
export function cgroupMountPoints(): string[] {
  const cgroups = hostControlMounts().filter(
    (m) => m.fsType === 'cgroup' || m.fsType === 'cgroup2' || m.path === '/sys/fs/cgroup',
  );
  return outermost(cgroups).map((m) => m.path);
}

let mountsSeen: { bytes: Buffer; mounts: ControlMount[] } | null = null;
let mountInfoFd = -1;

/** Reads /proc/self/mountinfo as it is now into SCRATCH (through the kept descriptor): its length, or -1. */
function mountTable(): number {
  try {
    if (mountInfoFd < 0) mountInfoFd = openSync('/proc/self/mountinfo', 'r');
    let n = 0;
    while (n < SCRATCH.length) {
      const got = readSync(mountInfoFd, SCRATCH, n, SCRATCH.length - n, n);
      if (got === 0) return n;
      n += got;
    }
  } catch {
    // no /proc, or the descriptor went bad
  }
  return -1; // larger than the scratch (or unreadable): the caller reads it the plain way
}

/** /proc/self/cgroup: controller list ('' for v2) → our path in that hierarchy. */
export function readOwnCgroups(): Map<string, string> {
  const m = new Map<string, string>();
  let text = '';
  try {
    text = readFileSync('/proc/self/cgroup', 'utf8');
  } catch {
    return m;
  }
  for (const line of text.split('\n')) {
    const a = line.indexOf(':');
    const b = line.indexOf(':', a + 1);
    if (a < 0 || b < 0) continue;
    m.set(line.slice(a + 1, b), line.slice(b + 1));
  }
  return m;
}

/** Our directory in a mounted hierarchy: the mount point plus our path below the mount's root. */
export function dirIn(mount: MountInfo, path: string): string | null {
  const root = mount.root === '/' ? '' : mount.root;
  if (root && path !== root && !path.startsWith(`${root}/`)) return null;
  const rel = path.slice(root.length);
  return rel === '' || rel === '/' ? mount.mountPoint : `${mount.mountPoint}${rel}`;
}

export function readText(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}

export function writable(dir: string): boolean {
  try {
    accessSync(dir, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

/** The value of the line `<key> <number>` in a cgroup file of counters (0 when absent). */
export function counter(text: string | null, key: string): number {
  if (!text) return 0;
  let at = text.startsWith(`${key} `) ? 0 : text.indexOf(`\n${key} `);
  if (at < 0) return 0;
  if (at > 0) at++;
  let n = 0;
  for (let i = at + key.length + 1; i < text.length; i++) {
    const d = text.charCodeAt(i) - 48;
    if (d < 0 || d > 9) break;
    n = n * 10 + d;
  }
  return n;
}

export function errText(e: unknown): string {
  return (e as NodeJS.ErrnoException).code ?? (e as Error).message;
}

// ---------------------------------------------------------------------------------------------------------------
// The server's cgroups

/** Scratch for reading cgroup files (they are small: cgroup.procs of a command, event counters). */
export const SCRATCH = Buffer.allocUnsafe(64 * 1024);

/**
 * The text of an open cgroup file of one record (a value, or counters), read again from its start: cgroupfs makes it
 * anew at every pread from 0. Not for lists such as cgroup.procs, whose iterator a pread does not restart (the
 * kernel returned the previous read's list).
 */
export function preadText(fd: number): string {
  try {
    const n = readSync(fd, SCRATCH, 0, SCRATCH.length, 0);
    return SCRATCH.toString('latin1', 0, n);
  } catch {
    return '';
  }
}

export function closeAll(fds: number[]): void {
  for (const fd of fds) {
    try {
      closeSync(fd);
    } catch {
      // already closed
    }
  }
}

export function writeOptional(path: string, value: string): void {
  try {
    writeFileSync(path, value);
  } catch {
    // absent (no swap accounting) or refused: the main limit stands
  }
}
