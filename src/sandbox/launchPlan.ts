/**
 * What planning a launch works with and produces (types shared by the backends: prepare.ts, linux/bwrapLaunch.ts,
 * linux/landlockLaunch.ts), and the helpers every backend's plan uses. Pure: creates no file, fd or process.
 */
import type { ProxyRoute } from '../network/proxy.js';
import type { LaunchSpec, SandboxType } from '../process/launch.js';
import type { SandboxGuarantees, WeakerGuarantee } from '../protocol/exec.js';
import type { EffectiveSandbox } from './effective.js';
import { SandboxSetupError } from './errors.js';
import { lstatInPass, realpathInPass } from './fsProbe.js';
import type { LandlockPlan } from './linux/landlock.js';
import type { LandlockSupport } from './linux/landlockNative.js';
import type { PlanBasis } from './linux/landlockReuse.js';
import type { BwrapHost } from './linux/locate.js';
import type { ManagedRoutes } from './linux/managedNet.js';
import {
  buildSeccompFilter,
  hostSeccompArch,
  type SeccompArch,
  type SeccompExtras,
  type SeccompMode,
} from './linux/seccomp.js';
import type { SeatbeltProfile } from './macos/seatbelt.js';
import { type ResolvedPolicy, resolvePolicy } from './resolve.js';

export interface LaunchCommand {
  /** What to run: `file` already resolved against the child's PATH; `argv[0]` may be a custom arg0. */
  spec: LaunchSpec;
  tty: boolean;
  /** The server's managed proxy for this command, when it started one: a managed-network sandbox routes to it. */
  proxy?: ProxyRoute | undefined;
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
  /** `--linux-sandbox-pid-namespace` (bwrapArgs.ts): isolate (default) or inherit the server's pid namespace. */
  pidNamespace?: 'isolate' | 'inherit';
  /**
   * `--linux-sandbox-transparent-tcp`: in a managed-network Linux sandbox every TCP connect, not only a proxy-aware
   * client's, is asked of the command's SOCKS5 listener by the server's connect supervisor (netnotify.c).
   */
  transparentTcp?: boolean;
  /**
   * `--require-sandbox`: as the seed declares it, `sandbox` is required in process/start; absent or null is -32602
   * ``missing field `sandbox` `` (an explicit `{"sandbox":"none",…}` still runs unsandboxed). Default: released
   * clients' absent or null sandbox means none.
   */
  requireSandbox?: boolean;
}

/**
 * A file descriptor bwrap gets at fd 3, 4, 5 (in that order), each one end of an anonymous pipe: the seccomp
 * program (read to EOF), bwrap's --info-fd (it writes the sandbox's pid) and --block-fd (it waits for one byte before
 * it execs the command). No file or FIFO on disk: nothing another sandbox could open.
 */
export type FdSlot = 'seccomp' | 'info' | 'block' | 'notify';

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
  /** The Landlock backend's ruleset plan (mechanism `landlock`), with what it was made from (for reuse). */
  landlock?: LandlockPlan & { basis?: PlanBasis; transparentSocks?: number };
  /**
   * bwrap with transparent TCP: the connect supervisor's watch (netNotify.ts) of the command, whose channel is the
   * `notify` fd slot (the in-sandbox launcher installs the filter): the host's proxy ports, the SOCKS5 one, and the
   * in-namespace forwarder ports that go on to the kernel.
   */
  transparent?: { ports: number[]; socks: number; pass: number[] };
  guarantees?: SandboxGuarantees;
}

/** Why a Linux sandbox uses the Landlock backend instead of bwrap. */
export type LinuxBackend = { kind: 'bwrap' } | { kind: 'landlock'; reason: 'useLegacyLandlock' | 'fallback' };

export interface HostFacts {
  platform: NodeJS.Platform;
  arch: string;
  machine: string;
  tmpdir: string | undefined;
  bwrap: BwrapHost;
  /**
   * The in-sandbox exec shim (the sandbox launcher, `--argv0 NAME`): where bwrap has no `--argv0` (below 0.9), bwrap
   * runs it and it execs the command under the arg0 asked for. Null when it is not built.
   */
  execShim?: string | null;
  /**
   * Masked in every sandbox (an empty tmpfs each): the user's mount-target lock directory (maskedDirs.ts). No
   * sandbox sees what Corral keeps for other launches.
   */
  masks: string[];
  /** util-linux `unshare` for the pid-namespace guard (used when running as root; see linux/pidGuard.ts). */
  unshare?: string;
  /**
   * Where cgroup filesystems are mounted: never writable inside a bwrap sandbox (protectCgroupFs; the Landlock plan
   * carves out every host-control mount itself, landlock.ts). ~15 µs: the mount table is parsed only when it changed.
   */
  cgroupMounts?: () => string[];
  euid: number;
  hiddenPaths?: readonly string[];
  /** Landlock instead of bwrap for every Linux sandbox (the fallback), else only when a start asks for it. */
  linuxBackend: LinuxBackend;
  landlock: LandlockSupport;
  acceptWeaker: ReadonlySet<WeakerGuarantee>;
  /** PrepareOptions.pidNamespace (absent: isolate). */
  pidNamespace?: 'isolate' | 'inherit';
  /** PrepareOptions.transparentTcp. */
  transparentTcp?: boolean;
}

export const WINDOWS_ERROR = 'sandbox type windows-restricted-token is not supported by this exec-server';

export function unchanged(
  spec: LaunchSpec,
  sandboxType: SandboxType,
  summary: Record<string, unknown>,
): LaunchPlan {
  return { sandboxType, mechanism: 'none', spec, summary, fdSlots: [], syntheticTargets: [] };
}

export function policySummary(eff: EffectiveSandbox, r: ResolvedPolicy): Record<string, unknown> {
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
export function seccompFilter(arch: SeccompArch, mode: SeccompMode, extras?: SeccompExtras): Buffer {
  const key = `${arch}/${mode}/${extras ? JSON.stringify(extras) : ''}`;
  let f = filters.get(key);
  if (!f) {
    f = buildSeccompFilter(arch, mode, extras);
    filters.set(key, f);
  }
  return f;
}

/** Masks the server's own files (PrepareOptions.hiddenPaths) in the sandbox, on top of every other mount. */
export function hideServerPaths(r: ResolvedPolicy, paths: readonly string[]): void {
  for (const given of paths) {
    let path: string;
    let dir: boolean;
    try {
      // Canonical, as every mount target (a log file may appear later: then it counts). In a pass (fsProbe.ts), from
      // its lstats.
      path = realpathInPass(given);
      const st = lstatInPass(path);
      if (!st) continue;
      dir = st.isDirectory();
    } catch {
      continue; // nothing there to read
    }
    if (r.unreadable.some((u) => u.path === path)) continue;
    r.unreadable.push({ path, access: 'none', state: dir ? 'dir' : 'file' });
  }
}

/** The command's environment under a Linux sandbox: its own, with CODEX_SANDBOX_NETWORK_DISABLED=1 without network. */
export function sandboxEnv(eff: EffectiveSandbox, env: Record<string, string>): Record<string, string> {
  const out = { ...env };
  if (eff.network === 'restricted') out.CODEX_SANDBOX_NETWORK_DISABLED = '1';
  return out;
}

/**
 * What both Linux backends start from: the architecture, the resolved policy, the env; or nothing to enforce.
 * `resolve`: how the policy is resolved (the Landlock backend reuses a kept resolution, resolveCache.ts).
 */
export function linuxStart(
  eff: EffectiveSandbox,
  cmd: LaunchCommand,
  host: HostFacts,
  summary: Record<string, unknown>,
  resolve: (eff: EffectiveSandbox, opts: { tmpdir?: string | undefined }) => ResolvedPolicy = resolvePolicy,
): { arch: SeccompArch; r: ResolvedPolicy; env: Record<string, string> } | LaunchPlan {
  let arch: SeccompArch;
  try {
    arch = hostSeccompArch(host.arch, host.machine);
  } catch (e) {
    throw new SandboxSetupError((e as Error).message);
  }
  const r = resolve(eff, { tmpdir: host.tmpdir });
  Object.assign(summary, policySummary(eff, r));
  const env = sandboxEnv(eff, cmd.spec.env);
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
