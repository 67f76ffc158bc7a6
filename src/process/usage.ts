/**
 * What a command used (ProcessUsage, protocol/exec.ts), read once it has exited: from its own cgroup (CgroupUsage,
 * held by its ProcessCgroup: files opened once with the cgroup, read again through their descriptors, ~2 µs each),
 * else from the rusage the native spawner got when it reaped the child (platform/spawn.ts). Nothing is read per start;
 * at exit a few preads of open files, on the loop like the limit counters (limitHit) already are.
 *
 * A pooled cgroup goes from command to command: cumulative counters (CPU, io) are taken against a baseline read when
 * it is handed out again; peaks are reset where the kernel lets a descriptor reset them (v2 memory.peak and
 * pids.peak, 6.12+: per descriptor; v1 memory.max_usage_in_bytes: by writing 0), else a reused cgroup's peak is null.
 */
import { constants, openSync, writeSync } from 'node:fs';
import type { ChildRusage } from '../platform/spawn.js';
import type { ProcessUsage } from '../protocol/exec.js';
import { closeAll, counter, preadText } from './cgroupFs.js';

/** What a command's cgroup says of it; null where it cannot. */
export interface CgroupFigures {
  version: 'v1' | 'v2';
  cpuUserUs: number | null;
  cpuSystemUs: number | null;
  peakMemoryBytes: number | null;
  peakPids: number | null;
  ioReadBytes: number | null;
  ioWriteBytes: number | null;
  /** OOM kills and refused forks since the command was given the cgroup (ProcessCgroup's counters). */
  oomKills: number;
  pidsRefused: number;
}

/** Where each file is: the cgroup's directory per controller (v2: the same one). */
export interface UsageDirs {
  version: 'v1' | 'v2';
  /** v2 only: cpu.stat and io.stat. */
  unified: string | null;
  memory: string | null;
  pids: string | null;
}

/** A peak file and whether writing to it resets what its descriptor reads. */
interface PeakFile {
  fd: number;
  resettable: boolean;
  /** What it reads is this command's: a fresh cgroup, or reset when handed out. */
  valid: boolean;
}

function openPeak(path: string | null, resetValue: string): PeakFile | null {
  if (!path) return null;
  try {
    const fd = openSync(path, constants.O_RDWR);
    try {
      // The first write says whether the kernel resets it (EINVAL/EACCES on kernels before per-fd peaks).
      writeSync(fd, resetValue, 0);
      return { fd, resettable: true, valid: true };
    } catch {
      return { fd, resettable: false, valid: true };
    }
  } catch {
    try {
      return { fd: openSync(path, constants.O_RDONLY), resettable: false, valid: true };
    } catch {
      return null;
    }
  }
}

function openOptional(path: string | null): number {
  if (!path) return -1;
  try {
    return openSync(path, constants.O_RDONLY);
  } catch {
    return -1;
  }
}

/** The sum of `key=N` over the lines of io.stat (one line per device). */
export function ioStatSum(text: string, key: 'rbytes' | 'wbytes'): number {
  let n = 0;
  const needle = ` ${key}=`;
  for (let at = text.indexOf(needle); at >= 0; at = text.indexOf(needle, at + needle.length)) {
    const v = Number.parseInt(text.slice(at + needle.length, at + needle.length + 24), 10);
    if (Number.isFinite(v)) n += v;
  }
  return n;
}

/** A number file (memory.peak, pids.peak, max_usage_in_bytes); null when unreadable ("max" or empty). */
function numberIn(fd: number): number | null {
  const text = preadText(fd).trim();
  if (!/^\d+$/.test(text)) return null;
  return Number(text);
}

/** The usage files of one cgroup, open for as long as it exists. */
export class CgroupUsage {
  private readonly cpuStatFd: number;
  private readonly ioStatFd: number;
  private readonly memoryPeak: PeakFile | null;
  private readonly pidsPeak: PeakFile | null;
  /** Cumulative counters when the cgroup was handed out. */
  private base = { user: 0, system: 0, rbytes: 0, wbytes: 0 };

  constructor(private readonly dirs: UsageDirs) {
    const v2 = dirs.version === 'v2';
    this.cpuStatFd = v2 ? openOptional(dirs.unified && `${dirs.unified}/cpu.stat`) : -1;
    this.ioStatFd = v2 ? openOptional(dirs.unified && `${dirs.unified}/io.stat`) : -1;
    this.memoryPeak = openPeak(
      dirs.memory && `${dirs.memory}/${v2 ? 'memory.peak' : 'memory.max_usage_in_bytes'}`,
      v2 ? 'reset\n' : '0',
    );
    this.pidsPeak = openPeak(dirs.pids && `${dirs.pids}/pids.peak`, 'reset\n');
    this.base = this.cumulative();
  }

  private cumulative(): { user: number; system: number; rbytes: number; wbytes: number } {
    const cpu = this.cpuStatFd >= 0 ? preadText(this.cpuStatFd) : '';
    const io = this.ioStatFd >= 0 ? preadText(this.ioStatFd) : '';
    return {
      user: counter(cpu, 'user_usec'),
      system: counter(cpu, 'system_usec'),
      rbytes: ioStatSum(io, 'rbytes'),
      wbytes: ioStatSum(io, 'wbytes'),
    };
  }

  /** The figures since the cgroup was handed out (limit counters are the caller's: ProcessCgroup has them). */
  read(oomKills: number, pidsRefused: number): CgroupFigures {
    const now = this.cumulative();
    const peak = (p: PeakFile | null) => (p?.valid ? numberIn(p.fd) : null);
    return {
      version: this.dirs.version,
      cpuUserUs: this.cpuStatFd >= 0 ? now.user - this.base.user : null,
      cpuSystemUs: this.cpuStatFd >= 0 ? now.system - this.base.system : null,
      peakMemoryBytes: peak(this.memoryPeak),
      peakPids: peak(this.pidsPeak),
      ioReadBytes: this.ioStatFd >= 0 ? now.rbytes - this.base.rbytes : null,
      ioWriteBytes: this.ioStatFd >= 0 ? now.wbytes - this.base.wbytes : null,
      oomKills,
      pidsRefused,
    };
  }

  /** The cgroup goes to another command: new baselines, peaks reset where the kernel can. */
  recycle(): void {
    this.base = this.cumulative();
    for (const p of [this.memoryPeak, this.pidsPeak]) {
      if (!p) continue;
      p.valid = false;
      if (!p.resettable) continue;
      try {
        writeSync(p.fd, p === this.memoryPeak && this.dirs.version === 'v1' ? '0' : 'reset\n', 0);
        p.valid = true;
      } catch {
        // stays invalid: this command's peak cannot be told from the last one's
      }
    }
  }

  close(): void {
    closeAll(
      [this.cpuStatFd, this.ioStatFd, this.memoryPeak?.fd ?? -1, this.pidsPeak?.fd ?? -1].filter(
        (fd) => fd >= 0,
      ),
    );
  }
}

const ms = (us: number | null) => (us === null ? null : Math.round(us / 100) / 10);

/**
 * A command's usage from what could be read: its cgroup's figures, else the rusage of its reap (CPU and io also from
 * the rusage where the cgroup has no per-command accounting: v1). null when neither says anything.
 */
export function processUsage(
  wallMs: number,
  cg: CgroupFigures | null,
  ru: ChildRusage | null,
): ProcessUsage | null {
  if (!cg && !ru) return null;
  const limitEvents: ProcessUsage['limitEvents'] = {};
  if (cg && cg.oomKills > 0) limitEvents.memory = cg.oomKills;
  if (cg && cg.pidsRefused > 0) limitEvents.pids = cg.pidsRefused;
  const cpuUserUs = cg?.cpuUserUs ?? ru?.userUs ?? null;
  const cpuSystemUs = cg?.cpuSystemUs ?? ru?.systemUs ?? null;
  return {
    source: cg ? (cg.version === 'v2' ? 'cgroup-v2' : 'cgroup-v1') : 'rusage',
    wallMs: Math.max(0, wallMs),
    cpuUserMs: ms(cpuUserUs),
    cpuSystemMs: ms(cpuSystemUs),
    peakMemoryBytes: cg ? cg.peakMemoryBytes : (ru?.maxRssBytes ?? null),
    peakPids: cg ? cg.peakPids : null,
    ioReadBytes: cg?.ioReadBytes ?? (ru ? ru.inBlocks * 512 : null),
    ioWriteBytes: cg?.ioWriteBytes ?? (ru ? ru.outBlocks * 512 : null),
    limitEvents,
  };
}
