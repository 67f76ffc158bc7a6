/**
 * An effective sandbox (effective.ts: `startSandbox`) and a command → the launch (src/process spawns it): which backend (bwrap, Landlock, Seatbelt),
 * the pure plan (planLaunch), and what a launch creates (prepareLaunch). The backends' own planning and setup are in
 * linux/bwrapLaunch.ts, linux/landlockLaunch.ts and macos/seatbelt.ts; the shared types in launchPlan.ts.
 */
import os from 'node:os';
import { sandboxLauncher, sandboxNative, sandboxNativeAbsence } from '../platform/sandbox.js';
import { cgroupMountPoints } from '../process/cgroup.js';
import type { LaunchSpec, PreparedLaunch, SandboxType } from '../process/launch.js';
import type { EffectiveSandbox } from './effective.js';
import { SandboxSetupError } from './errors.js';
import { inOnePass } from './fsProbe.js';
import {
  type FdSlot,
  type HostFacts,
  hideServerPaths,
  type LaunchCommand,
  type LaunchPlan,
  type LinuxBackend,
  type PrepareOptions,
  policySummary,
  unchanged,
  WINDOWS_ERROR,
} from './launchPlan.js';
import type { BwrapFeatures } from './linux/bwrapArgs.js';
import { materializeBwrap, materializeBwrapWithoutAddon, planBwrapLaunch } from './linux/bwrapLaunch.js';
import { materializeLandlock, planLandlockLaunch } from './linux/landlockLaunch.js';
import { type LandlockSupport, landlockSupport } from './linux/landlockNative.js';
import { type BwrapHost, findBwrap, knownBwrap, probeBwrap, SYSTEM_BWRAP } from './linux/locate.js';
import { planManagedRoutes } from './linux/managedNet.js';
import { ensureMaskedDirs, maskedDirs } from './linux/maskedDirs.js';
import { UNSHARE } from './linux/pidGuard.js';
import type { SeccompArch, SeccompMode } from './linux/seccomp.js';
import { buildSeatbelt, seatbeltArgv } from './macos/seatbelt.js';
import { resolvePolicy } from './resolve.js';

export type { FdSlot, LaunchCommand, LaunchPlan, LinuxBackend, PrepareOptions } from './launchPlan.js';
export { sweepStalePrivateDirs } from './linux/maskedDirs.js';

/**
 * The one pure planning function: (effective sandbox, command, host facts) → the launch. Reads the filesystem only
 * to resolve paths (realpath/lstat); creates nothing. Throws SandboxSetupError when the sandbox cannot be honoured.
 */
export function planLaunch(eff: EffectiveSandbox | null, cmd: LaunchCommand, host: HostFacts): LaunchPlan {
  const spec = cmd.spec;
  if (eff === null) return unchanged(spec, 'none', { sandbox: 'none' });
  if (eff.requested === 'windows-restricted-token') throw new SandboxSetupError(WINDOWS_ERROR);
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

function planLinux(eff: EffectiveSandbox, cmd: LaunchCommand, host: HostFacts): LaunchPlan {
  if (eff.useLegacyLandlock) return planLandlockLaunch(eff, cmd, host, 'useLegacyLandlock');
  if (host.linuxBackend.kind === 'landlock')
    return planLandlockLaunch(eff, cmd, host, host.linuxBackend.reason);
  return planBwrapLaunch(eff, cmd, host);
}

function serverTmpdir(opts: PrepareOptions | undefined): string | undefined {
  const t = opts?.tmpdir ?? process.env.TMPDIR;
  return t?.startsWith('/') ? t : undefined;
}

/** Whether this start may run under bwrap: a Linux sandbox that did not ask for the Landlock backend itself. */
function needsBwrap(eff: EffectiveSandbox | null, platform: NodeJS.Platform): boolean {
  if (platform !== 'linux' || !eff || eff.useLegacyLandlock) return false;
  if (eff.requested === 'windows-restricted-token' || eff.requested === 'macos-seatbelt') return false;
  return eff.requested !== 'none' || eff.enforceManagedNetwork;
}

const DEFAULT_FEATURES: BwrapFeatures = { argv0: false, perms: true };

/** uname's machine (it never changes while the server runs): asked once, not at every start. */
let hostMachine: string | undefined;
function hostMachineName(): string {
  hostMachine ??= os.machine();
  return hostMachine;
}

function hostFacts(
  opts: PrepareOptions | undefined,
  bwrap: BwrapHost,
  linuxBackend: LinuxBackend = { kind: 'bwrap' },
): HostFacts {
  return {
    linuxBackend,
    landlock: landlockSupport(),
    acceptWeaker: new Set(opts?.acceptWeaker ?? []),
    masks: maskedDirs(),
    unshare: UNSHARE,
    cgroupMounts: cgroupMountPoints,
    euid: process.geteuid?.() ?? -1,
    ...(opts?.hiddenPaths ? { hiddenPaths: opts.hiddenPaths } : {}),
    ...(opts?.pidNamespace === 'inherit' ? { pidNamespace: 'inherit' as const } : {}),
    ...(opts?.transparentTcp ? { transparentTcp: true } : {}),
    platform: opts?.platform ?? process.platform,
    arch: opts?.arch ?? os.arch(),
    machine: opts?.machine ?? hostMachineName(),
    tmpdir: serverTmpdir(opts),
    bwrap,
    execShim: sandboxLauncher,
  };
}

/** What the last host facts were made of, and them (keptHostFacts). */
let lastFacts:
  | {
      opts: PrepareOptions | undefined;
      platform: NodeJS.Platform;
      bwrap: BwrapHost;
      backend: string;
      masks: string;
      facts: HostFacts;
    }
  | undefined;

/**
 * hostFacts, the same (frozen) object while what it is made of stays (issue 32: made at every sandboxed start, ~8 µs
 * of the server's main thread: a Set, the euid system call, the environment's TMPDIR). The server's options are fixed
 * for its life (`opts` by identity), as are its euid and its environment (no code of the server changes them); a bwrap
 * probe is one object per binary (locate.ts, defaultBwrap), and the masked directory is the one fact that appears
 * later (maskedDirs, compared by value).
 */
function keptHostFacts(
  opts: PrepareOptions | undefined,
  platform: NodeJS.Platform,
  bwrap: BwrapHost,
  backend: LinuxBackend,
): HostFacts {
  const masks = maskedDirs().join('\0');
  const b = backend.kind === 'landlock' ? `landlock:${backend.reason}` : backend.kind;
  const l = lastFacts;
  if (
    l &&
    l.opts === opts &&
    l.platform === platform &&
    l.bwrap === bwrap &&
    l.backend === b &&
    l.masks === masks
  )
    return l.facts;
  const facts = hostFacts({ ...opts, platform }, bwrap, backend);
  Object.freeze(facts.masks);
  Object.freeze(facts);
  lastFacts = { opts, platform, bwrap, backend: b, masks, facts };
  return facts;
}

/** The bwrap a start names when it needs none probed (no bwrap start): one object per path. */
const defaultBwraps = new Map<string, BwrapHost>();
function defaultBwrap(path: string): BwrapHost {
  let b = defaultBwraps.get(path);
  if (!b) {
    b = { path, features: DEFAULT_FEATURES, proc: true };
    defaultBwraps.set(path, b);
    if (defaultBwraps.size > 16) defaultBwraps.delete(defaultBwraps.keys().next().value!);
  }
  return b;
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
  eff: EffectiveSandbox | null,
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
  const plan = planLaunch(eff, cmd, hostFacts({ ...opts, platform }, bwrap, backend));
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

/** Where bwrap failed to start a sandbox (path → why), remembered when the Landlock fallback is on. */
const bwrapFailures = new Map<string, string>();

export const SANDBOX_ADVICE =
  'run `corral doctor` to see what this machine lacks, or start the server with `--sandbox-fallback landlock` to use the Landlock backend where namespaces are unavailable';

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
  'the Linux sandbox needs the launcher built with the native addon (build/Release/corral-sandbox-exec; run `npm ci` or `npx node-gyp rebuild`): the command was not run with weaker isolation';

/**
 * Applies a sandbox (or none) to a command: plans the launch, then creates what it needs (the setup pipes, the proxy
 * bridge, synthetic mount-target references). Throws SandboxSetupError; never falls back to an unsandboxed run. The
 * caller spawns `spec` (pipes or a PTY: the same spec), calls `afterSpawn(pid)` once it has a pid (if it rejects, kill
 * the process: the command has not been released), and `cleanup()` exactly once after the process closed or the spawn
 * failed.
 */
export async function prepareLaunch(
  eff: EffectiveSandbox | null,
  cmd: LaunchCommand,
  opts?: PrepareOptions,
): Promise<PreparedLaunch> {
  const platform = opts?.platform ?? process.platform;
  let bwrap: BwrapHost = defaultBwrap(opts?.bwrapPath ?? SYSTEM_BWRAP);
  let backend: LinuxBackend = { kind: 'bwrap' };
  if (needsBwrap(eff, platform)) {
    const fallback = opts?.fallback === 'landlock';
    const r = await bwrapOrWhy(opts?.bwrapPath ?? findBwrap(cmd.spec.cwd), fallback);
    if ('bwrap' in r) {
      bwrap = r.bwrap;
      ensureMaskedDirs();
    } else if (fallback) backend = { kind: 'landlock', reason: 'fallback' };
    else throw new SandboxSetupError(`${r.why}; ${SANDBOX_ADVICE}`);
  }
  const host = keptHostFacts(opts, platform, bwrap, backend);
  // A Linux sandbox's planning looks at the filesystem in one pass (fsProbe.ts); a Landlock launch's ruleset check
  // (each rule's path still names its inode) belongs to the same pass: one drain of the planning watch and its kept
  // answers serve both, and while the watch saw nothing the check itself is skipped (landlockReuse.ts).
  const planned =
    eff !== null && platform === 'linux'
      ? inOnePass(() => {
          const plan = planLaunch(eff, cmd, host);
          return plan.mechanism === 'landlock' ? materializeLandlock(plan) : plan;
        })
      : planLaunch(eff, cmd, host);
  if ('cleanup' in planned) return planned;
  const plan = planned;
  if (plan.mechanism !== 'bwrap') {
    return { spec: plan.spec, sandboxType: plan.sandboxType, summary: plan.summary, cleanup() {} };
  }
  if (!sandboxNative) return materializeBwrapWithoutAddon(plan, sandboxNativeAbsence ?? 'it is missing');
  if (!sandboxLauncher) throw new SandboxSetupError(NATIVE_MISSING);
  return materializeBwrap(plan, sandboxNative);
}

export { WINDOWS_ERROR };
