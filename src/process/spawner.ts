/**
 * Pipe-mode process spawner (not PTY). Two implementations with the same semantics:
 *  - 'native': the addon in src/platform/native (clone(CLONE_VM) + execve without waiting for the exec, pidfd exit
 *    watching on the libuv loop; see NativeMode). Several times the spawn rate of child_process on a busy 2-core
 *    machine, closes every fd it was not asked to pass, and sets PR_SET_PDEATHSIG(SIGKILL).
 *  - 'node': child_process (src/platform/spawn.ts childProcessSpawn, beside the native one), used without the addon
 *    (src/platform/addon.ts: not Linux, not built, CORRAL_NATIVE=0).
 *    It cannot set PR_SET_PDEATHSIG. With the addon, every fd of this process is close-on-exec (sealFds before each
 *    spawn), so it passes on nothing either; without it, fds this process inherited reach its children.
 * Every child is its own session and process-group leader, sees exactly `spec.env`, gets /dev/null or a pipe as
 * stdin, pipes as stdout/stderr, and the extra fds at 3, 4, …. The usual exec failures (missing or unusable program
 * or cwd) throw SpawnError synchronously, with Rust's OS error text (what Codex reports); what only execve itself can
 * see (a missing #! interpreter) is exit 127 with the error on stderr, in both implementations (see NativeMode).
 *
 * PR_SET_PDEATHSIG belongs to the spawning *thread*: call spawnPiped from the main thread (or a thread that lives as
 * long as its children should).
 */
import { Socket } from 'node:net';
import { constants as osConstants } from 'node:os';
import { join } from 'node:path';
import type { Writable } from 'node:stream';
import { type OutputPipe, openOutputPipe } from '../platform/pipes.js';
import { sandboxLauncher, sandboxNative } from '../platform/sandbox.js';
import {
  type ChildRusage,
  checkPath,
  childProcessSpawn,
  endSpawnBatch,
  FD_CLOSED,
  FD_DEVNULL,
  FD_PIPE,
  type NativeSpawner,
  nativeSpawn,
  nativeSpawnAbsence,
} from '../platform/spawn.js';
import { childNprocMax, wrapArgv } from './cgroup.js';
import type { LaunchSpec } from './launch.js';

export type { OutputPipe };

export interface SpawnedChild {
  pid: number;
  /** null unless stdin: 'pipe' */
  stdin: Writable | null;
  stdout: OutputPipe;
  stderr: OutputPipe;
  /**
   * Exactly once: exitCode = status for normal exits (0..255), 128+signo when killed by a signal; rusage where the
   * spawner reaped the child itself (the native one), else null.
   */
  onExit(cb: ExitCallback): void;
  /**
   * Call once the process is done (exited, pipes closed): until then its process group is SIGKILLed if the server
   * dies, however it dies (the native spawner's group watchdog; a no-op elsewhere).
   */
  releaseGroup(): void;
}

export interface SpawnOptions {
  stdin: 'null' | 'pipe';
  /**
   * The child's cgroup(s) (src/process/cgroup.ts), entered before it execs: the native child writes "0" into the open
   * entry files `fds` (v1 `tasks`, v2 `cgroup.procs`) between clone and exec; a child_process child runs a bash
   * prologue that writes into the same files by `paths` (see wrapArgv). With `dirFd` (v2) the native child is
   * created in the cgroup instead (clone3 CLONE_INTO_CGROUP), where the kernel can.
   */
  cgroup?: { fds: number[]; paths: string[]; dirFd?: number };
}

export class SpawnError extends Error {
  /** 'ENOENT' | 'ENOTDIR' | 'EACCES' | … */
  readonly errno: string;
  /** Rust-style text, e.g. "No such file or directory (os error 2)". */
  readonly osMessage: string;
  constructor(errno: string, osMessage: string) {
    super(osMessage);
    this.name = 'SpawnError';
    this.errno = errno;
    this.osMessage = osMessage;
  }
}

export type SpawnerKind = 'native' | 'node';

// ---------------------------------------------------------------------------------------------------------------
// Errors

/** glibc strerror texts (what Rust prints) for the errors a spawn can produce; the native path uses strerror itself. */
const STRERROR: Record<string, string> = {
  EPERM: 'Operation not permitted',
  ENOENT: 'No such file or directory',
  E2BIG: 'Argument list too long',
  ENOEXEC: 'Exec format error',
  EAGAIN: 'Resource temporarily unavailable',
  ENOMEM: 'Cannot allocate memory',
  EACCES: 'Permission denied',
  ENOTDIR: 'Not a directory',
  EISDIR: 'Is a directory',
  EINVAL: 'Invalid argument',
  ENFILE: 'Too many open files in system',
  EMFILE: 'Too many open files',
  ETXTBSY: 'Text file busy',
  ENAMETOOLONG: 'File name too long',
  ELOOP: 'Too many levels of symbolic links',
  EIO: 'Input/output error',
  ELIBBAD: 'Accessing a corrupted shared library',
};

const ERRNO_NAMES = new Map<number, string>();
for (const [name, num] of Object.entries(osConstants.errno))
  if (!ERRNO_NAMES.has(num)) ERRNO_NAMES.set(num, name);

function spawnError(errnoNum: number, text?: string): SpawnError {
  const name = ERRNO_NAMES.get(errnoNum) ?? `E${errnoNum}`;
  const msg = text ?? STRERROR[name] ?? name;
  return new SpawnError(name, `${msg} (os error ${errnoNum})`);
}

/** Rust-style OS error text for an errno name: osErrorText('ENOENT') === 'No such file or directory (os error 2)'. */
export function osErrorText(code: string): string {
  const num = osConstants.errno[code as keyof typeof osConstants.errno];
  const text = STRERROR[code];
  return num !== undefined && text ? `${text} (os error ${num})` : code;
}

/** Mirrors Rust's `Command` refusing NUL bytes (execve cannot carry them). */
function checkNoNul(spec: LaunchSpec): void {
  const bad = (s: string) => s.includes('\0');
  if (
    bad(spec.file) ||
    bad(spec.cwd) ||
    spec.argv.some(bad) ||
    Object.entries(spec.env).some(([k, v]) => bad(k) || bad(v) || k.includes('='))
  ) {
    throw new SpawnError('EINVAL', 'nul byte found in provided data');
  }
}

function envPairs(env: Record<string, string>): string[] {
  const out: string[] = [];
  for (const k in env) out.push(`${k}=${env[k]}`);
  return out;
}

const SIGNAL_NAMES = new Map<number, NodeJS.Signals>();
for (const [name, num] of Object.entries(osConstants.signals)) {
  if (!SIGNAL_NAMES.has(num)) SIGNAL_NAMES.set(num, name as NodeJS.Signals);
}

/** Calls every callback registered through onExit, exactly once, even when registered after the exit. */
type ExitCallback = (exitCode: number, signal: NodeJS.Signals | null, rusage: ChildRusage | null) => void;

class ExitLatch {
  private result: [number, NodeJS.Signals | null, ChildRusage | null] | null = null;
  private cbs: ExitCallback[] = [];
  on(cb: ExitCallback): void {
    if (this.result) {
      const [c, s, r] = this.result;
      queueMicrotask(() => cb(c, s, r));
    } else this.cbs.push(cb);
  }
  fire(exitCode: number, signal: NodeJS.Signals | null, rusage: ChildRusage | null = null): void {
    if (this.result) return;
    this.result = [exitCode, signal, rusage];
    const cbs = this.cbs;
    this.cbs = [];
    for (const cb of cbs) cb(exitCode, signal, rusage);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Native implementation

/**
 * How the native spawner starts a child. 'async' (the default where supported): the event loop does not wait for the
 * child's execve; missing or unusable programs and cwds are found by checks before the start, and the rarer exec
 * failures only visible to execve itself (bad #! interpreter, unknown binary format) make the child print
 * `corral: cannot execute <file>: <error>` on stderr and exit 127. 'vfork': wait for the execve, every exec failure
 * is a SpawnError; the main thread is blocked until the child has been scheduled and exec'd, which costs throughput
 * when the machine is busy.
 */
export type NativeMode = 'async' | 'vfork';

/** Why the native spawner is not available (null when it is). */
export const nativeLoadError: string | null = nativeSpawnAbsence;

/** The fds a confined start hands the launcher, the Landlock ruleset last; the connect supervisor's channel before it. */
export function confineFds(c: NonNullable<LaunchSpec['confine']>): number[] {
  return c.netNotifyFd !== undefined ? [c.netNotifyFd, c.rulesetFd] : [c.rulesetFd];
}

/**
 * `spec` started through the sandbox launcher: a fresh session keyring, `fds` at 3, 4, … and nothing else. For the
 * spawners that cannot do that in the child themselves (node-pty, child_process, the native spawner in vfork mode).
 * With `spec.confine`, the last of `fds` must be where the launcher finds the Landlock ruleset: it confines itself with
 * it (and the seccomp program, passed as hex) and closes it before exec. With `supervise` (a Landlock command that no
 * cgroup holds), the command runs under the launcher's supervisor (src/platform/native/supervise.c): everything
 * it started is killed when it ends, is terminated, or the server dies. The launcher must be started by this process
 * (it checks that its parent is this pid). An `argv[0]` other than the file goes as `--argv0` (issue 33, item 4).
 */
export function throughLauncher(spec: LaunchSpec, fds: number[], supervise = false): LaunchSpec {
  if (!sandboxLauncher) {
    throw new SpawnError('ENOENT', `the sandbox launcher is not built: ${osErrorText('ENOENT')}`);
  }
  const c = spec.confine;
  const confine = c
    ? [
        '--landlock',
        String(2 + fds.length),
        '--seccomp',
        c.seccomp.toString('hex'),
        ...(c.flags ? ['--landlock-flags', String(c.flags)] : []),
        ...(c.netNotifyFd !== undefined ? ['--net-notify', String(1 + fds.length)] : []),
      ]
    : [];
  const argv = [
    sandboxLauncher,
    ...fds.flatMap((fd) => ['--fd', String(fd)]),
    ...confine,
    ...(supervise ? ['--supervise', String(process.pid)] : []),
    // The command's own argv[0] (a custom arg0, or the program as given), as an unsandboxed start keeps it.
    ...(spec.argv[0] !== undefined && spec.argv[0] !== spec.file ? ['--argv0', spec.argv[0]] : []),
    '--',
    spec.file,
    ...spec.argv.slice(1),
  ];
  return { file: sandboxLauncher, argv, env: spec.env, cwd: spec.cwd };
}

/**
 * The pid-namespace guard the sandbox puts around bwrap as root (src/sandbox/linux/pidGuard.ts):
 * `unshare --pid --fork --kill-child -- <program> …` runs <program> as the init of a new pid namespace, with
 * PR_SET_PDEATHSIG(SIGKILL) towards unshare. The native spawner does the same in one step, saving unshare's exec
 * and fork (about 1 ms per sandboxed start): its child is cloned with CLONE_NEWPID, so it is already that init, and
 * it has PR_SET_PDEATHSIG(SIGKILL) towards the server. Only as root (CLONE_NEWPID needs CAP_SYS_ADMIN) and for an
 * absolute <program>; anything else, and every other spawner (child_process, node-pty), runs unshare as given.
 */
const nativePidNs = nativeSpawn?.newPidNs === true;
const GUARD_FLAGS = ['--pid', '--fork', '--kill-child', '--'];

/** The spec without its `unshare --pid --fork --kill-child --` prefix, when the native spawner can do that itself. */
export function withoutPidGuard(spec: LaunchSpec): LaunchSpec | undefined {
  const a = spec.argv;
  if (!nativePidNs || a.length < 6 || a[0] !== spec.file || !spec.file.endsWith('/unshare')) return undefined;
  for (let i = 0; i < GUARD_FLAGS.length; i++) if (a[i + 1] !== GUARD_FLAGS[i]) return undefined;
  const file = a[GUARD_FLAGS.length + 1]!;
  if (!file.startsWith('/')) return undefined; // unshare would search PATH
  return { ...spec, file, argv: a.slice(GUARD_FLAGS.length + 1) };
}

function spawnNative(
  native: NativeSpawner,
  spec: LaunchSpec,
  opts: SpawnOptions,
  mode: NativeMode,
): SpawnedChild {
  checkNoNul(spec);
  if (spec.confine && (spec.extraFds?.length ?? 0) > 0)
    throw new SpawnError(
      'EINVAL',
      'the native spawner cannot confine a child (Landlock) that is given extra fds',
    );
  // A Landlock command that no cgroup holds runs under a supervisor (see supervise below). The addon's needs async mode
  // (x86_64, arm64: it runs in our memory on raw system calls); elsewhere the launcher's does the same (plain libc).
  const async = mode === 'async' && native.asyncExec;
  const supervise = spec.confine !== undefined && !opts.cgroup;
  if (supervise && !async) {
    const extraFds = confineFds(spec.confine!);
    spec = {
      ...throughLauncher(
        spec,
        extraFds.map((_, i) => 3 + i),
        true,
      ),
      extraFds,
    };
  }
  const unguarded = withoutPidGuard(spec);
  if (unguarded) spec = unguarded;
  const fds = [opts.stdin === 'pipe' ? FD_PIPE : FD_DEVNULL, FD_PIPE, FD_PIPE];
  for (const fd of spec.extraFds ?? []) fds.push(fd ?? FD_CLOSED);
  const latch = new ExitLatch();
  let child: ReturnType<NativeSpawner['spawn']>;
  try {
    child = native.spawn({
      file: spec.file,
      argv: spec.argv,
      env: envPairs(spec.env),
      cwd: spec.cwd,
      fds,
      waitExec: mode === 'vfork',
      newPidNs: unguarded !== undefined,
      freshKeyring: spec.freshSessionKeyring === true,
      ...(opts.cgroup ? { cgroup: { fds: opts.cgroup.fds, dirFd: opts.cgroup.dirFd } } : {}),
      ...(spec.confine ? { confine: spec.confine } : {}),
      nprocMax: childNprocMax(),
      // A sandboxed command without a pid namespace (Landlock) nor a cgroup: nothing else finds what it started once
      // that left its process group (setsid). The supervisor is a child subreaper that kills all of it when the
      // command ends, is terminated, or the server dies (spawn.c supervisor_main).
      supervise: supervise && async,
      checked: spec.checked !== undefined && spec.checked.file === spec.file && spec.checked.cwd === spec.cwd,
      onExit: (status, signo, rusage) => {
        if (signo !== 0) latch.fire(128 + signo, SIGNAL_NAMES.get(signo) ?? null, rusage);
        else latch.fire(status, null, rusage);
      },
    });
  } catch (e) {
    const errno = (e as { errno?: unknown }).errno;
    if (typeof errno === 'number') throw spawnError(errno, (e as Error).message);
    throw e;
  }
  return {
    releaseGroup: child.releaseGroup,
    pid: child.pid,
    stdin: child.stdinFd >= 0 ? new Socket({ fd: child.stdinFd, readable: false, writable: true }) : null,
    stdout: openOutputPipe(child.stdoutFd),
    stderr: openOutputPipe(child.stderrFd),
    onExit: (cb) => latch.on(cb),
  };
}

// ---------------------------------------------------------------------------------------------------------------
// child_process implementation

/** The spec run through the bash prologue that enters the cgroup first (cgroup.ts wrapArgv). */
function withCgroupPrologue(spec: LaunchSpec, procs: string[]): LaunchSpec {
  const w = wrapArgv(procs, spec.file, spec.argv, '', spec.env);
  return { ...spec, file: w.file, argv: ['bash', ...w.args] };
}

/** The working directory and an explicit program path, checked as chdir and execve would (the native spawner's order). */
function checkBeforeStart(spec: LaunchSpec): void {
  const cwdErr = checkPath(spec.cwd, 'cwd');
  if (cwdErr !== null)
    throw spawnError(osConstants.errno[cwdErr === 'ENOTDIR' || cwdErr === 'EACCES' ? cwdErr : 'ENOENT']);
  if (!spec.file.includes('/')) return; // a bare name: child_process searches the child's PATH
  const fileErr = checkPath(spec.file.startsWith('/') ? spec.file : join(spec.cwd, spec.file), 'program');
  if (fileErr === null) return;
  const enoent = ['ENOENT', 'ENOTDIR', 'ELOOP', 'ENAMETOOLONG'].includes(fileErr);
  throw spawnError(osConstants.errno[enoent ? 'ENOENT' : 'EACCES']);
}

function spawnNode(spec: LaunchSpec, opts: SpawnOptions): SpawnedChild {
  checkNoNul(spec);
  endSpawnBatch();
  sandboxNative?.sealFds(); // child_process closes nothing: every fd we do not pass must be close-on-exec
  if (spec.freshSessionKeyring || spec.confine) {
    const extra = [...(spec.extraFds ?? []), ...(spec.confine ? confineFds(spec.confine) : [])];
    if (extra.includes(null))
      throw new SpawnError('EINVAL', 'the sandbox launcher cannot leave an fd slot closed');
    spec = {
      ...throughLauncher(
        spec,
        extra.map((_, i) => 3 + i),
        spec.confine !== undefined && !opts.cgroup, // see spawnNative's supervise
      ),
      extraFds: extra,
    };
  }
  // Outside the launcher: a child that confined itself (Landlock) could no longer write its cgroup's entry file. The
  // same prologue gives the child its RLIMIT_NPROC where no cgroup bounds the commands (cgroup.ts, "Pids budget").
  if (opts.cgroup || childNprocMax() > 0) spec = withCgroupPrologue(spec, opts.cgroup?.paths ?? []);
  // The checks the native async spawner makes before it starts a child, so that the usual exec failures are thrown
  // here, synchronously, with the same errno. What only execve sees (a missing #! interpreter, a race) comes from
  // child_process on the next tick, and is reported as the native async spawner does: exit 127 with
  // `corral: cannot execute <file>: <error>` on stderr.
  checkBeforeStart(spec);
  const latch = new ExitLatch();
  const c = childProcessSpawn({
    file: spec.file,
    argv: spec.argv,
    env: spec.env,
    cwd: spec.cwd,
    stdin: opts.stdin === 'pipe' ? 'pipe' : 'ignore',
    extraFds: spec.extraFds ?? [],
    execErrorText: (code) => STRERROR[code] ?? code,
    onExit: (status, signal) => latch.fire(status, signal),
  });
  return {
    releaseGroup: () => {},
    pid: c.pid,
    stdin: c.stdin,
    stdout: c.stdout,
    stderr: c.stderr,
    onExit: (cb) => latch.on(cb),
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Public entry points

/** The implementation spawnPiped uses: the addon when it loaded (src/platform/addon.ts), else child_process. */
export const spawnerKind: SpawnerKind = nativeSpawn ? 'native' : 'node';

/** The addon's mode for spawnPiped (meaningful when spawnerKind is 'native'). */
export const nativeMode: NativeMode = nativeSpawn && !nativeSpawn.asyncExec ? 'vfork' : 'async';

/** Spawns with an explicit implementation (tests and benchmarks); throws if 'native' is not available. */
export function spawnPipedWith(
  kind: SpawnerKind,
  spec: LaunchSpec,
  opts: SpawnOptions,
  mode: NativeMode = 'async',
): SpawnedChild {
  if (kind === 'node') return spawnNode(spec, opts);
  if (!nativeSpawn) throw new Error(`native spawner unavailable: ${nativeSpawnAbsence}`);
  return spawnNative(nativeSpawn, spec, opts, mode);
}

/** Starts `spec` with pipes. Throws SpawnError synchronously when the program cannot be started. */
export function spawnPiped(spec: LaunchSpec, opts: SpawnOptions): SpawnedChild {
  return spawnerKind === 'native' ? spawnNative(nativeSpawn!, spec, opts, nativeMode) : spawnNode(spec, opts);
}
