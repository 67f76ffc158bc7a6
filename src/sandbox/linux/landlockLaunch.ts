/** The Landlock backend's launch: its plan (linux/landlock.ts) from a resolved policy, and the ruleset it builds. */
import { execFile } from 'node:child_process';
import { mkdtempSync, realpathSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';
import type { PreparedLaunch } from '../../process/launch.js';
import type { EffectiveSandbox } from '../effective.js';
import { SandboxSetupError } from '../errors.js';
import {
  type HostFacts,
  type LaunchCommand,
  type LaunchPlan,
  linuxStart,
  seccompFilter,
} from '../launchPlan.js';
import { planLandlock, WRITE } from './landlock.js';
import { buildRuleset, closeRuleset } from './landlockNative.js';
import { planManagedRoutes } from './managedNet.js';

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
export function planLandlockLaunch(
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
export function materializeLandlock(plan: LaunchPlan): PreparedLaunch {
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
