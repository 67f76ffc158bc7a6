/**
 * What a Landlock start reuses from the ones before it (issue 17: a Landlock start should cost little more than an
 * unsandboxed one, and an agent's commands come one after another under one policy):
 *
 * - the plan (landlock.ts), while its inputs are the same, every directory it listed is unchanged since a stable
 *   listing (dirListing.ts) and every path whose type it looked at has that type still: planning lists every
 *   decomposed directory (a temp root holding the workspace: hundreds of entries);
 * - the built ruleset, while every rule's path names the inode it named at the build: Landlock binds a rule to that
 *   inode, and the ruleset holds it, so its number cannot be reused. A rule's path in a directory whose stable
 *   listing is the one its inodes were last checked under needs no look: the directory's entries have not changed.
 *   With the planning watch (fsQuiet.ts), a check whose every look the watch vouched for is not made again while the
 *   watch's generation stands (the ruleset's `quiet`).
 *
 * Anything else (a path of another inode, one that appeared or went, an unstable listing) plans or builds anew.
 */
import { dirname } from 'node:path';
import { lstatInPass } from '../fsProbe.js';
import { quietFs } from '../fsQuiet.js';
import { listDirectory } from './dirListing.js';
import type { LandlockPlan, ListedEntry } from './landlock.js';
import { buildBoundRuleset, closeRuleset, type RulesetSpec } from './landlockNative.js';

/** What a plan was made from on the filesystem, and the key of its rules. */
export interface PlanBasis {
  /**
   * Directory → its stable listing's token: those the plan listed (an unstable one: the plan is not kept) and the
   * directories of the paths whose type it looked at (listed before the look; an unstable one is not here).
   */
  listings: Map<string, string>;
  /** Path → what isDir said. */
  types: Map<string, boolean | null>;
  /** Plans with the same rules have the same key (the rules' JSON). */
  rulesKey: string;
}

export interface FsLooks {
  list: (dir: string) => ListedEntry[] | null;
  isDir: (p: string) => boolean | null;
}

function typeOf(p: string): boolean | null {
  const st = lstatInPass(p);
  return st ? st.isDirectory() : null;
}

/**
 * Whether two keys (a list of parts) are equal. A part is often the very string of the last start (a kept
 * resolution's JSON, a kept plan's rules key: kilobytes), which `===` answers by identity without reading it; a key
 * joined into one new string had to be flattened and compared whole at every start.
 */
function sameParts(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

interface KeptPlan {
  inputs: readonly string[];
  plan: LandlockPlan;
  basis: PlanBasis;
  /** Every listing was stable: the plan may be reused. */
  reusable: boolean;
  /** The watch's generation at which its basis last held with every look vouched for (fsQuiet.ts). */
  quiet?: number | undefined;
}
const plans: KeptPlan[] = [];
const MAX_PLANS = 4;

/**
 * Whether the filesystem is still as the plan saw it: every stable listing it was made under is unchanged, and every
 * path whose type it looked at has that type still. A path in one of those (unchanged) directories needs no look:
 * each such listing's token was taken before any type in it was looked at (reusablePlan), so its name still names
 * the inode it named then, and an inode's type never changes; a mount cannot change it either (a directory can only
 * be mounted on a directory, anything else only on a non-directory, and only on an existing name).
 */
function stillHolds(b: PlanBasis): boolean {
  for (const [dir, token] of b.listings) {
    const l = listDirectory(dir);
    if (!l.stable || l.token !== token) return false;
  }
  for (const [p, t] of b.types) if (!b.listings.has(dirname(p)) && typeOf(p) !== t) return false;
  return true;
}

/**
 * The plan for `inputs` (everything planLandlock is given but the filesystem, as strings): the kept one while its
 * basis holds (`reused`), else `make` with recording looks.
 */
export function reusablePlan(
  inputs: readonly string[],
  make: (looks: FsLooks) => LandlockPlan,
): { plan: LandlockPlan; basis: PlanBasis; reused?: true } {
  const kept = plans.find((k) => sameParts(k.inputs, inputs));
  if (kept?.reusable) {
    if (quietFs.stillQuiet(kept.quiet)) return { plan: kept.plan, basis: kept.basis, reused: true };
    const scope = quietFs.scope();
    if (stillHolds(kept.basis)) {
      kept.quiet = scope.end();
      return { plan: kept.plan, basis: kept.basis, reused: true };
    }
  }
  const scope = quietFs.scope();
  const listings = new Map<string, string>();
  const types = new Map<string, boolean | null>();
  // The directory of every path whose type is looked at, listed first (a stable listing's token taken before the
  // look vouches for it at the next start, see stillHolds; /dev's one token for its devices); unstable ones: not.
  // Not where the planning watch vouches for the look itself (fsQuiet.ts): its kept answer is the cheaper check, and
  // a listing would make every change in the directory (a file made in /tmp) a change of the plan's basis.
  const parents = new Map<string, string | null>();
  let reusable = true;
  const plan = make({
    list(dir) {
      const l = listDirectory(dir);
      if (l.stable) listings.set(dir, l.token);
      else reusable = false;
      return l.entries;
    },
    isDir(p) {
      const d = dirname(p);
      if (p !== '/' && !listings.has(d) && !parents.has(d) && !quietFs.vouchesFor(p)) {
        const l = listDirectory(d);
        parents.set(d, l.stable ? l.token : null);
      }
      const t = typeOf(p);
      types.set(p, t);
      return t;
    },
  });
  for (const [d, token] of parents) {
    if (token === null) continue;
    const listed = listings.get(d);
    if (listed === undefined) listings.set(d, token);
    else if (listed !== token) reusable = false; // it changed while the plan was made
  }
  const basis: PlanBasis = { listings, types, rulesKey: JSON.stringify(plan.rules) };
  if (kept) plans.splice(plans.indexOf(kept), 1);
  plans.unshift({ inputs, plan, basis, reusable, quiet: scope.end() });
  if (plans.length > MAX_PLANS) plans.pop();
  return { plan, basis };
}

export interface KeptRuleset {
  key: readonly string[];
  fd: number;
  /** `dev:ino` of each rule's path (`-` where missing) when the ruleset was built. */
  inodes: string[];
  /** The stable listings' tokens under which every rule's path was last seen naming its inode of `inodes`. */
  verified: Map<string, string>;
  /** The rules (indices) no listing of `verified` vouches for: looked at on every start. */
  looked?: number[];
  /** The directories of the other rules, whose listings of `verified` vouch for them. */
  listedDirs?: string[];
  /**
   * The planning watch's generation at which the last check of every rule's inode was vouched for by the watch
   * (fsQuiet.ts scope): while it stands, the next start under the same key needs no check.
   */
  quiet?: number | undefined;
  /** Launches that may still pass the fd to a child. */
  users: number;
  evicted: boolean;
}
const rulesets: KeptRuleset[] = [];
const MAX_RULESETS = 4;

/** `dev:ino` of the path itself, `-` where there is nothing to look at (missing, or unreachable: as the build's). */
function inodeOf(p: string): string {
  try {
    const st = lstatInPass(p);
    return st ? `${st.dev}:${st.ino}` : '-';
  } catch {
    return '-';
  }
}

/**
 * Whether every rule's path still names the inode it named at the build (`listings`: the stable ones of now). A path
 * vouched for by its directory's listing rests on that directory's entries: within a pass of the planning watch that
 * is a look at them (watchEntries), so a check that skipped paths this way is vouched for only where the watch covers
 * those directories (see acquireRuleset).
 */
function stillNamesItsInodes(
  c: KeptRuleset,
  rules: readonly { path: string }[],
  listings: Map<string, string>,
): boolean {
  if (c.verified === listings && c.looked && c.listedDirs) {
    // The same plan again, its listings unchanged (reusablePlan checked them): only the unvouched paths.
    for (const i of c.looked) if (inodeOf(rules[i]!.path) !== c.inodes[i]) return false;
    for (const d of c.listedDirs) quietFs.watchEntries(d);
    return true;
  }
  const looked: number[] = [];
  const listedDirs = new Set<string>();
  for (let i = 0; i < rules.length; i++) {
    const p = rules[i]!.path;
    const dir = dirname(p);
    const token = listings.get(dir);
    if (token !== undefined) listedDirs.add(dir);
    if (token !== undefined && c.verified.get(dir) === token) continue;
    if (inodeOf(p) !== c.inodes[i]) return false;
    if (token === undefined) looked.push(i);
  }
  for (const d of listedDirs) quietFs.watchEntries(d);
  c.verified = listings; // each path was looked at (or vouched for) after these listings' tokens were taken
  c.looked = looked;
  c.listedDirs = [...listedDirs];
  return true;
}

function evict(c: KeptRuleset): void {
  const i = rulesets.indexOf(c);
  if (i >= 0) rulesets.splice(i, 1);
  c.evicted = true;
  if (c.users === 0) closeRuleset(c.fd);
}

export function releaseRuleset(c: KeptRuleset): void {
  c.users--;
  if (c.evicted && c.users === 0) closeRuleset(c.fd);
}

/**
 * The ruleset for `spec` (`key`: equal parts for equal specs): the kept one when every rule's path names the inode it
 * named, else a new one. Held until releaseRuleset.
 */
export function acquireRuleset(
  spec: RulesetSpec,
  key: readonly string[],
  listings: Map<string, string>,
): { ruleset: KeptRuleset; cached: boolean } {
  const hit = rulesets.find((c) => sameParts(c.key, key));
  if (hit) {
    // Checked at a generation of the watch that still stands: nothing any rule's path or its directory's listing
    // depends on changed since (fsQuiet.ts); the check itself is skipped.
    if (quietFs.stillQuiet(hit.quiet)) {
      hit.users++;
      return { ruleset: hit, cached: true };
    }
    const scope = quietFs.scope();
    if (stillNamesItsInodes(hit, spec.rules, listings)) {
      hit.quiet = scope.end();
      hit.users++;
      return { ruleset: hit, cached: true };
    }
    evict(hit);
  }
  // Each rule's inode is the one its rule was bound to (the build opens each path once, and says what it opened): a
  // path changed since shows at the next start.
  const built = buildBoundRuleset(spec);
  const ruleset: KeptRuleset = {
    key,
    fd: built.fd,
    inodes: built.inodes,
    verified: listings,
    users: 1,
    evicted: false,
  };
  rulesets.unshift(ruleset);
  while (rulesets.length > MAX_RULESETS) evict(rulesets[rulesets.length - 1]!);
  return { ruleset, cached: false };
}
