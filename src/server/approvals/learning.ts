/**
 * Learning mode (issue 36, item 5): for one workspace, for a bounded time and number of requests, the allowlist
 * misses of its processes are allowed and recorded instead of prompted — exactly as seen (protocol, host, port, plain
 * HTTP's method), with hit counts — and the proposal is offered for the person to accept (edited down) as project
 * rules, or discard. Only misses reach it: a host the config denies is blocked before any decider, and a deny rule or
 * remembered deny is checked first. Started and ended only by a panel principal.
 */
import {
  type LearnedEndpoint,
  type LearningState,
  MAX_LEARNED_ENDPOINTS,
  MAX_PATH_PREFIX,
} from '../../protocol/approvals.js';
import { firstSegment, normalizePathPrefix } from './endpointPath.js';
import { pathVisible, type RuleTarget, ruleMethod } from './projectRules.js';

interface Seen extends LearnedEndpoint {
  hits: number;
}

interface Session {
  workspace: string;
  startedAt: number;
  endsAt: number;
  maxRequests: number;
  requests: number;
  seen: Map<string, Seen>;
}

const endpointKey = (e: LearnedEndpoint) =>
  `${e.protocol}\u0000${e.host.toLowerCase()}\u0000${e.port}\u0000${e.method ?? ''}\u0000${e.pathPrefix ?? ''}`;

/** What `record` did: nothing (prompt as usual), recorded, or recorded and changed what a panel shows. */
export type Recorded = 'no' | 'yes' | 'changed';

export class LearningSessions {
  private readonly byWorkspace = new Map<string, Session>();

  start(workspace: string, now: number, durationMs: number, maxRequests: number): LearningState {
    const s: Session = {
      workspace,
      startedAt: now,
      endsAt: now + durationMs,
      maxRequests,
      requests: 0,
      seen: new Map(),
    };
    this.byWorkspace.set(workspace, s);
    return this.state(s, now);
  }

  /**
   * Allows and records `t` when `workspace` is learning and has room; `no`: prompt as usual. Plain HTTP is recorded
   * with its path's first segment; a plain-HTTP path that cannot be read safely is not learned (it is prompted).
   */
  record(workspace: string, t: RuleTarget, now: number): Recorded {
    const s = this.byWorkspace.get(workspace);
    if (!s || now >= s.endsAt || s.requests >= s.maxRequests) return 'no';
    let pathPrefix: string | null = null;
    if (pathVisible(t.protocol)) {
      if (t.path == null) return 'no';
      pathPrefix = firstSegment(t.path);
      if (pathPrefix.length > MAX_PATH_PREFIX) return 'no';
    }
    const e: LearnedEndpoint = {
      protocol: t.protocol,
      host: t.host.toLowerCase(),
      port: t.port,
      method: ruleMethod(t.protocol, t.method),
      ...(pathPrefix === null ? {} : { pathPrefix }),
    };
    const k = endpointKey(e);
    const seen = s.seen.get(k);
    let changed = false;
    if (seen) seen.hits += 1;
    else if (s.seen.size >= MAX_LEARNED_ENDPOINTS) return 'no';
    else {
      s.seen.set(k, { ...e, hits: 1 });
      changed = true;
    }
    s.requests += 1;
    return changed || s.requests >= s.maxRequests ? 'changed' : 'yes';
  }

  /** The session of `workspace` while it is allowing (before its end, under its count), else null. */
  activeFor(workspace: string, now: number): LearningState | null {
    const s = this.byWorkspace.get(workspace);
    return s && now < s.endsAt && s.requests < s.maxRequests ? this.state(s, now) : null;
  }

  get size(): number {
    return this.byWorkspace.size;
  }

  list(now: number, workspace?: string | null): LearningState[] {
    return [...this.byWorkspace.values()]
      .filter((s) => !workspace || s.workspace === workspace)
      .map((s) => this.state(s, now));
  }

  /** Ends `workspace`'s session: the accepted endpoints it saw (an unseen one throws naming it), or null if none. */
  end(workspace: string, accept: readonly LearnedEndpoint[]): Seen[] | null {
    const s = this.byWorkspace.get(workspace);
    if (!s) return null;
    const out: Seen[] = [];
    for (const a of accept) {
      // The prefix as given is normalised the one way: a spelling of another prefix never matches a seen one.
      const prefix = a.pathPrefix == null ? null : normalizePathPrefix(a.pathPrefix);
      const seen =
        a.pathPrefix != null && prefix === null
          ? undefined
          : s.seen.get(
              endpointKey({
                ...a,
                host: a.host.toLowerCase(),
                method: a.method === null ? null : a.method.toUpperCase(),
                pathPrefix: prefix,
              }),
            );
      if (!seen)
        throw new Error(
          `${a.protocol} ${a.host}:${a.port}${a.method ? ` ${a.method}` : ''}${a.pathPrefix ? ` ${a.pathPrefix}` : ''} was not seen while learning: only what was seen can be accepted`,
        );
      if (!out.includes(seen)) out.push(seen);
    }
    this.byWorkspace.delete(workspace);
    return out;
  }

  private state(s: Session, now: number): LearningState {
    return {
      workspace: s.workspace,
      startedAt: s.startedAt,
      endsAt: s.endsAt,
      maxRequests: s.maxRequests,
      requests: s.requests,
      active: now < s.endsAt && s.requests < s.maxRequests,
      proposal: [...s.seen.values()].map((e) => ({ ...e })),
    };
  }
}
