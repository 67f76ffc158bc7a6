/**
 * Per-command cgroups: every command Corral starts (sandboxed or not, pipes or PTY) runs in a cgroup of its own with
 * `pids.max` and a memory limit, so a fork bomb or a memory hog stays inside its own budget; terminating a command
 * kills its whole cgroup (descendants that left the process group with `setsid` included); `process/exited` says
 * which limit was hit.
 *
 * Layout: the server makes one directory in its own cgroup, `corral-<tag>` (serverTag.ts), and one `p-<n>` in it
 * per command:
 *   - cgroup v2: `<our cgroup>/corral-<tag>/p-<n>` with the pids and memory controllers enabled down to it. When our
 *     cgroup is not the root and holds only this process (a delegated scope, e.g. `systemd-run --user --scope -p
 *     Delegate=yes`), the server first moves itself into `corral-<tag>/server` (a cgroup with processes cannot give
 *     controllers to its children). A cgroup that also holds other processes cannot be used.
 *   - cgroup v1: `<pids mount>/<our pids cgroup>/corral-<tag>/p-<n>` and the same under the memory mount.
 * The child enters its cgroup before it execs: the native spawner's child writes "0" into each entry file (see
 * ProcessCgroup.entryFiles: v1 `tasks`, v2 `cgroup.procs`) between clone and exec, through descriptors the server
 * keeps open; node-pty and child_process children run a two-line bash prologue that does the same and then execs
 * the command (see wrapArgv).
 *
 * Killing a cgroup: v2 writes `cgroup.kill`; v1 (and v2 kernels before 5.14) first sets `pids.max` to 0, so nothing
 * in it can fork any more, then SIGKILLs every pid in `cgroup.procs` until it is empty.
 * A cgroup is removed once its command has closed and it is empty; one that still holds processes (a daemon the
 * command left behind) keeps its limits and is retried every second. At server exit, and by the native group
 * watchdog if the server dies any other way, every process in our cgroups is killed and the directories removed;
 * a later server removes the cgroups of dead servers at start.
 *
 * Where neither version can be used (no write access, controllers not delegated), commands run without a cgroup:
 * the server says so at start and in `status` (host/info), never silently. Env CORRAL_CGROUPS=0 turns the cgroups
 * off; CORRAL_CGROUPS=v1 or v2 insists on one version.
 */
import {
  accessSync,
  closeSync,
  constants,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  rmdirSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { totalmem } from 'node:os';
import { type GroupWatchdog, groupWatchdog } from '../platform/watchdog.js';
import { deadServerEntries, formatTag, ownTag, parseTag } from './serverTag.js';

export type LimitKind = 'pids' | 'memory';

/** What a command may use: the values written into its cgroup. */
export interface ResourceLimits {
  pidsMax: number;
  memoryMaxBytes: number;
}

/** What the server can do with cgroups, for the start-up log and host/info. */
export interface CgroupStatus {
  version: 'v2' | 'v1' | 'none';
  /** The limits that are enforced. */
  enforced: LimitKind[];
  /** The server's cgroup directories (one per hierarchy). */
  dirs: string[];
  /** Why cgroups, or one of the limits, cannot be used; null when everything works. */
  problem: string | null;
}

export class CgroupError extends Error {}

/** The default pids.max of a command. */
export const DEFAULT_PIDS_MAX = 4096;
/** The default memory limit of a command: this fraction of the memory the server itself may use. */
export const DEFAULT_MEMORY_FRACTION = 0.5;

/** How many commands' cgroups are kept for reuse after they closed (mkdir and rmdir cost ~0.1 ms each on v1). */
const POOL_MAX = 64;
/** How often cgroups left populated after their command closed are retried for removal. */
const LINGER_RETRY_MS = 1000;

// ---------------------------------------------------------------------------------------------------------------
// Reading the system

interface MountInfo {
  root: string;
  mountPoint: string;
  fsType: string;
  superOptions: string[];
}

function unescapeMount(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)));
}

function readMounts(): MountInfo[] {
  let text: string;
  try {
    text = readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return [];
  }
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
 * Where cgroup (v1) and cgroup2 filesystems are mounted in this mount namespace, plus /sys/fs/cgroup when it is a
 * mount of its own (the tmpfs holding the v1 hierarchies); none below another.
 */
export function cgroupMountPoints(): string[] {
  const points = readMounts()
    .filter((m) => m.fsType === 'cgroup' || m.fsType === 'cgroup2' || m.mountPoint === '/sys/fs/cgroup')
    .map((m) => m.mountPoint);
  return [...new Set(points)].filter((p) => !points.some((q) => q !== p && p.startsWith(`${q}/`)));
}

/** /proc/self/cgroup: controller list ('' for v2) → our path in that hierarchy. */
function readOwnCgroups(): Map<string, string> {
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
function dirIn(mount: MountInfo, path: string): string | null {
  const root = mount.root === '/' ? '' : mount.root;
  if (root && path !== root && !path.startsWith(`${root}/`)) return null;
  const rel = path.slice(root.length);
  return rel === '' || rel === '/' ? mount.mountPoint : `${mount.mountPoint}${rel}`;
}

function readText(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}

function writable(dir: string): boolean {
  try {
    accessSync(dir, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

/** The value of the line `<key> <number>` in a cgroup file of counters (0 when absent). */
function counter(text: string | null, key: string): number {
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

function errText(e: unknown): string {
  return (e as NodeJS.ErrnoException).code ?? (e as Error).message;
}

// ---------------------------------------------------------------------------------------------------------------
// One hierarchy's directory of this server

interface Hierarchy {
  /** The server's directory: corral-<tag>. */
  base: string;
  /** Limit files that live in this hierarchy. */
  pids: boolean;
  memory: boolean;
}

interface Setup {
  version: 'v2' | 'v1';
  hierarchies: Hierarchy[];
  /** v2: the kernel has cgroup.kill. */
  cgroupKill: boolean;
  /** The server moved itself into corral-<tag>/server (v2): the base stays until a later server removes it. */
  serverLeaf: boolean;
  problem: string | null;
}

const BASE_PREFIX = 'corral-';

function baseName(): string {
  return `${BASE_PREFIX}${formatTag(ownTag())}`;
}

/** Kills what a cgroup directory holds (v2 cgroup.kill, else pids.max 0 and SIGKILL to every listed pid). */
function killDir(dir: string, useCgroupKill: boolean): number {
  if (useCgroupKill) {
    try {
      writeFileSync(`${dir}/cgroup.kill`, '1');
      return 0;
    } catch {
      // kernel < 5.14 or gone: fall back to the listed pids
    }
  }
  try {
    writeFileSync(`${dir}/pids.max`, '0');
  } catch {
    // no pids controller here
  }
  return killListed(`${dir}/cgroup.procs`);
}

/** SIGKILLs every pid listed in a cgroup.procs file; returns how many were listed. */
function killListed(procs: string): number {
  let n = 0;
  for (const s of (readText(procs) ?? '').split('\n')) {
    const pid = Number(s);
    if (!(pid > 1)) continue;
    n++;
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  return n;
}

function tryRmdir(dir: string): boolean {
  try {
    rmdirSync(dir);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'ENOENT';
  }
}

/** Subdirectories of a server base that hold commands (p-<n>) or the server itself (server). */
function children(base: string): string[] {
  try {
    return readdirSync(base, { withFileTypes: true })
      .filter((d) => d.isDirectory())
      .map((d) => d.name);
  } catch {
    return [];
  }
}

/**
 * Removes the directories of dead servers next to ours (same parent cgroup): kills what they still hold, then
 * removes them, waiting a little for the killed processes to go. Only entries named corral-<tag> whose tag is dead
 * and whose directory belongs to our uid.
 */
function sweepStale(parent: string, useCgroupKill: boolean): string[] {
  const removed: string[] = [];
  for (const name of deadServerEntries(parent, BASE_PREFIX)) {
    const dir = `${parent}/${name}`;
    // Exactly corral-<tag>, a directory of our uid (cgroupfs has no symlinks; the owner says whose it is).
    if (formatTag(parseTag(name.slice(BASE_PREFIX.length))!) !== name.slice(BASE_PREFIX.length)) continue;
    try {
      const st = statSync(dir);
      if (!st.isDirectory() || st.uid !== process.geteuid?.()) continue;
    } catch {
      continue;
    }
    const deadline = Date.now() + 1000;
    for (;;) {
      const kids = children(dir);
      for (const k of kids) killDir(`${dir}/${k}`, useCgroupKill);
      killDir(dir, useCgroupKill);
      for (const k of kids) tryRmdir(`${dir}/${k}`);
      if (tryRmdir(dir)) {
        removed.push(dir);
        break;
      }
      if (Date.now() > deadline) break;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
    }
  }
  return removed;
}

function setupV2(force: boolean): Setup | string {
  const own = readOwnCgroups().get('');
  if (own === undefined) return 'cgroup v2: this process is in no cgroup v2 hierarchy';
  const mount = readMounts().find((m) => m.fsType === 'cgroup2' && dirIn(m, own) !== null);
  if (!mount) return 'cgroup v2: the hierarchy is not mounted';
  const dir = dirIn(mount, own)!;
  if (!writable(dir)) return `cgroup v2: ${dir} is not writable by this user (not delegated)`;
  const available = (readText(`${dir}/cgroup.controllers`) ?? '').trim().split(/\s+/);
  const wanted = (['pids', 'memory'] as const).filter((c) => available.includes(c));
  const missing = (['pids', 'memory'] as const).filter((c) => !available.includes(c));
  if (wanted.length < 2 && !force)
    return `cgroup v2: the ${missing.join(' and ')} controller${missing.length > 1 ? 's are' : ' is'} not available in ${dir}`;
  // The real root cgroup (the only one without cgroup.type) may hold processes and give its children controllers;
  // any other, the root of a cgroup namespace (a container) included, may not.
  const isRoot = !existsSync(`${dir}/cgroup.type`);
  const enabled = (readText(`${dir}/cgroup.subtree_control`) ?? '').trim().split(/\s+/);
  const toEnable = wanted.filter((c) => !enabled.includes(c));
  let serverLeaf = false;
  if (toEnable.length > 0 && !isRoot) {
    // A non-root cgroup with processes cannot enable controllers for its children: move out of it first, if we are
    // alone in it.
    const procs = (readText(`${dir}/cgroup.procs`) ?? '').trim().split(/\s+/).filter(Boolean).map(Number);
    if (procs.some((p) => p !== process.pid))
      return `cgroup v2: ${dir} also holds other processes, so it cannot give controllers to its children; start corral in a cgroup of its own (e.g. systemd-run --user --scope -p Delegate=yes corral …)`;
    serverLeaf = true;
  }
  sweepStale(dir, true);
  const base = `${dir}/${baseName()}`;
  try {
    mkdirSync(base);
    if (serverLeaf) {
      mkdirSync(`${base}/server`);
      writeFileSync(`${base}/server/cgroup.procs`, '0');
    }
    if (toEnable.length > 0)
      writeFileSync(`${dir}/cgroup.subtree_control`, toEnable.map((c) => `+${c}`).join(' '));
    if (wanted.length > 0)
      writeFileSync(`${base}/cgroup.subtree_control`, wanted.map((c) => `+${c}`).join(' '));
  } catch (e) {
    if (serverLeaf) {
      try {
        writeFileSync(`${dir}/cgroup.procs`, '0');
      } catch {
        // stays in the leaf: harmless
      }
      tryRmdir(`${base}/server`);
    }
    tryRmdir(base);
    return `cgroup v2: cannot set up ${base}: ${errText(e)}`;
  }
  return {
    version: 'v2',
    hierarchies: [{ base, pids: wanted.includes('pids'), memory: wanted.includes('memory') }],
    cgroupKill: existsSync(`${base}/cgroup.kill`),
    serverLeaf,
    problem:
      missing.length > 0
        ? `cgroup v2: the ${missing.join(' and ')} controller${missing.length > 1 ? 's are' : ' is'} not available in ${dir}: ${missing.join(' and ')} not limited`
        : null,
  };
}

function setupV1(force: boolean): Setup | string {
  const own = readOwnCgroups();
  const mounts = readMounts().filter((m) => m.fsType === 'cgroup');
  const hierarchies: Hierarchy[] = [];
  const problems: string[] = [];
  for (const controller of ['pids', 'memory'] as const) {
    const mount = mounts.find((m) => m.superOptions.includes(controller));
    const path = [...own].find(([k]) => k.split(',').includes(controller))?.[1];
    const dir = mount && path !== undefined ? dirIn(mount, path) : null;
    if (!dir) {
      problems.push(`the ${controller} controller is not mounted`);
      continue;
    }
    if (!writable(dir)) {
      problems.push(`${dir} is not writable by this user`);
      continue;
    }
    hierarchies.push({
      base: `${dir}/${baseName()}`,
      pids: controller === 'pids',
      memory: controller === 'memory',
    });
  }
  if (hierarchies.length === 0 || (hierarchies.length < 2 && !force))
    return `cgroup v1: ${problems.join('; ')}`;
  const made: Hierarchy[] = [];
  for (const h of hierarchies) {
    const parent = h.base.slice(0, h.base.lastIndexOf('/'));
    sweepStale(parent, false);
    try {
      mkdirSync(h.base);
      made.push(h);
    } catch (e) {
      problems.push(`cannot create ${h.base}: ${errText(e)}`);
    }
  }
  if (made.length === 0 || (made.length < 2 && !force)) {
    for (const h of made) tryRmdir(h.base);
    return `cgroup v1: ${problems.join('; ')}`;
  }
  const missing = (['pids', 'memory'] as const).filter((c) => !made.some((h) => h[c]));
  return {
    version: 'v1',
    // The pids hierarchy first: processes are found and killed there (pids.max 0 stops their forks).
    hierarchies: made.sort((a, b) => Number(b.pids) - Number(a.pids)),
    cgroupKill: false,
    serverLeaf: false,
    problem:
      missing.length > 0 ? `cgroup v1: ${problems.join('; ')}: ${missing.join(' and ')} not limited` : null,
  };
}

// ---------------------------------------------------------------------------------------------------------------
// The server's cgroups

/** Scratch for reading cgroup files (they are small: cgroup.procs of a command, event counters). */
const SCRATCH = Buffer.allocUnsafe(64 * 1024);

/**
 * The text of an open cgroup file of one record (a value, or counters), read again from its start: cgroupfs makes it
 * anew at every pread from 0. Not for lists such as cgroup.procs, whose iterator a pread does not restart (the
 * kernel returned the previous read's list).
 */
function preadText(fd: number): string {
  try {
    const n = readSync(fd, SCRATCH, 0, SCRATCH.length, 0);
    return SCRATCH.toString('latin1', 0, n);
  } catch {
    return '';
  }
}

function closeAll(fds: number[]): void {
  for (const fd of fds) {
    try {
      closeSync(fd);
    } catch {
      // already closed
    }
  }
}

/**
 * A command's cgroup (one directory per hierarchy). It keeps its files open for as long as it exists: opening a
 * cgroupfs file costs ~40 µs, reading an open one again ~2 µs, and a cgroup is read at every exit and close.
 */
export class ProcessCgroup {
  /** Who is in it: `cgroup.procs` of each hierarchy. */
  readonly procsFiles: string[];
  /**
   * What a child writes "0" into to enter it (paths, for a child started through the bash prologue): v2
   * `cgroup.procs`; v1 `tasks`, which moves only the writing thread (our child has no other) and so, unlike
   * `cgroup.procs`, takes no system-wide lock: measured 5-45 µs per move against 6-9 ms after an idle spell
   * (cgroup.procs waits for an RCU grace period and blocks every fork in the system meanwhile).
   */
  readonly entryFiles: string[];
  /** The same files, open for writing, for the native spawner. */
  readonly entryFds: number[];
  /** v2: the cgroup's directory, open, for the native spawner to create the child in it (CLONE_INTO_CGROUP); -1 on v1. */
  readonly dirFd: number;
  private readonly pidsEventsFd: number;
  private readonly oomFd: number;
  /** Whether anything is in it: v2 cgroup.events ("populated 1"), v1 pids.current; -1: read cgroup.procs. */
  private readonly populatedFd: number;
  private killed = false;
  private released = false;
  private lingering = false;
  private removed = false;
  /** Event counters when this cgroup was handed out (a reused cgroup keeps its old counts). */
  private baseline = { pids: 0, oom: 0 };
  /** What limitHit read when the command exited. */
  private atExit: { counters: { pids: number; oom: number }; empty: boolean } | null = null;
  /** The limits written into it. */
  limits: ResourceLimits | null = null;

  /** Opens the cgroup's files; throws (closing what it opened) when one cannot be opened. */
  constructor(
    private readonly host: CgroupHost,
    readonly dirs: string[],
    private readonly setup: Setup,
  ) {
    this.procsFiles = dirs.map((d) => `${d}/cgroup.procs`);
    this.entryFiles = dirs.map((d) => `${d}/${setup.version === 'v2' ? 'cgroup.procs' : 'tasks'}`);
    const opened: number[] = [];
    const open = (path: string, flags: number) => {
      const fd = openSync(path, flags); // libuv opens with O_CLOEXEC
      opened.push(fd);
      return fd;
    };
    try {
      this.entryFds = this.entryFiles.map((f) => open(f, constants.O_WRONLY));
      this.dirFd = setup.version === 'v2' ? open(dirs[0]!, constants.O_RDONLY | constants.O_DIRECTORY) : -1;
      const pidsAt = setup.hierarchies.findIndex((h) => h.pids);
      const memAt = setup.hierarchies.findIndex((h) => h.memory);
      this.pidsEventsFd = pidsAt >= 0 ? open(`${dirs[pidsAt]}/pids.events`, constants.O_RDONLY) : -1;
      this.oomFd =
        memAt >= 0
          ? open(
              `${dirs[memAt]}/${setup.version === 'v2' ? 'memory.events' : 'memory.oom_control'}`,
              constants.O_RDONLY,
            )
          : -1;
      this.populatedFd =
        setup.version === 'v2'
          ? open(`${dirs[0]}/cgroup.events`, constants.O_RDONLY)
          : pidsAt >= 0
            ? open(`${dirs[pidsAt]}/pids.current`, constants.O_RDONLY)
            : -1;
    } catch (e) {
      closeAll(opened);
      throw e;
    }
    this.baseline = this.counters();
  }

  /** Writes the limits (only those that differ from what the cgroup has). Throws CgroupError. */
  apply(limits: ResourceLimits): void {
    const old = this.limits;
    this.setup.hierarchies.forEach((h, i) => {
      const dir = this.dirs[i]!;
      try {
        if (h.pids && old?.pidsMax !== limits.pidsMax)
          writeFileSync(`${dir}/pids.max`, String(limits.pidsMax));
        if (h.memory && old?.memoryMaxBytes !== limits.memoryMaxBytes) {
          const bytes = String(limits.memoryMaxBytes);
          if (this.setup.version === 'v2') {
            writeFileSync(`${dir}/memory.max`, bytes);
            writeOptional(`${dir}/memory.swap.max`, '0');
          } else {
            // memsw (memory + swap) must never be below the memory limit: raise it first when growing.
            if (old && limits.memoryMaxBytes > old.memoryMaxBytes)
              writeOptional(`${dir}/memory.memsw.limit_in_bytes`, bytes);
            writeFileSync(`${dir}/memory.limit_in_bytes`, bytes);
            writeOptional(`${dir}/memory.memsw.limit_in_bytes`, bytes);
          }
        }
      } catch (e) {
        this.limits = null; // partly written: rewrite everything next time
        throw new CgroupError(`cannot set the limits of ${dir}: ${errText(e)}`);
      }
    });
    this.limits = { ...limits };
  }

  private counters(): { pids: number; oom: number } {
    return {
      pids: this.pidsEventsFd >= 0 ? counter(preadText(this.pidsEventsFd), 'max') : 0,
      oom: this.oomFd >= 0 ? counter(preadText(this.oomFd), 'oom_kill') : 0,
    };
  }

  /** Which limit the command ran into since it was given this cgroup: memory (an OOM kill) before pids. */
  limitHit(): LimitKind | null {
    const c = this.counters();
    // Read once the command has exited (and been reaped): if nothing is left in it, nothing can come back, and the
    // release needs no more reads.
    this.atExit = { counters: c, empty: !this.populated() };
    if (c.oom > this.baseline.oom) return 'memory';
    if (c.pids > this.baseline.pids) return 'pids';
    return null;
  }

  /** Whether it is empty now; known without a read when it was empty when its command exited. */
  emptyNow(): boolean {
    return this.atExit?.empty === true || !this.populated();
  }

  /** Whether any process is in it (v1: or a zombie not yet reaped). */
  populated(): boolean {
    if (this.populatedFd < 0) return (readText(this.procsFiles[0]!) ?? '').trim() !== '';
    const text = preadText(this.populatedFd);
    return this.setup.version === 'v2' ? counter(text, 'populated') > 0 : Number(text) > 0;
  }

  /** SIGKILLs everything in it, now and (v1) until it is empty. */
  kill(): void {
    if (this.removed) return;
    this.killed = true;
    if (killDir(this.dirs[0]!, this.setup.cgroupKill) > 0) this.host.finishKill(this);
  }

  /** One more round of a v1 kill; true when nothing is left. */
  killRound(): boolean {
    if (this.removed) return true;
    return killListed(this.procsFiles[0]!) === 0;
  }

  /**
   * The command has closed: the cgroup goes back to the pool, is removed, or (when processes are still in it) waits
   * until it is empty. Returns true in that last case only: the caller may still kill it; otherwise it must forget
   * it (a pooled cgroup goes to the next command).
   */
  release(): boolean {
    if (this.released) return this.lingering;
    this.released = true;
    this.lingering = this.host.released(this);
    return this.lingering;
  }

  /** For the host: reset for the next command (after release, when empty and not killed). */
  recycle(): boolean {
    if (this.killed) return false;
    this.released = false;
    this.lingering = false;
    this.baseline = this.atExit?.empty ? this.atExit.counters : this.counters();
    this.atExit = null;
    return true;
  }

  /** Removes the directories (and closes the files once they are all gone); false while one is still busy. */
  remove(): boolean {
    let all = true;
    for (const d of this.dirs) if (!tryRmdir(d)) all = false;
    if (all && !this.removed) {
      this.removed = true;
      closeAll(
        [...this.entryFds, this.dirFd, this.pidsEventsFd, this.oomFd, this.populatedFd].filter(
          (fd) => fd >= 0,
        ),
      );
    }
    return all;
  }
}

function writeOptional(path: string, value: string): void {
  try {
    writeFileSync(path, value);
  } catch {
    // absent (no swap accounting) or refused: the main limit stands
  }
}

/**
 * This process's cgroups: set up once (cgroupHost()), shared by every ExecServer in the process. Hands out a cgroup
 * per command (acquire), pools and removes them, and cleans up at exit.
 */
export class CgroupHost {
  readonly status: CgroupStatus;
  private readonly setup: Setup | null;
  private next = 0;
  private readonly pool: ProcessCgroup[] = [];
  private readonly live = new Set<ProcessCgroup>();
  private readonly lingering = new Set<ProcessCgroup>();
  private lingerTimer: NodeJS.Timeout | null = null;
  private lingerRounds = 0;
  private readonly killing = new Map<ProcessCgroup, number>();
  private killTimer: NodeJS.Timeout | null = null;
  private disposed = false;
  private watched = false;

  constructor(setup: Setup | null, problem: string | null) {
    this.setup = setup;
    this.status = setup
      ? {
          version: setup.version,
          enforced: (['pids', 'memory'] as const).filter((k) => setup.hierarchies.some((h) => h[k])),
          dirs: setup.hierarchies.map((h) => h.base),
          problem: setup.problem,
        }
      : { version: 'none', enforced: [], dirs: [], problem };
  }

  get usable(): boolean {
    return this.setup !== null && !this.disposed;
  }

  /** A cgroup with these limits for a new command. Throws CgroupError. */
  acquire(limits: ResourceLimits): ProcessCgroup {
    if (!this.setup || this.disposed) throw new CgroupError(this.status.problem ?? 'cgroups are not in use');
    let cg: ProcessCgroup | undefined;
    while (!cg && this.pool.length > 0) {
      const pooled = this.pool.pop()!;
      try {
        pooled.apply(limits);
        cg = pooled;
      } catch {
        pooled.remove(); // e.g. v1 refuses a memory limit below what it still holds (page cache): a fresh one
      }
    }
    if (!cg) {
      const n = ++this.next;
      const dirs: string[] = [];
      try {
        for (const h of this.setup.hierarchies) {
          const d = `${h.base}/p-${n}`;
          mkdirSync(d);
          dirs.push(d);
        }
      } catch (e) {
        for (const d of dirs) tryRmdir(d);
        throw new CgroupError(`cannot create the command's cgroup: ${errText(e)}`);
      }
      try {
        cg = new ProcessCgroup(this, dirs, this.setup);
      } catch (e) {
        for (const d of dirs) tryRmdir(d);
        throw new CgroupError(`cannot open the command's cgroup: ${errText(e)}`);
      }
      try {
        cg.apply(limits);
      } catch (e) {
        cg.remove();
        throw e;
      }
    }
    this.live.add(cg);
    return cg;
  }

  /** A command's cgroup after its command closed (ProcessCgroup.release); true when it is left lingering. */
  released(cg: ProcessCgroup): boolean {
    this.live.delete(cg);
    if (cg.emptyNow()) {
      if (!this.disposed && this.pool.length < POOL_MAX && cg.recycle()) {
        this.pool.push(cg);
        return false;
      }
      if (cg.remove()) return false;
    }
    this.lingering.add(cg);
    this.scheduleLinger();
    return true;
  }

  private scheduleLinger(): void {
    if (this.lingerTimer || this.lingering.size === 0) return;
    this.lingerTimer = setTimeout(() => {
      this.lingerTimer = null;
      this.lingerRounds++;
      for (const cg of this.lingering) if (!cg.populated() && cg.remove()) this.lingering.delete(cg);
      this.scheduleLinger();
    }, LINGER_RETRY_MS);
    this.lingerTimer.unref();
  }

  /** v1 kills: repeat until the cgroup is empty (a fork in flight when pids.max went to 0 can still land). */
  finishKill(cg: ProcessCgroup): void {
    this.killing.set(cg, this.killing.get(cg) ?? 0);
    if (this.killTimer) return;
    const round = () => {
      this.killTimer = null;
      for (const [c, n] of this.killing) {
        if (c.killRound() || n >= 500) this.killing.delete(c);
        else this.killing.set(c, n + 1);
      }
      if (this.killing.size > 0) {
        this.killTimer = setTimeout(round, 5);
        this.killTimer.unref();
      }
    };
    this.killTimer = setTimeout(round, 1);
    this.killTimer.unref();
  }

  /** Cgroups not yet removed (live, lingering, pooled) and how often the lingering were retried: tests. */
  get counts(): { live: number; lingering: number; pooled: number; lingerRounds: number } {
    return {
      live: this.live.size,
      lingering: this.lingering.size,
      pooled: this.pool.length,
      lingerRounds: this.lingerRounds,
    };
  }

  /** Kills every process in our cgroups and removes them (process exit). Synchronous, best effort. */
  dispose(): void {
    if (!this.setup || this.disposed) return;
    this.disposed = true;
    const all = [...this.live, ...this.lingering, ...this.pool];
    for (const cg of all) cg.kill();
    const deadline = Date.now() + 200;
    let left = all;
    while (left.length > 0) {
      left = left.filter((cg) => {
        cg.killRound();
        return !cg.remove();
      });
      if (left.length === 0 || Date.now() > deadline) break;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5);
    }
    // What is left (processes still exiting) the group watchdog removes once we are gone.
    if (!this.setup.serverLeaf) for (const h of this.setup.hierarchies) tryRmdir(h.base);
  }

  /** Hands the cgroup directories to the group watchdog, which empties and removes them if this process dies. */
  attachWatchdog(hooks: Pick<GroupWatchdog, 'setCgroupCleanup'> | null): void {
    if (!this.setup || !hooks || this.watched) return;
    this.watched = true;
    try {
      hooks.setCgroupCleanup(
        this.setup.version === 'v2' ? 2 : 1,
        this.setup.hierarchies.map((h) => h.base),
        !this.setup.serverLeaf,
      );
    } catch {
      // ENOSPC (more than 4 copies of this module in one process) or no watchdog: removed at exit only
    }
  }
}

/** The memory this process may use: RAM, or less when its own cgroup (or an ancestor) has a lower limit. */
function availableMemory(): number {
  let limit = totalmem();
  const own = readOwnCgroups();
  const mounts = readMounts();
  const consider = (mount: MountInfo | undefined, path: string | undefined, file: string) => {
    const dir = mount && path !== undefined ? dirIn(mount, path) : null;
    if (!mount || !dir) return;
    for (let d = dir; d.startsWith(mount.mountPoint); d = d.slice(0, d.lastIndexOf('/'))) {
      const v = Number((readText(`${d}/${file}`) ?? '').trim());
      if (Number.isFinite(v) && v > 0 && v < limit) limit = v;
      if (d === mount.mountPoint) break;
    }
  };
  const v2 = own.get('');
  consider(
    mounts.find((m) => m.fsType === 'cgroup2' && v2 !== undefined && dirIn(m, v2) !== null),
    v2,
    'memory.max',
  );
  consider(
    mounts.find((m) => m.fsType === 'cgroup' && m.superOptions.includes('memory')),
    [...own].find(([k]) => k.split(',').includes('memory'))?.[1],
    'memory.limit_in_bytes',
  );
  return limit;
}

/** The limits a command gets unless the server or the start asks for others. */
export function defaultLimits(): ResourceLimits {
  const mib = 1024 * 1024;
  return {
    pidsMax: DEFAULT_PIDS_MAX,
    memoryMaxBytes: Math.max(64 * mib, Math.floor((availableMemory() * DEFAULT_MEMORY_FRACTION) / mib) * mib),
  };
}

/** Sets up this process's cgroups (see the module comment); never throws. */
export function setupCgroups(mode = process.env.CORRAL_CGROUPS): CgroupHost {
  if (process.platform !== 'linux')
    return new CgroupHost(null, `cgroups are Linux only (this is ${process.platform})`);
  if (mode === '0' || mode === 'off')
    return new CgroupHost(null, 'cgroups are turned off (CORRAL_CGROUPS=0)');
  const tried: string[] = [];
  const order: ['v2' | 'v1', boolean][] =
    mode === 'v2'
      ? [['v2', true]]
      : mode === 'v1'
        ? [['v1', true]]
        : [
            ['v2', false],
            ['v1', false],
            ['v2', true],
            ['v1', true],
          ];
  for (const [version, force] of order) {
    const r = version === 'v2' ? setupV2(force) : setupV1(force);
    if (typeof r !== 'string') return new CgroupHost(r, null);
    if (!tried.includes(r)) tried.push(r);
  }
  return new CgroupHost(
    null,
    `no usable cgroup, commands run without pids and memory limits: ${tried.join('; ')}`,
  );
}

let host: CgroupHost | null = null;
/** This process's cgroups, set up on first use; removed at exit (and by the group watchdog if we die). */
export function cgroupHost(): CgroupHost {
  if (!host) {
    const h = setupCgroups();
    host = h;
    if (h.usable) {
      process.once('exit', () => h.dispose());
      h.attachWatchdog(groupWatchdog);
    }
  }
  return host;
}

/**
 * The argv that makes a child started without our spawner (node-pty, child_process) enter its cgroup before the
 * command runs: bash writes "0" into each entry file (moving itself), then execs the command with its argv[0].
 * Extra shell text (e.g. `unset TERM; `) runs between the two.
 */
export function wrapArgv(
  entryFiles: string[],
  file: string,
  argv: string[],
  between = '',
  env?: Record<string, string>,
): { file: string; args: string[] } {
  const enter = entryFiles.map((_, i) => `echo 0 >"$${i + 1}" || exit 127; `).join('');
  const shift = entryFiles.length > 0 ? `shift ${entryFiles.length}; ` : '';
  const script = `${enter}${shift}${between}${env ? keepEnv(env) : ''}exec -a "$0" "$@"`;
  // --norc: bash would read ~/.bashrc when its stdin is a socket (child_process's pipes), taking it for rshd.
  return {
    file: '/bin/bash',
    args: ['--norc', '-c', script, argv[0] ?? file, ...entryFiles, file, ...argv.slice(1)],
  };
}

/**
 * Undoes what bash adds to the environment of what it execs, so that the command sees exactly `env`: PWD (unset when
 * not given) and SHLVL. Bash's `exec` re-exports SHLVL as its level minus one: a given SHLVL comes out as given (bash
 * raised it by one at start), and an absent one is bound, by a nameref, to an array element, which is never exported.
 */
function keepEnv(env: Record<string, string>): string {
  const pwd = env.PWD === undefined ? 'unset PWD; ' : '';
  const shlvl =
    env.SHLVL === undefined
      ? 'unset SHLVL; declare -a corral_shlvl; declare -n SHLVL="corral_shlvl[0]"; '
      : '';
  return pwd + shlvl;
}
