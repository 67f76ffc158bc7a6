/** One hierarchy's directory of this server: finding it (v2 or v1), sweeping dead servers' groups, killing a group. */
import { existsSync, mkdirSync, readdirSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import { dirIn, errText, readMounts, readOwnCgroups, readText, writable } from './cgroupFs.js';
import { deadServerEntries, formatTag, ownTag, parseTag } from './serverTag.js';

// ---------------------------------------------------------------------------------------------------------------
// One hierarchy's directory of this server

export interface Hierarchy {
  /** The server's directory: corral-<tag>. */
  base: string;
  /** Limit files that live in this hierarchy. */
  pids: boolean;
  memory: boolean;
  /**
   * The base is a CPU group that every command runs in (see cgroup.ts, "CPU"): v1, the cpu hierarchy (commands enter
   * the base itself, no `p-<n>` is made there); v2, the cpu controller is enabled for the base (not below it).
   */
  cpu: boolean;
}

export interface Setup {
  version: 'v2' | 'v1';
  hierarchies: Hierarchy[];
  /** v2: the kernel has cgroup.kill. */
  cgroupKill: boolean;
  /** The server moved itself into corral-<tag>/server (v2): the base stays until a later server removes it. */
  serverLeaf: boolean;
  problem: string | null;
  /** Why commands are not CPU groups inside the server's (see cgroup.ts, "CPU"); null when they are. */
  cpuProblem: string | null;
}

export const BASE_PREFIX = 'corral-';

export function baseName(): string {
  return `${BASE_PREFIX}${formatTag(ownTag())}`;
}

/** Kills what a cgroup directory holds (v2 cgroup.kill, else pids.max 0 and SIGKILL to every listed pid). */
export function killDir(dir: string, useCgroupKill: boolean): number {
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
export function killListed(procs: string): number {
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

export function tryRmdir(dir: string): boolean {
  try {
    rmdirSync(dir);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'ENOENT';
  }
}

/** Subdirectories of a server base that hold commands (p-<n>) or the server itself (server). */
export function children(base: string): string[] {
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
export function sweepStale(parent: string, useCgroupKill: boolean): string[] {
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
    // Real time: synchronous retries of kill + rmdir of a dead server's cgroup while the kernel reaps its processes.
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

/**
 * What setting up one version would do, decided from reading the system only (nothing is made, moved or swept): the
 * server applies it (applySetup), `corral doctor` shows it (previewSetup). A string says why the version cannot be
 * used.
 */
export type SetupPlan = V2Plan | V1Plan;

interface V2Plan {
  version: 'v2';
  /** Our own cgroup. */
  dir: string;
  base: string;
  wanted: ('pids' | 'memory')[];
  missing: ('pids' | 'memory')[];
  /** Controllers our cgroup must still give its children. */
  toEnable: ('pids' | 'memory')[];
  /** The cpu controller is on for our cgroup's children already. */
  cpuEnabled: boolean;
  cpuProblem: string | null;
  /** The server must first move into corral-<tag>/server (see cgroup.ts, "Layout"). */
  serverLeaf: boolean;
}

interface V1Plan {
  version: 'v1';
  /** The pids and memory hierarchies whose base can be made. */
  hierarchies: Hierarchy[];
  /** Why a hierarchy is not among them. */
  problems: string[];
  force: boolean;
  /** The cpu hierarchy's base, or why there is none. */
  cpu: Hierarchy | string;
}

export function planV2(force: boolean): V2Plan | string {
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
  const othersHere = () =>
    (readText(`${dir}/cgroup.procs`) ?? '')
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .some((p) => Number(p) !== process.pid);
  // CPU (optional, see cgroup.ts): our directory gives the cpu controller to its children (the base is then a CPU
  // group) where the kernel offers it; at the real root only if it is on already (turning it on there would change
  // how every other cgroup of the machine is scheduled).
  const cpuEnabled = enabled.includes('cpu');
  const cpuProblem =
    cpuOff() ??
    (!available.includes('cpu')
      ? `cgroup v2: the cpu controller is not available in ${dir}`
      : isRoot && !cpuEnabled
        ? 'cgroup v2: the cpu controller is off in the root cgroup (corral does not turn it on for the whole machine)'
        : !cpuEnabled && toEnable.length === 0 && othersHere()
          ? `cgroup v2: ${dir} also holds other processes, so it cannot give the cpu controller to its children`
          : null);
  let serverLeaf = false;
  if ((toEnable.length > 0 || (cpuProblem === null && !cpuEnabled)) && !isRoot) {
    // A non-root cgroup with processes cannot enable controllers for its children: move out of it first, if we are
    // alone in it.
    if (othersHere())
      return `cgroup v2: ${dir} also holds other processes, so it cannot give controllers to its children; start corral in a cgroup of its own (e.g. systemd-run --user --scope -p Delegate=yes corral …)`;
    serverLeaf = true;
  }
  return {
    version: 'v2',
    dir,
    base: `${dir}/${baseName()}`,
    wanted,
    missing,
    toEnable,
    cpuEnabled,
    cpuProblem,
    serverLeaf,
  };
}

export function planV1(force: boolean): V1Plan | string {
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
      cpu: false,
    });
  }
  if (hierarchies.length === 0 || (hierarchies.length < 2 && !force))
    return `cgroup v1: ${problems.join('; ')}`;
  return { version: 'v1', hierarchies, problems, force, cpu: cpuHierarchyV1(own, mounts) };
}

/** Carries a plan out: sweeps dead servers' groups, makes the base (moves the server where v2 needs it). */
export function applySetup(plan: SetupPlan): Setup | string {
  return plan.version === 'v2' ? applyV2(plan) : applyV1(plan);
}

/** The setup a plan would give, none of it made (`corral doctor`, without a server). */
export function previewSetup(plan: SetupPlan): Setup {
  if (plan.version === 'v2') {
    const cpu = plan.cpuProblem === null;
    // (The root cgroup has no cgroup.kill of its own: a preview there says false where the server's base would have it.)
    return { ...v2Setup(plan, cpu), cgroupKill: existsSync(`${plan.dir}/cgroup.kill`) };
  }
  return v1Setup(plan, plan.hierarchies, plan.problems);
}

function v2Setup(plan: V2Plan, cpu: boolean): Omit<Setup, 'cgroupKill'> {
  const { base, wanted, missing, dir } = plan;
  return {
    version: 'v2',
    hierarchies: [{ base, pids: wanted.includes('pids'), memory: wanted.includes('memory'), cpu }],
    cpuProblem: plan.cpuProblem,
    serverLeaf: plan.serverLeaf,
    problem:
      missing.length > 0
        ? `cgroup v2: the ${missing.join(' and ')} controller${missing.length > 1 ? 's are' : ' is'} not available in ${dir}: ${missing.join(' and ')} not limited`
        : null,
  };
}

function v1Setup(plan: V1Plan, made: Hierarchy[], problems: string[]): Setup {
  const missing = (['pids', 'memory'] as const).filter((c) => !made.some((h) => h[c]));
  return {
    version: 'v1',
    // The pids hierarchy first: processes are found and killed there (pids.max 0 stops their forks).
    hierarchies: [
      ...[...made].sort((a, b) => Number(b.pids) - Number(a.pids)),
      ...(typeof plan.cpu === 'string' ? [] : [plan.cpu]),
    ],
    cpuProblem: typeof plan.cpu === 'string' ? plan.cpu : null,
    cgroupKill: false,
    serverLeaf: false,
    problem:
      missing.length > 0 ? `cgroup v1: ${problems.join('; ')}: ${missing.join(' and ')} not limited` : null,
  };
}

function applyV2(plan: V2Plan): Setup | string {
  const { dir, base, wanted, toEnable, serverLeaf } = plan;
  sweepStale(dir, true);
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
  // The cpu controller apart: the kernel refuses it in some places (e.g. while a realtime process is outside the
  // root cgroup), and commands still get their pids and memory limits without it.
  let cpu = plan.cpuEnabled && plan.cpuProblem === null;
  let cpuProblem = plan.cpuProblem;
  if (!cpu && cpuProblem === null) {
    try {
      writeFileSync(`${dir}/cgroup.subtree_control`, '+cpu');
      cpu = true;
    } catch (e) {
      cpuProblem = `cgroup v2: cannot enable the cpu controller for ${base}: ${errText(e)}`;
    }
  }
  return { ...v2Setup({ ...plan, cpuProblem }, cpu), cgroupKill: existsSync(`${base}/cgroup.kill`) };
}

function applyV1(plan: V1Plan): Setup | string {
  const problems = [...plan.problems];
  const made: Hierarchy[] = [];
  for (const h of plan.hierarchies) {
    const parent = h.base.slice(0, h.base.lastIndexOf('/'));
    sweepStale(parent, false);
    try {
      mkdirSync(h.base);
      made.push(h);
    } catch (e) {
      problems.push(`cannot create ${h.base}: ${errText(e)}`);
    }
  }
  if (made.length === 0 || (made.length < 2 && !plan.force)) {
    for (const h of made) tryRmdir(h.base);
    return `cgroup v1: ${problems.join('; ')}`;
  }
  let cpu = plan.cpu;
  if (typeof cpu !== 'string') {
    sweepStale(cpu.base.slice(0, cpu.base.lastIndexOf('/')), false);
    try {
      mkdirSync(cpu.base);
    } catch (e) {
      cpu = `cgroup v1: cannot create ${cpu.base}: ${errText(e)}`;
    }
  }
  return v1Setup({ ...plan, cpu }, made, problems);
}

/** v1: the server's directory in the cpu hierarchy (optional: limits work without it), or why there is none. */
function cpuHierarchyV1(own: Map<string, string>, mounts: ReturnType<typeof readMounts>): Hierarchy | string {
  const off = cpuOff();
  if (off) return off;
  const mount = mounts.find((m) => m.fsType === 'cgroup' && m.superOptions.includes('cpu'));
  const path = [...own].find(([k]) => k.split(',').includes('cpu'))?.[1];
  const dir = mount && path !== undefined ? dirIn(mount, path) : null;
  if (!dir) return 'cgroup v1: the cpu controller is not mounted';
  if (!writable(dir)) return `cgroup v1: ${dir} is not writable by this user`;
  return { base: `${dir}/${baseName()}`, pids: false, memory: false, cpu: true };
}

/** CORRAL_CGROUP_CPU=0: commands are not made CPU groups (each is then scheduled as the session it is). */
function cpuOff(): string | null {
  const v = process.env.CORRAL_CGROUP_CPU;
  return v === '0' || v === 'off' ? 'CPU groups are turned off (CORRAL_CGROUP_CPU=0)' : null;
}
