/** The bubblewrap backend: its plan (bwrap's arguments, fd slots, pins) and what a launch creates for it. */
import { existsSync, writeSync } from 'node:fs';
import os from 'node:os';
import { type NetNotifyChannel, netNotifyAbsence, netNotifyChannel } from '../../platform/netNotify.js';
import type { sandboxNative } from '../../platform/sandbox.js';
import { wrapArgv } from '../../process/cgroup.js';
import type { LaunchSpec, PreparedLaunch } from '../../process/launch.js';
import type { EffectiveSandbox } from '../effective.js';
import { SandboxSetupError } from '../errors.js';
import { inOnePass } from '../fsProbe.js';
import {
  type FdSlot,
  type HostFacts,
  hideServerPaths,
  type LaunchCommand,
  type LaunchPlan,
  linuxStart,
  seccompFilter,
} from '../launchPlan.js';
import { isUnder, type ResolvedPolicy } from '../resolve.js';
import { resolvePolicyKept } from '../resolveCache.js';
import { bwrapArgs } from './bwrapArgs.js';
import {
  closeQuietly,
  FORWARD_BASE_PORT,
  listenInSandboxNetns,
  type ManagedRoutes,
  planManagedRoutes,
  readChildPid,
  release,
} from './managedNet.js';
import { acquireSyntheticTargets } from './mountTargets.js';
import { guardArgv, hostPidOf, setupDone } from './pidGuard.js';
import type { SeccompMode } from './seccomp.js';

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

/**
 * A kept resolution (frozen, shared) with the lists this plan adds to made its own: the unreadable paths (the
 * server's masks) and each writable root's read-only subpaths (the cgroup mounts). The rest stays shared and frozen
 * (a structuredClone of it all cost ~40-80 us a start).
 */
function ownCopy(r: ResolvedPolicy): ResolvedPolicy {
  return {
    ...r,
    unreadable: [...r.unreadable],
    writableRoots: r.writableRoots.map((w) => ({ ...w, readOnlySubpaths: [...w.readOnlySubpaths] })),
  };
}

/** The bubblewrap launch: namespaces, mounts, the seccomp program on a pipe, the managed network's listeners. */
export function planBwrapLaunch(eff: EffectiveSandbox, cmd: LaunchCommand, host: HostFacts): LaunchPlan {
  const summary: Record<string, unknown> = { sandbox: 'linux-seccomp' };
  // The policy's resolution is the kept one while every question it asked gets the same answer (resolveCache.ts, as
  // for Landlock), its checks and the server's masks looked at in one pass of lstats (fsProbe.ts). The kept resolution
  // is frozen and shared: this plan adds the masks and the cgroup mounts to a copy of its own (ownCopy).
  let reused = false;
  const start = inOnePass(() => {
    const s = linuxStart(eff, cmd, host, summary, (e, o) => {
      const k = resolvePolicyKept(e, o);
      reused = k.reused;
      return ownCopy(k.r);
    });
    if (!('mechanism' in s) && host.hiddenPaths) hideServerPaths(s.r, host.hiddenPaths);
    return s;
  });
  if ('mechanism' in start) return start;
  summary.policyResolution = reused ? 'reused' : 'resolved';
  const { arch, r, env } = start;
  const managed = eff.enforceManagedNetwork;
  protectCgroupFs(r, host.cgroupMounts?.() ?? []);
  // Every sandbox has a filter: the network-enabled one denies only what no coding agent needs (seccomp.ts).
  const mode: SeccompMode = managed
    ? 'proxy-routed'
    : eff.network === 'restricted'
      ? 'restricted'
      : 'network-enabled';
  let routes: ManagedRoutes | undefined;
  if (managed) {
    routes = planManagedRoutes(cmd.spec.env, true, cmd.proxy);
    Object.assign(env, routes.env);
    if (eff.network === 'restricted') env.CODEX_SANDBOX_NETWORK_DISABLED = '1';
  }
  const transparent = routes && host.transparentTcp ? transparentWatch(routes, host) : undefined;
  const pins = r.pinnedLinks;
  // bwrap waits on its block fd while the server pins symlinks and/or sets up the managed network.
  const fdSlots: FdSlot[] = managed || pins.length > 0 ? ['seccomp', 'info', 'block'] : ['seccomp'];
  if (transparent) fdSlots.push('notify');
  const fdOf = (s: FdSlot) => (fdSlots.includes(s) ? 3 + fdSlots.indexOf(s) : undefined);
  const b = bwrapArgs(r, {
    unshareNet: eff.network === 'restricted' || managed,
    proc: host.bwrap.proc,
    ...(host.pidNamespace === 'inherit' ? { pidNamespace: 'inherit' as const } : {}),
    newSession: !cmd.tty,
    chdir: cmd.spec.cwd,
    file: cmd.spec.file,
    args: cmd.spec.argv.slice(1),
    argv0: cmd.spec.argv[0],
    seccompFd: fdOf('seccomp'),
    netNotifyFd: fdOf('notify'),
    infoFd: fdOf('info'),
    blockFd: fdOf('block'),
    features: host.bwrap.features,
    execShim: host.execShim,
    masks: host.masks,
  });
  summary.seccomp = mode;
  summary.bwrap = host.bwrap.path;
  summary.proc = host.bwrap.proc;
  if (pins.length > 0) summary.pinnedSymlinks = pins;
  if (host.masks.length > 0) summary.masked = host.masks;
  if (b.argv0Ignored) summary.arg0 = 'ignored: bwrap < 0.9 has no --argv0';
  if (routes) summary.proxyEndpoints = routes.endpoints.map((e) => `${e.host}:${e.port}`);
  if (transparent) summary.transparentTcp = `127.0.0.1:${transparent.socks}`;
  let argv = [host.bwrap.path, ...b.args];
  // Inheriting the pid namespace means no namespace of the sandbox's own, the guard's included: a kill then reaches
  // the command's tree through its cgroup (as for a command without a sandbox).
  const inheritPid = host.pidNamespace === 'inherit';
  if (inheritPid) summary.pidNamespace = 'inherit';
  const guard = host.euid === 0 && host.unshare !== undefined && !inheritPid;
  if (guard) argv = guardArgv(host.unshare!, argv, false);
  else if (host.euid === 0 && !inheritPid)
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
    ...(transparent ? { transparent } : {}),
    pins: pins.length > 0 ? pins : undefined,
    syntheticTargets: b.syntheticTargets,
    pidGuard: guard,
  };
}

/**
 * Transparent TCP under bwrap: the connect supervisor's watch. Refused (naming why) without the supervisor, the
 * in-sandbox launcher that installs its filter, or a SOCKS5 listener on 127.0.0.1 to ask.
 */
function transparentWatch(routes: ManagedRoutes, host: HostFacts): NonNullable<LaunchPlan['transparent']> {
  const why =
    netNotifyAbsence() ??
    (host.execShim ? undefined : 'the sandbox launcher (corral-sandbox-exec) is not built') ??
    (routes.socks === undefined
      ? 'the managed proxy has no SOCKS5 listener on 127.0.0.1 (enable_socks5, or a socks5:// ALL_PROXY)'
      : undefined);
  if (why !== undefined)
    throw new SandboxSetupError(`--linux-sandbox-transparent-tcp: ${why}; the command was not run`);
  const hostPorts = routes.endpoints.filter((e) => e.host === '127.0.0.1').map((e) => e.port);
  return {
    ports: [...new Set(hostPorts.length > 0 ? hostPorts : [routes.socks!])].slice(0, 8),
    socks: routes.socks!,
    pass: routes.endpoints.map((_, i) => FORWARD_BASE_PORT + i).slice(0, 8),
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

/** Creates what a bwrap launch needs: the setup pipes, synthetic mount targets, the managed network after spawn. */
export function materializeBwrap(
  plan: LaunchPlan,
  native: NonNullable<typeof sandboxNative>,
): PreparedLaunch {
  /** Our copies of the child's ends: closed once the child has them (afterSpawn) or on cleanup. */
  const childEnds: number[] = [];
  let releaseTargets: (() => void) | undefined;
  let bridges: { close(): void } | undefined;
  let pidReader: { promise: Promise<number>; cancel(): void } | undefined;
  let blockFd: number | undefined;
  let chan: NetNotifyChannel | undefined;
  let cleaned = false;
  const closeChildEnds = () => {
    for (const fd of childEnds.splice(0)) closeQuietly(fd);
  };
  const cleanup = () => {
    if (cleaned) return;
    cleaned = true;
    pidReader?.cancel();
    closeChildEnds();
    chan?.close();
    closeQuietly(blockFd);
    blockFd = undefined;
    bridges?.close();
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
    if (plan.transparent) {
      chan = netNotifyChannel();
      slotFds.notify = chan.childFd;
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
        // The command's connects wait in the kernel until the supervisor has the listener it sends.
        if (chan && plan.transparent) {
          const t = plan.transparent;
          chan.watch(t.ports, t.socks, t.pass);
        }
        if (!managed && !pins) return;
        let nsPid = await pidReader!.promise;
        if (plan.pidGuard) {
          const hostPid = hostPidOf(pid, nsPid);
          if (hostPid === undefined)
            throw new SandboxSetupError('sandbox setup: cannot find the sandbox process');
          nsPid = hostPid;
        }
        if (cleaned) throw new SandboxSetupError('sandbox setup: the process exited during setup');
        const waitSetupDone = async () => {
          await setupDone(nsPid, 15_000).catch((e: Error) => {
            throw new SandboxSetupError(`sandbox setup: ${e.message}`);
          });
          if (cleaned) throw new SandboxSetupError('sandbox setup: the process exited during setup');
        };
        // Pins act on the mounts as bwrap leaves them: after its setup.
        if (pins) {
          await waitSetupDone();
          pinSymlinks(native, nsPid, pins);
        }
        // The listeners: tried at once (bwrap is nearly always far enough by now), and if that fails, again once
        // bwrap has finished its setup (a listener made in the middle of it failed with EADDRNOTAVAIL: CI, about 1
        // start in 1000, as uid 65534). The second failure refuses the start.
        if (managed) {
          try {
            bridges = listenInSandboxNetns(nsPid, managed.endpoints);
          } catch (e) {
            if (pins) throw e;
            await waitSetupDone();
            bridges = listenInSandboxNetns(nsPid, managed.endpoints);
          }
        }
        if (cleaned) throw new SandboxSetupError('sandbox setup: the process exited during setup');
        release(blockFd!); // bwrap execs the command
      },
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

/** util-linux's setpriv (--pdeathsig: 2.33 and later), for the launch without the addon. */
const SETPRIV = '/usr/bin/setpriv';

/**
 * Every fd above 3 of the shell closed (what the server inherited and child_process or node-pty passed on: without the
 * addon nothing marks them close-on-exec), after fd 3 became the read end of a pipe carrying the seccomp program,
 * written by a process substitution (no file, nothing another process could swap).
 */
function withoutAddonPrologue(filter: Buffer): string {
  let escaped = '';
  for (const b of filter) escaped += `\\x${b.toString(16).padStart(2, '0')}`;
  return (
    `exec 3< <(printf '%b' '${escaped}') || exit 127; ` +
    `for f in /proc/self/fd/*; do n=\${f##*/}; case $n in 0|1|2|3) ;; *) eval "exec $n<&-";; esac; done; `
  );
}

/**
 * The bubblewrap launch without the addon (CORRAL_NATIVE=0, a build that failed, no compiler): bwrap still gets the
 * whole policy (namespaces, mounts, --die-with-parent, the seccomp program on fd 3, the pid guard as root), started
 * through a bash prologue (withoutAddonPrologue) by child_process or node-pty. What only the addon can do refuses the
 * start, naming it: the managed network (listeners inside the sandbox's network namespace, netns.c), pinning a
 * symlink on the way to a protected path (sandbox.c). Placeholders of missing protected paths are this server's alone
 * (mountTargets.ts: no flock in Node). The fresh session keyring (the launcher's) is not made: the seccomp program denies
 * every keyring call (add_key, request_key, keyctl), so the sandbox cannot use the one it possesses.
 */
export function materializeBwrapWithoutAddon(plan: LaunchPlan, absence: string): PreparedLaunch {
  const refuse = (what: string): never => {
    throw new SandboxSetupError(
      `${what} needs the native addon, and ${absence}: the command was not run with weaker isolation`,
    );
  };
  if (plan.managed)
    refuse(
      "enforceManagedNetwork (the proxy's listeners inside the sandbox's network namespace: src/platform/native/netns.c)",
    );
  if (plan.pins)
    refuse(
      `a protected path reached through a symbolic link in a writable root (${plan.pins.join(', ')}: pinned against a racing sandboxed process by src/platform/native/sandbox.c)`,
    );
  if (plan.fdSlots.join() !== 'seccomp') refuse(`bwrap's setup fds (${plan.fdSlots.join(', ')})`);
  const { spec } = plan;
  // No parent-death signal from child_process or node-pty: setpriv sets one (SIGKILL, towards this process), then a
  // shell checks that its parent is still this process (it could have died before) and execs bwrap or its pid guard.
  const summary: Record<string, unknown> = {
    ...plan.summary,
    native: `none (${absence}): bwrap started through bash, seccomp on a pipe`,
  };
  let argv = spec.argv;
  if (existsSync(SETPRIV))
    argv = [
      SETPRIV,
      '--pdeathsig',
      'KILL',
      '--',
      '/bin/sh',
      '-c',
      '[ "$PPID" = "$0" ] && exec "$@"; exit 127',
      String(process.pid),
      ...argv,
    ];
  else summary.terminate = `${SETPRIV} not found: the sandbox may outlive a server that dies`;
  const w = wrapArgv([], argv[0]!, argv, withoutAddonPrologue(plan.seccomp!.filter), spec.env);
  let releaseTargets: (() => void) | undefined = acquireSyntheticTargets(plan.syntheticTargets);
  return {
    spec: { file: w.file, argv: ['bash', ...w.args], env: spec.env, cwd: spec.cwd },
    sandboxType: plan.sandboxType,
    summary,
    cleanup() {
      releaseTargets?.();
      releaseTargets = undefined;
    },
  };
}
