/**
 * The host policy of the managed proxy (network-proxy.md §3.3–§3.6, §5): deny first, the local/private guard, the
 * allowlist, the optional async decider, and resolve-once pinning: every resolver answer is checked and the caller
 * dials one of the checked addresses, never resolving again.
 *
 * One deliberate difference from Codex's order (documented in the report): a hostname that is not allowlisted is
 * blocked as `not_allowed` without any DNS lookup (Codex resolves first and may report `not_allowed_local`). Names
 * that are allowed (by the list or the decider) are resolved and every answer must pass the guard.
 */
import { lookup } from 'node:dns/promises';
import { type Clock, realClock } from '../clock.js';
import type { NetworkSettings } from './config.js';
import { canonicalIp, isNonPublicIp } from './host.js';
import { type CompiledPatterns, compilePatterns } from './patterns.js';

/** Resolves a host name to IP addresses. Injected in tests; the default uses getaddrinfo (so /etc/hosts applies). */
export type Resolver = (host: string, port: number) => Promise<string[]>;

export const defaultResolver: Resolver = async (host) => {
  const answers = await lookup(host, { all: true, verbatim: true });
  return answers.map((a) => a.address);
};

export const RESOLVE_TIMEOUT_MS = 2000;

export type PolicyProtocol = 'http' | 'https_connect' | 'socks5_tcp' | 'socks5_udp';

/** What the decider sees (§3.6). */
export interface DeciderRequest {
  /** `https`: a request inside an intercepted TLS tunnel (its method and path are visible, as on plain HTTP). */
  protocol: PolicyProtocol | 'https';
  host: string;
  port: number;
  client_addr: string | null;
  method: string | null;
  /**
   * Plain HTTP and `https`: the request target's origin-form path and query as sent (the decider normalises it);
   * else absent.
   */
  path?: string | null;
  /**
   * `https` only: how its tunnel was admitted. `deferred`: the tunnel's host was not decided (the decider was not
   * asked for the CONNECT), this request is: answer it as a plain-HTTP request. `admitted`: the decider already let
   * the tunnel through (a host intercepted after the CONNECT was answered): only a deny may still refuse it.
   */
  tunnel?: 'deferred' | 'admitted';
  command?: string;
  exec_policy_hint?: string;
}

/**
 * What decided a request (issue 37, item 2): where the rule lives and its id there. `config`: the configured
 * allow/deny lists (`allow:<pattern>`, `deny:<pattern>`); `local_guard`: the local/private address refusal;
 * `limited_mode`: limited mode's method rule; `default`: nothing allowed it (`not_allowed`); `repository`: the
 * workspace's `.corral/network.json`; `project`: a project rule (its id); `session`: a remembered decision (its id);
 * `panel`/`harness`: a person's answer in the panel, or the session's own client; `timeout`: an unanswered prompt;
 * `learning`: learning mode; `broker`: the approval broker refused without asking (no room, not a live process).
 */
export type RuleOrigin =
  | 'config'
  | 'local_guard'
  | 'limited_mode'
  | 'default'
  | 'repository'
  | 'project'
  | 'session'
  | 'panel'
  | 'harness'
  | 'timeout'
  | 'learning'
  | 'broker';

/** The receipt of a decision: the rule's id and origin, and the id tying it to a prompt and its answer. */
export interface DecisionReceipt {
  ruleId: string;
  origin: RuleOrigin;
  correlationId?: string | undefined;
}

export type DeciderResult =
  | 'allow'
  | 'deny'
  | { deny: string; receipt?: DecisionReceipt }
  | { ask: string; receipt?: DecisionReceipt }
  | { type: 'allow'; receipt?: DecisionReceipt }
  | { type: 'deny'; reason?: string; receipt?: DecisionReceipt }
  | { type: 'ask'; reason?: string; receipt?: DecisionReceipt };

/** Called only for `not_allowed`, awaited inline (the client's request waits). */
export type Decider = (request: DeciderRequest) => Promise<DeciderResult>;

export type PolicySource = 'baseline_policy' | 'mode_guard' | 'proxy_state' | 'decider';

export type HostDecision =
  | {
      allowed: true;
      host: string;
      /** Checked addresses; dial one of these and nothing else. Empty when resolution failed (ALB true). */
      addresses: string[];
      source: PolicySource;
      override: boolean;
      receipt?: DecisionReceipt | undefined;
      /**
       * A tunnel the proxy intercepts whose host missed the allowlist: the decider was not asked for it, it is asked
       * for each request inside (`evaluateWithin`), with the request's method and path (issue 36, item 7).
       */
      deferred?: true;
    }
  | {
      allowed: false;
      host: string;
      reason: string;
      source: PolicySource;
      decision: 'deny' | 'ask';
      receipt?: DecisionReceipt | undefined;
    };

type Verdict = { receipt?: DecisionReceipt | undefined } & (
  | { allow: true }
  | { allow: false; decision: 'deny' | 'ask'; reason: string }
);

function normalizeDeciderResult(r: DeciderResult): Verdict {
  const reasonOf = (s: string | undefined) => (s && s.length > 0 ? s : 'policy_denied');
  if (r === 'allow') return { allow: true };
  if (r === 'deny') return { allow: false, decision: 'deny', reason: 'policy_denied' };
  const receipt = r.receipt;
  if ('type' in r) {
    if (r.type === 'allow') return { allow: true, receipt };
    return { allow: false, decision: r.type, reason: reasonOf(r.reason), receipt };
  }
  if ('deny' in r) return { allow: false, decision: 'deny', reason: reasonOf(r.deny), receipt };
  return { allow: false, decision: 'ask', reason: reasonOf(r.ask), receipt };
}

const configRule = (list: 'allow' | 'deny', pattern: string | null): DecisionReceipt => ({
  ruleId: `${list}:${pattern ?? ''}`,
  origin: 'config',
});
const LOCAL_GUARD: DecisionReceipt = { ruleId: 'not_allowed_local', origin: 'local_guard' };
const NOT_ALLOWED: DecisionReceipt = { ruleId: 'not_allowed', origin: 'default' };
const DECIDER_FAILED: DecisionReceipt = { ruleId: 'decider_failed', origin: 'broker' };
/** The receipt of an intercepted tunnel admitted without asking the decider: each request inside is asked. */
export const PER_REQUEST: DecisionReceipt = { ruleId: 'intercepted_per_request', origin: 'broker' };

function withTimeout<T>(p: Promise<T>, ms: number, clock: Clock): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = clock.setTimeout(() => reject(new Error('resolve timeout')), ms);
    p.then(
      (v) => {
        clock.clearTimeout(t);
        resolve(v);
      },
      (e) => {
        clock.clearTimeout(t);
        reject(e);
      },
    );
  });
}

export interface PolicyOptions {
  resolver?: Resolver;
  decider?: Decider;
  resolveTimeoutMs?: number;
  /** The time of the resolve timeout (tests pass a fake one). */
  clock?: Clock;
}

export class PolicyEngine {
  readonly allow: CompiledPatterns;
  readonly deny: CompiledPatterns;
  readonly resolver: Resolver;
  decider: Decider | undefined;
  private readonly resolveTimeoutMs: number;
  private readonly clock: Clock;

  constructor(
    readonly settings: NetworkSettings,
    opts: PolicyOptions = {},
  ) {
    this.allow = compilePatterns(settings.allowed_domains);
    this.deny = compilePatterns(settings.denied_domains);
    this.resolver = opts.resolver ?? defaultResolver;
    this.decider = opts.decider;
    this.resolveTimeoutMs = opts.resolveTimeoutMs ?? RESOLVE_TIMEOUT_MS;
    this.clock = opts.clock ?? realClock;
  }

  get mode(): 'full' | 'limited' {
    return this.settings.mode;
  }

  /** TLS interception is on (issue 34). */
  get mitm(): boolean {
    return this.settings.mitm;
  }

  /** Resolves once under the timeout; returns canonical addresses or null on failure/timeout/empty answer. */
  async resolve(host: string, port: number): Promise<string[] | null> {
    try {
      const answers = await withTimeout(
        Promise.resolve().then(() => this.resolver(host, port)),
        this.resolveTimeoutMs,
        this.clock,
      );
      const out: string[] = [];
      for (const a of answers ?? []) {
        const c = canonicalIp(String(a));
        if (c === null) return null;
        if (!out.includes(c)) out.push(c);
      }
      return out.length > 0 ? out : null;
    } catch {
      return null;
    }
  }

  /** Asks the decider; a throw is a deny. */
  private async ask(r: DeciderRequest): Promise<Verdict> {
    try {
      return normalizeDeciderResult(await this.decider!(r));
    } catch {
      return { allow: false, decision: 'deny', reason: 'policy_denied', receipt: DECIDER_FAILED };
    }
  }

  /**
   * Decides one (normalised, canonical) host and port. `client`, `method` and `path` only feed the decider. `defer`
   * (a tunnel the proxy will intercept): an allowlist miss does not ask the decider, the tunnel is admitted
   * `deferred` (deny list, local guard and resolution as ever) and each request inside is asked (`evaluateWithin`).
   */
  async evaluate(
    host: string,
    port: number,
    ctx: {
      protocol: PolicyProtocol;
      client: string | null;
      method: string | null;
      path?: string | null;
      defer?: boolean;
    },
  ): Promise<HostDecision> {
    const block = (
      reason: string,
      receipt: DecisionReceipt,
      source: PolicySource = 'baseline_policy',
      decision: 'deny' | 'ask' = 'deny',
    ) => ({ allowed: false, host, reason, source, decision, receipt }) as const;
    if (host === '') return block('not_allowed', NOT_ALLOWED);
    if (this.deny.test(host)) return block('denied', configRule('deny', this.deny.match(host)));
    const alb = this.settings.allow_local_binding;
    const ip = canonicalIp(host);
    const isLocalLiteral = host === 'localhost' || (ip !== null && isNonPublicIp(ip));
    const explicit =
      this.allow.exact.has(host) || (ip !== null && this.allow.exact.has(ip.replace(/%.*$/, '')));
    if (!alb && isLocalLiteral && !explicit) return block('not_allowed_local', LOCAL_GUARD);

    let source: PolicySource = 'baseline_policy';
    let override = false;
    let receipt: DecisionReceipt;
    let deferred = false;
    const listed = this.allow.match(host);
    if (listed !== null) receipt = configRule('allow', listed);
    else if (!this.decider) return block('not_allowed', NOT_ALLOWED);
    else if (ctx.defer === true) {
      source = 'decider';
      receipt = PER_REQUEST;
      deferred = true;
    } else {
      const verdict = await this.ask({
        protocol: ctx.protocol,
        host,
        port,
        client_addr: ctx.client,
        method: ctx.method,
        ...(ctx.path != null ? { path: ctx.path } : {}),
      });
      if (!verdict.allow)
        return block(verdict.reason, verdict.receipt ?? NOT_ALLOWED, 'decider', verdict.decision);
      source = 'decider';
      override = true;
      receipt = verdict.receipt ?? NOT_ALLOWED;
    }
    const allowed = (addresses: string[]): HostDecision =>
      deferred
        ? { allowed: true, host, addresses, source, override, receipt, deferred: true }
        : { allowed: true, host, addresses, source, override, receipt };

    // Addresses to dial: literals and localhost need no lookup; names are resolved exactly once.
    let addresses: string[];
    if (ip !== null) addresses = [ip];
    else if (host === 'localhost') addresses = ['127.0.0.1'];
    else {
      const resolved = await this.resolve(host, port);
      if (resolved === null) {
        if (!alb) return block('not_allowed_local', LOCAL_GUARD, source);
        return allowed([]);
      }
      addresses = resolved;
      // IP-literal deny entries also apply to what a name resolves to (§5 item 1, SHOULD).
      const denied = addresses.find((a) => this.deny.ipLiterals.has(a) || this.deny.test(a));
      if (denied !== undefined)
        return block(
          'denied',
          configRule('deny', this.deny.ipLiterals.has(denied) ? denied : this.deny.match(denied)),
        );
      if (!alb && addresses.some((a) => isNonPublicIp(a)))
        return block('not_allowed_local', LOCAL_GUARD, source);
    }
    return allowed(addresses);
  }

  /**
   * Decides one request inside an intercepted tunnel (`tunnel`, its admission; the request names its host and port).
   * A tunnel the configured lists allowed stands for its requests (the decider is asked only for allowlist misses,
   * as on plain HTTP). One the decider admitted or deferred asks it again per request, with protocol `https`, the
   * method and the path: its rules with a method or path prefix apply inside the tunnel. An allowed request dials the
   * tunnel's checked addresses: nothing is resolved again.
   */
  async evaluateWithin(
    tunnel: Extract<HostDecision, { allowed: true }>,
    ctx: { port: number; client: string | null; method: string; path: string | null },
  ): Promise<HostDecision> {
    if (tunnel.source !== 'decider' || !this.decider) {
      if (tunnel.deferred !== true) return tunnel;
      // Deferred, and the decider is gone since: nothing may allow the request.
      return {
        allowed: false,
        host: tunnel.host,
        reason: 'not_allowed',
        source: 'baseline_policy',
        decision: 'deny',
        receipt: NOT_ALLOWED,
      };
    }
    const v = await this.ask({
      protocol: 'https',
      host: tunnel.host,
      port: ctx.port,
      client_addr: ctx.client,
      method: ctx.method,
      ...(ctx.path !== null ? { path: ctx.path } : {}),
      tunnel: tunnel.deferred === true ? 'deferred' : 'admitted',
    });
    if (!v.allow) {
      const receipt = v.receipt ?? NOT_ALLOWED;
      return {
        allowed: false,
        host: tunnel.host,
        reason: v.reason,
        source: 'decider',
        decision: v.decision,
        receipt,
      };
    }
    const { host, addresses } = tunnel;
    return {
      allowed: true,
      host,
      addresses,
      source: 'decider',
      override: true,
      receipt: v.receipt ?? tunnel.receipt,
    };
  }
}
