/** The Landlock backend's launch: its plan (linux/landlock.ts) from a resolved policy, and the ruleset it builds. */
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { netNotifyAbsence, netNotifyChannel } from '../../platform/netNotify.js';
import { hostControlMounts } from '../../process/cgroupFs.js';
import type { LaunchSpec, PreparedLaunch } from '../../process/launch.js';
import { formatTag, ownTag, sweepStaleDirs } from '../../process/serverTag.js';
import { deepFreeze } from '../../protocol/deepFreeze.js';
import { type EffectiveSandbox, isKeptEffective } from '../effective.js';
import { SandboxSetupError } from '../errors.js';
import { inOnePass, realpathInPass } from '../fsProbe.js';
import { quietFs } from '../fsQuiet.js';
import {
  type HostFacts,
  type LaunchCommand,
  type LaunchPlan,
  linuxStart,
  sandboxEnv,
  seccompFilter,
} from '../launchPlan.js';
import type { ResolvedPolicy } from '../resolve.js';
import { resolvePolicyKept } from '../resolveCache.js';
import { planLandlock, WRITE } from './landlock.js';
import type { RulesetSpec } from './landlockNative.js';
import { acquireRuleset, type KeptRuleset, releaseRuleset, reusablePlan } from './landlockReuse.js';
import { planManagedRoutes } from './managedNet.js';

/** The server's own paths no sandbox may read (existing, canonical), with what each is. */
function serverMasks(host: HostFacts): { path: string; what: string }[] {
  const out: { path: string; what: string }[] = [];
  const add = (given: string, what: string) => {
    try {
      out.push({ path: realpathInPass(given), what });
    } catch {
      // not there: nothing to hide
    }
  };
  for (const m of host.masks) add(m, "the server's mount-target lock directory");
  for (const h of host.hiddenPaths ?? []) add(h, "a file of the server's (token, log or audit database)");
  return out;
}

/** A kept resolution's JSON (a part of the plan's inputs), written once: a kept resolution is frozen. */
const resolutionJson = new WeakMap<ResolvedPolicy, string>();
function jsonOf(r: ResolvedPolicy): string {
  let j = resolutionJson.get(r);
  if (j === undefined) {
    j = JSON.stringify(r);
    if (Object.isFrozen(r)) resolutionJson.set(r, j);
  }
  return j;
}

/**
 * Whole Landlock launch plans kept between starts (issue 32): an agent's commands come one after another under one
 * policy, and planning again what the kept resolution and the kept plan already say still cost ~30-40 µs of each
 * start (their keys, the server's masks, the summary), and a new summary object each time (redacted again).
 *
 * A plan is a function of the effective sandbox, the host facts and the TMPDIR it reads (`launchKey`) and of the
 * filesystem's answers. It is kept only when its every look was vouched for by the planning watch (fsQuiet.ts
 * scope) and its Landlock plan was itself a reuse (every listing it rests on stable), and reused only while the watch
 * has seen nothing since (any event, mount change or lost event moves its generation): then planning again would ask
 * the same questions, get the same answers and make the same plan. Only the command's own part is made anew (its
 * spec and environment). The effective sandbox is matched by identity: a kept parse's (startSandbox, deeply frozen:
 * isKeptEffective), so nothing can change it while kept. Not for managed network (its routes and ports are each command's own).
 */
interface KeptLaunch {
  eff: EffectiveSandbox;
  key: string;
  /** The watch's generation at which the plan was made or last confirmed. */
  quiet: number;
  /** Its spec is the one of the start that made it: a hit makes its own. */
  plan: LaunchPlan;
}
const keptLaunches: KeptLaunch[] = [];
const MAX_KEPT_LAUNCHES = 4;
/** The summaries of kept plans (deeply frozen): what launchSummary keeps its summary by. */
const keptSummaries = new WeakSet<object>();

/** Everything but the effective sandbox and the filesystem a Landlock plan depends on; undefined: not to be kept. */
function launchKey(
  eff: EffectiveSandbox,
  cmd: LaunchCommand,
  host: HostFacts,
  reason: 'useLegacyLandlock' | 'fallback',
): string | undefined {
  if (eff.enforceManagedNetwork || !isKeptEffective(eff)) return undefined;
  // The host facts are one frozen object while they stay (prepare.ts keptHostFacts): their key is made once per
  // such object, reason and TMPDIR (at most MAX_KEYS of those per object: a client's every TMPDIR is its own).
  const tmp = cmd.spec.env.TMPDIR;
  const part = `${reason}\0${tmp === undefined ? '\u0001' : tmp}`;
  let keys = Object.isFrozen(host) ? launchKeys.get(host) : undefined;
  const known = keys?.get(part);
  if (known !== undefined) return known;
  if (Object.isFrozen(host) && (!keys || keys.size >= MAX_KEYS)) {
    keys = new Map();
    launchKeys.set(host, keys);
  }
  const key = JSON.stringify([
    reason,
    host.landlock.abi,
    [...host.acceptWeaker].sort(),
    host.masks,
    host.hiddenPaths ?? null,
    host.tmpdir ?? null,
    host.arch,
    host.machine,
    tmp ?? null,
  ]);
  keys?.set(part, key);
  return key;
}
const launchKeys = new WeakMap<HostFacts, Map<string, string>>();
const MAX_KEYS = 16;

/**
 * The Landlock backend (linux/landlock.ts): no namespaces; the child confines itself right before exec. Its look at
 * the filesystem is one pass (fsProbe.ts inOnePass): the policy resolution, the plan and their checks ask about
 * each path once; a start under the same policy while nothing changed reuses the whole plan (KeptLaunch).
 */
export function planLandlockLaunch(
  eff: EffectiveSandbox,
  cmd: LaunchCommand,
  host: HostFacts,
  reason: 'useLegacyLandlock' | 'fallback',
): LaunchPlan {
  return inOnePass(() => {
    const key = launchKey(eff, cmd, host, reason);
    if (key !== undefined) {
      const k = keptLaunches.find((x) => x.eff === eff && x.key === key);
      if (k && quietFs.stillQuiet(k.quiet))
        return {
          ...k.plan,
          spec: { ...cmd.spec, env: sandboxEnv(eff, cmd.spec.env), freshSessionKeyring: true },
        };
    }
    const scope = quietFs.scope();
    const facts: { reused?: boolean } = {};
    const plan = planInPass(eff, cmd, host, reason, facts);
    const quiet = scope.end();
    if (key !== undefined && quiet !== undefined && facts.reused && plan.mechanism === 'landlock') {
      const i = keptLaunches.findIndex((x) => x.eff === eff && x.key === key);
      if (i >= 0) keptLaunches.splice(i, 1);
      keptSummaries.add(deepFreeze(plan.summary));
      keptLaunches.unshift({ eff, key, quiet, plan });
      if (keptLaunches.length > MAX_KEPT_LAUNCHES) keptLaunches.pop();
      return keptLaunches[0]!.plan;
    }
    return plan;
  });
}

function planInPass(
  eff: EffectiveSandbox,
  cmd: LaunchCommand,
  host: HostFacts,
  reason: 'useLegacyLandlock' | 'fallback',
  facts: { reused?: boolean },
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
  let reused = false;
  const start = linuxStart(eff, cmd, host, summary, (e, o) => {
    const k = resolvePolicyKept(e, o);
    reused = k.reused;
    return k.r;
  });
  if ('mechanism' in start) return start;
  summary.policyResolution = reused ? 'reused' : 'resolved';
  const { arch, r, env } = start;
  const managed = eff.enforceManagedNetwork;
  // The proxy listens on the host's loopback, which the sandbox shares: its variables keep pointing at it.
  const routes = managed ? planManagedRoutes(cmd.spec.env, false) : undefined;
  if (routes) Object.assign(env, routes.env);
  const proxyPorts = routes ? routes.endpoints.map((e) => e.port) : [];
  const canonical = (p: string | undefined) => {
    try {
      return p ? realpathInPass(p) : undefined;
    } catch {
      return undefined;
    }
  };
  const tmpRoots = [canonical('/tmp'), canonical(host.tmpdir)].filter(
    (t): t is string => t !== undefined && r.writableRoots.some((w) => w.root === t),
  );
  const given = {
    abi: host.landlock.abi,
    accept: host.acceptWeaker,
    network: eff.network,
    managed,
    proxyPorts,
    masks: serverMasks(host),
    tmpRoots,
    envTmpdir: canonical(env.TMPDIR) ?? env.TMPDIR,
    // Managed: whether the connect supervisor runs here (asked of the kernel once per process).
    ...(managed ? { connectSupervisor: netNotifyAbsence() } : {}),
    // Read-only in every plan (landlock.ts): a part of the inputs, so a new mount makes a new plan.
    controlMounts: hostControlMounts(),
  };
  const inputs = [jsonOf(r), JSON.stringify({ ...given, accept: [...given.accept].sort() })];
  const {
    plan,
    basis,
    reused: planReused,
  } = reusablePlan(inputs, (looks) => planLandlock(r, { ...given, ...looks }));
  // A plan resting on a listing too recent to vouch for its entries (dirListing.ts) is made anew: not to be kept.
  facts.reused = reused && planReused === true;
  const filter = seccompFilter(arch, plan.seccompMode, plan.seccompExtras);
  summary.seccomp = plan.seccompMode;
  summary.landlockRules = plan.rules.length;
  if (plan.frozen.length > 0) summary.frozen = plan.frozen;
  if (plan.weaker.length > 0) summary.weaker = plan.weaker;
  if (proxyPorts.length > 0) summary.proxyEndpoints = proxyPorts.map((p) => `127.0.0.1:${p}`);
  if (plan.netNotify) summary.connectSupervisor = true;
  // Transparent TCP: every other connect is asked of the command's SOCKS5 listener (refused without one).
  let transparentSocks: number | undefined;
  if (host.transparentTcp && managed && !plan.netNotify)
    throw new SandboxSetupError(
      `landlock sandbox: --linux-sandbox-transparent-tcp needs the connect supervisor, which cannot run here (${netNotifyAbsence() ?? 'unknown'}); the command was not run`,
    );
  if (host.transparentTcp && managed && plan.netNotify) {
    transparentSocks = routes?.socks;
    if (transparentSocks === undefined)
      throw new SandboxSetupError(
        'landlock sandbox: --linux-sandbox-transparent-tcp needs a SOCKS5 proxy on 127.0.0.1 (a socks5:// or socks5h:// proxy variable, as the managed proxy sets ALL_PROXY); the command was not run',
      );
    summary.transparentTcp = `127.0.0.1:${transparentSocks}`;
  }
  return {
    sandboxType: 'linuxSeccomp',
    mechanism: 'landlock',
    spec: { ...cmd.spec, env, freshSessionKeyring: true },
    summary,
    fdSlots: [],
    seccomp: { arch, mode: plan.seccompMode, filter },
    syntheticTargets: [],
    landlock: { ...plan, basis, ...(transparentSocks !== undefined ? { transparentSocks } : {}) },
    guarantees: { backend: 'landlock', reason, landlockAbi: plan.abi, weaker: plan.weaker },
  };
}

const TMP_PREFIX = 'corral-tmp-';
/** Per temp root: the private TMPDIR of this server's Landlock sandboxes. */
const privateTmps = new Map<string, string>();

/**
 * The private TMPDIR in `root` (a frozen temp root, see landlock.ts) for this server's Landlock sandboxes: one per
 * server, as bwrap's sandboxes share the host's /tmp; removed when the server exits, and by the next server when it
 * was killed (its name carries the server's tag). The same for every start, so their rulesets are the same too.
 */
function privateTmpIn(root: string): string {
  const known = privateTmps.get(root);
  if (known) return known;
  sweepStaleDirs(root, TMP_PREFIX);
  const made = mkdtempSync(join(root, `${TMP_PREFIX}${formatTag(ownTag())}-`));
  privateTmps.set(root, made);
  process.once('exit', () => {
    try {
      rmSync(made, { recursive: true, force: true });
    } catch {
      // a sandbox left something we cannot remove: the next server's sweep tries again
    }
  });
  return made;
}

/**
 * The launch's summary of a kept plan (its summary frozen, see KeptLaunch), per ruleset reuse and private TMPDIR:
 * one object while they stay, so that what is made once per summary (its redaction for the audit trail and the panel,
 * protocol/monitor.ts) is made once for all the starts under that plan.
 */
const launchSummaries = new WeakMap<
  object,
  { cached: boolean; tmp: string | undefined; summary: Record<string, unknown> }
>();

function launchSummary(
  planSummary: Record<string, unknown>,
  cached: boolean,
  tmp: string | undefined,
): Record<string, unknown> {
  const kept = keptSummaries.has(planSummary) ? launchSummaries.get(planSummary) : undefined;
  if (kept && kept.cached === cached && kept.tmp === tmp) return kept.summary;
  const summary = {
    ...planSummary,
    landlockRuleset: cached ? 'reused' : 'built',
    ...(tmp ? { tmpdir: tmp } : {}),
  };
  if (!keptSummaries.has(planSummary)) return summary;
  launchSummaries.set(planSummary, { cached, tmp, summary: Object.freeze(summary) });
  return summary;
}

/** What a launch asks of acquireRuleset: the same for every start of a kept plan (made once per plan and TMPDIR). */
interface RulesetRequest {
  tmp: string | undefined;
  spec: RulesetSpec;
  key: readonly string[];
  listings: Map<string, string>;
}
type LandlockLaunch = NonNullable<LaunchPlan['landlock']>;
const rulesetRequests = new WeakMap<LandlockLaunch, RulesetRequest>();

/** The ruleset request of `ll`: its rules (and the private TMPDIR's, made here when it needs one) and their key. */
function rulesetRequest(ll: LandlockLaunch): RulesetRequest {
  const tmp = ll.privateTmpIn ? privateTmpIn(ll.privateTmpIn) : undefined;
  const known = rulesetRequests.get(ll);
  if (known && known.tmp === tmp) return known;
  const req: RulesetRequest = {
    tmp,
    spec: {
      handledFs: ll.handledFs,
      handledNet: ll.handledNet,
      scoped: ll.scoped,
      rules: tmp ? [...ll.rules, { path: tmp, rights: WRITE }] : ll.rules,
      connectPorts: ll.connectPorts,
    },
    key: [
      ll.basis?.rulesKey ?? JSON.stringify(ll.rules),
      `${ll.handledFs}|${ll.handledNet}|${ll.scoped}|${ll.connectPorts}|${tmp ?? ''}`,
    ],
    listings: ll.basis?.listings ?? new Map(),
  };
  rulesetRequests.set(ll, req);
  return req;
}

/**
 * The Landlock launch: the ruleset (built, or the last one for the same rules) goes to the child, which applies it
 * before exec; with a private TMPDIR when the temp root's top level is frozen (see landlock.ts).
 */
export function materializeLandlock(plan: LaunchPlan): PreparedLaunch {
  const ll = plan.landlock!;
  let held: KeptRuleset | undefined;
  // Managed network: the connect supervisor's channel; its child end goes to the command, the listener it sends back
  // is watched once the command is spawned.
  const chan = ll.netNotify ? netNotifyChannel() : undefined;
  const release = () => {
    if (held) releaseRuleset(held);
    held = undefined;
    chan?.close();
  };
  let tmp: string | undefined;
  let got: { ruleset: KeptRuleset; cached: boolean };
  try {
    const req = rulesetRequest(ll);
    tmp = req.tmp;
    got = acquireRuleset(req.spec, req.key, req.listings);
  } catch (e) {
    chan?.close();
    throw new SandboxSetupError(`landlock sandbox: cannot build the ruleset: ${(e as Error).message}`);
  }
  held = got.ruleset;
  const summary = launchSummary(plan.summary, got.cached, tmp);
  const confine: NonNullable<LaunchSpec['confine']> = {
    rulesetFd: got.ruleset.fd,
    seccomp: plan.seccomp!.filter,
  };
  if (ll.restrictFlags) confine.flags = ll.restrictFlags;
  if (chan) confine.netNotifyFd = chan.childFd;
  return {
    spec: { ...plan.spec, env: tmp ? { ...plan.spec.env, TMPDIR: tmp } : plan.spec.env, confine },
    sandboxType: plan.sandboxType,
    summary,
    ...(plan.guarantees ? { guarantees: plan.guarantees } : {}),
    async afterSpawn() {
      // The child has its copies. Its connects wait in the kernel until the supervisor has its listener.
      if (chan && ll.netNotify) chan.watch(ll.netNotify, ll.transparentSocks);
      release();
    },
    cleanup: release,
  };
}
