/**
 * The `network` settings of a managed proxy (network-proxy.md §2.1): parsing every accepted config shape into
 * NetworkSettings, and their validation against managed constraints (§3.7). The request fields that carry them
 * (`managedNetwork`, `networkProxy`) are managedNetwork.ts. Errors carry the full client-facing text.
 */
import { domainToASCII } from 'node:url';
import type { z } from 'zod';
import { type NetworkConstraints, type NetworkMode, NetworkSettingsWireSchema } from '../protocol/network.js';
import { serdeMessage } from '../protocol/serde.js';
import { compilePatterns, GlobError, isGlobalWildcard } from './patterns.js';

/** A configuration error; `message` is the complete text for the -32602 answer. */
export class NetworkConfigError extends Error {
  /** The process/start member the config came from, once known (parseProcessNetwork sets it). */
  readonly field: 'managedNetwork' | 'networkProxy' | undefined;
  constructor(message: string, field?: 'managedNetwork' | 'networkProxy') {
    super(message);
    this.name = 'NetworkConfigError';
    this.field = field;
  }
}

/** What every config error's text begins with. */
export const PREFIX = 'invalid network proxy config: ';

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
  const add = (list: string[], p: string) => {
    if (!list.some((x) => x.toLowerCase() === p.toLowerCase())) list.push(p);
  };
  for (const p of legacyDeny ?? []) add(denied, p);
  for (const [p, v] of Object.entries(domains ?? {})) if (v === 'deny') add(denied, p);
  const deniedLower = new Set(denied.map((d) => d.toLowerCase()));
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
  if (!isObject(raw)) throw new NetworkConfigError(`${PREFIX}invalid type: ${typeof raw}, expected a map`);
  const inner = 'network' in raw ? raw.network : raw;
  if (inner === null || inner === undefined) return defaultSettings();
  const parsed = NetworkSettingsWireSchema.safeParse(inner);
  if (!parsed.success)
    throw new NetworkConfigError(PREFIX + zodText(parsed.error, inner, 'NetworkProxySettings'));
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
  };
}

// ---- constraint validation (§3.7) ------------------------------------------------------------------------------

const debugList = (xs: readonly string[]) => `[${xs.map((x) => JSON.stringify(x)).join(', ')}]`;
const invalidValue = (field: string, candidate: string, allowed: string) =>
  new NetworkConfigError(`${PREFIX}invalid value for ${field}: ${candidate} (allowed ${allowed})`);
const DISABLED = 'false (disabled by managed config)';
const modeName = (m: NetworkMode) => (m === 'full' ? 'Full' : 'Limited');
const modeRank = (m: NetworkMode) => (m === 'full' ? 1 : 0);

function checkNoGlobalWildcard(field: string, patterns: readonly string[]): void {
  const bad = patterns.find(isGlobalWildcard);
  if (bad !== undefined) {
    throw invalidValue(
      field,
      bad.trim(),
      'exact hosts or scoped wildcards like *.example.com or **.example.com',
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

const under = (x: string, d: string) => x.endsWith(`.${d}`);

/** Whether a managed allowlist pattern covers a candidate pattern (the "expansion absent" rule of §3.7 step 6). */
export function managedPatternAllows(managedEntry: string, candidateEntry: string): boolean {
  const m = parseForConstraints(managedEntry);
  const c = parseForConstraints(candidateEntry);
  switch (m.kind) {
    case 'exact':
      return c.kind === 'exact' && c.domain === m.domain;
    case 'sub':
      if (c.kind === 'exact') return under(c.domain, m.domain);
      if (c.kind === 'sub') return c.domain === m.domain || under(c.domain, m.domain);
      return under(c.domain, m.domain);
    case 'apex':
      return c.domain === m.domain || under(c.domain, m.domain);
  }
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
      const invalid = s.allowed_domains.filter((e) => !managed.some((m) => managedPatternAllows(m, e)));
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
        `${PREFIX}invalid network.allow_unix_sockets[${i}]: expected an absolute path, got ${JSON.stringify(p)}`,
      );
    }
  });
  checkNoGlobalWildcard('network.denied_domains', s.denied_domains);
  try {
    compilePatterns(s.denied_domains);
    compilePatterns(s.allowed_domains);
  } catch (e) {
    if (e instanceof GlobError) throw new NetworkConfigError(PREFIX + e.message);
    throw e;
  }
}
