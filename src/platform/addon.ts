/**
 * The one loader of Corral's native addon (build/Release/corral_spawn.node, and the sandbox launcher next to it, both
 * built from src/platform/native by node-gyp at `npm ci`: all of Corral's C is there). Nothing outside src/platform
 * imports this file (scripts/check-layers.mjs enforces it): every other module uses a capability of src/platform,
 * which is either the addon's (typed, every member present) or its JavaScript implementation or an explicit refusal,
 * decided in that capability's file once, at load.
 *
 * The addon is loaded only when all of these hold, else `addon` is null and `addonAbsence` says why:
 *  - Linux (the C is Linux-only; elsewhere nothing is built);
 *  - env CORRAL_NATIVE is not "0" (the one switch that turns every native capability off: what macOS or a machine
 *    without a compiler gets; CI runs the whole suite a second time that way);
 *  - the build exists and loads;
 *  - its `abi` equals NATIVE_ABI: a build from another version of the C is never half used.
 *
 * Every switch that turns native code off is read in this file and nowhere else (the C reads no environment):
 *  - CORRAL_NATIVE=0: no addon at all (the list above);
 *  - CORRAL_NO_BATCH (set, any value): the spawner never switches to SCHED_BATCH (spawn.c batch_begin), read at load;
 *  - CORRAL_NO_SIMD (set, any value): the addon's base64 without SSSE3 (pipes.c), read at load;
 *  - CORRAL_PROXY_SPLICE=0: the proxy's tunnels through Node streams even with the addon (relay.ts), read per tunnel
 *    (a measurement switch that tests and benchmarks flip in a running process);
 *  - CORRAL_FS_WATCH=0: no filesystem watch for sandbox planning (fsWatch.ts: every start asks the filesystem again),
 *    read at load (an operator who does not trust inotify on a filesystem; the A/B of its benefit).
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The interface version this JavaScript was written against (CORRAL_NATIVE_ABI in src/platform/native/common.h). */
export const NATIVE_ABI = 12;

declare const handleBrand: unique symbol;
/** An opaque handle the addon hands out (a pipe reader, a relay). */
export type NativeHandle = { readonly [handleBrand]: true };

/**
 * The Landlock backend's confinement, applied by the child right before exec (confine.c): the ruleset fd, the
 * seccomp program, Landlock restrict flags. (src/process/launch.ts LaunchSpec.confine.)
 */
export interface Confinement {
  rulesetFd: number;
  seccomp: Buffer;
  flags?: number;
  /** The command's end of netNotifyPair: its connect() calls go to the server's supervisor (netnotify.c). */
  netNotifyFd?: number;
}

/** Everything the addon exports at NATIVE_ABI. Only the capability files of src/platform see it. */
export interface Addon {
  readonly abi: number;
  // spawn.c
  /**
   * Starts a child (clone + execve; see src/platform/spawn.ts). fds: stdin, stdout, stderr, extra fds at 3, 4, …
   * (-1 closed, -2 a new pipe, -3 /dev/null). Returns [pid, stdin fd, stdout fd, stderr fd, watchdog slot].
   */
  spawn(
    file: string,
    argv: string[],
    env: string[],
    cwd: string,
    fds: number[],
    waitExec: boolean,
    newPidNs: boolean,
    freshKeyring: boolean,
    cgroupFds: number[] | undefined,
    cgroupDirFd: number,
    confine: Confinement | undefined,
    /** > 0: the child's RLIMIT_NPROC (soft and hard), set before exec; 0: unchanged. */
    nprocMax: number,
    /** Async mode: run the command under a subreaper supervisor (spawn.c supervisor_main); the pid is the command's. */
    supervise: boolean,
    /** file and cwd were just checked by checkPath's rules: async mode does not check them again (absent: false). */
    checked?: boolean,
  ): [number, number, number, number, number];
  /** rusage: [user µs, system µs, max RSS KiB, blocks in, blocks out] from waitid, absent when the kernel gave none. */
  setExitHandler(fn: (pid: number, status: number, signo: number, rusage?: number[]) => void): void;
  /** Whether this build can start children without waiting for their exec (x86_64, arm64). */
  readonly asyncExec: boolean;
  /** spawn understands its confine argument (confine.c). */
  readonly confine: boolean;
  /** false: the pid is already gone (fn is never called). Throws (ENOSYS, EMFILE) when no pidfd can be had. */
  watchExit(pid: number, fn: () => void): boolean;
  /** 0, or the errno a chdir into (kind 0) or an execve of (kind 1) `path` would fail with. */
  checkPath(path: string, kind: 0 | 1): number;
  /** Ends the spawning thread's SCHED_BATCH window of this loop turn (spawn.c, batch_begin). */
  schedRestore(): void;
  // watchdog.c
  unwatchGroup(slot: number): void;
  watchdogPid(): number;
  /** Registers a process group started another way (node-pty); the slot, or -1. */
  watchGroup(pgid: number): number;
  ensureWatchdog(): void;
  setCgroupCleanup(version: 1 | 2, bases: string[], removeBases: boolean): void;
  /** The C's switches, as read here (see nativeSwitches): false turns SCHED_BATCH / SSSE3 base64 off. */
  setSwitches(batch: boolean, simd: boolean): void;
  // pipes.c
  pipeOpen(fd: number, scratch: Uint8Array, onData: (n: number) => void): NativeHandle;
  pipePause(h: NativeHandle): void;
  pipeResume(h: NativeHandle): void;
  pipeClose(h: NativeHandle): void;
  /** Standard base64 of `src` written into `dst` at `offset`; returns the bytes written. */
  base64Into(src: Uint8Array, dst: Uint8Array, offset: number): number;
  // relay.c
  /** A socket named by [mark, localAddress, localPort, remoteAddress, remotePort] (relay.c find_socket). */
  relayOpen(
    a: [number, string, number, string, number],
    b: [number, string, number, string, number],
    headAToB: Buffer | null,
    headBToA: Buffer | null,
    onDone: (err: number, aToB: number, bToA: number) => void,
  ): NativeHandle;
  relayClose(h: NativeHandle): void;
  // netns.c
  listenInNetns(pid: number, ports: number[]): number[];
  // landlock.c (see src/platform/landlock.ts)
  landlockAbi(): [number, number, number];
  landlockRuleset(
    handledFs: number,
    handledNet: number,
    scoped: number,
    paths: string[],
    rights: number[],
    ports: number[],
  ): number[];
  // netnotify.c (see src/platform/netNotify.ts)
  netNotifyProbe(): string | null;
  netNotifyPair(): [number, number];
  netNotifyWatch(serverFd: number, ports: number[], socksPort?: number, passPorts?: number[]): void;
  netNotifyCounts(): [number, number, number];
  netNotifyTransparent?(localPort: number, socksPort: number): boolean;
  // fswatch.c (see src/platform/fsWatch.ts)
  fsWatchOpen(): number;
  fsWatchAdd(fd: number, dir: string): number;
  fsWatchDrain(fd: number, max: number): null | -1 | (number | string | null)[];
  fsWatchPending(fd: number, mountsFd: number): number;
  fsRevalidate(path: string): number;
  // fsat.c (see src/platform/confinedFs.ts)
  fsProbe(): number;
  fsOpenRoot(): number;
  fsOpenAt(dirfd: number, name: string, flags: number, mode: number): number;
  fsStat(fd: number): number | [string, number, number, number, number, number, number];
  fsDup(fd: number): number;
  fsReadlink(fd: number): number | string;
  fsMkdirAt(dirfd: number, name: string, mode: number): number;
  fsUnlinkAt(dirfd: number, name: string, isDir: boolean): number;
  fsSymlinkAt(target: string, dirfd: number, name: string): number;
  fsReadDir(fd: number, max: number): number | (string | number)[];
  // src/platform/native/sandbox.c (see src/platform/sandbox.ts)
  sealFds(): void;
  setInheritable(fd: number, inheritable: boolean): void;
  pipe(): [number, number];
  pinSymlinks(pid: number, paths: string[]): void;
  holdMountTarget(lockFile: string, target: string): number;
  releaseMountTarget(fd: number, lockFile: string, target: string): void;
  /** Absent in an addon built before it: callers read the table instead. */
  mountsChanged?(fd: number): boolean;
}

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

/** Where node-gyp puts what it builds (the addon and the sandbox launcher), or null when the package root is unknown. */
export const buildDir: string | null = (() => {
  const root = packageRoot();
  return root ? join(root, 'build', 'Release') : null;
})();

function load(): { addon: Addon; absence: null } | { addon: null; absence: string } {
  if (process.env.CORRAL_NATIVE === '0')
    return { addon: null, absence: 'the native addon is turned off (CORRAL_NATIVE=0)' };
  if (process.platform !== 'linux')
    return { addon: null, absence: `the native addon is Linux-only (this is ${process.platform})` };
  if (!buildDir) return { addon: null, absence: 'the native addon was not found (no package root)' };
  const path = join(buildDir, 'corral_spawn.node');
  let exports: { abi?: unknown };
  try {
    exports = createRequire(import.meta.url)(path) as { abi?: unknown };
  } catch (e) {
    return { addon: null, absence: `the native addon did not load (${(e as Error).message.split('\n')[0]})` };
  }
  if (exports.abi !== NATIVE_ABI) {
    return {
      addon: null,
      absence: `the native addon at ${path} is another version (abi ${String(exports.abi ?? 'none')}, this build needs ${NATIVE_ABI}): rebuild it with \`npx node-gyp rebuild\``,
    };
  }
  return { addon: exports as Addon, absence: null };
}

const loaded = load();
// (A stand-in build with only `abi`, as the loader's own test makes, has nothing to switch.)
if (typeof loaded.addon?.setSwitches === 'function')
  loaded.addon.setSwitches(
    process.env.CORRAL_NO_BATCH === undefined,
    process.env.CORRAL_NO_SIMD === undefined,
  );

/** The switches the capability files ask (see the module comment: each says when it is read). */
export const nativeSwitches = {
  /** false: tunnels are piped through Node streams even where the splice relay could carry them. */
  proxySplice: (): boolean => process.env.CORRAL_PROXY_SPLICE !== '0',
  /** false: sandbox planning keeps no answers between starts (fsWatch.ts). */
  fsWatch: process.env.CORRAL_FS_WATCH !== '0',
};

/** The addon, or null (see addonAbsence). */
export const addon: Addon | null = loaded.addon;

/** Why the addon is not loaded, in words for a user ("the native addon is turned off (CORRAL_NATIVE=0)"); null when it is. */
export const addonAbsence: string | null = loaded.absence;
