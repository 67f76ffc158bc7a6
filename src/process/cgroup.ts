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
 * CPU: all the commands of a server run in one CPU group, `corral-<tag>` itself (v1: the base under the cpu mount,
 * which commands enter directly; v2: our directory gives the cpu controller to the base, not below it), so together
 * they weigh as one program against the user's others. Without it each command, being a session of its own
 * (setsid), is an autogroup of its own to the scheduler (kernel.sched_autogroup_enabled, on by default) and weighs
 * like a whole desktop session: an agent running hundreds of short commands a second took the CPU of the panel, the
 * browser and the server itself (test/bench/panel.bench.ts: the panel's lag p99 318-342 ms ungrouped, 155-178 ms
 * grouped; the commands' own throughput on a saturated machine is lower by as much as the others now get). Inside
 * the group the scheduler shares by thread. Optional: where the cpu controller cannot be had the limits still apply,
 * and host/info says why (cpuProblem); CORRAL_CGROUP_CPU=0 turns it off.
 *
 * The headless server joins that group itself (joinCpuGroup; v2 with `corral-<tag>/server` is in it already), so the
 * server and its commands weigh as one program (issue 32). A group only its commands are in is idle between them,
 * and the scheduler (EEVDF, Linux 6.6+) keeps an entity's lag across its sleeps: the group woke up behind at every
 * start, and each command's first run waited out the slices of whatever else ran (from the spawn to the exit of
 * `true`: 3.5-4.5 ms against 0.6 ms, start→closed p50 4.04 against 1.03 ms, on this 2-core machine under load;
 * `npm run bench -- hotpath`). With the server in it, the group is busy whenever a start is, and a new command is a
 * new task in it, placed without lag. Only the server's threads move (cgroup.procs of the cpu hierarchy; pids and
 * memory are the commands' alone), once at start-up, and back out at exit, so that the group can be removed. Processes the server spawns are in it too: the app (Electron) does not
 * join, or its windows, spawned later, would weigh with the commands.
 *
 * Where neither version can be used (no write access, controllers not delegated), commands run without a cgroup:
 * the server says so at start and in `status` (host/info), never silently. Env CORRAL_CGROUPS=0 turns the cgroups
 * off; CORRAL_CGROUPS=v1 or v2 insists on one version.
 *
 * Pids budget (issue 30, item 7): a command's pids.max alone does not keep a fork bomb from starving the others when
 * the uid may have fewer processes than that (RLIMIT_NPROC 400 against pids.max 4096: the bomb took the uid's last
 * process, and every other session's start failed with EAGAIN). So all commands together get a budget below what
 * the uid may still have (pidsBudget: RLIMIT_NPROC less the uid's tasks now less headroom for the server, and at most
 * half of what the system has left), enforced as the pids.max of the commands' parent cgroup (`corral-<tag>`), and a
 * command's default pids.max is half of it (at most 4096), so one bomb leaves the others room to start. Without a
 * usable cgroup every child gets an RLIMIT_NPROC (soft and hard) of the server's less the headroom: a bomb then
 * stops where the server can still start commands (which, RLIMIT_NPROC counting the uid's processes, may
 * themselves not fork until it is gone). Root is not bound by RLIMIT_NPROC: only the system's share applies.
 *
 * The parts: cgroupFs.ts (reading cgroupfs), cgroupSetup.ts (finding our hierarchy, sweeping dead servers' groups),
 * processCgroup.ts (one command's cgroup); this file has the limits, the host that hands cgroups out, and wrapArgv.
 */
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { totalmem } from 'node:os';
import { type GroupWatchdog, groupWatchdog } from '../platform/watchdog.js';
import {
  CgroupError,
  cgroupMountPoints,
  dirIn,
  errText,
  type MountInfo,
  readMounts,
  readOwnCgroups,
  readText,
} from './cgroupFs.js';
import {
  applySetup,
  planV1,
  planV2,
  previewSetup,
  type Setup,
  type SetupPlan,
  tryRmdir,
} from './cgroupSetup.js';
import { type CgroupOwner, type LimitKind, ProcessCgroup, type ResourceLimits } from './processCgroup.js';

export { CgroupError, cgroupMountPoints, type LimitKind, ProcessCgroup, type ResourceLimits };

/** What the server can do with cgroups, for the start-up log and host/info. */
export interface CgroupStatus {
  version: 'v2' | 'v1' | 'none';
  /** The limits that are enforced. */
  enforced: LimitKind[];
  /** The server's cgroup directories (one per hierarchy). */
  dirs: string[];
  /** Why cgroups, or one of the limits, cannot be used; null when everything works. */
  problem: string | null;
  /** The commands run in one CPU group (see "CPU" above). */
  cpuGroup: boolean;
  /** Why not; null when they are. */
  cpuProblem: string | null;
}

/** The default pids.max of a command, where the pids budget is larger than twice that. */
export const DEFAULT_PIDS_MAX = 4096;
/** The default memory limit of a command: this fraction of the memory the server itself may use. */
export const DEFAULT_MEMORY_FRACTION = 0.5;

/** How many commands' cgroups are kept for reuse after they closed (mkdir and rmdir cost ~0.1 ms each on v1). */
const POOL_MAX = 64;
/** Open files a command's cgroup holds, at most (entry files, events, populated, usage: ~7-10 on v1 or v2). */
const FDS_PER_CGROUP = 12;
/**
 * Pooled cgroups hold their files open: together at most this share of the server's open-files limit (a server run
 * with `--nofile=400` keeps 2, one with 20 000 the whole POOL_MAX), so that its cache never costs it a request's fds.
 */
const POOL_FD_SHARE = 16;

/** How many cgroups may be pooled with this soft limit of open files (null: unknown, the whole POOL_MAX). */
export function poolBound(openFiles: number | null): number {
  if (openFiles === null) return POOL_MAX;
  return Math.max(0, Math.min(POOL_MAX, Math.floor(openFiles / POOL_FD_SHARE / FDS_PER_CGROUP)));
}

/**
 * The soft limit `name` (`Max processes`, `Max open files`) in `limits`, the text of /proc/<pid>/limits (the kernel's:
 * nothing a command or a client writes), or null when it has no such row, says unlimited, or is not a number.
 */
export function softLimitIn(limits: string, name: string): number | null {
  const row = limits.split('\n').find((l) => l.startsWith(`${name} `));
  const soft = row?.slice(name.length).trim().split(/\s+/, 1)[0];
  const n = soft === undefined || soft === 'unlimited' || soft === '' ? Number.NaN : Number(soft);
  return Number.isFinite(n) && n >= 0 ? n : null;
}

/** This process's soft limit `name` (softLimitIn of /proc/self/limits), or null when it cannot be read. */
function softLimit(name: string): number | null {
  return softLimitIn(readText('/proc/self/limits') ?? '', name);
}
/** Cgroups a server makes as it starts, ahead of its first commands (CgroupHost.prepare): they find one pooled. */
export const PREPARED_CGROUPS = 8;
/** How often cgroups left populated after their command closed are retried for removal. */
const LINGER_RETRY_MS = 1000;

/**
 * This process's cgroups: set up once (cgroupHost()), shared by every ExecServer in the process. Hands out a cgroup
 * per command (acquire), pools and removes them, and cleans up at exit.
 */
export class CgroupHost implements CgroupOwner {
  readonly status: CgroupStatus;
  /** What all commands together may have, and how it is enforced (see "Pids budget" above). */
  readonly budget: PidsBudget & { enforcedBy: 'cgroup' | 'rlimit' | null };
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
  /** How many cgroups the pool keeps (poolBound of the open-files limit when the host was set up). */
  private readonly poolMax = poolBound(softLimit('Max open files'));
  private watched = false;
  /** v1: the cpu cgroup this process left for its commands' CPU group (joinCpuGroup), to go back to at exit. */
  private cpuHome: string | null = null;

  constructor(setup: Setup | null, problem: string | null, budget: PidsBudget = pidsBudget()) {
    this.setup = setup;
    this.budget = { ...budget, enforcedBy: budgetEnforcer(setup, budget) };
    this.status = setup ? statusOf(setup) : noCgroupStatus(problem ?? 'cgroups are not in use');
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
    if (!cg) cg = this.create(limits);
    this.live.add(cg);
    return cg;
  }

  /** A new cgroup with these limits (mkdir in each hierarchy, its files opened, the limits written). Throws CgroupError. */
  private create(limits: ResourceLimits): ProcessCgroup {
    const setup = this.setup!;
    const n = ++this.next;
    let cg: ProcessCgroup;
    const dirs: string[] = [];
    try {
      for (const h of setup.hierarchies) {
        if (h.cpu && setup.version === 'v1') {
          dirs.push(h.base); // every command enters the base of the cpu hierarchy itself
          continue;
        }
        const d = `${h.base}/p-${n}`;
        mkdirSync(d);
        dirs.push(d);
      }
    } catch (e) {
      for (const d of dirs) tryRmdir(d);
      throw new CgroupError(`cannot create the command's cgroup: ${errText(e)}`);
    }
    try {
      cg = new ProcessCgroup(this, dirs, setup);
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
    return cg;
  }

  /**
   * Makes cgroups for commands ahead of them (issue 32): the pool gets up to `count` with these limits now, so that the
   * first commands of a server take a pooled one instead of making one on their start's path (mkdir, six files opened,
   * the limits written: ~0.3 ms warm, ~3 ms for a server's first). Now, not in later turns of the event loop: made
   * while a server starts, they do not compete with its first requests. Stops at the pool's bound and at the first
   * failure (acquire then makes one, and reports why it cannot).
   */
  prepare(limits: ResourceLimits, count: number): void {
    if (!this.usable) return;
    const want = Math.min(count, this.poolMax);
    while (this.pool.length < want) {
      try {
        this.pool.push(this.create(limits));
      } catch {
        return;
      }
    }
  }

  /** A command's cgroup after its command closed (ProcessCgroup.release); true when it is left lingering. */
  released(cg: ProcessCgroup): boolean {
    this.live.delete(cg);
    if (cg.emptyNow()) {
      if (!this.disposed && this.pool.length < this.poolMax && cg.recycle()) {
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
    // Real time: retries removing cgroups whose processes the kernel is still tearing down.
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
    // Real time: v1 kill rounds, chasing forks already in flight in the kernel (no policy in it).
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
    // Real time: a synchronous, bounded kill-and-remove at process exit (no event loop left to run timers).
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
    // Out of the commands' CPU group first: a cgroup this process is in cannot be removed.
    if (this.cpuHome !== null) {
      try {
        writeFileSync(`${this.cpuHome}/cgroup.procs`, String(process.pid));
      } catch {
        // stays: a later server removes the group (sweepStale)
      }
      this.cpuHome = null;
    }
    // What is left (processes still exiting) the group watchdog removes once we are gone.
    if (!this.setup.serverLeaf) for (const h of this.setup.hierarchies) tryRmdir(h.base);
  }

  /**
   * Moves this process (all its threads) into its commands' CPU group (see "CPU" above: why). v2: where the server
   * moved into `corral-<tag>/server` it is in it already. Returns null when it is in the group, else why not (the
   * commands still share their group; each start may then wait for the CPU). Once, at start-up: moving a process
   * takes a system-wide lock (cgroup.procs, see ProcessCgroup.entryFiles). Before it, the group watchdog is started,
   * so that it stays outside the group it removes.
   */
  joinCpuGroup(watchdog: Pick<GroupWatchdog, 'ensure'> | null = groupWatchdog): string | null {
    const setup = this.setup;
    if (!setup || this.disposed) return this.status.problem ?? 'cgroups are not in use';
    const cpu = setup.hierarchies.find((h) => h.cpu);
    if (!cpu) return this.status.cpuProblem ?? 'no CPU group';
    if (setup.version === 'v2')
      return setup.serverLeaf
        ? null
        : 'cgroup v2: the server is not in a leaf of its own below its CPU group';
    if (this.cpuHome !== null) return null;
    watchdog?.ensure();
    const home = cpu.base.slice(0, cpu.base.lastIndexOf('/'));
    try {
      writeFileSync(`${cpu.base}/cgroup.procs`, String(process.pid));
    } catch (e) {
      return `cannot move the server into ${cpu.base}: ${errText(e)}`;
    }
    this.cpuHome = home;
    return null;
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
export function defaultLimits(budget: PidsBudget = host?.budget ?? pidsBudget()): ResourceLimits {
  const mib = 1024 * 1024;
  return {
    pidsMax: budget.perCommand,
    memoryMaxBytes: Math.max(64 * mib, Math.floor((availableMemory() * DEFAULT_MEMORY_FRACTION) / mib) * mib),
  };
}

/** Sets up this process's cgroups (see the module comment); never throws. */
export function setupCgroups(mode = process.env.CORRAL_CGROUPS): CgroupHost {
  const budget = pidsBudget();
  const r = firstUsable(mode, applySetup);
  if (typeof r === 'string') return new CgroupHost(null, r, budget);
  limitCommandsParent(r, budget);
  return new CgroupHost(r, null, budget);
}

/**
 * What setupCgroups would give a server started here, from reading the system only: nothing is made, moved or swept
 * (`corral doctor` without a server).
 */
export function previewCgroups(mode = process.env.CORRAL_CGROUPS): CgroupStatus {
  const r = firstUsable(mode, previewSetup);
  return typeof r === 'string' ? noCgroupStatus(r) : statusOf(r);
}

/** The problem where there are no cgroups by design (nothing to fix): off by the user, or not Linux. */
export const CGROUPS_TURNED_OFF = 'cgroups are turned off (CORRAL_CGROUPS=0)';
export const CGROUPS_LINUX_ONLY = 'cgroups are Linux only';

/** How the problem of a server without a usable cgroup begins (the reasons of each version follow). */
export const NO_USABLE_CGROUP = 'no usable cgroup, commands run without pids and memory limits: ';

/** The first version, in the order CORRAL_CGROUPS asks, whose plan `use` turns into a setup; else why none. */
function firstUsable(mode: string | undefined, use: (plan: SetupPlan) => Setup | string): Setup | string {
  if (process.platform !== 'linux') return `${CGROUPS_LINUX_ONLY} (this is ${process.platform})`;
  if (mode === '0' || mode === 'off') return CGROUPS_TURNED_OFF;
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
    const plan = version === 'v2' ? planV2(force) : planV1(force);
    const r = typeof plan === 'string' ? plan : use(plan);
    if (typeof r !== 'string') return r;
    if (!tried.includes(r)) tried.push(r);
  }
  return `${NO_USABLE_CGROUP}${tried.join('; ')}`;
}

function statusOf(setup: Setup): CgroupStatus {
  return {
    version: setup.version,
    enforced: (['pids', 'memory'] as const).filter((k) => setup.hierarchies.some((h) => h[k])),
    dirs: setup.hierarchies.map((h) => h.base),
    problem: setup.problem,
    cpuGroup: setup.hierarchies.some((h) => h.cpu),
    cpuProblem: setup.cpuProblem,
  };
}

function noCgroupStatus(problem: string): CgroupStatus {
  return { version: 'none', enforced: [], dirs: [], problem, cpuGroup: false, cpuProblem: problem };
}

let host: CgroupHost | null = null;
/** This process's cgroups if they were set up (a server), else null (`corral doctor`: it only reads the system). */
export function cgroupHostIfSetUp(): CgroupHost | null {
  return host;
}
/** This process's cgroups, set up on first use; removed at exit (and by the group watchdog if we die). */
export function cgroupHost(): CgroupHost {
  if (!host) {
    const h = setupCgroups();
    host = h;
    // Without a cgroup, every child gets an RLIMIT_NPROC below the server's (see "Pids budget").
    if (h.budget.enforcedBy === 'rlimit') childNproc = h.budget.childNproc ?? 0;
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
  const nproc = childNproc > 0 ? `ulimit -u ${childNproc} || exit 127; ` : '';
  const shift = entryFiles.length > 0 ? `shift ${entryFiles.length}; ` : '';
  const script = `${enter}${shift}${nproc}${between}${env ? keepEnv(env) : ''}exec -a "$0" "$@"`;
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

// ---------------------------------------------------------------------------------------------------------------
// Pids budget (see the module comment)

/** What the server's uid may still start, and the share of it its commands get. */
export interface PidsBudget {
  /** This process's RLIMIT_NPROC (soft), or null when it does not bind (unlimited; root, CAP_SYS_RESOURCE/ADMIN). */
  nproc: number | null;
  /** Tasks (threads) of our real uid when the budget was made: RLIMIT_NPROC counts them all. */
  uidTasks: number;
  /** Tasks the system may still have: min(kernel.pid_max, kernel.threads-max) less those that run. */
  systemFree: number;
  /** What is kept from the commands for the server and the uid's other processes (when nproc binds). */
  headroom: number;
  /** The most all commands together may have (the pids.max of their parent cgroup). */
  total: number;
  /** The default pids.max of one command: half the total, at most DEFAULT_PIDS_MAX. */
  perCommand: number;
  /** Without a cgroup: the RLIMIT_NPROC every child gets (nproc less the headroom); null when nproc does not bind. */
  childNproc: number | null;
}

/** The budget as this process sees it now (reads /proc; scans it for the uid's tasks only when RLIMIT_NPROC binds). */
export function pidsBudget(): PidsBudget {
  const status = readText('/proc/self/status') ?? '';
  const ruid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1] ?? process.getuid?.() ?? 0);
  const capEff = BigInt(`0x${/^CapEff:\s+([0-9a-f]+)/m.exec(status)?.[1] ?? '0'}`);
  const exempt = ruid === 0 || (capEff & ((1n << 21n) | (1n << 24n))) !== 0n; // CAP_SYS_ADMIN, CAP_SYS_RESOURCE
  const nproc = exempt ? null : softLimit('Max processes');
  const kernelMax = Math.min(
    Number(readText('/proc/sys/kernel/pid_max') ?? '') || 4_194_304,
    Number(readText('/proc/sys/kernel/threads-max') ?? '') || 4_194_304,
  );
  const running = Number(/\/(\d+)/.exec(readText('/proc/loadavg') ?? '')?.[1] ?? 0);
  const systemFree = Math.max(0, kernelMax - running);
  let total = Math.floor(systemFree / 2);
  let headroom = 0;
  let uidTasks = 0;
  let childNproc: number | null = null;
  if (nproc !== null) {
    uidTasks = tasksOfUid(ruid);
    headroom = Math.max(32, Math.ceil(nproc / 10));
    total = Math.min(total, nproc - uidTasks - headroom);
    childNproc = Math.max(1, nproc - headroom);
  }
  total = Math.max(1, total);
  return {
    nproc,
    uidTasks,
    systemFree,
    headroom,
    total,
    perCommand: Math.max(1, Math.min(DEFAULT_PIDS_MAX, Math.floor(total / 2))),
    childNproc,
  };
}

/** How many tasks (threads) processes of real uid `uid` have now. */
function tasksOfUid(uid: number): number {
  let n = 0;
  let pids: string[] = [];
  try {
    pids = readdirSync('/proc');
  } catch {
    return 0;
  }
  for (const p of pids) {
    if (p.charCodeAt(0) < 48 || p.charCodeAt(0) > 57) continue;
    const st = readText(`/proc/${p}/status`);
    if (!st || Number(/^Uid:\s+(\d+)/m.exec(st)?.[1]) !== uid) continue;
    n += Number(/^Threads:\s+(\d+)/m.exec(st)?.[1] ?? 1);
  }
  return n;
}

function budgetEnforcer(setup: Setup | null, budget: PidsBudget): 'cgroup' | 'rlimit' | null {
  if (setup?.hierarchies.some((h) => h.pids)) return 'cgroup';
  return budget.childNproc !== null ? 'rlimit' : null;
}

/**
 * The commands' parent cgroup gets the budget as its pids.max. Where the server itself moved into it (v2,
 * `corral-<tag>/server`), its own tasks and room for a few starts are added: they count there too.
 */
function limitCommandsParent(setup: Setup, budget: PidsBudget): void {
  const own = setup.serverLeaf
    ? Number(/^Threads:\s+(\d+)/m.exec(readText('/proc/self/status') ?? '')?.[1] ?? 16) + 16
    : 0;
  for (const h of setup.hierarchies) {
    if (!h.pids) continue;
    try {
      writeFileSync(`${h.base}/pids.max`, String(budget.total + own));
    } catch (e) {
      const why = `cannot limit the commands together (${h.base}/pids.max): ${errText(e)}`;
      setup.problem = setup.problem ? `${setup.problem}; ${why}` : why;
    }
  }
}

let childNproc = 0;
/** The RLIMIT_NPROC every child gets (0: none): set while no cgroup bounds the commands (see "Pids budget"). */
export function childNprocMax(): number {
  return childNproc;
}
