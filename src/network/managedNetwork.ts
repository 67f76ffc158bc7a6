/**
 * The managed-network parameters of `process/start` (network-proxy.md §1, §2): the seed
 * `managedNetwork: {config, constraints, auditMetadata}`, the 0.169 `managedNetwork` sandbox fact and the 0.169
 * `networkProxy`, each into the spec of the proxy to start (or none). Errors carry the full client-facing text.
 */
import {
  type AuditMetadata,
  AuditMetadataSchema,
  type ManagedNetworkParam,
  type ManagedNetworkSandboxFact,
  type NetworkConstraints,
  NetworkConstraintsSchema,
  type NetworkProxyParam,
} from '../protocol/network.js';
import {
  defaultSettings,
  domainLists,
  isObject,
  NetworkConfigError,
  type NetworkSettings,
  parseNetworkConfig,
  validateAgainstConstraints,
  validateSettings,
  zodText,
} from './config.js';
import { symlinkedListedSockets, UNIX_SOCKETS_SUPPORTED } from './unixSocket.js';

export interface ManagedNetworkSpec {
  settings: NetworkSettings;
  constraints: NetworkConstraints;
  auditMetadata: AuditMetadata;
  /** Which request field started the proxy. */
  origin: 'managedNetwork' | 'networkProxy';
  executionId?: string;
  /** Things the dashboard should show (e.g. a setting that has no effect as configured). */
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
      `invalid type: ${typeof hardDeny}, expected a boolean at \`network.hard_deny_allowlist_misses\``,
      'shape',
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
      `invalid value: ${JSON.stringify(timeout)}, expected an integer from 1 to ${MAX_APPROVAL_TIMEOUT_MS} at \`network.approval_timeout_ms\``,
      'shape',
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
  if (!r.success) throw new NetworkConfigError(zodText(r.error, raw, 'NetworkProxyConstraints'), 'shape');
  return r.data;
}

function parseAudit(raw: unknown): AuditMetadata {
  if (raw === null || raw === undefined) return {};
  const r = AuditMetadataSchema.safeParse(raw);
  if (!r.success) throw new NetworkConfigError(zodText(r.error, raw, 'NetworkProxyAuditMetadata'), 'shape');
  return r.data;
}

function warningsFor(s: NetworkSettings): string[] {
  const w: string[] = [];
  if (s.mitm && s.mode === 'full' && s.mitm_hooks.length === 0 && !s.credential_broker)
    w.push(
      'mitm in full mode intercepts only hosts with mitm_hooks or brokered credentials: none are configured',
    );
  if (!UNIX_SOCKETS_SUPPORTED && (s.allow_unix_sockets.length > 0 || s.dangerously_allow_all_unix_sockets)) {
    w.push(`unix-socket proxying is not supported on ${process.platform}: x-unix-socket requests get 501`);
  } else {
    for (const { path, canonical } of symlinkedListedSockets(s.allow_unix_sockets))
      w.push(
        `unix socket ${path} has a symlink on the way and is never opened as written: list ${canonical}`,
      );
  }
  return w;
}

/**
 * The proxy a `process/start` `managedNetwork` asks for, from the value the method table typed (shape errors are the
 * table's): null for absent/null, the 0.169 sandbox fact `{loopbackPorts, allowLocalBinding}`, or a seed config with
 * `enabled:false` (§1, §4.1). Throws NetworkConfigError for what only the config's content can tell.
 */
export function parseManagedNetwork(mn: ManagedNetworkParam | undefined): ManagedNetworkSpec | null {
  if (!mn || !('config' in mn)) return null;
  const settings = parseNetworkConfig(mn.config);
  const constraints = parseConstraints(mn.constraints);
  const auditMetadata = parseAudit(mn.auditMetadata);
  validateAgainstConstraints(settings, constraints);
  validateSettings(settings);
  const approvals = parseApprovalSettings(mn.config, mn.constraints);
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
  mn: ManagedNetworkParam | undefined,
): ManagedNetworkSandboxFact | null {
  return mn && 'loopbackPorts' in mn ? mn : null;
}

/**
 * Maps the 0.169 `networkProxy` (§2.6), as the method table typed it, onto §2.1. `enabled:false` gives the 0.169
 * text; config errors are prefixed as usual.
 */
export function parseNetworkProxy(np: NetworkProxyParam | null | undefined): ManagedNetworkSpec | null {
  if (!np) return null;
  const p = np.proxy;
  if (!p.enabled) {
    throw new NetworkConfigError('executor-local network proxy launch requires an enabled proxy', 'shape');
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
  const auditMetadata = parseAudit(np.auditMetadata);
  return {
    settings,
    constraints: {},
    auditMetadata,
    origin: 'networkProxy',
    ...(np.executionId ? { executionId: np.executionId } : {}),
    warnings: warningsFor(settings),
  };
}

/**
 * Both typed request fields at once: `networkProxy` (0.169) or a seed `managedNetwork` starts a proxy; both together
 * is an error; the 0.169 sandbox fact alone starts nothing. Every error is a NetworkConfigError naming the field it
 * came from (`field`), so the wire code of each is chosen in one place (the launcher).
 */
export function parseProcessNetwork(params: {
  managedNetwork?: ManagedNetworkParam | undefined;
  networkProxy?: NetworkProxyParam | null | undefined;
}): ManagedNetworkSpec | null {
  const fromProxy = inField('networkProxy', () => parseNetworkProxy(params.networkProxy));
  const mn = params.managedNetwork;
  if (fromProxy && mn && 'config' in mn) {
    throw new NetworkConfigError(
      'managedNetwork.config and networkProxy cannot both be given',
      'shape',
      'managedNetwork',
    );
  }
  const fromSeed = inField('managedNetwork', () => parseManagedNetwork(mn));
  return fromProxy ?? fromSeed;
}

function inField<T>(field: 'managedNetwork' | 'networkProxy', parse: () => T): T {
  try {
    return parse();
  } catch (e) {
    if (e instanceof NetworkConfigError && e.field === undefined) throw e.inField(field);
    throw e;
  }
}
