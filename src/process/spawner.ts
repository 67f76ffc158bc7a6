/**
 * Pipe-mode process spawner (not PTY). Two implementations with the same semantics:
 *  - 'native': the addon in src/process/native (clone(CLONE_VM) + execve without waiting for the exec, pidfd exit
 *    watching on the libuv loop; see NativeMode). Several times the spawn rate of child_process on a busy 2-core
 *    machine, closes every fd it was not asked to pass, and sets PR_SET_PDEATHSIG(SIGKILL).
 *  - 'node': child_process, used when the addon is not built (or not Linux) or with env CORRAL_SPAWNER=node. It
 *    cannot set PR_SET_PDEATHSIG. With the addon, every fd of this process is close-on-exec (sealFds at load and
 *    before each spawn), so it passes on nothing either; without it, fds this process inherited reach its children.
 * Every child is its own session and process-group leader, sees exactly `spec.env`, gets /dev/null or a pipe as
 * stdin, pipes as stdout/stderr, and the extra fds at 3, 4, …. Exec failures throw SpawnError synchronously, with
 * Rust's OS error text (what Codex reports).
 *
 * PR_SET_PDEATHSIG belongs to the spawning *thread*: call spawnPiped from the main thread (or a thread that lives as
 * long as its children should).
 */
import { ChildProcess } from 'node:child_process';
import { closeSync, existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Socket } from 'node:net';
import { constants as osConstants } from 'node:os';
import { dirname, join } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { getSystemErrorName } from 'node:util';
import { setWatchdogHooks, wrapArgv } from './cgroup.js';
import type { LaunchSpec } from './launch.js';

/**
 * The read end of a child's stdout or stderr. Reading starts when the first 'data' listener is added (or on resume);
 * 'close' follows the last data, once the pipe is at EOF or destroyed. A 'data' Buffer is only valid during the
 * callback (the native reader reuses its memory): copy what you keep.
 */
export interface OutputPipe {
  on(event: 'data', cb: (data: Buffer) => void): this;
  on(event: 'close', cb: () => void): this;
  pause(): void;
  resume(): void;
  /** Stops reading and closes the pipe now; 'close' still fires. */
  destroy(): void;
}

export interface SpawnedChild {
  pid: number;
  /** null unless stdin: 'pipe' */
  stdin: Writable | null;
  stdout: OutputPipe;
  stderr: OutputPipe;
  /** Exactly once: exitCode = status for normal exits (0..255), 128+signo when killed by a signal. */
  onExit(cb: (exitCode: number, signal: NodeJS.Signals | null) => void): void;
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
class ExitLatch {
  private result: [number, NodeJS.Signals | null] | null = null;
  private cbs: ((exitCode: number, signal: NodeJS.Signals | null) => void)[] = [];
  on(cb: (exitCode: number, signal: NodeJS.Signals | null) => void): void {
    if (this.result) {
      const [c, s] = this.result;
      queueMicrotask(() => cb(c, s));
    } else this.cbs.push(cb);
  }
  fire(exitCode: number, signal: NodeJS.Signals | null): void {
    if (this.result) return;
    this.result = [exitCode, signal];
    const cbs = this.cbs;
    this.cbs = [];
    for (const cb of cbs) cb(exitCode, signal);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Native implementation

interface NativeBinding {
  spawn(
    file: string,
    argv: string[],
    env: string[],
    cwd: string,
    fds: number[],
    waitExec: boolean,
    newPidNs?: boolean,
    freshKeyring?: boolean,
    cgroupFds?: number[],
    cgroupDirFd?: number,
    confine?: LaunchSpec['confine'],
  ): [number, number, number, number, number?];
  setExitHandler(fn: (pid: number, status: number, signo: number) => void): void;
  /** Whether this build can start children without waiting for their exec (x86_64, arm64). */
  asyncExec: boolean;
  /** Absent from builds older than spawn's newPidNs argument. */
  newPidNs?: boolean;
  /** Absent from builds older than spawn's freshKeyring argument. */
  freshKeyring?: boolean;
  /** Absent from builds older than spawn's confine argument (the Landlock backend, confine.c). */
  confine?: boolean;
  /** The Linux sandbox's helpers (src/sandbox/linux/native/sandbox.c). Absent from older builds. */
  sealFds?(): void;
  setInheritable?(fd: number, inheritable: boolean): void;
  pipe?(): [number, number];
  pinSymlinks?(pid: number, paths: string[]): void;
  holdMountTarget?(lockFile: string, target: string): number;
  releaseMountTarget?(fd: number, lockFile: string, target: string): void;
  /** Absent from builds older than the function. false: the pid is already gone (fn is never called). */
  watchExit?(pid: number, fn: () => void): boolean;
  /**
   * Pipe reading on the loop (pipes.c); absent from older builds. onData(n > 0): scratch[0, n) holds new bytes
   * (valid during the call); onData(0): EOF, the fd is closed.
   */
  pipeOpen?(fd: number, scratch: Uint8Array, onData: (n: number) => void): PipeHandle;
  pipePause?(h: PipeHandle): void;
  pipeResume?(h: PipeHandle): void;
  pipeClose?(h: PipeHandle): void;
  /** 0, or the errno a chdir into (kind 0) or an execve of (kind 1) `path` would fail with. Absent from older builds. */
  checkPath?(path: string, kind: 0 | 1): number;
  /** Group watchdog (watchdog.c): forget a slot spawn returned; the watchdog's pid (0: none). Absent from older builds. */
  unwatchGroup?(slot: number): void;
  watchdogPid?(): number;
  /** Registers a process group started another way (node-pty); the slot, or -1. Absent from older builds. */
  watchGroup?(pgid: number): number;
  /** (Re)starts the watchdog if it is not running. Absent from older builds. */
  ensureWatchdog?(): void;
  /**
   * Cgroup mode of the watchdog (see watchdog.h); also means spawn takes cgroupFds. Absent from older builds.
   */
  setCgroupCleanup?(version: 1 | 2, bases: string[], removeBases: boolean): void;
  /** Ends the spawning thread's SCHED_BATCH window of this loop turn (spawn.c, batch_begin). Absent from older builds. */
  schedRestore?(): void;
  /** Standard base64 of `src` written into `dst` at `offset`; returns the bytes written. Absent from older builds. */
  base64Into?(src: Uint8Array, dst: Uint8Array, offset: number): number;
  /**
   * splice(2) relay between two connected sockets (relay.c), on duplicates of the fds; onDone(err, aToB, bToA) once
   * both directions have ended (err 0) or at the first error (an errno value), never from within relayOpen. Absent
   * from older builds.
   */
  relayOpen?(fdA: number, fdB: number, onDone: (err: number, aToB: number, bToA: number) => void): unknown;
  /** Stops a relay now; its onDone is not called. */
  relayClose?(handle: unknown): void;
  /** Listening sockets on 127.0.0.1:port in pid's network namespace (netns.c). Absent from older builds. */
  listenInNetns?(pid: number, ports: number[]): number[];
  /** See frameOutputs below. Absent from older builds. */
  frameOutputs?(
    src: Uint8Array,
    chunkSize: number,
    prefix: Uint8Array,
    firstSeq: number,
    fields: Uint8Array,
    dst: Uint8Array,
    offset: number,
  ): number;
}

declare const pipeHandleBrand: unique symbol;
type PipeHandle = { readonly [pipeHandleBrand]: true };

type PipeMethods = Required<Pick<NativeBinding, 'pipeOpen' | 'pipePause' | 'pipeResume' | 'pipeClose'>>;

/** Where every native pipe of this module reads into; its callbacks run one at a time on the loop. */
const PIPE_SCRATCH = Buffer.allocUnsafeSlow(256 * 1024);

/** A pipe read by the addon (one uv_poll handle, no allocation per read) instead of a net.Socket. */
class NativePipe implements OutputPipe {
  private handle: PipeHandle | null = null;
  private dataCb: ((data: Buffer) => void) | null = null;
  private extraDataCbs: ((data: Buffer) => void)[] = [];
  private closeCbs: (() => void)[] = [];
  private paused = false;
  private closed = false;
  private readonly onChunk = (n: number) => {
    if (n === 0) this.finish();
    else {
      const data = PIPE_SCRATCH.subarray(0, n);
      this.dataCb?.(data);
      for (const cb of this.extraDataCbs) cb(data);
    }
  };

  constructor(
    private readonly binding: PipeMethods,
    private readonly fd: number,
  ) {}

  on(event: 'data' | 'close', cb: ((data: Buffer) => void) | (() => void)): this {
    if (event === 'close') {
      if (this.closed) queueMicrotask(cb as () => void);
      else this.closeCbs.push(cb as () => void);
      return this;
    }
    if (this.dataCb) this.extraDataCbs.push(cb);
    else this.dataCb = cb;
    if (!this.paused) this.open();
    return this;
  }

  pause(): void {
    this.paused = true;
    if (this.handle) this.binding.pipePause(this.handle);
  }

  resume(): void {
    this.paused = false;
    if (this.handle) this.binding.pipeResume(this.handle);
    else this.open();
  }

  destroy(): void {
    if (this.closed) return;
    if (this.handle) this.binding.pipeClose(this.handle);
    else closeSync(this.fd);
    this.finish();
  }

  private open(): void {
    if (this.handle || this.closed) return;
    this.handle = this.binding.pipeOpen(this.fd, PIPE_SCRATCH, this.onChunk);
  }

  private finish(): void {
    if (this.closed) return;
    this.closed = true;
    const cbs = this.closeCbs;
    this.closeCbs = [];
    for (const cb of cbs) cb();
  }
}

/** child_process's Readable behind the OutputPipe interface. */
function readablePipe(r: Readable): OutputPipe {
  const pipe: OutputPipe = {
    on(event: 'data' | 'close', cb: ((data: Buffer) => void) | (() => void)) {
      if (event === 'close') r.once('close', cb as () => void);
      else r.on('data', cb);
      return pipe;
    },
    pause: () => r.pause(),
    resume: () => r.resume(),
    destroy: () => r.destroy(),
  } as OutputPipe;
  r.on('error', () => {});
  return pipe;
}

const pipeMethods = new WeakMap<NativeBinding, PipeMethods | null>();

function outputPipe(binding: NativeBinding, fd: number): OutputPipe {
  let m = pipeMethods.get(binding);
  if (m === undefined) {
    const { pipeOpen, pipePause, pipeResume, pipeClose } = binding;
    m =
      pipeOpen && pipePause && pipeResume && pipeClose
        ? {
            pipeOpen: pipeOpen.bind(binding),
            pipePause: pipePause.bind(binding),
            pipeResume: pipeResume.bind(binding),
            pipeClose: pipeClose.bind(binding),
          }
        : null;
    pipeMethods.set(binding, m);
  }
  if (m) return new NativePipe(m, fd);
  return readablePipe(new Socket({ fd, readable: true, writable: false }));
}

/**
 * How the native spawner starts a child. 'async' (the default where supported): the event loop does not wait for the
 * child's execve; missing or unusable programs and cwds are found by checks before the start, and the rarer exec
 * failures only visible to execve itself (bad #! interpreter, unknown binary format) make the child print
 * `corral: cannot execute <file>: <error>` on stderr and exit 127. 'vfork': wait for the execve, every exec failure
 * is a SpawnError; the main thread is blocked until the child has been scheduled and exec'd, which costs throughput
 * when the machine is busy.
 */
export type NativeMode = 'async' | 'vfork';

const FD_CLOSED = -1;
const FD_PIPE = -2;
const FD_DEVNULL = -3;

/** The package root: the nearest directory upwards holding our package.json (works from src/ and from dist/). */
function packageRoot(): string | null {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pj = join(dir, 'package.json');
    if (existsSync(pj)) {
      try {
        if ((JSON.parse(readFileSync(pj, 'utf8')) as { name?: string }).name === 'corral') return dir;
      } catch {
        // not ours; keep looking
      }
    }
    const up = dirname(dir);
    if (up === dir) return null;
    dir = up;
  }
}

function loadNative(): { binding: NativeBinding | null; error: string | null } {
  if (process.platform !== 'linux') return { binding: null, error: 'not Linux' };
  const root = packageRoot();
  if (!root) return { binding: null, error: 'package root not found' };
  const path = join(root, 'build', 'Release', 'corral_spawn.node');
  try {
    return { binding: createRequire(import.meta.url)(path) as NativeBinding, error: null };
  } catch (e) {
    return { binding: null, error: (e as Error).message };
  }
}

const native = loadNative();

/**
 * Exit latches by pid. The addon has one exit handler per process (per thread), shared by every copy of this module
 * that loads it (sources and a bundle, say), so the table lives on the addon's exports object.
 */
const nativeExits: Map<number, ExitLatch> = (() => {
  const b = native.binding as (NativeBinding & { corralExits?: Map<number, ExitLatch> }) | null;
  if (!b) return new Map();
  if (b.corralExits) return b.corralExits;
  const table = new Map<number, ExitLatch>();
  b.corralExits = table;
  b.setExitHandler((pid, status, signo) => {
    const latch = table.get(pid);
    if (!latch) return;
    table.delete(pid);
    if (signo !== 0) latch.fire(128 + signo, SIGNAL_NAMES.get(signo) ?? null);
    else latch.fire(status, null);
  });
  return table;
})();

/**
 * The addon's SIMD base64 encoder writing straight into `dst` (about 2.5x Node's toString('base64') plus the copy
 * into a Buffer, and no string garbage), or null without the addon.
 */
export const base64Into: ((src: Uint8Array, dst: Uint8Array, offset: number) => number) | null =
  native.binding?.base64Into?.bind(native.binding) ?? null;

/**
 * The process/output notifications of one read as unmasked WebSocket text frames, written into `dst` at `offset` by
 * the addon (one call per read instead of JS work per chunk); null without the addon. `src` is cut into chunks of
 * `chunkSize`; chunk k becomes `prefix + (firstSeq + k) + fields + base64(chunk) + '"}}'`. Returns the bytes written;
 * throws a RangeError, writing nothing, when `dst` is too small.
 */
export const frameOutputs: NonNullable<NativeBinding['frameOutputs']> | null =
  native.binding?.frameOutputs?.bind(native.binding) ?? null;

/**
 * Listening TCP sockets on 127.0.0.1:port inside pid's network namespace, made by the addon (see
 * NativeBinding.listenInNetns); throws an Error with `errno` when that fails. Null without the addon.
 */
export const nativeListenInNetns: ((pid: number, ports: number[]) => number[]) | null =
  native.binding?.listenInNetns?.bind(native.binding) ?? null;

/** The addon's splice relay for the proxy's tunnels (see NativeBinding.relayOpen), or null without it. */
export const nativeRelay: {
  open(fdA: number, fdB: number, onDone: (err: number, aToB: number, bToA: number) => void): unknown;
  close(handle: unknown): void;
} | null = (() => {
  const b = native.binding;
  if (!b?.relayOpen || !b.relayClose) return null;
  return { open: b.relayOpen.bind(b), close: b.relayClose.bind(b) };
})();

/**
 * The addon's check of a path before a launch (see NativeBinding.checkPath): an errno name, or null when usable;
 * undefined when the addon cannot check (not built, older build) and the caller must check itself.
 */
export function nativeCheckPath(path: string, kind: 'cwd' | 'program'): string | null | undefined {
  const fn = native.binding?.checkPath;
  if (!fn) return undefined;
  const err = fn.call(native.binding, path, kind === 'cwd' ? 0 : 1);
  return err === 0 ? null : (ERRNO_NAMES.get(err) ?? `E${err}`);
}

/**
 * Call before starting a process any other way than spawnPiped (node-pty, child_process): the native spawner keeps
 * this thread SCHED_BATCH from its first spawn of a loop turn until the loop polls again, and a child forked meanwhile
 * would inherit that policy for life.
 */
export function endSpawnBatch(): void {
  native.binding?.schedRestore?.();
}

/**
 * Registers a process group started without spawnPiped (node-pty's children) with the group watchdog, so it dies
 * with the server however the server dies; returns the function that unregisters it (call it once the process has
 * closed). A no-op without the addon.
 */
export function watchProcessGroup(pgid: number): () => void {
  const b = native.binding;
  const slot = b?.watchGroup?.(pgid) ?? -1;
  if (slot < 0) return () => {};
  let watched = true;
  return () => {
    if (!watched) return;
    watched = false;
    b?.unwatchGroup?.(slot);
  };
}

// The watchdog's cgroup mode: src/process/cgroup.ts hands it the server's cgroup directories.
setWatchdogHooks(
  native.binding?.setCgroupCleanup
    ? { setCgroupCleanup: native.binding.setCgroupCleanup.bind(native.binding) }
    : null,
);

/**
 * Makes sure the group watchdog runs (it empties the server's cgroups if the server dies): for a child in a cgroup
 * started without spawnPiped (node-pty), which registers nothing. A no-op without the addon.
 */
export function ensureGroupWatchdog(): void {
  try {
    native.binding?.ensureWatchdog?.();
  } catch {
    // no watchdog can be started (ENOMEM, EAGAIN): the cgroups are still removed at exit
  }
}

/** The group watchdog's pid while it runs (tests), else 0. */
export function groupWatchdogPid(): number {
  return native.binding?.watchdogPid?.() ?? 0;
}

/**
 * The addon's exports when they hold the fd-relative fs calls of fsat.c (typed and checked by src/server/fsNative.ts,
 * their only user), else null.
 */
export const nativeFsCalls: object | null =
  native.binding && 'fsOpenAt' in native.binding ? (native.binding as object) : null;

/**
 * The addon's exports when they hold the Landlock calls of landlock.c and spawn can confine a child (typed and
 * checked by src/sandbox/linux/landlockNative.ts, their only user), else null.
 */
export const nativeLandlockCalls: object | null =
  native.binding?.confine === true && 'landlockRuleset' in native.binding ? (native.binding as object) : null;

/** Why the native spawner is not available (null when it is). */
export const nativeLoadError: string | null = native.error;

/** The addon's helpers for the Linux sandbox, or null when this build has none (see NativeBinding). */
export const sandboxNative: {
  sealFds(): void;
  setInheritable(fd: number, inheritable: boolean): void;
  pipe(): [number, number];
  pinSymlinks(pid: number, paths: string[]): void;
  holdMountTarget(lockFile: string, target: string): number;
  releaseMountTarget(fd: number, lockFile: string, target: string): void;
} | null = (() => {
  const b = native.binding;
  if (
    !b?.sealFds ||
    !b.setInheritable ||
    !b.pipe ||
    !b.pinSymlinks ||
    !b.holdMountTarget ||
    !b.releaseMountTarget
  )
    return null;
  return {
    sealFds: b.sealFds.bind(b),
    setInheritable: b.setInheritable.bind(b),
    pipe: b.pipe.bind(b),
    pinSymlinks: b.pinSymlinks.bind(b),
    holdMountTarget: b.holdMountTarget.bind(b),
    releaseMountTarget: b.releaseMountTarget.bind(b),
  };
})();

/** The sandbox launcher built next to the addon (src/sandbox/linux/native/launcher.c), or null when it is missing. */
export const sandboxLauncher: string | null = (() => {
  const root = native.binding ? packageRoot() : null;
  const p = root ? join(root, 'build', 'Release', 'corral-sandbox-exec') : null;
  return p && existsSync(p) ? p : null;
})();

/**
 * `spec` started through the sandbox launcher: a fresh session keyring, `fds` at 3, 4, … and nothing else. For the
 * spawners that cannot do that in the child themselves (node-pty, child_process). With `spec.confine`, the last of
 * `fds` must be where the launcher finds the Landlock ruleset: it confines itself with it (and the seccomp program,
 * passed as hex) and closes it before exec.
 */
export function throughLauncher(spec: LaunchSpec, fds: number[]): LaunchSpec {
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
      ]
    : [];
  const argv = [
    sandboxLauncher,
    ...fds.flatMap((fd) => ['--fd', String(fd)]),
    ...confine,
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
 * Env CORRAL_NATIVE_PIDNS=0 turns this off (diagnosis, benchmarks).
 */
const nativePidNs =
  native.binding?.newPidNs === true && process.geteuid?.() === 0 && process.env.CORRAL_NATIVE_PIDNS !== '0';
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
  binding: NativeBinding,
  spec: LaunchSpec,
  opts: SpawnOptions,
  mode: NativeMode,
): SpawnedChild {
  checkNoNul(spec);
  if (spec.freshSessionKeyring && binding.freshKeyring !== true) {
    throw new SpawnError(
      'ENOSYS',
      'this build of the native spawner cannot give a child a fresh session keyring',
    );
  }
  if (opts.cgroup && !binding.setCgroupCleanup) {
    // An older build cannot enter a cgroup itself: the bash prologue does.
    spec = withCgroupPrologue(spec, opts.cgroup.paths);
    opts = { stdin: opts.stdin };
  }
  if (spec.confine && (binding.confine !== true || (spec.extraFds?.length ?? 0) > 0)) {
    throw new SpawnError(
      'ENOSYS',
      'this build of the native spawner cannot confine a child (Landlock), or extra fds were asked for with it',
    );
  }
  const unguarded = withoutPidGuard(spec);
  if (unguarded) spec = unguarded;
  const fds = [opts.stdin === 'pipe' ? FD_PIPE : FD_DEVNULL, FD_PIPE, FD_PIPE];
  for (const fd of spec.extraFds ?? []) fds.push(fd ?? FD_CLOSED);
  let r: [number, number, number, number, number?];
  try {
    r = binding.spawn(
      spec.file,
      spec.argv,
      envPairs(spec.env),
      spec.cwd,
      fds,
      mode === 'vfork' || !binding.asyncExec,
      unguarded !== undefined,
      spec.freshSessionKeyring === true,
      opts.cgroup?.fds,
      opts.cgroup?.dirFd ?? -1,
      spec.confine,
    );
  } catch (e) {
    const errno = (e as { errno?: unknown }).errno;
    if (typeof errno === 'number') throw spawnError(errno, (e as Error).message);
    throw e;
  }
  const [pid, inFd, outFd, errFd, slot = -1] = r;
  const latch = new ExitLatch();
  nativeExits.set(pid, latch);
  let watched = slot >= 0;
  return {
    releaseGroup: () => {
      if (!watched) return;
      watched = false;
      binding.unwatchGroup?.(slot);
    },
    pid,
    stdin: inFd >= 0 ? new Socket({ fd: inFd, readable: false, writable: true }) : null,
    stdout: outputPipe(binding, outFd),
    stderr: outputPipe(binding, errFd),
    onExit: (cb) => latch.on(cb),
  };
}

// ---------------------------------------------------------------------------------------------------------------
// child_process implementation

/** The spec run through the bash prologue that enters the cgroup first (cgroup.ts wrapArgv). */
function withCgroupPrologue(spec: LaunchSpec, procs: string[]): LaunchSpec {
  const w = wrapArgv(procs, spec.file, spec.argv);
  return { ...spec, file: w.file, argv: ['bash', ...w.args] };
}

function spawnNode(spec: LaunchSpec, opts: SpawnOptions): SpawnedChild {
  checkNoNul(spec);
  endSpawnBatch();
  sandboxNative?.sealFds(); // child_process closes nothing: every fd we do not pass must be close-on-exec
  if (spec.freshSessionKeyring || spec.confine) {
    const extra = [...(spec.extraFds ?? []), ...(spec.confine ? [spec.confine.rulesetFd] : [])];
    if (extra.includes(null))
      throw new SpawnError('EINVAL', 'the sandbox launcher cannot leave an fd slot closed');
    spec = {
      ...throughLauncher(
        spec,
        extra.map((_, i) => 3 + i),
      ),
      extraFds: extra,
    };
  }
  // Outside the launcher: a child that confined itself (Landlock) could no longer write its cgroup's entry file.
  if (opts.cgroup) spec = withCgroupPrologue(spec, opts.cgroup.paths);
  // ChildProcess#spawn (what child_process.spawn calls after normalising its arguments) returns the exec error
  // synchronously, where child_process.spawn would only emit it on the next tick.
  const cp = new ChildProcess();
  const stdio: (string | number)[] = [opts.stdin === 'pipe' ? 'pipe' : 'ignore', 'pipe', 'pipe'];
  for (const fd of spec.extraFds ?? []) stdio.push(fd ?? 'ignore');
  let err: unknown;
  try {
    err = (cp as unknown as { spawn(o: object): unknown }).spawn({
      file: spec.file,
      args: spec.argv,
      envPairs: envPairs(spec.env),
      cwd: spec.cwd,
      stdio,
      detached: true,
      windowsHide: true,
    });
  } catch (e) {
    const errno = (e as { errno?: unknown }).errno;
    if (typeof errno === 'number' && errno < 0) throw spawnError(-errno);
    throw e;
  }
  if (typeof err === 'number' && err < 0) {
    cp.on('error', () => {}); // the same error, emitted on the next tick: already reported by throwing
    const name = getSystemErrorName(err);
    throw spawnError(osConstants.errno[name as keyof typeof osConstants.errno] ?? -err);
  }
  if (cp.pid === undefined || !cp.stdout || !cp.stderr) {
    cp.on('error', () => {});
    throw spawnError(osConstants.errno.EINVAL);
  }
  const latch = new ExitLatch();
  cp.once('exit', (code, signal) => {
    if (signal) latch.fire(128 + (osConstants.signals[signal] ?? 0), signal);
    else latch.fire(code ?? 0, null);
  });
  return {
    releaseGroup: () => {},
    pid: cp.pid,
    stdin: cp.stdin,
    stdout: readablePipe(cp.stdout),
    stderr: readablePipe(cp.stderr),
    onExit: (cb) => latch.on(cb),
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Public entry points

function chooseKind(): SpawnerKind {
  if (process.env.CORRAL_SPAWNER === 'node') return 'node';
  return native.binding ? 'native' : 'node';
}

/**
 * The implementation spawnPiped uses: the addon when it loaded, else child_process. Env CORRAL_SPAWNER=node forces
 * child_process; CORRAL_SPAWNER=native-vfork keeps the addon but in vfork mode (for diagnosis).
 */
export const spawnerKind: SpawnerKind = chooseKind();

/** The addon's mode for spawnPiped (meaningful when spawnerKind is 'native'). */
export const nativeMode: NativeMode =
  process.env.CORRAL_SPAWNER === 'native-vfork' || (native.binding !== null && !native.binding.asyncExec)
    ? 'vfork'
    : 'async';

/** Spawns with an explicit implementation (tests and benchmarks); throws if 'native' is not available. */
export function spawnPipedWith(
  kind: SpawnerKind,
  spec: LaunchSpec,
  opts: SpawnOptions,
  mode: NativeMode = 'async',
): SpawnedChild {
  if (kind === 'node') return spawnNode(spec, opts);
  if (!native.binding) throw new Error(`native spawner unavailable: ${native.error}`);
  return spawnNative(native.binding, spec, opts, mode);
}

/**
 * Calls `cb` once, on the event loop, when process `pid` has terminated: for processes this module did not start
 * (node-pty's children). It polls a pidfd and never reaps: the process's own parent (node-pty's waitpid thread) does.
 * A pid that is already gone calls back on a later turn. Returns false, and never calls `cb`, when no watcher is
 * available (addon not built or older than this function, not Linux, kernel without pidfd_open): the caller must
 * learn of the exit another way.
 *
 * Call it while the pid cannot have been reused, i.e. before the process can have been reaped (right after starting
 * it, from the same synchronous code): a reaped pid is only reused after the kernel's pid counter wraps.
 */
export function watchExit(pid: number, cb: () => void): boolean {
  const fn = native.binding?.watchExit;
  if (!fn) return false;
  let watching: boolean;
  try {
    watching = fn.call(native.binding, pid, cb);
  } catch {
    return false; // ENOSYS (Linux < 5.3), EMFILE, …
  }
  if (!watching) setImmediate(cb);
  return true;
}

/** Starts `spec` with pipes. Throws SpawnError synchronously when the program cannot be started. */
export function spawnPiped(spec: LaunchSpec, opts: SpawnOptions): SpawnedChild {
  return spawnerKind === 'native'
    ? spawnNative(native.binding!, spec, opts, nativeMode)
    : spawnNode(spec, opts);
}
