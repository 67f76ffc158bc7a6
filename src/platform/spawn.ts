/**
 * Starting children natively (src/platform/native/spawn.c): clone(CLONE_VM) + execve without waiting for the exec,
 * every fd not passed closed in the child, PR_SET_PDEATHSIG(SIGKILL), entry into a cgroup before the exec, pidfd exit
 * watching on the libuv loop. Beside it, its JS implementation, child_process (childProcessSpawn), which can do none
 * of these: src/process/spawner.ts uses it without the addon and makes up for what it can (a bash prologue for the
 * cgroup, the sandbox launcher). Also the path checks and exit watching that go with them, each with its JS
 * implementation or refusal.
 */
import { type StdioOptions, spawn } from 'node:child_process';
import { accessSync, constants, readFileSync, statSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { PassThrough, type Writable } from 'node:stream';
import { type Addon, addon, addonAbsence, type Confinement } from './addon.js';
import { errnoName } from './errno.js';
import { type OutputPipe, readablePipe } from './pipes.js';
import { watchdogSlotRelease } from './watchdog.js';

export interface NativeChild {
  pid: number;
  /** -1 unless a stdin pipe was asked for. */
  stdinFd: number;
  stdoutFd: number;
  stderrFd: number;
  /** Ends the group watchdog's protection of the child's process group (call once it has closed). */
  releaseGroup(): void;
}

export interface NativeSpawnArgs {
  file: string;
  argv: string[];
  /** "KEY=value" pairs. */
  env: string[];
  cwd: string;
  /** stdin, stdout, stderr, then the extra fds at 3, 4, …: an fd, or FD_CLOSED / FD_PIPE / FD_DEVNULL. */
  fds: number[];
  waitExec: boolean;
  /** Clone the child as the init of a new pid namespace (needs root; see newPidNs). */
  newPidNs: boolean;
  freshKeyring: boolean;
  cgroup?: { fds: number[]; dirFd?: number };
  /** The Landlock backend: the child confines itself right before exec (confine.c). */
  confine?: Confinement;
  /** The child's RLIMIT_NPROC (soft and hard), set before exec: where no cgroup bounds the commands. */
  nprocMax?: number;
  /**
   * Run the command under a supervisor (spawn.c supervisor_main: a child subreaper that kills every descendant once the
   * command has ended, or the server has died). Async mode only (asyncExec, waitExec false); not with newPidNs or a
   * cgroup. The returned pid is the command's; onExit is called once everything it started is gone.
   */
  supervise?: boolean;
  /**
   * `file` and `cwd` were checked by checkPath's rules just now, in this turn of the loop (resolveProgram, checkCwd):
   * async mode does not check them again before the clone. Otherwise (absent) it does, to report what execve and chdir
   * would fail with synchronously.
   */
  checked?: boolean;
  /** Called once, on the loop, with the wait status (signo 0 for a normal exit) and what the child used. */
  onExit(status: number, signo: number, rusage: ChildRusage | null): void;
}

/**
 * What a child and the descendants it waited for used, as the kernel's wait reports it (the native spawner reaps with
 * waitid's rusage argument); read at the reap, so it costs nothing more per start.
 */
export interface ChildRusage {
  userUs: number;
  systemUs: number;
  /** ru_maxrss: the largest resident set of the child or of one of its waited-for descendants. */
  maxRssBytes: number;
  /** Blocks the file systems read and wrote for it (ru_inblock, ru_oublock: 512-byte units). */
  inBlocks: number;
  outBlocks: number;
}

function rusageOf(v: number[] | undefined): ChildRusage | null {
  if (!Array.isArray(v) || v.length < 5) return null;
  return { userUs: v[0]!, systemUs: v[1]!, maxRssBytes: v[2]! * 1024, inBlocks: v[3]!, outBlocks: v[4]! };
}

export const FD_CLOSED = -1;
export const FD_PIPE = -2;
export const FD_DEVNULL = -3;

export interface NativeSpawner {
  /** Whether children can start without the loop waiting for their exec (x86_64, arm64). */
  readonly asyncExec: boolean;
  /** Whether spawn can clone into a new pid namespace: root only (CLONE_NEWPID needs CAP_SYS_ADMIN). */
  readonly newPidNs: boolean;
  /** Throws an Error with a numeric `errno` when the start fails. */
  spawn(a: NativeSpawnArgs): NativeChild;
}

/**
 * Exit callbacks by pid. The addon has one exit handler per process (per thread), shared by every copy of the
 * platform that loads it (sources and a bundle, say), so the table lives on the addon's exports object.
 */
type ExitCallback = (status: number, signo: number, rusage: ChildRusage | null) => void;

function exitTable(a: Addon): Map<number, ExitCallback> {
  const b = a as Addon & { corralExits?: Map<number, ExitCallback> };
  if (b.corralExits) return b.corralExits;
  const table = new Map<number, ExitCallback>();
  b.corralExits = table;
  a.setExitHandler((pid, status, signo, rusage) => {
    const cb = table.get(pid);
    if (!cb) return;
    table.delete(pid);
    cb(status, signo, rusageOf(rusage));
  });
  return table;
}

function nativeSpawner(a: Addon): NativeSpawner {
  const exits = exitTable(a);
  return {
    asyncExec: a.asyncExec,
    newPidNs: process.geteuid?.() === 0,
    spawn(s) {
      const [pid, stdinFd, stdoutFd, stderrFd, slot] = a.spawn(
        s.file,
        s.argv,
        s.env,
        s.cwd,
        s.fds,
        s.waitExec || !a.asyncExec,
        s.newPidNs,
        s.freshKeyring,
        s.cgroup?.fds,
        s.cgroup?.dirFd ?? -1,
        s.confine,
        s.nprocMax ?? 0,
        s.supervise === true,
        s.checked === true,
      );
      exits.set(pid, s.onExit);
      return { pid, stdinFd, stdoutFd, stderrFd, releaseGroup: watchdogSlotRelease(slot) };
    },
  };
}

/** The native spawner, or null without the addon (src/process/spawner.ts then uses child_process). */
export const nativeSpawn: NativeSpawner | null = addon ? nativeSpawner(addon) : null;

/** Why there is no native spawner (the addon's absence); null when there is one. */
export const nativeSpawnAbsence: string | null = addonAbsence;

/**
 * Call before starting a process any other way than nativeSpawn (node-pty, child_process): the native spawner keeps
 * this thread SCHED_BATCH from its first spawn of a loop turn until the loop polls again, and a child forked meanwhile
 * would inherit that policy for life. Nothing to do without the addon.
 */
export const endSpawnBatch: () => void = addon ? addon.schedRestore.bind(addon) : () => {};

/**
 * Whether `path` would work as a child's cwd (chdir) or program (execve): null, or the errno name the kernel would
 * give. The addon asks the kernel itself (faccessat, the same lookup as the call); the JS implementation answers
 * from stat and access(X_OK), which agree on everything but the rarer errors (ELOOP, ENAMETOOLONG are ENOENT there).
 */
export const checkPath: (path: string, kind: 'cwd' | 'program') => string | null = addon
  ? (path, kind) => {
      const err = addon!.checkPath(path, kind === 'cwd' ? 0 : 1);
      return err === 0 ? null : errnoName(err);
    }
  : (path, kind) => {
      let dir: boolean;
      try {
        dir = statSync(path).isDirectory();
      } catch (e) {
        return (e as NodeJS.ErrnoException).code ?? 'ENOENT';
      }
      if (kind === 'cwd' && !dir) return 'ENOTDIR';
      if (kind === 'program' && dir) return 'EACCES';
      try {
        accessSync(path, constants.X_OK);
      } catch {
        return 'EACCES';
      }
      return null;
    };

/** How often the JS implementation of watchExit looks at /proc. */
const EXIT_POLL_MS = 5;

/** Whether `pid` has terminated: gone, or a zombie (/proc/<pid>/stat state Z or X). */
function terminated(pid: number): boolean {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return true;
  }
  const state = stat[stat.lastIndexOf(')') + 2];
  return state === 'Z' || state === 'X';
}

/**
 * Calls `cb` once, on the event loop, when process `pid` has terminated: for processes the native spawner did not
 * start (node-pty's children). It never reaps. The addon polls a pidfd on the loop; the JS implementation looks at
 * /proc/<pid>/stat every EXIT_POLL_MS (Linux). A pid that is already gone calls back on a later turn. Returns false,
 * and never calls `cb`, when it cannot watch (no /proc; the addon's pidfd_open failing, EMFILE): the caller must learn
 * of the exit another way (node-pty's own exit event).
 *
 * Call it while the pid cannot have been reused, i.e. before the process can have been reaped: a reaped pid is only
 * reused after the kernel's pid counter wraps, far longer than the poll.
 */
export function watchExit(pid: number, cb: () => void): boolean {
  if (!addon) {
    if (process.platform !== 'linux') return false;
    // Real time: the JS stand-in for the addon's pidfd, polling /proc for a real exit (no policy in it).
    const timer = setInterval(() => {
      if (!terminated(pid)) return;
      clearInterval(timer);
      cb();
    }, EXIT_POLL_MS);
    return true;
  }
  let watching: boolean;
  try {
    watching = addon.watchExit(pid, cb);
  } catch {
    return false; // ENOSYS (Linux < 5.3), EMFILE, …
  }
  if (!watching) setImmediate(cb);
  return true;
}

export interface ChildProcessSpawnArgs {
  file: string;
  /** argv[0] included (child_process sets it as argv0). */
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  stdin: 'pipe' | 'ignore';
  /** Fds the child gets at 3, 4, … (null: left closed). */
  extraFds: (number | null)[];
  /** The text of an exec error child_process reports by code (ENOENT, …) after the start. */
  execErrorText(code: string): string;
  /** Once: the exit status (0..255) and null, or 128+signo and the signal; 127 when the exec failed. */
  onExit(status: number, signal: NodeJS.Signals | null): void;
}

export interface ChildProcessChild {
  /** 0 when the exec failed (its error is on stderr, and onExit says 127). */
  pid: number;
  stdin: Writable | null;
  stdout: OutputPipe;
  stderr: OutputPipe;
}

/**
 * The JS implementation of starting a child: child_process, its own session and process group (detached), exactly
 * `env`, pipes. It closes no fd (with the addon everything is close-on-exec first: sealFds) and sets no parent-death
 * signal. An exec failure only child_process sees is reported as the native async spawner reports it: exit 127 with
 * `corral: cannot execute <file>: <error>` on stderr.
 */
export function childProcessSpawn(a: ChildProcessSpawnArgs): ChildProcessChild {
  const stdio: (string | number)[] = [a.stdin, 'pipe', 'pipe'];
  for (const fd of a.extraFds) stdio.push(fd ?? 'ignore');
  const cp = spawn(a.file, a.argv.slice(1), {
    argv0: a.argv[0] ?? a.file,
    env: a.env,
    cwd: a.cwd,
    stdio: stdio as StdioOptions,
    detached: true,
    windowsHide: true,
  });
  if (cp.pid === undefined || !cp.stdout || !cp.stderr) {
    const stderr = new PassThrough();
    cp.stdout?.destroy();
    cp.stderr?.destroy();
    cp.stdin?.destroy();
    cp.once('error', (e: NodeJS.ErrnoException) => {
      stderr.end(`corral: cannot execute ${a.file}: ${a.execErrorText(e.code ?? e.message)}\n`);
      a.onExit(127, null);
    });
    const empty = new PassThrough();
    empty.end();
    return { pid: 0, stdin: null, stdout: readablePipe(empty), stderr: readablePipe(stderr) };
  }
  cp.once('exit', (code, signal) => {
    if (signal) a.onExit(128 + (osConstants.signals[signal] ?? 0), signal);
    else a.onExit(code ?? 0, null);
  });
  return { pid: cp.pid, stdin: cp.stdin, stdout: readablePipe(cp.stdout), stderr: readablePipe(cp.stderr) };
}
