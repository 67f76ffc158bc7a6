/**
 * Admission: the one rule that decides whether the managed proxy lets a request through (network-proxy.md §3.3,
 * §3.5, §4.2 step 5, §4.3 steps 3–4, §4.4). Plain HTTP, upgrades, CONNECT, SOCKS5 TCP and UDP, the fast path and the
 * policy debugger all ask `admit`, so they cannot disagree. It has no effects of its own: the host policy it consults
 * may resolve a name or ask the decider. The proxy's entry points decide and record in one call, `admitAndRecord`,
 * and then answer (a refusal through responses.ts) or dial one of the admitted addresses.
 *
 * The order of checks per protocol:
 * - `http` (a plain request, the proxy sees its method): the host policy, then limited mode's method rule.
 * - `https_connect`: the host policy, then limited mode refuses it as `mitm_required` (the proxy cannot see the
 *   methods inside an opaque tunnel, §4.5) unless `mitm` is on: then the tunnel is intercepted (`intercepts`).
 * - `socks5_tcp`, `socks5_udp`: limited mode refuses first (`method_not_allowed`, [seed]), then the host policy;
 *   with `mitm`, a SOCKS5 CONNECT to port 443 takes the host policy and is intercepted instead.
 * - `https` (a request inside an intercepted tunnel; the caller has checked that it names the tunnel's target): a
 *   configured hook's refusal, limited mode's method rule, then the host policy within the tunnel's admission
 *   (`evaluateWithin`): a tunnel the lists allowed stands; one the decider admitted, or deferred to its requests
 *   (`intercepts`: the CONNECT of an intercepted tunnel does not ask the decider), asks it per request with the
 *   method and path, so endpoint rules (method, path prefix) apply inside TLS as on plain HTTP.
 */
import { clientAddr } from './host.js';
import type { DecisionReceipt, HostDecision, PolicyEngine, PolicyProtocol, PolicySource } from './policy.js';

/** The methods limited mode lets through (§2.2): case-sensitive, so `post` is not GET and is blocked. */
export const LIMITED_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS']);

/** How a decided request came: a policy protocol, or `https` for a request inside an intercepted tunnel. */
export type RequestProtocol = PolicyProtocol | 'https';

/** What the proxy knows of a request when it decides: the normalised target and how it came. */
export interface AdmissionRequest {
  protocol: RequestProtocol;
  /** Normalised and canonical (`normalizeHost`); '' is blocked as `not_allowed`. */
  host: string;
  port: number;
  /** The HTTP method (`CONNECT` for a tunnel); null for SOCKS. */
  method: string | null;
  /**
   * Plain HTTP (`http`) and `https`: the origin-form path and query as sent, for the decider's endpoint rules (issue
   * 36, item 7); absent where the path is not visible (a tunnel, SOCKS).
   */
  path?: string | null;
  /** `ip:port` of the client, or null. */
  client: string | null;
  /** A command's plain TCP connect, asked for by the connect supervisor (transparent TCP): audited as such. */
  transparent?: true;
  /** `https`: the admission of the intercepted tunnel the request came in (without it, the request is refused). */
  tunnel?: Admitted;
  /** `https`: a configured MITM hook refused the request (`mitm_hooks`), with this reason. */
  hookRefusal?: string | undefined;
  /** `https`: a WebSocket (or other) upgrade, which limited mode refuses whatever its method. */
  upgrade?: boolean;
}

/**
 * The admission request of a plain-HTTP request or upgrade (the Node path, the fast path, upgrades, a request that
 * follows a failed parse): its target's host, port and origin-form path, its method, and the client it came from.
 */
export function plainHttpRequest(
  target: { host: string; port: number; path: string | null },
  method: string,
  socket: { remoteAddress?: string | undefined; remotePort?: number | undefined },
): AdmissionRequest {
  return {
    protocol: 'http',
    host: target.host,
    port: target.port,
    method,
    path: target.path,
    client: clientAddr(socket),
  };
}

/** An admitted request: the host policy's allow, with the checked addresses to dial (and nothing else). */
export type Admitted = Extract<HostDecision, { allowed: true }>;

/** A refused request: the reason, who refused (`source`), and whether it was the host policy or the mode guard. */
export type Refused = Extract<HostDecision, { allowed: false }> & {
  /** `domain` when the host policy refused; `non_domain` for the mode guard. */
  scope: 'domain' | 'non_domain';
  /** Set when the host policy allowed the request before the mode guard refused it (its allow is audited). */
  hostAllowed?: { source: PolicySource; override: boolean; receipt?: DecisionReceipt | undefined };
};

export type Admission = Admitted | Refused;

/** The policy as admission sees it: the mode and the host decision (§3.3), within a tunnel too. */
export type AdmissionPolicy = Pick<PolicyEngine, 'mode' | 'evaluate'> &
  Partial<Pick<PolicyEngine, 'evaluateWithin'>> & {
    /** TLS interception is on (`mitm`, issue 34). */
    readonly mitm?: boolean;
  };

/**
 * Whether an admitted tunnel is terminated by the proxy (issue 34, item 3): in limited mode with `mitm`, every
 * CONNECT and every SOCKS5 CONNECT to port 443. Where this holds, limited mode lets the tunnel through its host
 * policy, and the proxy must intercept it (it never becomes an opaque tunnel).
 */
export function intercepts(
  policy: Pick<AdmissionPolicy, 'mode' | 'mitm'>,
  r: Pick<AdmissionRequest, 'protocol' | 'port'>,
): boolean {
  if (policy.mode !== 'limited' || policy.mitm !== true) return false;
  return r.protocol === 'https_connect' || (r.protocol === 'socks5_tcp' && r.port === 443);
}

/** Limited mode's refusal for a request, and whether it comes before the host policy or after it (§3.5). */
function limitedModeRefusal(
  policy: AdmissionPolicy,
  r: AdmissionRequest,
): { reason: string; beforeHost: boolean } | null {
  if (intercepts(policy, r)) return null;
  switch (r.protocol) {
    case 'http':
      return r.method !== null && LIMITED_METHODS.has(r.method)
        ? null
        : { reason: 'method_not_allowed', beforeHost: false };
    case 'https':
      // Before the decider is asked (the tunnel's host is allowed already): no prompt for a request refused anyway.
      return r.method !== null && LIMITED_METHODS.has(r.method) && r.upgrade !== true
        ? null
        : { reason: 'method_not_allowed', beforeHost: true };
    case 'https_connect':
      return { reason: 'mitm_required', beforeHost: false };
    case 'socks5_tcp':
    case 'socks5_udp':
      return { reason: 'method_not_allowed', beforeHost: true };
  }
}

const hostAllowedOf = (a: Admitted): NonNullable<Refused['hostAllowed']> => ({
  source: a.source,
  override: a.override,
  receipt: a.receipt,
});

function modeGuard(host: string, reason: string, hostAllowed?: Admitted): Refused {
  return {
    allowed: false,
    host,
    reason,
    source: 'mode_guard',
    decision: 'deny',
    scope: 'non_domain',
    receipt: { ruleId: reason, origin: 'limited_mode' },
    ...(hostAllowed ? { hostAllowed: hostAllowedOf(hostAllowed) } : {}),
  };
}

/** Decides one request: the host policy and the mode guard, in the order its protocol takes them. */
export async function admit(policy: AdmissionPolicy, r: AdmissionRequest): Promise<Admission> {
  if (r.protocol === 'https') return admitWithin(policy, r);
  const limited = policy.mode === 'limited' ? limitedModeRefusal(policy, r) : null;
  if (limited?.beforeHost) return modeGuard(r.host, limited.reason);
  const d = await policy.evaluate(r.host, r.port, {
    protocol: r.protocol,
    client: r.client,
    method: r.method,
    path: r.protocol === 'http' ? (r.path ?? null) : null,
    defer: intercepts(policy, r),
  });
  if (!d.allowed) return { ...d, scope: 'domain' };
  if (limited) return modeGuard(d.host, limited.reason, d);
  return d;
}

/**
 * Decides one request inside an intercepted tunnel (protocol `https`; the caller has checked that it names the
 * tunnel's host and port): a hook's refusal, then limited mode's method rule (the plain-HTTP reason), then the host
 * policy within the tunnel's admission. An allowed request can only reach the addresses the tunnel's admission
 * checked (local/private guard included): nothing is resolved again.
 */
async function admitWithin(policy: AdmissionPolicy, r: AdmissionRequest): Promise<Admission> {
  const tunnel = r.tunnel;
  if (tunnel === undefined) return modeGuard(r.host, 'not_allowed');
  if (r.hookRefusal !== undefined) {
    return {
      allowed: false,
      host: tunnel.host,
      reason: r.hookRefusal,
      source: 'baseline_policy',
      decision: 'deny',
      scope: 'domain',
      // The configured MITM hook that refused it (`mitm_hooks`).
      receipt: { ruleId: 'mitm_hook', origin: 'config' },
      hostAllowed: hostAllowedOf(tunnel),
    };
  }
  const limited = policy.mode === 'limited' ? limitedModeRefusal(policy, r) : null;
  if (limited) return modeGuard(tunnel.host, limited.reason, tunnel);
  const d = policy.evaluateWithin
    ? await policy.evaluateWithin(tunnel, {
        port: r.port,
        client: r.client,
        method: r.method ?? 'GET',
        path: r.path ?? null,
      })
    : tunnel;
  return d.allowed ? d : { ...d, scope: 'domain' };
}

/** What an audit event keeps of a request inside an intercepted tunnel: its path (no query), the credential injected. */
export interface InterceptedInfo {
  path: string;
  /** The name of the credential injected into it (never its value). */
  credential?: string | undefined;
}

/** Where a decision is kept (the proxy's Recorder: blocked ring, audit events, violation log). */
export interface DecisionRecorder {
  record(r: AdmissionRequest, a: Admission, intercepted?: InterceptedInfo): void;
}

/**
 * Decides one request and records the decision: the one call every entry point of the proxy makes before it answers
 * or sends a byte upstream. `refusals` records only a refusal (a request that cannot be forwarded whatever the
 * policy says, e.g. an unparseable method, is answered as a parse error and leaves no allowed event).
 */
export async function admitAndRecord(
  deps: { policy: AdmissionPolicy; recorder: DecisionRecorder },
  r: AdmissionRequest,
  record: 'all' | 'refusals' = 'all',
  intercepted?: InterceptedInfo,
): Promise<Admission> {
  const a = await admit(deps.policy, r);
  if (record === 'all' || !a.allowed) {
    // A credential is injected only into an allowed request: a refusal's events never name one.
    const info = intercepted && !a.allowed ? { path: intercepted.path } : intercepted;
    deps.recorder.record(r, a, info);
  }
  return a;
}
