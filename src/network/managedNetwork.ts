/**
 * The managed-network parameters of `process/start` (network-proxy.md §1, §2): the seed
 * `managedNetwork: {config, constraints, auditMetadata}`, the 0.169 `managedNetwork` sandbox fact and the 0.169
 * `networkProxy`, each into the spec of the proxy to start (or none). Errors carry the full client-facing text.
 */
import {
  type AuditMetadata,
  AuditMetadataSchema,
  ManagedNetworkSandboxFactSchema,
  type NetworkConstraints,
  NetworkConstraintsSchema,
  NetworkProxyParamSchema,
} from '../protocol/network.js';
import {
  defaultSettings,
  domainLists,
  isObject,
  NetworkConfigError,
  type NetworkSettings,
  PREFIX,
  parseNetworkConfig,
  validateAgainstConstraints,
  validateSettings,
  zodText,
} from './config.js';

export interface ManagedNetworkSpec {
  settings: NetworkSettings;
  constraints: NetworkConstraints;
  auditMetadata: AuditMetadata;
  /** Which request field started the proxy. */
  origin: 'managedNetwork' | 'networkProxy';
  executionId?: string;
  /** Things the dashboard should show (e.g. `mitm` accepted but not implemented). */
  warnings: string[];
  /** Set when the config asks for interactive approvals of allowlist misses (see `parseApprovalSettings`). */
  approvals?: ApprovalSettings;
}

/** Interactive approvals of hosts neither allowed nor denied (issue 7); `timeoutMs` null = the server's default. */
export interface ApprovalSettings {
  timeoutMs: number | null;
}

/** The longest prompt timeout a config may ask for (10 minutes). */
export const MAX_APPROVAL_TIMEOUT_MS = 600_000;

/**
 * Whether a seed `managedNetwork` asks for approvals. Codex's `NetworkProxySpec.hard_deny_allowlist_misses` (set
 * from the managed requirement `managed_allowed_domains_only`) decides whether allowlist misses are hard-denied or
 * go to the approval decider; Codex's exec-server has no approval callbacks, so a miss is always final there. Ours:
 * - `config.network.hard_deny_allowlist_misses: false` (also flat, or camelCase `hardDenyAllowlistMisses`) asks
 *   for approvals; absent or `true` keeps the seed behaviour (misses are final `not_allowed`);
 * - `constraints.managed_allowed_domains_only: true` (or `managedAllowedDomainsOnly`) forces hard deny, as in Codex;
 * - `config.network.approval_timeout_ms` (or `approvalTimeoutMs`): the prompt timeout, 1..600000 ms.
 */
export function parseApprovalSettings(config: unknown, constraints: unknown): ApprovalSettings | undefined {
  if (!isObject(config)) return undefined;
  const inner = 'network' in config ? config.network : config;
  if (!isObject(inner)) return undefined;
  const pick = (snake: string, camel: string) => (snake in inner ? inner[snake] : inner[camel]);
  const hardDeny = pick('hard_deny_allowlist_misses', 'hardDenyAllowlistMisses');
  if (hardDeny !== undefined && hardDeny !== null && typeof hardDeny !== 'boolean') {
    throw new NetworkConfigError(
      `${PREFIX}invalid type: ${typeof hardDeny}, expected a boolean at \`network.hard_deny_allowlist_misses\``,
    );
  }
  const timeout = pick('approval_timeout_ms', 'approvalTimeoutMs');
  if (
    timeout !== undefined &&
    timeout !== null &&
    (typeof timeout !== 'number' ||
      !Number.isInteger(timeout) ||
      timeout < 1 ||
      timeout > MAX_APPROVAL_TIMEOUT_MS)
  ) {
    throw new NetworkConfigError(
      `${PREFIX}invalid value: ${JSON.stringify(timeout)}, expected an integer from 1 to ${MAX_APPROVAL_TIMEOUT_MS} at \`network.approval_timeout_ms\``,
    );
  }
  const c = isObject(constraints) ? constraints : {};
  const managedOnly = c.managed_allowed_domains_only ?? c.managedAllowedDomainsOnly;
  if (hardDeny !== false || managedOnly === true) return undefined;
  return { timeoutMs: typeof timeout === 'number' ? timeout : null };
}

function parseConstraints(raw: unknown): NetworkConstraints {
  if (raw === null || raw === undefined) return {};
  const r = NetworkConstraintsSchema.safeParse(raw);
  if (!r.success) throw new NetworkConfigError(PREFIX + zodText(r.error, raw, 'NetworkProxyConstraints'));
  return r.data;
}

function parseAudit(raw: unknown): AuditMetadata {
  if (raw === null || raw === undefined) return {};
  const r = AuditMetadataSchema.safeParse(raw);
  if (!r.success) throw new NetworkConfigError(PREFIX + zodText(r.error, raw, 'NetworkProxyAuditMetadata'));
  return r.data;
}

function warningsFor(s: NetworkSettings): string[] {
  const w: string[] = [];
  if (s.mitm) w.push('mitm is not supported: limited-mode HTTPS is blocked with mitm_required');
  if (s.allow_unix_sockets.length > 0 || s.dangerously_allow_all_unix_sockets) {
    w.push('unix-socket proxying is macOS-only: x-unix-socket requests get 501 on Linux');
  }
  return w;
}

/**
 * Parses `process/start` `managedNetwork`. Returns the proxy to start, or null for no proxy: absent/null, the 0.169
 * sandbox fact `{loopbackPorts, allowLocalBinding}`, or a seed config with `enabled:false` (§1, §4.1).
 * Throws NetworkConfigError with the full -32602 text.
 */
export function parseManagedNetwork(raw: unknown): ManagedNetworkSpec | null {
  if (raw === null || raw === undefined) return null;
  if (!isObject(raw)) {
    throw new NetworkConfigError(
      `invalid type: ${Array.isArray(raw) ? 'sequence' : typeof raw}, expected a map`,
    );
  }
  if (!('config' in raw) && 'loopbackPorts' in raw) {
    const fact = ManagedNetworkSandboxFactSchema.safeParse(raw);
    if (!fact.success) throw new NetworkConfigError(zodText(fact.error, raw, 'ManagedNetworkSandboxContext'));
    return null;
  }
  if (!('config' in raw)) throw new NetworkConfigError('missing field `config`');
  const settings = parseNetworkConfig(raw.config);
  const constraints = parseConstraints(raw.constraints);
  const auditMetadata = parseAudit(raw.auditMetadata);
  validateAgainstConstraints(settings, constraints);
  validateSettings(settings);
  const approvals = parseApprovalSettings(raw.config, raw.constraints);
  if (!settings.enabled) return null;
  return {
    settings,
    constraints,
    auditMetadata,
    origin: 'managedNetwork',
    warnings: warningsFor(settings),
    ...(approvals ? { approvals } : {}),
  };
}

/** The 0.169 sandbox fact of `managedNetwork`, if that is what was sent (for the sandbox's ProxyRouted mode). */
export function managedNetworkSandboxFact(
  raw: unknown,
): { loopbackPorts: number[]; allowLocalBinding: boolean } | null {
  if (!isObject(raw) || 'config' in raw) return null;
  const fact = ManagedNetworkSandboxFactSchema.safeParse(raw);
  return fact.success ? fact.data : null;
}

/**
 * Parses the 0.169 `networkProxy` (§2.6) and maps it onto §2.1. Missing booleans give serde's
 * ``missing field `enableSocks5` ``; `enabled:false` gives the 0.169 text; config errors are prefixed as usual.
 */
export function parseNetworkProxy(raw: unknown): ManagedNetworkSpec | null {
  if (raw === null || raw === undefined) return null;
  const r = NetworkProxyParamSchema.safeParse(raw);
  if (!r.success) {
    const issue = r.error.issues[0];
    const path = (issue?.path ?? []).filter((p) => typeof p !== 'symbol') as (string | number)[];
    let v: unknown = raw;
    for (const k of path) v = isObject(v) ? v[k as string] : undefined;
    if (issue?.code === 'invalid_type' && v === undefined && path.length > 0) {
      throw new NetworkConfigError(`missing field \`${String(path[path.length - 1])}\``);
    }
    throw new NetworkConfigError(zodText(r.error, raw, 'RemoteNetworkProxyLaunchConfig'));
  }
  const p = r.data.proxy;
  if (!p.enabled) {
    throw new NetworkConfigError(`${PREFIX}executor-local network proxy launch requires an enabled proxy`);
  }
  const { allowed, denied } = domainLists(p.domains, null, null);
  const settings: NetworkSettings = {
    ...defaultSettings(),
    enabled: true,
    enable_socks5: p.enableSocks5,
    enable_socks5_udp: p.enableSocks5Udp,
    allow_upstream_proxy: p.allowUpstreamProxy,
    dangerously_allow_all_unix_sockets: p.dangerouslyAllowAllUnixSockets,
    mode: p.mode ?? 'full',
    allowed_domains: allowed,
    denied_domains: denied,
    allow_unix_sockets: Object.entries(p.unixSockets ?? {})
      .filter(([, v]) => v === 'allow')
      .map(([k]) => k),
    allow_local_binding: p.allowLocalBinding,
  };
  validateSettings(settings);
  const auditMetadata = parseAudit(r.data.auditMetadata);
  return {
    settings,
    constraints: {},
    auditMetadata,
    origin: 'networkProxy',
    ...(r.data.executionId ? { executionId: r.data.executionId } : {}),
    warnings: warningsFor(settings),
  };
}

/**
 * Both request fields at once: `networkProxy` (0.169) or a seed `managedNetwork` starts a proxy; both together is
 * an error; the 0.169 sandbox fact alone starts nothing.
 */
export function parseProcessNetwork(params: {
  managedNetwork?: unknown;
  networkProxy?: unknown;
}): ManagedNetworkSpec | null {
  const fromProxy = parseNetworkProxy(params.networkProxy);
  const mn = params.managedNetwork;
  if (fromProxy && isObject(mn) && 'config' in mn) {
    throw new NetworkConfigError(`${PREFIX}managedNetwork.config and networkProxy cannot both be given`);
  }
  const fromSeed = parseManagedNetwork(mn);
  return fromProxy ?? fromSeed;
}
