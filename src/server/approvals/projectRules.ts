/**
 * Project rules (issue 36, item 1): an answer `allowProject` / `denyProject` stored for the process's workspace and
 * applied to every later process of that workspace, across restarts. The rules live in a `ProjectRuleStore` the
 * composition root gives (SQLite beside the audit database, src/app/approvalRuleStore.ts); this module keeps them
 * indexed in memory, so that a request's lookup is one map read.
 *
 * Narrow by construction: a rule is made only from a prompt, and says exactly what the prompt was — protocol, host,
 * port, and for plain HTTP and intercepted `https` the method (and a path prefix). No wildcard, no "any host", no rule without a workspace.
 */
import { lstatSync, realpathSync } from 'node:fs';
import { dirname, join } from 'node:path';
import {
  type ApprovalProtocol,
  type ApprovalRule,
  MAX_PROJECT_RULES,
  type RepoAcceptance,
} from '../../protocol/approvals.js';
import { pathWithin } from './endpointPath.js';

export { MAX_PROJECT_RULES };

/** Where project rules are kept: durable, synchronous (each call has happened when it returns). */
export interface ProjectRuleStore {
  /** Where (shown by `approvals/rules`). */
  readonly location: string;
  load(): ApprovalRule[];
  insert(rule: ApprovalRule): void;
  remove(id: string): void;
  /** The rule's counters after a hit. */
  hit(id: string, hits: number, lastHitAt: number): void;
  /** The accepted `.corral/network.json` hash of each workspace (repoPolicy.ts), kept beside the rules. */
  loadRepoAcceptances?(): RepoAcceptance[];
  acceptRepo?(a: RepoAcceptance): void;
}

/** What a request is, for a rule. */
export interface RuleTarget {
  protocol: ApprovalProtocol;
  host: string;
  port: number;
  method: string | null;
  /**
   * Plain HTTP and `https`: the normalised path (endpointPath.ts), or null when it could not be read safely; absent
   * or ignored for the other protocols (their path is not visible).
   */
  path?: string | null;
}

/** Whether `rule`'s path prefix (if any) holds the request's path; an unreadable path meets only denies. */
export function pathMatches(rule: Pick<ApprovalRule, 'pathPrefix' | 'decision'>, t: RuleTarget): boolean {
  if (rule.pathPrefix == null) return true;
  if (t.path == null) return rule.decision === 'deny';
  return pathWithin(t.path, rule.pathPrefix);
}

/** Whether an enabled `rule` answers `t` (its workspace and key already matched). */
export function ruleAnswers(rule: ApprovalRule, t: RuleTarget): boolean {
  return (
    rule.enabled &&
    (rule.method === null || rule.method === ruleMethod(t.protocol, t.method)) &&
    pathMatches(rule, t)
  );
}

/** Whether a request of `protocol` shows its method and path: plain HTTP, and `https` inside an intercepted tunnel. */
export const pathVisible = (protocol: ApprovalProtocol): boolean =>
  protocol === 'http' || protocol === 'https';

/**
 * Whether a rule or decision about `ruled` covers a request of `asked`: its own protocol, and a CONNECT tunnel's also
 * the requests inside it when the proxy intercepts them (a host-wide rule, as it was before interception).
 */
export const protocolCovers = (ruled: ApprovalProtocol, asked: ApprovalProtocol): boolean =>
  ruled === asked || (ruled === 'https_connect' && asked === 'https');

/** The method a rule made from this request matches: plain HTTP's and `https`'s (upper-cased), else none. */
export function ruleMethod(protocol: ApprovalProtocol, method: string | null): string | null {
  return pathVisible(protocol) && method ? method.toUpperCase() : null;
}

const keyOf = (workspace: string, t: Pick<RuleTarget, 'protocol' | 'host' | 'port'>) =>
  `${workspace}\u0000${t.protocol}\u0000${t.host.toLowerCase()}\u0000${t.port}`;

/**
 * The workspace of a process started in `cwd`: the real path of the nearest directory at or above it that holds a
 * `.git` (a directory, or a worktree's file), else the real path of `cwd` itself. Null when `cwd` does not resolve.
 */
export function workspaceOf(cwd: string | null | undefined): string | null {
  if (!cwd) return null;
  let real: string;
  try {
    real = realpathSync(cwd);
  } catch {
    return null;
  }
  for (let dir = real; ; ) {
    try {
      lstatSync(join(dir, '.git'));
      return dir;
    } catch {
      // not here
    }
    const up = dirname(dir);
    if (up === dir) return real;
    dir = up;
  }
}

export class ProjectRules {
  private readonly byId = new Map<string, ApprovalRule>();
  private readonly byKey = new Map<string, ApprovalRule[]>();
  /** The accepted repository file of each workspace, by workspace. */
  private readonly accepted = new Map<string, RepoAcceptance>();

  constructor(
    private readonly store: ProjectRuleStore | null,
    /** Why there is no store (said when a project answer is refused), when there is none. */
    readonly problem: string | null = null,
  ) {
    for (const r of store?.load() ?? []) this.index(r);
    for (const a of store?.loadRepoAcceptances?.() ?? []) this.accepted.set(a.workspace, a);
  }

  /** What the user last accepted of `workspace`'s `.corral/network.json`. */
  repoAcceptance(workspace: string): RepoAcceptance | undefined {
    return this.accepted.get(workspace);
  }

  /** Stores an acceptance (replacing the workspace's last one); throws when it cannot be stored. */
  acceptRepo(a: RepoAcceptance): void {
    if (!this.store?.acceptRepo)
      throw new Error(`project rules are off on this server: ${this.problem ?? 'it has no rule store'}`);
    if (!this.accepted.has(a.workspace) && this.accepted.size >= MAX_PROJECT_RULES)
      throw new Error(`this server already keeps ${MAX_PROJECT_RULES} accepted repository files`);
    this.store.acceptRepo(a);
    this.accepted.set(a.workspace, { ...a });
  }

  get size(): number {
    return this.byId.size;
  }

  get location(): string | null {
    return this.store?.location ?? null;
  }

  /** Why a project rule cannot be stored now, or null. */
  refusal(): string | null {
    if (!this.store) return `project rules are off on this server: ${this.problem ?? 'it has no rule store'}`;
    if (this.byId.size >= MAX_PROJECT_RULES)
      return `this server already keeps ${MAX_PROJECT_RULES} project rules: revoke some first`;
    return null;
  }

  /**
   * Flags the allow rules of `workspace` whose host `denies` matches (a process's deny list, which wins over them);
   * whether any flag changed.
   */
  flagContradictions(
    workspace: string,
    denies: (host: string) => boolean,
    why: (host: string) => string,
  ): boolean {
    let changed = false;
    for (const r of this.byId.values()) {
      if (r.workspace !== workspace || r.decision !== 'allow' || !denies(r.host)) continue;
      const text = why(r.host);
      if (r.contradiction === text) continue;
      r.contradiction = text;
      changed = true;
    }
    return changed;
  }

  list(workspace?: string | null): ApprovalRule[] {
    const all = [...this.byId.values()];
    return workspace ? all.filter((r) => r.workspace === workspace) : all;
  }

  get(id: string): ApprovalRule | undefined {
    return this.byId.get(id);
  }

  /**
   * The enabled rule that answers this request of a process in `workspace`, deny first. A request inside an
   * intercepted tunnel (`https`) is also answered by its host's CONNECT rules (host-wide), a deny of either winning.
   */
  find(workspace: string, t: RuleTarget): ApprovalRule | undefined {
    const own = this.findKey(workspace, t);
    if (t.protocol !== 'https' || own?.decision === 'deny') return own;
    const tunnel = this.findKey(workspace, { ...t, protocol: 'https_connect' });
    return tunnel?.decision === 'deny' ? tunnel : (own ?? tunnel);
  }

  private findKey(workspace: string, t: RuleTarget): ApprovalRule | undefined {
    const rules = this.byKey.get(keyOf(workspace, t));
    if (!rules) return undefined;
    let allow: ApprovalRule | undefined;
    for (const r of rules) {
      if (!ruleAnswers(r, t)) continue;
      if (r.decision === 'deny') return r;
      allow ??= r;
    }
    return allow;
  }

  /** Counts a request `rule` answered. */
  hit(rule: ApprovalRule, now: number): void {
    rule.hits += 1;
    rule.lastHitAt = now;
    this.store?.hit(rule.id, rule.hits, now);
  }

  /** Stores `rule` (replacing one that says the same); throws when it cannot be stored (see `refusal`). */
  add(rule: ApprovalRule): void {
    const why = this.refusal();
    if (why) throw new Error(why);
    const same = (this.byKey.get(keyOf(rule.workspace, rule)) ?? []).find(
      (r) =>
        r.decision === rule.decision &&
        r.method === rule.method &&
        (r.pathPrefix ?? null) === (rule.pathPrefix ?? null),
    );
    this.store!.insert(rule);
    if (same) this.remove(same.id);
    this.index(rule);
  }

  /** Turns `id` off or on, or sets its note; the rule as it is now, or undefined when there is none. */
  update(id: string, change: { enabled?: boolean; note?: string | null }): ApprovalRule | undefined {
    const r = this.byId.get(id);
    if (!r) return undefined;
    const next = { ...r, ...change };
    this.store?.insert(next);
    Object.assign(r, change);
    return r;
  }

  remove(id: string): ApprovalRule | undefined {
    const r = this.byId.get(id);
    if (!r) return undefined;
    this.store?.remove(id);
    this.byId.delete(id);
    const k = keyOf(r.workspace, r);
    const left = (this.byKey.get(k) ?? []).filter((x) => x.id !== id);
    if (left.length > 0) this.byKey.set(k, left);
    else this.byKey.delete(k);
    return r;
  }

  private index(r: ApprovalRule): void {
    this.byId.set(r.id, r);
    const k = keyOf(r.workspace, r);
    const list = this.byKey.get(k);
    if (list) list.push(r);
    else this.byKey.set(k, [r]);
  }
}
