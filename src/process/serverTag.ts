/**
 * Who left this behind? Corral names what it leaves on shared ground (its private directory in /tmp, its cgroups)
 * with a tag of the server process that made it: `<pid namespace inode>.<pid>.<start time>`. A later server removes
 * what a dead one left: a tag whose pid namespace is ours and whose pid is gone, or now belongs to a process that
 * started at another time (pid reuse). A tag from another pid namespace is never judged (its pid means nothing
 * here), and a live server's things are never touched.
 *
 * Removal never follows a symbolic link: sweepStaleDirs opens each directory with O_NOFOLLOW and walks the tree
 * through directory file descriptors (/proc/self/fd/N/name), so an entry swapped for a symlink while we walk is
 * unlinked, never followed; and it only removes directories owned by our uid with mode 0700.
 */
import {
  closeSync,
  constants,
  fstatSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmdirSync,
  unlinkSync,
} from 'node:fs';

export interface ServerTag {
  pidNs: string;
  pid: number;
  startTime: string;
}

/** Field 22 of /proc/<pid>/stat (clock ticks after boot), or null when the process does not exist. */
export function processStartTime(pid: number | 'self'): string | null {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // comm (field 2) may hold spaces and parentheses: count from the last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return fields[19] ?? null;
}

function pidNamespace(): string {
  try {
    return /\[(\d+)\]/.exec(readlinkSync('/proc/self/ns/pid'))?.[1] ?? '0';
  } catch {
    return '0';
  }
}

let own: ServerTag | null = null;

/** This process's tag. */
export function ownTag(): ServerTag {
  own ??= { pidNs: pidNamespace(), pid: process.pid, startTime: processStartTime('self') ?? '0' };
  return own;
}

export function formatTag(t: ServerTag): string {
  return `${t.pidNs}.${t.pid}.${t.startTime}`;
}

/** The tag at the start of `s` (`<ns>.<pid>.<start>`, then the end or a non-digit), or null. */
export function parseTag(s: string): ServerTag | null {
  const m = /^(\d+)\.(\d+)\.(\d+)(?!\d)/.exec(s);
  return m ? { pidNs: m[1]!, pid: Number(m[2]), startTime: m[3]! } : null;
}

/** True only when the tag's server is certainly gone: our pid namespace, and no process with that pid and start. */
export function isDeadServer(t: ServerTag): boolean {
  const me = ownTag();
  if (t.pidNs !== me.pidNs || me.pidNs === '0') return false;
  if (t.pid === me.pid) return t.startTime !== me.startTime;
  const start = processStartTime(t.pid);
  return start === null || start !== t.startTime;
}

function emptyDir(fd: number): void {
  const at = `/proc/self/fd/${fd}`;
  let names: string[];
  try {
    names = readdirSync(at);
  } catch {
    return;
  }
  for (const name of names) {
    const p = `${at}/${name}`;
    let child: number | null = null;
    try {
      child = openSync(p, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
    } catch {
      child = null; // not a directory (or a symlink): unlink the entry itself
    }
    if (child === null) {
      try {
        unlinkSync(p);
      } catch {
        // gone
      }
      continue;
    }
    try {
      emptyDir(child);
    } finally {
      closeSync(child);
    }
    try {
      rmdirSync(p);
    } catch {
      // not empty after all: leave it
    }
  }
}

/** Whether an open directory is ours to remove: owned by our uid, with `mode` (0700 for our private directories). */
function ownedFd(fd: number, mode: number): boolean {
  const st = fstatSync(fd);
  return st.isDirectory() && st.uid === process.geteuid?.() && (st.mode & 0o777) === mode;
}

/** The entries of `dir` named `<prefix><tag>…` whose tag is a dead server's (isDeadServer). */
export function deadServerEntries(dir: string, prefix: string): string[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  return names.filter((name) => {
    if (!name.startsWith(prefix)) return false;
    const tag = parseTag(name.slice(prefix.length));
    return tag !== null && isDeadServer(tag);
  });
}

/**
 * Removes the leftovers of dead servers in `dir`: entries named `<prefix><tag>…` whose tag is dead and that are real
 * directories (not symlinks) owned by our uid with mode 0700. Returns the paths removed.
 */
export function sweepStaleDirs(dir: string, prefix: string): string[] {
  const removed: string[] = [];
  for (const name of deadServerEntries(dir, prefix)) {
    const path = `${dir}/${name}`;
    let fd: number;
    try {
      fd = openSync(path, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
    } catch {
      continue; // a symlink or not a directory: not ours to judge
    }
    let ours: boolean;
    try {
      ours = ownedFd(fd, 0o700);
      if (ours) emptyDir(fd);
    } finally {
      closeSync(fd);
    }
    if (!ours) continue;
    try {
      rmdirSync(path);
      removed.push(path);
    } catch {
      // replaced meanwhile, or refilled: leave it
    }
  }
  return removed;
}
