/**
 * One CPU group for all the pods of the one-machine cluster (their servers and everything those start): on a real
 * cluster the pods run on other nodes and cost the machine with the panel nothing; here they share its two cores,
 * and without a group each pod's server (a session of its own, so an autogroup of its own) and each pod's CPU group of
 * commands weigh as much to the scheduler as the whole browser does — eight pods starve the panel that watches them.
 * In one group the cluster weighs as one program against the host's (the fleet host, the browser, the bench): the
 * share the rest of a cluster would not take from this machine. Each pod's server still makes its own CPU group of
 * commands, nested inside this one (a server makes its group below its own cgroup).
 *
 * cgroup v1 (the `cpu` hierarchy) or v2 where the caller's parent already gives the `cpu` controller to its children;
 * otherwise `makeNodesGroup` says why not and the pods share the machine's scheduler as they are.
 */
import { chownSync, mkdirSync, readdirSync, rmdirSync } from 'node:fs';
import { dirIn, readMounts, readOwnCgroups, readText } from '../../../src/process/cgroupFs.js';
import { until } from '../server.js';

export interface NodesGroup {
  /** The group's directory. */
  readonly dir: string;
  /** Where a process writes its pid to enter the group. */
  readonly procs: string;
  /**
   * Kills what is still in the group (a SIGKILLed pod's commands may outlive it for a moment) and removes the group,
   * with the groups the pods made inside it, once they are gone (10 s at most, then what is left stays).
   */
  remove(): Promise<void>;
}

/** A fresh CPU group beside the caller's own, which a server running as uid:gid may make its own groups in. */
export function makeNodesGroup(uid: number, gid: number): NodesGroup | string {
  const own = readOwnCgroups();
  const mounts = readMounts();
  let parent: string | null = null;
  const v1 = mounts.find((m) => m.fsType === 'cgroup' && m.superOptions.includes('cpu'));
  const v1Path = [...own].find(([k]) => k.split(',').includes('cpu'))?.[1];
  if (v1 && v1Path !== undefined) parent = dirIn(v1, v1Path);
  else {
    const v2 = mounts.find((m) => m.fsType === 'cgroup2');
    const v2Path = own.get('');
    const mine = v2 && v2Path !== undefined ? dirIn(v2, v2Path) : null;
    if (!mine) return 'no cgroup cpu controller is mounted';
    parent = mine.slice(0, mine.lastIndexOf('/'));
    if (!(readText(`${parent}/cgroup.subtree_control`) ?? '').split(/\s+/).includes('cpu'))
      return `cgroup v2: ${parent} does not give the cpu controller to its children`;
  }
  if (!parent) return 'this process is in no cpu cgroup';
  const dir = `${parent}/corral-fleet-nodes-${process.pid}-${Date.now().toString(36)}`;
  try {
    mkdirSync(dir);
    chownSync(dir, uid, gid);
  } catch (e) {
    return `cannot make ${dir}: ${(e as Error).message}`;
  }
  return {
    dir,
    procs: `${dir}/cgroup.procs`,
    async remove() {
      // Everything in the group is the pods' (a killed pod's commands may outlive it until its watchdog acts).
      for (const pid of tasksIn(dir)) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      await until(() => tasksIn(dir).length === 0, 10_000, `${dir} to empty`).catch(() => {});
      removeTree(dir);
    },
  };
}

/** The processes in the group and in the groups below it. */
function tasksIn(dir: string): number[] {
  const pids = (readText(`${dir}/cgroup.procs`) ?? '').split('\n').filter(Boolean).map(Number);
  try {
    for (const e of readdirSync(dir, { withFileTypes: true }))
      if (e.isDirectory()) pids.push(...tasksIn(`${dir}/${e.name}`));
  } catch {
    // gone
  }
  return pids;
}

/** rmdir of a cgroup directory and the empty groups below it (cgroupfs removes a group by rmdir alone). */
function removeTree(dir: string): void {
  let entries: string[] = [];
  try {
    entries = readdirSync(dir, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name);
  } catch {
    return;
  }
  for (const e of entries) removeTree(`${dir}/${e}`);
  try {
    rmdirSync(dir);
  } catch {
    // still in use: left (it is empty of the rig's processes or was not removable at all).
  }
}
