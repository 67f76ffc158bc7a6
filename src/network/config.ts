/**
 * The `network` settings of a managed proxy (network-proxy.md §2.1): parsing every accepted config shape into
 * NetworkSettings, and their validation against managed constraints (§3.7). The request fields that carry them
 * (`managedNetwork`, `networkProxy`) are managedNetwork.ts. Errors carry the full client-facing text.
 */
import { domainToASCII } from 'node:url';
import type { z } from 'zod';
import {
  type MitmHookWire,
  type NetworkConstraints,
  type NetworkMode,
  NetworkSettingsWireSchema,
} from '../protocol/network.js';
import { serdeMessage } from '../protocol/serde.js';
import { compilePatterns, GlobError, isGlobalWildcard } from './patterns.js';

/**
 * What went wrong with a config: its shape or types (`shape`), a managed constraint it breaks (`constraint`, §3.7),
 * or a state that cannot be built from it (`build`: a bad glob, a relative unix-socket path, `*` in the denylist).
 */
export type NetworkConfigErrorKind = 'shape' | 'constraint' | 'build';

/** What every config error's text begins with (0.169's wording, -32602). */
export const PREFIX = 'invalid network proxy config: ';

/**
 * The seed's answers for its own `managedNetwork` (issue 33, item 1): -32603 with these prefixes for a constraint
 * violation and for a config whose state cannot be built. Shape errors stay -32602, as serde gave them.
 */
const SEED_PREFIX: Record<Exclude<NetworkConfigErrorKind, 'shape'>, string> = {
  constraint: 'invalid managed network config: ',
  build: 'failed to build managed network proxy state: ',
};

/**
 * A configuration error. `message` is 0.169's complete -32602 text (`PREFIX` + `detail`); `answer()` is the one place
 * that picks the wire code and text for the member the config came from.
 */
export class NetworkConfigError extends Error {
  /** The process/start member the config came from, once known (parseProcessNetwork sets it). */
  readonly field: 'managedNetwork' | 'networkProxy' | undefined;
  constructor(
    /** The error itself, without any prefix. */
    readonly detail: string,
    readonly kind: NetworkConfigErrorKind,
    field?: 'managedNetwork' | 'networkProxy',
  ) {
    super(PREFIX + detail);
    this.name = 'NetworkConfigError';
    this.field = field;
  }

  /**
   * The answer to process/start: a seed `managedNetwork` whose constraints fail or whose state cannot be built is
   * -32603 in the seed's words; everything else (every `networkProxy` error, every shape error) -32602 in 0.169's.
   */
  answer(): { internal: boolean; message: string } {
    if (this.field === 'managedNetwork' && this.kind !== 'shape')
      return { internal: true, message: SEED_PREFIX[this.kind] + this.detail };
    return { internal: false, message: this.message };
  }

  /** The same error, now known to come from `field`. */
  inField(field: 'managedNetwork' | 'networkProxy'): NetworkConfigError {
    return new NetworkConfigError(this.detail, this.kind, field);
  }
}

/** The normalised `network` settings (§2.1), with the three effective lists. */
export interface NetworkSettings {
  enabled: boolean;
  proxy_url: string;
  enable_socks5: boolean;
  socks_url: string;
  enable_socks5_udp: boolean;
  allow_upstream_proxy: boolean;
  dangerously_allow_non_loopback_proxy: boolean;
  dangerously_allow_all_unix_sockets: boolean;
  mode: NetworkMode;
  allowed_domains: string[];
  denied_domains: string[];
  allow_unix_sockets: string[];
  allow_local_binding: boolean;
  mitm: boolean;
  /** Hooks on intercepted requests ([HEAD], issue 34); secrets are resolved when the proxy starts. */
  mitm_hooks: MitmHookWire[];
  /** Brokered tokens in the child's env become dummies; the proxy injects the real ones (issue 34). */
  credential_broker: boolean;
  dangerously_allow_plaintext_credential_injection: boolean;
}

export function defaultSettings(): NetworkSettings {
  return {
    enabled: false,
    proxy_url: 'http://127.0.0.1:3128',
    enable_socks5: true,
    socks_url: 'http://127.0.0.1:8081',
    enable_socks5_udp: true,
    allow_upstream_proxy: true,
    dangerously_allow_non_loopback_proxy: false,
    dangerously_allow_all_unix_sockets: false,
    mode: 'full',
    allowed_domains: [],
    denied_domains: [],
    allow_unix_sockets: [],
    allow_local_binding: false,
    mitm: false,
    mitm_hooks: [],
    credential_broker: false,
    dangerously_allow_plaintext_credential_injection: false,
  };
}

export function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

export function zodText(error: z.ZodError, input: unknown, struct: string): string {
  return serdeMessage(error, input, struct);
}

/** Splits a domains map (plus legacy arrays) into the allow/deny lists; precedence none < allow < deny. */
export function domainLists(
  domains: Record<string, 'allow' | 'deny' | 'none'> | null | undefined,
  legacyAllow: string[] | null | undefined,
  legacyDeny: string[] | null | undefined,
): { allowed: string[]; denied: string[] } {
  const denied: string[] = [];
  const allowed: string[] = [];
  // Each list's entries by lowercase, so that a wide map stays linear (a scan per entry took minutes at 100k).
  const seen = new Map<string[], Set<string>>([
    [denied, new Set()],
    [allowed, new Set()],
  ]);
  const add = (list: string[], p: string) => {
    const lower = seen.get(list)!;
    const key = p.toLowerCase();
    if (lower.has(key)) return;
    lower.add(key);
    list.push(p);
  };
  for (const p of legacyDeny ?? []) add(denied, p);
  for (const [p, v] of Object.entries(domains ?? {})) if (v === 'deny') add(denied, p);
  const deniedLower = seen.get(denied)!;
  const allowIfNotDenied = (p: string) => {
    if (!deniedLower.has(p.toLowerCase())) add(allowed, p);
  };
  for (const p of legacyAllow ?? []) allowIfNotDenied(p);
  for (const [p, v] of Object.entries(domains ?? {})) if (v === 'allow') allowIfNotDenied(p);
  return { allowed, denied };
}

/** Parses the seed `config` (`{network:{…}}` or flat; map or legacy arrays) into settings. */
export function parseNetworkConfig(raw: unknown): NetworkSettings {
  if (raw === null || raw === undefined) return defaultSettings();
  if (!isObject(raw)) throw new NetworkConfigError(`invalid type: ${typeof raw}, expected a map`, 'shape');
  const inner = 'network' in raw ? raw.network : raw;
  if (inner === null || inner === undefined) return defaultSettings();
  const parsed = NetworkSettingsWireSchema.safeParse(inner);
  if (!parsed.success)
    throw new NetworkConfigError(zodText(parsed.error, inner, 'NetworkProxySettings'), 'shape');
  const w = parsed.data;
  const d = defaultSettings();
  const { allowed, denied } = domainLists(w.domains, w.allowed_domains, w.denied_domains);
  const sockets: string[] = [...(w.allow_unix_sockets ?? [])];
  for (const [p, v] of Object.entries(w.unix_sockets ?? {}))
    if (v === 'allow' && !sockets.includes(p)) sockets.push(p);
  return {
    enabled: w.enabled ?? d.enabled,
    proxy_url: w.proxy_url ?? d.proxy_url,
    enable_socks5: w.enable_socks5 ?? d.enable_socks5,
    socks_url: w.socks_url ?? d.socks_url,
    enable_socks5_udp: w.enable_socks5_udp ?? d.enable_socks5_udp,
    allow_upstream_proxy: w.allow_upstream_proxy ?? d.allow_upstream_proxy,
    dangerously_allow_non_loopback_proxy: w.dangerously_allow_non_loopback_proxy ?? false,
    dangerously_allow_all_unix_sockets: w.dangerously_allow_all_unix_sockets ?? false,
    mode: w.mode ?? 'full',
    allowed_domains: allowed,
    denied_domains: denied,
    allow_unix_sockets: sockets,
    allow_local_binding: w.allow_local_binding ?? false,
    mitm: w.mitm ?? false,
    mitm_hooks: w.mitm_hooks ?? [],
    credential_broker: w.credential_broker ?? false,
    dangerously_allow_plaintext_credential_injection:
      w.dangerously_allow_plaintext_credential_injection ?? false,
  };
}

// ---- constraint validation (§3.7) ------------------------------------------------------------------------------

const debugList = (xs: readonly string[]) => `[${xs.map((x) => JSON.stringify(x)).join(', ')}]`;
const invalidValue = (
  field: string,
  candidate: string,
  allowed: string,
  kind: NetworkConfigErrorKind = 'constraint',
) => new NetworkConfigError(`invalid value for ${field}: ${candidate} (allowed ${allowed})`, kind);
const DISABLED = 'false (disabled by managed config)';
const modeName = (m: NetworkMode) => (m === 'full' ? 'Full' : 'Limited');
const modeRank = (m: NetworkMode) => (m === 'full' ? 1 : 0);

function checkNoGlobalWildcard(
  field: string,
  patterns: readonly string[],
  kind: NetworkConfigErrorKind = 'constraint',
): void {
  const bad = patterns.find(isGlobalWildcard);
  if (bad !== undefined) {
    throw invalidValue(
      field,
      bad.trim(),
      'exact hosts or scoped wildcards like *.example.com or **.example.com',
      kind,
    );
  }
}

type ConstraintPattern = { kind: 'exact' | 'sub' | 'apex'; domain: string };

function constraintHost(s: string): string {
  let h = s.trim().toLowerCase();
  while (h.endsWith('.')) h = h.slice(0, -1);
  if (/[^\x00-\x7f]/.test(h)) {
    const ascii = domainToASCII(h);
    if (ascii !== '') h = ascii;
  }
  return h;
}

function parseForConstraints(entry: string): ConstraintPattern {
  const e = entry.trim();
  if (e.startsWith('**.')) return { kind: 'apex', domain: constraintHost(e.slice(3)) };
  if (e.startsWith('*.')) return { kind: 'sub', domain: constraintHost(e.slice(2)) };
  return { kind: 'exact', domain: constraintHost(e) };
}

/**
 * Whether some entry of a managed allowlist covers a candidate pattern (the "expansion absent" rule of §3.7 step 6):
 * an exact entry covers the same exact host; `*.d` covers exact hosts and `*.` patterns under d, `*.d` itself, and
 * `**.` patterns strictly under d; `**.d` covers d and everything under it. The managed list is indexed once, so a
 * candidate costs a lookup per label (a scan of the list per candidate made 100k × 100k entries a denial of service).
 */
export function managedAllowlist(managed: readonly string[]): (candidateEntry: string) => boolean {
  const exact = new Set<string>();
  const sub = new Set<string>();
  const apex = new Set<string>();
  for (const m of managed) {
    const p = parseForConstraints(m);
    (p.kind === 'exact' ? exact : p.kind === 'sub' ? sub : apex).add(p.domain);
  }
  return (candidateEntry) => {
    const c = parseForConstraints(candidateEntry);
    if (apex.has(c.domain)) return true;
    if (c.kind === 'exact' && exact.has(c.domain)) return true;
    if (c.kind === 'sub' && sub.has(c.domain)) return true;
    // Strictly under d: every proper suffix of the candidate's domain.
    for (let i = c.domain.indexOf('.'); i !== -1; i = c.domain.indexOf('.', i + 1)) {
      const parent = c.domain.slice(i + 1);
      if (sub.has(parent) || apex.has(parent)) return true;
    }
    return false;
  };
}

/** §3.7, in order; the first failure wins. */
export function validateAgainstConstraints(s: NetworkSettings, c: NetworkConstraints): void {
  checkNoGlobalWildcard('network.denied_domains', s.denied_domains);
  if (c.enabled === false && s.enabled) throw invalidValue('network.enabled', 'true', DISABLED);
  if (c.mode != null && modeRank(s.mode) > modeRank(c.mode)) {
    throw invalidValue('network.mode', modeName(s.mode), `${modeName(c.mode)} or more restrictive`);
  }
  if (c.allow_upstream_proxy === false && s.allow_upstream_proxy) {
    throw invalidValue('network.allow_upstream_proxy', 'true', DISABLED);
  }
  if (c.dangerously_allow_non_loopback_proxy === false && s.dangerously_allow_non_loopback_proxy) {
    throw invalidValue('network.dangerously_allow_non_loopback_proxy', 'true', DISABLED);
  }
  const allowAllSockets = c.dangerously_allow_all_unix_sockets ?? c.allow_unix_sockets == null;
  if (s.dangerously_allow_all_unix_sockets && !allowAllSockets) {
    throw invalidValue('network.dangerously_allow_all_unix_sockets', 'true', DISABLED);
  }
  if (c.allow_local_binding === false && s.allow_local_binding) {
    throw invalidValue('network.allow_local_binding', 'true', DISABLED);
  }
  const lower = (xs: readonly string[]) => xs.map((x) => x.toLowerCase());
  const deniedOverrides = new Set(lower(s.denied_domains));
  if (c.allowed_domains != null) {
    const managed = c.allowed_domains;
    checkNoGlobalWildcard('network.allowed_domains', managed);
    const candidate = new Set(lower(s.allowed_domains));
    if (c.allowlist_expansion_enabled === true) {
      const missing = [...new Set(lower(managed))].filter(
        (e) => !candidate.has(e) && !deniedOverrides.has(e),
      );
      if (missing.length > 0) {
        throw invalidValue(
          'network.allowed_domains',
          'missing managed allowed_domains entries',
          debugList(missing),
        );
      }
    } else if (c.allowlist_expansion_enabled === false) {
      const expected = new Set(lower(managed).filter((e) => !deniedOverrides.has(e)));
      const same = expected.size === candidate.size && [...expected].every((e) => candidate.has(e));
      if (!same) {
        throw invalidValue(
          'network.allowed_domains',
          debugList(s.allowed_domains),
          'must match managed allowed_domains',
        );
      }
    } else {
      const covered = managedAllowlist(managed);
      const invalid = s.allowed_domains.filter((e) => !covered(e));
      if (invalid.length > 0) {
        throw invalidValue(
          'network.allowed_domains',
          debugList(invalid),
          'subset of managed allowed_domains',
        );
      }
    }
  }
  if (c.denied_domains != null) {
    checkNoGlobalWildcard('network.denied_domains', c.denied_domains);
    const required = [...new Set(lower(c.denied_domains))];
    const candidate = new Set(lower(s.denied_domains));
    if (c.denylist_expansion_enabled === false) {
      const same = required.length === candidate.size && required.every((e) => candidate.has(e));
      if (!same) {
        throw invalidValue(
          'network.denied_domains',
          debugList(s.denied_domains),
          'must match managed denied_domains',
        );
      }
    } else {
      const missing = required.filter((e) => !candidate.has(e));
      if (missing.length > 0) {
        throw invalidValue(
          'network.denied_domains',
          'missing managed denied_domains entries',
          debugList(missing),
        );
      }
    }
  }
  if (c.allow_unix_sockets != null) {
    const allowed = new Set(lower(c.allow_unix_sockets));
    const invalid = s.allow_unix_sockets.filter((e) => !allowed.has(e.toLowerCase()));
    if (invalid.length > 0) {
      throw invalidValue(
        'network.allow_unix_sockets',
        debugList(invalid),
        'subset of managed allow_unix_sockets',
      );
    }
  }
}

/** Builds the config state: unix-socket paths absolute, no `*` in the denylist, every glob compiles. */
export function validateSettings(s: NetworkSettings): void {
  s.allow_unix_sockets.forEach((p, i) => {
    if (!p.startsWith('/')) {
      throw new NetworkConfigError(
        `invalid network.allow_unix_sockets[${i}]: expected an absolute path, got ${JSON.stringify(p)}`,
        'build',
      );
    }
  });
  checkNoGlobalWildcard('network.denied_domains', s.denied_domains, 'build');
  try {
    compilePatterns(s.denied_domains);
    compilePatterns(s.allowed_domains);
  } catch (e) {
    if (e instanceof GlobError) throw new NetworkConfigError(e.message, 'build');
    throw e;
  }
}
