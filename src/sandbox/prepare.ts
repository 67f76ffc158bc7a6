import { type ChildProcess, execFile } from 'node:child_process';
import { lstatSync, mkdtempSync, realpathSync, rmdirSync, rmSync, writeSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { cgroupMountPoints } from '../process/cgroup.js';
import type { LaunchSpec, PreparedLaunch, SandboxType } from '../process/launch.js';
import { formatTag, ownTag, sweepStaleDirs } from '../process/serverTag.js';
import { sandboxLauncher, sandboxNative } from '../process/spawner.js';
import type { SandboxGuarantees, WeakerGuarantee } from '../protocol/exec.js';
import type { ParsedSandbox } from '../protocol/sandbox.js';
import { type EffectiveSandbox, effectiveSandbox } from './effective.js';
import { SandboxSetupError } from './errors.js';
import { type BwrapFeatures, bwrapArgs } from './linux/bwrapArgs.js';
import { type LandlockPlan, planLandlock, WRITE } from './linux/landlock.js';
import { buildRuleset, closeRuleset, type LandlockSupport, landlockSupport } from './linux/landlockNative.js';
import { type BwrapHost, findBwrap, knownBwrap, probeBwrap, SYSTEM_BWRAP } from './linux/locate.js';
import {
  closeQuietly,
  FORWARD_BASE_PORT,
  listenInSandboxNetns,
  type ManagedRoutes,
  planManagedRoutes,
  readChildPid,
  release,
  startForwarder,
  startHostBridges,
} from './linux/managedNet.js';
import { acquireSyntheticTargets, mountTargetLockDir } from './linux/mountTargets.js';
import { guardArgv, hostPidOf, setupDone, UNSHARE } from './linux/pidGuard.js';
import {
  buildSeccompFilter,
  hostSeccompArch,
  type SeccompArch,
  type SeccompExtras,
  type SeccompMode,
} from './linux/seccomp.js';
import { watchSandbox } from './linux/watchdog.js';
import { buildSeatbelt, type SeatbeltProfile, seatbeltArgv } from './macos/seatbelt.js';
import { isUnder, type ResolvedPolicy, resolvePolicy } from './resolve.js';

export interface LaunchCommand {
  /** What to run: `file` already resolved against the child's PATH; `argv[0]` may be a custom arg0. */
  spec: LaunchSpec;
  tty: boolean;
  /** The 0.169 top-level `enforceManagedNetwork` (the seed carries its own flag inside the sandbox object). */
  enforceManagedNetwork?: boolean;
}

export interface PrepareOptions {
  /** The bwrap binary (default: /usr/bin/bwrap, else PATH). Injectable so tests can point it at a missing file. */
  bwrapPath?: string;
  /** The server's TMPDIR (default: process.env.TMPDIR). */
  tmpdir?: string;
  platform?: NodeJS.Platform;
  /** Node's arch and the kernel's `uname -m` (defaults: os.arch(), os.machine()). */
  arch?: string;
  machine?: string;
  /**
   * Files of the server that no sandbox may read, whatever its policy (the `--ws-token-file`, the log file): each is
   * masked like an unreadable path (a file by /dev/null, a directory by an empty tmpfs).
   */
  hiddenPaths?: readonly string[];
  /**
   * `landlock`: where bubblewrap cannot create namespaces (or is not installed), Linux sandboxes use the Landlock
   * backend instead of failing (`--sandbox-fallback landlock`). Default `none`: such a start fails, saying why.
   */
  fallback?: 'landlock' | 'none';
  /** Guarantees the Landlock backend may hold weaker than bwrap would (`--sandbox-accept-weaker`); default none. */
  acceptWeaker?: readonly WeakerGuarantee[];
}

/**
 * A file descriptor bwrap gets at fd 3, 4, 5 (in that order), each one end of an anonymous pipe: the seccomp
 * program (read to EOF), bwrap's --info-fd (it writes the sandbox's pid) and --block-fd (it waits for one byte before
 * it execs the command). No file or FIFO on disk: nothing another sandbox could open.
 */
export type FdSlot = 'seccomp' | 'info' | 'block';

/** The pure result of planning a launch: what would run, without any file, fd or process created. */
export interface LaunchPlan {
  sandboxType: SandboxType;
  mechanism: 'none' | 'passthrough' | 'bwrap' | 'landlock' | 'seatbelt';
  /** The final spec; its `extraFds` are filled in by prepareLaunch from `fdSlots` (the same for pipes and a PTY). */
  spec: LaunchSpec;
  summary: Record<string, unknown>;
  fdSlots: FdSlot[];
  seccomp?: { arch: SeccompArch; mode: SeccompMode; filter: Buffer };
  managed?: ManagedRoutes;
  /** Symlinks to pin by name in the sandbox's mount namespace before the command runs (ResolvedPolicy.pinnedLinks). */
  pins?: string[];
  syntheticTargets: string[];
  seatbelt?: SeatbeltProfile;
  /** bwrap runs under the pid-namespace guard: its info-fd pids are relative to the guard's namespace. */
  pidGuard?: boolean;
  /** The Landlock backend's ruleset plan (mechanism `landlock`). */
  landlock?: LandlockPlan;
  guarantees?: SandboxGuarantees;
}

/** Why a Linux sandbox uses the Landlock backend instead of bwrap. */
export type LinuxBackend = { kind: 'bwrap' } | { kind: 'landlock'; reason: 'useLegacyLandlock' | 'fallback' };

interface HostFacts {
  platform: NodeJS.Platform;
  arch: string;
  machine: string;
  tmpdir: string | undefined;
  bwrap: BwrapHost;
  /**
   * Masked in every sandbox (an empty tmpfs each): the server's private directory (the forwarder fallback's bridge
   * sockets) and the user's mount-target lock directory. No sandbox sees what Corral keeps for other launches.
   */
  masks: string[];
  /** util-linux `unshare` for the pid-namespace guard (used when running as root; see linux/pidGuard.ts). */
  unshare?: string;
  /** Where cgroup filesystems are mounted: never writable inside a sandbox (protectCgroupFs). */
  cgroupMounts?: string[];
  euid: number;
  hiddenPaths?: readonly string[];
  /** Landlock instead of bwrap for every Linux sandbox (the fallback), else only when a start asks for it. */
  linuxBackend: LinuxBackend;
  landlock: LandlockSupport;
  acceptWeaker: ReadonlySet<WeakerGuarantee>;
}

const WINDOWS_ERROR = 'sandbox type windows-restricted-token is not supported by this exec-server';

function unchanged(spec: LaunchSpec, sandboxType: SandboxType, summary: Record<string, unknown>): LaunchPlan {
  return { sandboxType, mechanism: 'none', spec, summary, fdSlots: [], syntheticTargets: [] };
}

function policySummary(eff: EffectiveSandbox, r: ResolvedPolicy): Record<string, unknown> {
  return {
    fullRead: r.fullRead,
    fullWrite: r.fullWrite,
    readableRoots: r.rootReadable ? ['/'] : r.readableRoots,
    writableRoots: r.writableRoots.map((w) => ({
      root: w.root,
      readOnly: w.readOnlySubpaths.map((s) => (s.access === 'none' ? `${s.path} (no access)` : s.path)),
    })),
    unreadable: r.unreadable.map((u) => u.path),
    network: eff.network,
    managedNetwork: eff.enforceManagedNetwork,
    legacyPolicy: eff.legacy?.type,
  };
}

const filters = new Map<string, Buffer>();
/** The filter bytes, generated once per (arch, mode, extras). */
function seccompFilter(arch: SeccompArch, mode: SeccompMode, extras?: SeccompExtras): Buffer {
  const key = `${arch}/${mode}/${extras ? JSON.stringify(extras) : ''}`;
  let f = filters.get(key);
  if (!f) {
    f = buildSeccompFilter(arch, mode, extras);
    filters.set(key, f);
  }
  return f;
}

/** Masks the server's own files (PrepareOptions.hiddenPaths) in the sandbox, on top of every other mount. */
function hideServerPaths(r: ResolvedPolicy, paths: readonly string[]): void {
  for (const given of paths) {
    let path: string;
    let dir: boolean;
    try {
      path = realpathSync(given); // canonical, as every mount target (a log file may appear later: then it counts)
      dir = lstatSync(path).isDirectory();
    } catch {
      continue; // nothing there to read
    }
    if (r.unreadable.some((u) => u.path === path)) continue;
    r.unreadable.push({ path, access: 'none', state: dir ? 'dir' : 'file' });
  }
}

/**
 * Keeps every cgroup filesystem read-only inside the sandbox: with a writable root above it (e.g. `--bind / /`) a
 * sandboxed process could otherwise raise its own pids/memory limits or move itself out of its cgroup. A writable
 * root inside a cgroup mount is made read-only itself.
 */
function protectCgroupFs(r: ResolvedPolicy, mounts: string[]): void {
  for (const w of r.writableRoots) {
    for (const m of mounts) {
      const path = isUnder(m, w.root) ? m : isUnder(w.root, m) ? w.root : null;
      if (path !== null && !w.readOnlySubpaths.some((s) => s.path === path)) {
        w.readOnlySubpaths.push({ path, access: 'read', state: 'dir' });
      }
    }
  }
}

/** The effective sandbox for `enforceManagedNetwork` without a sandbox: full filesystem, network only via the proxy. */
function enforcementOnly(cwd: string): EffectiveSandbox {
  return {
    shape: 'context',
    requested: 'native',
    fs: { kind: 'unrestricted', entries: [] },
    network: 'enabled',
    cwd,
    projectRoots: [],
    enforceManagedNetwork: true,
    useLegacyLandlock: false,
  };
}

/**
 * The one pure planning function: (sandbox config, command, host facts) → the launch. Reads the filesystem only to
 * resolve paths (realpath/lstat); creates nothing. Throws SandboxSetupError when the sandbox cannot be honoured.
 */
export function planLaunch(
  sandbox: ParsedSandbox | null | undefined,
  cmd: LaunchCommand,
  host: HostFacts,
): LaunchPlan {
  const spec = cmd.spec;
  const enforce = cmd.enforceManagedNetwork === true;
  if ((sandbox === null || sandbox === undefined) && !enforce)
    return unchanged(spec, 'none', { sandbox: 'none' });
  let eff: EffectiveSandbox =
    sandbox === null || sandbox === undefined
      ? enforcementOnly(spec.cwd)
      : effectiveSandbox(sandbox, enforce);
  if (eff.requested === 'windows-restricted-token') throw new SandboxSetupError(WINDOWS_ERROR);
  // Managed-network enforcement is never ignored: without a sandbox it gets a network-only one (full filesystem).
  if (eff.requested === 'none' && eff.enforceManagedNetwork && eff.fs.kind !== 'external-sandbox') {
    eff = { ...eff, requested: 'native' };
  }
  let requested = eff.requested;
  if (requested === 'none') return unchanged(spec, 'none', { sandbox: 'none', shape: eff.shape });
  if (requested === 'native') {
    if (host.platform === 'linux') requested = 'linux-seccomp';
    else if (host.platform === 'darwin') requested = 'macos-seatbelt';
    else
      throw new SandboxSetupError(
        `the requested sandbox is not supported on ${host.platform} by this exec-server`,
      );
  }
  if (requested === 'macos-seatbelt' && host.platform !== 'darwin') {
    throw new SandboxSetupError('seatbelt sandbox is only available on macOS');
  }
  if (requested === 'linux-seccomp' && host.platform !== 'linux') {
    throw new SandboxSetupError(
      `sandbox type linux-seccomp is only available on Linux (this host is ${host.platform})`,
    );
  }
  if (eff.fs.kind === 'external-sandbox') {
    return unchanged(spec, 'none', {
      sandbox: requested,
      note: 'external sandbox: the command is not wrapped',
    });
  }
  if (requested === 'macos-seatbelt') return planSeatbelt(eff, cmd, host);
  return planLinux(eff, cmd, host);
}

function planSeatbelt(eff: EffectiveSandbox, cmd: LaunchCommand, host: HostFacts): LaunchPlan {
  const r = resolvePolicy(eff, { tmpdir: host.tmpdir });
  if (host.hiddenPaths) hideServerPaths(r, host.hiddenPaths);
  let proxyPorts: number[] = [];
  try {
    proxyPorts = planManagedRoutes(cmd.spec.env).endpoints.map((e) => e.port);
  } catch {
    proxyPorts = [];
  }
  const profile = buildSeatbelt(r, { network: eff.network, managed: eff.enforceManagedNetwork, proxyPorts });
  const env: Record<string, string> = { ...cmd.spec.env, CODEX_SANDBOX: 'seatbelt' };
  if (eff.network === 'restricted') env.CODEX_SANDBOX_NETWORK_DISABLED = '1';
  const argv = seatbeltArgv(profile, cmd.spec.file, cmd.spec.argv.slice(1));
  return {
    sandboxType: 'macosSeatbelt',
    mechanism: 'seatbelt',
    spec: { file: argv[0]!, argv, env, cwd: cmd.spec.cwd },
    summary: { sandbox: 'macos-seatbelt', ...policySummary(eff, r), proxyPorts },
    fdSlots: [],
    syntheticTargets: [],
    seatbelt: profile,
  };
}

/** What both Linux backends start from: the architecture, the resolved policy, the env; or nothing to enforce. */
function linuxStart(
  eff: EffectiveSandbox,
  cmd: LaunchCommand,
  host: HostFacts,
  summary: Record<string, unknown>,
): { arch: SeccompArch; r: ResolvedPolicy; env: Record<string, string> } | LaunchPlan {
  let arch: SeccompArch;
  try {
    arch = hostSeccompArch(host.arch, host.machine);
  } catch (e) {
    throw new SandboxSetupError((e as Error).message);
  }
  const r = resolvePolicy(eff, { tmpdir: host.tmpdir });
  Object.assign(summary, policySummary(eff, r));
  const env = { ...cmd.spec.env };
  if (eff.network === 'restricted') env.CODEX_SANDBOX_NETWORK_DISABLED = '1';
  if (r.fullWrite && eff.network === 'enabled' && !eff.enforceManagedNetwork) {
    return {
      sandboxType: 'linuxSeccomp',
      mechanism: 'passthrough',
      spec: { ...cmd.spec, env },
      summary: { ...summary, note: 'full disk write and network enabled: nothing to enforce, not wrapped' },
      fdSlots: [],
      syntheticTargets: [],
    };
  }
  return { arch, r, env };
}

function planLinux(eff: EffectiveSandbox, cmd: LaunchCommand, host: HostFacts): LaunchPlan {
  if (eff.useLegacyLandlock) return planLandlockLaunch(eff, cmd, host, 'useLegacyLandlock');
  if (host.linuxBackend.kind === 'landlock')
    return planLandlockLaunch(eff, cmd, host, host.linuxBackend.reason);
  const summary: Record<string, unknown> = { sandbox: 'linux-seccomp' };
  const start = linuxStart(eff, cmd, host, summary);
  if ('mechanism' in start) return start;
  const { arch, r, env } = start;
  const managed = eff.enforceManagedNetwork;
  if (host.hiddenPaths) hideServerPaths(r, host.hiddenPaths);
  protectCgroupFs(r, host.cgroupMounts ?? []);
  // Every sandbox has a filter: the network-enabled one denies only what no coding agent needs (seccomp.ts).
  const mode: SeccompMode = managed
    ? 'proxy-routed'
    : eff.network === 'restricted'
      ? 'restricted'
      : 'network-enabled';
  let routes: ManagedRoutes | undefined;
  if (managed) {
    routes = planManagedRoutes(cmd.spec.env);
    Object.assign(env, routes.env);
    if (eff.network === 'restricted') env.CODEX_SANDBOX_NETWORK_DISABLED = '1';
  }
  const pins = r.pinnedLinks;
  // bwrap waits on its block fd while the server pins symlinks and/or sets up the managed network.
  const fdSlots: FdSlot[] = managed || pins.length > 0 ? ['seccomp', 'info', 'block'] : ['seccomp'];
  const fdOf = (s: FdSlot) => (fdSlots.includes(s) ? 3 + fdSlots.indexOf(s) : undefined);
  const b = bwrapArgs(r, {
    unshareNet: eff.network === 'restricted' || managed,
    proc: host.bwrap.proc,
    newSession: !cmd.tty,
    chdir: cmd.spec.cwd,
    file: cmd.spec.file,
    args: cmd.spec.argv.slice(1),
    argv0: cmd.spec.argv[0],
    seccompFd: fdOf('seccomp'),
    infoFd: fdOf('info'),
    blockFd: fdOf('block'),
    features: host.bwrap.features,
    masks: host.masks,
  });
  summary.seccomp = mode;
  summary.bwrap = host.bwrap.path;
  summary.proc = host.bwrap.proc;
  if (pins.length > 0) summary.pinnedSymlinks = pins;
  if (host.masks.length > 0) summary.masked = host.masks;
  if (b.argv0Ignored) summary.arg0 = 'ignored: bwrap < 0.9 has no --argv0';
  if (routes) summary.proxyEndpoints = routes.endpoints.map((e) => `${e.host}:${e.port}`);
  let argv = [host.bwrap.path, ...b.args];
  const guard = host.euid === 0 && host.unshare !== undefined;
  if (guard) argv = guardArgv(host.unshare!, argv, false);
  else if (host.euid === 0)
    summary.terminate = 'unshare not found: killing bwrap may leave the sandbox running';
  const spec: LaunchSpec = {
    file: argv[0]!,
    argv,
    env,
    cwd: cmd.spec.cwd,
    extraFds: fdSlots.map(() => null),
    freshSessionKeyring: true,
  };
  return {
    sandboxType: 'linuxSeccomp',
    mechanism: 'bwrap',
    spec,
    summary,
    fdSlots,
    seccomp: { arch, mode, filter: seccompFilter(arch, mode) },
    managed: routes,
    pins: pins.length > 0 ? pins : undefined,
    syntheticTargets: b.syntheticTargets,
    pidGuard: guard,
  };
}

/** The server's own paths no sandbox may read (existing, canonical), with what each is. */
function serverMasks(host: HostFacts): { path: string; what: string }[] {
  const out: { path: string; what: string }[] = [];
  const add = (given: string, what: string) => {
    try {
      out.push({ path: realpathSync(given), what });
    } catch {
      // not there: nothing to hide
    }
  };
  for (const m of host.masks) add(m, "the server's private directory");
  for (const h of host.hiddenPaths ?? []) add(h, "a file of the server's (token, log or audit database)");
  return out;
}

/** The Landlock backend (linux/landlock.ts): no namespaces; the child confines itself right before exec. */
function planLandlockLaunch(
  eff: EffectiveSandbox,
  cmd: LaunchCommand,
  host: HostFacts,
  reason: 'useLegacyLandlock' | 'fallback',
): LaunchPlan {
  if (host.landlock.abi === 0) {
    throw new SandboxSetupError(
      `landlock sandbox: Landlock is not available here (${host.landlock.missing})${
        reason === 'useLegacyLandlock'
          ? '; the bubblewrap sandbox is available with useLegacyLandlock: false'
          : ''
      }; the command was not run`,
    );
  }
  const summary: Record<string, unknown> = {
    sandbox: 'linux-seccomp',
    backend: 'landlock',
    backendReason: reason,
    landlockAbi: host.landlock.abi,
  };
  const start = linuxStart(eff, cmd, host, summary);
  if ('mechanism' in start) return start;
  const { arch, r, env } = start;
  const managed = eff.enforceManagedNetwork;
  // The proxy listens on the host's loopback, which the sandbox shares: its variables keep pointing at it.
  const routes = managed ? planManagedRoutes(cmd.spec.env, false) : undefined;
  if (routes) Object.assign(env, routes.env);
  const proxyPorts = routes ? routes.endpoints.map((e) => e.port) : [];
  const canonical = (p: string | undefined) => {
    try {
      return p ? realpathSync(p) : undefined;
    } catch {
      return undefined;
    }
  };
  const tmpRoots = [canonical('/tmp'), canonical(host.tmpdir)].filter(
    (t): t is string => t !== undefined && r.writableRoots.some((w) => w.root === t),
  );
  const plan = planLandlock(r, {
    abi: host.landlock.abi,
    accept: host.acceptWeaker,
    network: eff.network,
    managed,
    proxyPorts,
    masks: serverMasks(host),
    tmpRoots,
    envTmpdir: canonical(env.TMPDIR) ?? env.TMPDIR,
  });
  const filter = seccompFilter(arch, plan.seccompMode, plan.seccompExtras);
  summary.seccomp = plan.seccompMode;
  summary.landlockRules = plan.rules.length;
  if (plan.frozen.length > 0) summary.frozen = plan.frozen;
  if (plan.weaker.length > 0) summary.weaker = plan.weaker;
  if (proxyPorts.length > 0) summary.proxyEndpoints = proxyPorts.map((p) => `127.0.0.1:${p}`);
  return {
    sandboxType: 'linuxSeccomp',
    mechanism: 'landlock',
    spec: { ...cmd.spec, env, freshSessionKeyring: true },
    summary,
    fdSlots: [],
    seccomp: { arch, mode: plan.seccompMode, filter },
    syntheticTargets: [],
    landlock: plan,
    guarantees: { backend: 'landlock', reason, landlockAbi: plan.abi, weaker: plan.weaker },
  };
}

function serverTmpdir(opts: PrepareOptions | undefined): string | undefined {
  const t = opts?.tmpdir ?? process.env.TMPDIR;
  return t?.startsWith('/') ? t : undefined;
}

function needsBwrap(
  sandbox: ParsedSandbox | null | undefined,
  platform: NodeJS.Platform,
  enforce: boolean,
): boolean {
  if (platform !== 'linux') return false;
  if (!sandbox) return enforce;
  const s = sandbox as {
    sandbox?: unknown;
    permissions?: { type?: unknown };
    enforceManagedNetwork?: unknown;
  };
  if (s.sandbox === 'windows-restricted-token' || s.sandbox === 'macos-seatbelt') return false;
  return (
    s.sandbox === 'linux-seccomp' ||
    s.permissions?.type === 'managed' ||
    enforce ||
    s.enforceManagedNetwork === true
  );
}

const DEFAULT_FEATURES: BwrapFeatures = { argv0: false, perms: true };

function hostFacts(
  opts: PrepareOptions | undefined,
  bwrap: BwrapHost,
  linuxBackend: LinuxBackend = { kind: 'bwrap' },
): HostFacts {
  return {
    linuxBackend,
    landlock: landlockSupport(),
    acceptWeaker: new Set(opts?.acceptWeaker ?? []),
    masks: [sharedDir, lockDir].filter((d): d is string => d !== undefined),
    unshare: UNSHARE,
    cgroupMounts: cgroupMountPoints(),
    euid: process.geteuid?.() ?? -1,
    ...(opts?.hiddenPaths ? { hiddenPaths: opts.hiddenPaths } : {}),
    platform: opts?.platform ?? process.platform,
    arch: opts?.arch ?? os.arch(),
    machine: opts?.machine ?? os.machine(),
    tmpdir: serverTmpdir(opts),
    bwrap,
  };
}

export interface LaunchPreview {
  sandboxType: SandboxType;
  mechanism: LaunchPlan['mechanism'];
  /** What would be exec'd (fd slots shown as `fdSlots`; PTY file paths as placeholders). */
  spec: LaunchSpec;
  summary: Record<string, unknown>;
  fdSlots: FdSlot[];
  seccomp?: { arch: SeccompArch; mode: SeccompMode; instructions: number };
  seatbeltProfile?: string;
  seatbeltParams?: [string, string][];
}

/** The launch a command would get, for the panel's policy debugger: no files, fds or processes are created. */
export function previewLaunch(
  sandbox: ParsedSandbox | null | undefined,
  cmd: LaunchCommand,
  opts?: PrepareOptions,
): LaunchPreview {
  const platform = opts?.platform ?? process.platform;
  const path = opts?.bwrapPath ?? findBwrap(cmd.spec.cwd) ?? SYSTEM_BWRAP;
  const bwrap = knownBwrap(path) ?? { path, features: DEFAULT_FEATURES, proc: true };
  const backend: LinuxBackend =
    opts?.fallback === 'landlock' && bwrapFailures.has(path)
      ? { kind: 'landlock', reason: 'fallback' }
      : { kind: 'bwrap' };
  const plan = planLaunch(sandbox, cmd, hostFacts({ ...opts, platform }, bwrap, backend));
  return {
    sandboxType: plan.sandboxType,
    mechanism: plan.mechanism,
    spec: plan.spec,
    summary: plan.summary,
    fdSlots: plan.fdSlots,
    seccomp: plan.seccomp && {
      arch: plan.seccomp.arch,
      mode: plan.seccomp.mode,
      instructions: plan.seccomp.filter.length / 8,
    },
    seatbeltProfile: plan.seatbelt?.profile,
    seatbeltParams: plan.seatbelt?.params,
  };
}

let sharedDir: string | undefined;
let lockDir: string | undefined;

/**
 * Where the server's private directory goes: $XDG_RUNTIME_DIR, else /dev/shm, else the temp dir. Not /tmp when it can
 * be helped: a Landlock sandbox shares the host's filesystem, and Landlock cannot hide a directory inside a writable
 * root such as /tmp (bwrap masks it; /dev/shm is never writable to a Landlock sandbox unless a policy names it).
 */
function privateBase(): string {
  const xdg = process.env.XDG_RUNTIME_DIR;
  if (xdg?.startsWith('/')) return xdg;
  return lstatSync('/dev/shm', { throwIfNoEntry: false })?.isDirectory() ? '/dev/shm' : os.tmpdir();
}

const PRIVATE_PREFIX = 'corral-sandbox-';

/**
 * Removes the private directories that dead servers left (SIGKILL, a crash): once per process, at the first call.
 * The directory's name carries its server's tag (src/process/serverTag.ts), so a live server's is never touched.
 */
export function sweepStalePrivateDirs(): string[] {
  if (swept) return [];
  swept = true;
  return sweepStaleDirs(privateBase(), PRIVATE_PREFIX);
}
let swept = false;

/** The 0700 private directory of this server process (canonical), removed when the process exits. */
function sharedPrivateDir(): string {
  if (!sharedDir) {
    sweepStalePrivateDirs();
    const dir = realpathSync(mkdtempSync(join(privateBase(), `${PRIVATE_PREFIX}${formatTag(ownTag())}-`)));
    sharedDir = dir;
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  }
  return sharedDir;
}

/** Where bwrap failed to start a sandbox (path → why), remembered when the Landlock fallback is on. */
const bwrapFailures = new Map<string, string>();

export const SANDBOX_ADVICE =
  'run `corral doctor` to see what this machine lacks, or start the server with `--sandbox-fallback landlock` to use the Landlock backend where namespaces are unavailable';

/** True when the start asks for the Landlock backend itself (the seed's and 0.169's `useLegacyLandlock`). */
function asksForLandlock(sandbox: ParsedSandbox | null | undefined): boolean {
  return (sandbox as { useLegacyLandlock?: unknown } | null | undefined)?.useLegacyLandlock === true;
}

/**
 * bwrap's probe for this server (locate.ts), or why bwrap cannot sandbox here: not installed, or its preflight
 * failed (no user namespaces: Docker's seccomp profile, max_user_namespaces = 0, AppArmor's restriction). With the
 * Landlock fallback on, a failure is remembered for the life of the server (namespaces do not come back) and logged
 * once by whoever asked first (detectLinuxSandbox).
 */
async function bwrapOrWhy(
  path: string | undefined,
  fallback: boolean,
): Promise<{ bwrap: BwrapHost } | { why: string }> {
  if (!path) {
    return {
      why: 'bubblewrap (bwrap) is not installed: the Linux sandbox is unavailable and the command was not run unsandboxed',
    };
  }
  const known = fallback ? bwrapFailures.get(path) : undefined;
  if (known) return { why: known };
  try {
    return { bwrap: await probeBwrap(path) };
  } catch (e) {
    if (!(e instanceof SandboxSetupError)) throw e;
    if (fallback) bwrapFailures.set(path, e.message);
    return { why: e.message };
  }
}

/**
 * Which Linux backend sandboxed starts get on this server, found once at startup (the CLI logs it): bwrap, or with
 * the fallback on and bwrap unusable, Landlock (with why bwrap cannot run). Null off Linux.
 */
export async function detectLinuxSandbox(
  opts?: PrepareOptions,
): Promise<{ backend: 'bwrap' | 'landlock' | 'none'; why?: string; landlock: LandlockSupport } | null> {
  if ((opts?.platform ?? process.platform) !== 'linux') return null;
  const r = await bwrapOrWhy(opts?.bwrapPath ?? findBwrap(), opts?.fallback === 'landlock');
  if ('bwrap' in r) return { backend: 'bwrap', landlock: landlockSupport() };
  const landlock = landlockSupport();
  return {
    backend: opts?.fallback === 'landlock' && landlock.abi > 0 ? 'landlock' : 'none',
    why: r.why,
    landlock,
  };
}

const NATIVE_MISSING =
  'the Linux sandbox needs the native addon and its launcher (build/Release/corral_spawn.node and corral-sandbox-exec; run `npm ci` or `npx node-gyp rebuild`): the command was not run with weaker isolation';

/**
 * Applies a sandbox (or none) to a command: plans the launch, then creates what it needs (the setup pipes, the proxy
 * bridge, synthetic mount-target references). Throws SandboxSetupError; never falls back to an unsandboxed run. The
 * caller spawns `spec` (pipes or a PTY: the same spec), calls `afterSpawn(pid)` once it has a pid (if it rejects, kill
 * the process: the command has not been released), and `cleanup()` exactly once after the process closed or the spawn
 * failed.
 */
export async function prepareLaunch(
  sandbox: ParsedSandbox | null | undefined,
  cmd: LaunchCommand,
  opts?: PrepareOptions,
): Promise<PreparedLaunch> {
  const platform = opts?.platform ?? process.platform;
  let bwrap: BwrapHost = { path: opts?.bwrapPath ?? SYSTEM_BWRAP, features: DEFAULT_FEATURES, proc: true };
  let backend: LinuxBackend = { kind: 'bwrap' };
  if (needsBwrap(sandbox, platform, cmd.enforceManagedNetwork === true) && !asksForLandlock(sandbox)) {
    const fallback = opts?.fallback === 'landlock';
    const r = await bwrapOrWhy(opts?.bwrapPath ?? findBwrap(cmd.spec.cwd), fallback);
    if ('bwrap' in r) {
      bwrap = r.bwrap;
      sharedPrivateDir();
      lockDir = mountTargetLockDir();
    } else if (fallback) backend = { kind: 'landlock', reason: 'fallback' };
    else throw new SandboxSetupError(`${r.why}; ${SANDBOX_ADVICE}`);
  }
  const plan = planLaunch(sandbox, cmd, hostFacts({ ...opts, platform }, bwrap, backend));
  if (plan.mechanism === 'landlock') return materializeLandlock(plan);
  if (plan.mechanism !== 'bwrap') {
    return { spec: plan.spec, sandboxType: plan.sandboxType, summary: plan.summary, cleanup() {} };
  }
  if (!sandboxNative || !sandboxLauncher) throw new SandboxSetupError(NATIVE_MISSING);
  return materialize(plan, sandboxNative);
}

/** Removes a private TMPDIR: rmdir when the command left it empty, else `rm -rf`, which never follows a symlink. */
function removePrivateTmp(dir: string): void {
  try {
    rmdirSync(dir);
  } catch {
    execFile('/bin/rm', ['-rf', '--', dir], { timeout: 60_000 }, () => {});
  }
}

/**
 * The Landlock launch: the ruleset is built here (its fd goes to the child, which applies it before exec, then is
 * closed), with a private TMPDIR when the temp root's top level is frozen (see landlock.ts).
 */
function materializeLandlock(plan: LaunchPlan): PreparedLaunch {
  const ll = plan.landlock!;
  let tmp: string | undefined;
  let fd = -1;
  const closeFd = () => {
    if (fd >= 0) closeRuleset(fd);
    fd = -1;
  };
  let cleaned = false;
  const cleanup = () => {
    if (cleaned) return;
    cleaned = true;
    closeFd();
    if (tmp) removePrivateTmp(tmp);
  };
  let env = plan.spec.env;
  try {
    const rules = [...ll.rules];
    if (ll.privateTmpIn) {
      tmp = mkdtempSync(join(ll.privateTmpIn, 'corral-tmp-'));
      rules.push({ path: tmp, rights: WRITE });
      env = { ...env, TMPDIR: tmp };
    }
    fd = buildRuleset({
      handledFs: ll.handledFs,
      handledNet: ll.handledNet,
      scoped: ll.scoped,
      rules,
      connectPorts: ll.connectPorts,
    });
  } catch (e) {
    cleanup();
    throw new SandboxSetupError(`landlock sandbox: cannot build the ruleset: ${(e as Error).message}`);
  }
  const summary = tmp ? { ...plan.summary, tmpdir: tmp } : plan.summary;
  return {
    spec: {
      ...plan.spec,
      env,
      confine: {
        rulesetFd: fd,
        seccomp: plan.seccomp!.filter,
        ...(ll.restrictFlags ? { flags: ll.restrictFlags } : {}),
      },
    },
    sandboxType: plan.sandboxType,
    summary,
    ...(plan.guarantees ? { guarantees: plan.guarantees } : {}),
    async afterSpawn() {
      closeFd(); // the child has its copy
    },
    cleanup,
  };
}

/** The pipe that carries `filter` to bwrap: the whole program is written (it fits the pipe buffer) and the write end closed. */
function filterPipe(native: NonNullable<typeof sandboxNative>, filter: Buffer): number {
  const [r, w] = native.pipe();
  try {
    if (writeSync(w, filter) !== filter.length) throw new Error('short write of the seccomp program');
  } catch (e) {
    closeQuietly(r);
    throw e;
  } finally {
    closeQuietly(w);
  }
  return r;
}

function materialize(plan: LaunchPlan, native: NonNullable<typeof sandboxNative>): PreparedLaunch {
  /** Our copies of the child's ends: closed once the child has them (afterSpawn) or on cleanup. */
  const childEnds: number[] = [];
  let dir: string | undefined;
  let releaseTargets: (() => void) | undefined;
  let bridges: { close(): void } | undefined;
  let forwarder: ChildProcess | undefined;
  let pidReader: { promise: Promise<number>; cancel(): void } | undefined;
  let blockFd: number | undefined;
  let cleaned = false;
  let unwatch: (() => void) | undefined;
  const closeChildEnds = () => {
    for (const fd of childEnds.splice(0)) closeQuietly(fd);
  };
  const cleanup = () => {
    if (cleaned) return;
    cleaned = true;
    unwatch?.();
    pidReader?.cancel();
    closeChildEnds();
    closeQuietly(blockFd);
    blockFd = undefined;
    if (forwarder && forwarder.exitCode === null) forwarder.kill('SIGKILL');
    bridges?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
    releaseTargets?.();
  };
  try {
    const slotFds: Partial<Record<FdSlot, number>> = {};
    slotFds.seccomp = filterPipe(native, plan.seccomp!.filter);
    childEnds.push(slotFds.seccomp);
    if (plan.fdSlots.includes('info')) {
      const [infoR, infoW] = native.pipe();
      childEnds.push(infoW);
      slotFds.info = infoW;
      // Read from now on: nothing bwrap writes is lost, and our read end stays open until cleanup (bwrap writes its
      // JSON in several writes; a closed reader would kill it with SIGPIPE).
      pidReader = readChildPid(infoR, 15_000);
      pidReader.promise.catch(() => {});
      const [blockR, blockW] = native.pipe();
      childEnds.push(blockR);
      slotFds.block = blockR;
      blockFd = blockW;
    }
    const spec: LaunchSpec = { ...plan.spec, extraFds: plan.fdSlots.map((s) => slotFds[s]!) };
    releaseTargets = acquireSyntheticTargets(plan.syntheticTargets);
    const managed = plan.managed;
    const pins = plan.pins;
    const prepared: PreparedLaunch = {
      spec,
      sandboxType: plan.sandboxType,
      summary: plan.summary,
      cleanup,
      async afterSpawn(pid: number) {
        closeChildEnds();
        if (!cleaned) unwatch = watchSandbox(pid);
        if (!managed && !pins) return;
        let nsPid = await pidReader!.promise;
        if (plan.pidGuard) {
          const hostPid = hostPidOf(pid, nsPid);
          if (hostPid === undefined)
            throw new SandboxSetupError('sandbox setup: cannot find the sandbox process');
          nsPid = hostPid;
        }
        if (cleaned) throw new SandboxSetupError('sandbox setup: the process exited during setup');
        if (pins) {
          await setupDone(nsPid, 15_000).catch((e: Error) => {
            throw new SandboxSetupError(`sandbox setup: ${e.message}`);
          });
          if (cleaned) throw new SandboxSetupError('sandbox setup: the process exited during setup');
          pinSymlinks(native, nsPid, pins);
        }
        if (managed) await setUpManagedNetwork(nsPid, managed);
        if (cleaned) throw new SandboxSetupError('sandbox setup: the process exited during setup');
        release(blockFd!); // bwrap execs the command
      },
    };
    // Managed network: listeners made inside the sandbox's network namespace by the addon; else (the namespace
    // cannot be entered, or CORRAL_SANDBOX_FORWARDER=1) a forwarder process in the namespace and a unix-socket
    // bridge in the private directory (masked in every sandbox).
    const setUpManagedNetwork = async (nsPid: number, routes: ManagedRoutes) => {
      let direct: { close(): void } | null = null;
      if (process.env.CORRAL_SANDBOX_FORWARDER !== '1') {
        try {
          direct = listenInSandboxNetns(nsPid, routes.endpoints);
        } catch {
          direct = null;
        }
      }
      if (direct) {
        bridges = direct;
        return;
      }
      dir = mkdtempSync(join(sharedPrivateDir(), 'launch-'));
      const bridge = await startHostBridges(dir, routes.endpoints);
      bridges = bridge;
      if (cleaned) throw new SandboxSetupError('managed network: the process exited during setup');
      forwarder = await startForwarder(
        nsPid,
        bridge.sockets.map((sock, i) => ({ sock, port: FORWARD_BASE_PORT + i })),
      );
      if (cleaned) {
        forwarder.kill('SIGKILL');
        throw new SandboxSetupError('managed network: the process exited during setup');
      }
    };
    return prepared;
  } catch (e) {
    cleanup();
    if (e instanceof SandboxSetupError) throw e;
    throw new SandboxSetupError(`sandbox setup failed: ${(e as Error).message}`);
  }
}

/** Pins the plan's symlinks in the sandbox of `pid` (bwrap holds it on its block fd); a failure refuses the start. */
function pinSymlinks(native: NonNullable<typeof sandboxNative>, pid: number, pins: string[]): void {
  try {
    native.pinSymlinks(pid, pins);
  } catch (e) {
    const err = e as Error & { errno?: number };
    const why = err.errno === os.constants.errno.ENOLINK ? 'it is no longer a symbolic link' : err.message;
    throw new SandboxSetupError(
      `cannot pin the symbolic link a protected path goes through (${why}): a link in a writable root could be replaced, so the command was not started`,
    );
  }
}

export { WINDOWS_ERROR };
