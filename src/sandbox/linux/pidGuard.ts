import { accessSync, constants, readdirSync, readFileSync } from 'node:fs';

/**
 * The pid-namespace guard (root only). bwrap's --die-with-parent makes the sandbox's pid 1 die with the outer bwrap
 * through a parent-death signal, but as root bwrap's own capability drop clears that signal, so killing the outer
 * bwrap (process/terminate, a group kill) can leave the whole sandbox running. The guard runs bwrap inside a fresh
 * pid namespace whose init is a plain shell:
 *   unshare --pid --fork --kill-child -- /bin/sh -c '"$@"; exit $?' sh bwrap …
 * Killing `unshare` kills that shell (its parent-death signal survives: it changes no credentials), and when a pid
 * namespace's init dies the kernel kills every process in it and in its child namespaces: bwrap, the sandbox's
 * pid 1 and everything the command started, `setsid` children included.
 */

function executable(p: string): boolean {
  try {
    accessSync(p, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

export const UNSHARE = ['/usr/bin/unshare', '/bin/unshare'].find(executable);

/** The argv prefix that puts `argv` under the guard. */
export function guardArgv(unshare: string, argv: string[], runsShellAlready: boolean): string[] {
  const prefix = [unshare, '--pid', '--fork', '--kill-child', '--'];
  return runsShellAlready
    ? [...prefix, ...argv]
    : [...prefix, '/bin/sh', '-c', '"$@"; exit $?', 'sh', ...argv];
}

/** Descendant pids of `pid` (through /proc/<pid>/task/<tid>/children). */
export function descendants(pid: number, out: number[] = []): number[] {
  let tids: string[] = [];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tids) {
    let kids = '';
    try {
      kids = readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8');
    } catch {
      continue;
    }
    for (const k of kids.split(/\s+/).filter(Boolean)) {
      out.push(Number(k));
      descendants(Number(k), out);
    }
  }
  return out;
}

/**
 * bwrap's `--info-fd` reports the sandbox's pid as seen from bwrap's own pid namespace (the guard's): the host pid
 * is the descendant of `root` whose NSpid has `nsPid` one level down.
 */
export function hostPidOf(root: number, nsPid: number): number | undefined {
  for (const d of descendants(root)) {
    try {
      const m = /^NSpid:\s+(.*)$/m.exec(readFileSync(`/proc/${d}/status`, 'utf8'));
      const f = m?.[1]?.trim().split(/\s+/);
      if (f && f.length >= 2 && Number(f[1]) === nsPid) return d;
    } catch {
      // gone
    }
  }
  return undefined;
}

/**
 * Resolves once bwrap's sandbox process `pid` has finished setting up its mounts and waits on its --block-fd: bwrap
 * reports the pid (--info-fd) before the process has even started its setup, and drops its last capabilities
 * (`--cap-drop ALL`) after the last mount change, right before it reads the block fd. So: CapEff is 0.
 */
export async function setupDone(pid: number, timeoutMs: number): Promise<void> {
  // Real time: a poll of a real process's /proc status while bwrap sets up, not policy time a test would move.
  const deadline = Date.now() + timeoutMs;
  for (let wait = 0; ; wait = Math.min(wait + 1, 5)) {
    let status: string;
    try {
      status = readFileSync(`/proc/${pid}/status`, 'utf8');
    } catch {
      throw new Error('the sandbox exited during setup');
    }
    if (/^CapEff:\s*0+$/m.test(status)) return;
    if (/^State:\s*Z/m.test(status)) throw new Error('the sandbox exited during setup');
    if (Date.now() > deadline) throw new Error('timed out waiting for the sandbox to set up');
    await new Promise((r) => setTimeout(r, wait));
  }
}
