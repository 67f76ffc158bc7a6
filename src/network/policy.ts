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
  protocol: PolicyProtocol;
  host: string;
  port: number;
  client_addr: string | null;
  method: string | null;
  command?: string;
  exec_policy_hint?: string;
}

export type DeciderResult =
  | 'allow'
  | 'deny'
  | { deny: string }
  | { ask: string }
  | { type: 'allow' }
  | { type: 'deny'; reason?: string }
  | { type: 'ask'; reason?: string };

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
    }
  | { allowed: false; host: string; reason: string; source: PolicySource; decision: 'deny' | 'ask' };

function normalizeDeciderResult(
  r: DeciderResult,
): { allow: true } | { allow: false; decision: 'deny' | 'ask'; reason: string } {
  const reasonOf = (s: string | undefined) => (s && s.length > 0 ? s : 'policy_denied');
  if (r === 'allow') return { allow: true };
  if (r === 'deny') return { allow: false, decision: 'deny', reason: 'policy_denied' };
  if ('type' in r) {
    if (r.type === 'allow') return { allow: true };
    return { allow: false, decision: r.type, reason: reasonOf(r.reason) };
  }
  if ('deny' in r) return { allow: false, decision: 'deny', reason: reasonOf(r.deny) };
  return { allow: false, decision: 'ask', reason: reasonOf(r.ask) };
}

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

  /**
   * Decides one (normalised, canonical) host and port. `client` and `method` only feed the decider.
   */
  async evaluate(
    host: string,
    port: number,
    ctx: { protocol: PolicyProtocol; client: string | null; method: string | null },
  ): Promise<HostDecision> {
    const block = (
      reason: string,
      source: PolicySource = 'baseline_policy',
      decision: 'deny' | 'ask' = 'deny',
    ) => ({ allowed: false, host, reason, source, decision }) as const;
    if (host === '') return block('not_allowed');
    if (this.deny.test(host)) return block('denied');
    const alb = this.settings.allow_local_binding;
    const ip = canonicalIp(host);
    const isLocalLiteral = host === 'localhost' || (ip !== null && isNonPublicIp(ip));
    const explicit =
      this.allow.exact.has(host) || (ip !== null && this.allow.exact.has(ip.replace(/%.*$/, '')));
    if (!alb && isLocalLiteral && !explicit) return block('not_allowed_local');

    let source: PolicySource = 'baseline_policy';
    let override = false;
    if (!this.allow.test(host)) {
      if (!this.decider) return block('not_allowed');
      let verdict: ReturnType<typeof normalizeDeciderResult>;
      try {
        verdict = normalizeDeciderResult(
          await this.decider({
            protocol: ctx.protocol,
            host,
            port,
            client_addr: ctx.client,
            method: ctx.method,
          }),
        );
      } catch {
        verdict = { allow: false, decision: 'deny', reason: 'policy_denied' };
      }
      if (!verdict.allow) return block(verdict.reason, 'decider', verdict.decision);
      source = 'decider';
      override = true;
    }

    // Addresses to dial: literals and localhost need no lookup; names are resolved exactly once.
    let addresses: string[];
    if (ip !== null) addresses = [ip];
    else if (host === 'localhost') addresses = ['127.0.0.1'];
    else {
      const resolved = await this.resolve(host, port);
      if (resolved === null) {
        if (!alb) return block('not_allowed_local', source);
        return { allowed: true, host, addresses: [], source, override };
      }
      addresses = resolved;
      // IP-literal deny entries also apply to what a name resolves to (§5 item 1, SHOULD).
      if (addresses.some((a) => this.deny.ipLiterals.has(a) || this.deny.test(a))) return block('denied');
      if (!alb && addresses.some((a) => isNonPublicIp(a))) return block('not_allowed_local', source);
    }
    return { allowed: true, host, addresses, source, override };
  }
}
