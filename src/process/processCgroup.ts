/** A command's cgroup: its directories, open files, limits, counters and kill (see cgroup.ts for the layout). */
import { constants, openSync, writeFileSync } from 'node:fs';
import { CgroupError, closeAll, counter, errText, preadText, readText, writeOptional } from './cgroupFs.js';
import { killDir, killListed, type Setup, tryRmdir } from './cgroupSetup.js';
import { type CgroupFigures, CgroupUsage } from './usage.js';

export type LimitKind = 'pids' | 'memory';

/** What a command may use: the values written into its cgroup. */
export interface ResourceLimits {
  pidsMax: number;
  memoryMaxBytes: number;
}

/** The host that hands out and pools command cgroups (CgroupHost, cgroup.ts): what a cgroup tells it. */
export interface CgroupOwner {
  /** A kill that could not empty the cgroup at once: the owner retries until it is empty. */
  finishKill(c: ProcessCgroup): void;
  /** The command closed: pool or remove the cgroup; true while it still holds processes (lingering). */
  released(c: ProcessCgroup): boolean;
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
  /** Its usage files (usage.ts): CPU, io, peaks. */
  private readonly usageFiles: CgroupUsage;

  /** Opens the cgroup's files; throws (closing what it opened) when one cannot be opened. */
  constructor(
    private readonly host: CgroupOwner,
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
    const pidsAt = setup.hierarchies.findIndex((h) => h.pids);
    const memAt = setup.hierarchies.findIndex((h) => h.memory);
    this.usageFiles = new CgroupUsage({
      version: setup.version,
      unified: setup.version === 'v2' ? dirs[0]! : null,
      memory: memAt >= 0 ? dirs[memAt]! : null,
      pids: pidsAt >= 0 ? dirs[pidsAt]! : null,
    });
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

  /** What the command used since it was given this cgroup (read at exit, after limitHit). */
  usage(): CgroupFigures {
    const c = this.atExit?.counters ?? this.counters();
    return this.usageFiles.read(c.oom - this.baseline.oom, c.pids - this.baseline.pids);
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
    this.usageFiles.recycle();
    return true;
  }

  /** Removes the directories (and closes the files once they are all gone); false while one is still busy. */
  remove(): boolean {
    let all = true;
    // The base of a shared hierarchy (v1 cpu) is not the command's to remove.
    for (const [i, d] of this.dirs.entries())
      if (d !== this.setup.hierarchies[i]!.base && !tryRmdir(d)) all = false;
    if (all && !this.removed) {
      this.removed = true;
      this.usageFiles.close();
      closeAll(
        [...this.entryFds, this.dirFd, this.pidsEventsFd, this.oomFd, this.populatedFd].filter(
          (fd) => fd >= 0,
        ),
      );
    }
    return all;
  }
}
