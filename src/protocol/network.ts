/**
 * Wire shapes of the managed network proxy (network-proxy.md §2, §4.8, §4.9). Pure: no Node imports, so the panel
 * can import the record and event schemas too.
 */
import { z } from 'zod';
import { serdeMessage } from './serde.js';

export const NetworkModeSchema = z.enum(['full', 'limited']);
export type NetworkMode = z.infer<typeof NetworkModeSchema>;

const stringList = z.array(z.string()).nullish();

/** An HTTP header name (RFC 9110 token). */
const headerName = z.string().regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, 'expected an HTTP header name');
/** A string that goes into a header value: no CR, LF or NUL (no header can be smuggled through it). */
const headerText = z.string().regex(/^[^\r\n\0]*$/, 'expected no CR, LF or NUL');

/**
 * One `mitm_hooks` entry ([HEAD]'s `MitmHookConfig`, issue 34): requests to `host` inside an intercepted tunnel that
 * match (every listed method, path prefix, query value and header value lists must match; empty lists match all)
 * get their actions; a request to a hooked host that matches no hook is refused (`mitm_hook_denied`). Secrets come
 * from the server's environment or files, never from the request. Body matching is not supported (refused).
 */
export const MitmHookWireSchema = z.object({
  host: z
    .string()
    .min(1)
    .regex(/^[^\s/?#@\0-\x1f]+$/, 'expected a host name or IP literal'),
  match: z
    .object({
      methods: z.array(z.string().regex(/^[A-Za-z]{1,20}$/, 'expected an HTTP method')).nullish(),
      path_prefixes: z.array(z.string().startsWith('/')).nullish(),
      query: z.record(z.string(), z.array(z.string())).nullish(),
      headers: z.record(headerName, z.array(z.string())).nullish(),
      body: z
        .unknown()
        .refine((v) => v === undefined || v === null, { message: 'matching on the body is not supported' })
        .optional(),
    })
    .nullish(),
  actions: z
    .object({
      strip_request_headers: z.array(headerName).nullish(),
      inject_request_headers: z
        .array(
          z
            .object({
              name: headerName,
              secret_env_var: z
                .string()
                .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'expected a variable name')
                .nullish(),
              secret_file: z.string().startsWith('/', 'expected an absolute path').nullish(),
              prefix: headerText.nullish(),
            })
            .refine((h) => (h.secret_env_var == null) !== (h.secret_file == null), {
              message: 'exactly one of secret_env_var and secret_file',
            }),
        )
        .nullish(),
    })
    .nullish(),
});
export type MitmHookWire = z.infer<typeof MitmHookWireSchema>;

/** At most this many hooks in one config. */
export const MAX_MITM_HOOKS = 256;

/**
 * `NetworkProxyConfig.network` [seed] (§2.1): snake_case, unknown keys ignored, every field optional. `domains` is
 * the map form; `allowed_domains` / `denied_domains` / `allow_unix_sockets` are the legacy (pre-#15120) arrays.
 */
export const NetworkSettingsWireSchema = z.object({
  enabled: z.boolean().nullish(),
  proxy_url: z.string().nullish(),
  enable_socks5: z.boolean().nullish(),
  socks_url: z.string().nullish(),
  enable_socks5_udp: z.boolean().nullish(),
  allow_upstream_proxy: z.boolean().nullish(),
  dangerously_allow_non_loopback_proxy: z.boolean().nullish(),
  dangerously_allow_all_unix_sockets: z.boolean().nullish(),
  mode: NetworkModeSchema.nullish(),
  domains: z.record(z.string(), z.enum(['allow', 'deny', 'none'])).nullish(),
  unix_sockets: z.record(z.string(), z.enum(['allow', 'deny', 'none'])).nullish(),
  allow_local_binding: z.boolean().nullish(),
  mitm: z.boolean().nullish(),
  /** [HEAD]: hooks on intercepted requests (issue 34, item 5). */
  mitm_hooks: z.array(MitmHookWireSchema).max(MAX_MITM_HOOKS).nullish(),
  /** [HEAD]: the credential broker (issue 34, item 6): brokered tokens in the child's env become dummies. */
  credential_broker: z.boolean().nullish(),
  /** [HEAD]: let the broker inject into plain-HTTP requests to non-loopback targets too. */
  dangerously_allow_plaintext_credential_injection: z.boolean().nullish(),
  allowed_domains: stringList,
  denied_domains: stringList,
  allow_unix_sockets: stringList,
});
export type NetworkSettingsWire = z.infer<typeof NetworkSettingsWireSchema>;

/** Converts `camelCase` keys to `snake_case` (constraints and audit metadata accept both spellings, §0). */
export function snakeKeys(value: unknown): unknown {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    const snake = k.replace(/[A-Z]/g, (m) => `_${m.toLowerCase()}`);
    if (!(snake in out) || k === snake) out[snake] = v;
  }
  return out;
}

/** `NetworkProxyConstraints` (§2.3): every field optional; null means unconstrained. */
export const NetworkConstraintsSchema = z.preprocess(
  snakeKeys,
  z.object({
    enabled: z.boolean().nullish(),
    mode: NetworkModeSchema.nullish(),
    allow_upstream_proxy: z.boolean().nullish(),
    dangerously_allow_non_loopback_proxy: z.boolean().nullish(),
    dangerously_allow_all_unix_sockets: z.boolean().nullish(),
    allowed_domains: stringList,
    allowlist_expansion_enabled: z.boolean().nullish(),
    denied_domains: stringList,
    denylist_expansion_enabled: z.boolean().nullish(),
    allow_unix_sockets: stringList,
    allow_local_binding: z.boolean().nullish(),
  }),
);
export type NetworkConstraints = z.infer<typeof NetworkConstraintsSchema>;

/** `NetworkProxyAuditMetadata` (§2.4), normalised to the seed's snake_case names. */
export const AuditMetadataSchema = z.preprocess(
  snakeKeys,
  z.object({
    conversation_id: z.string().nullish(),
    app_version: z.string().nullish(),
    user_account_id: z.string().nullish(),
    auth_mode: z.string().nullish(),
    originator: z.string().nullish(),
    user_email: z.string().nullish(),
    terminal_type: z.string().nullish(),
    model: z.string().nullish(),
    slug: z.string().nullish(),
  }),
);
export type AuditMetadata = z.infer<typeof AuditMetadataSchema>;

/** The seed's `managedNetwork: {config, constraints, auditMetadata}` (config validated in src/network). */
export const ManagedNetworkSeedSchema = z.object({
  config: z.unknown(),
  constraints: z.unknown().optional(),
  auditMetadata: z.unknown().optional(),
});

/** 0.145+/0.169 `managedNetwork: {loopbackPorts, allowLocalBinding}`: a sandbox fact that starts nothing. */
export const ManagedNetworkSandboxFactSchema = z.object({
  loopbackPorts: z.array(z.number().int().min(0).max(65535)),
  allowLocalBinding: z.boolean(),
});
export type ManagedNetworkSandboxFact = z.infer<typeof ManagedNetworkSandboxFactSchema>;

/** `process/start` `managedNetwork`: the seed shape (has `config`) or the 0.169 sandbox fact (has `loopbackPorts`). */
export const ManagedNetworkParamSchema = z
  .union([ManagedNetworkSeedSchema, ManagedNetworkSandboxFactSchema])
  .nullish();
export type ManagedNetworkParam = z.infer<typeof ManagedNetworkParamSchema>;

const isMap = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * A present `managedNetwork`, its shape picked by key: `config` → the seed's; `loopbackPorts` (without `config`) →
 * the 0.169 sandbox fact; anything else is refused with the managed-network parser's own text.
 */
function checkManagedNetwork(
  raw: unknown,
): { ok: true; value: NonNullable<ManagedNetworkParam> } | { ok: false; message: string } {
  if (!isMap(raw))
    return {
      ok: false,
      message: `invalid type: ${Array.isArray(raw) ? 'sequence' : typeof raw}, expected a map`,
    };
  if ('config' in raw) return { ok: true, value: ManagedNetworkSeedSchema.parse(raw) };
  if (!('loopbackPorts' in raw)) return { ok: false, message: 'missing field `config`' };
  const fact = ManagedNetworkSandboxFactSchema.safeParse(raw);
  if (fact.success) return { ok: true, value: fact.data };
  return { ok: false, message: serdeMessage(fact.error, raw, 'ManagedNetworkSandboxContext') };
}

/** The `managedNetwork` member of process/start as the method table reads it (a zod transform); absent or null → null. */
export function toManagedNetworkParam(raw: unknown, ctx: z.RefinementCtx): ManagedNetworkParam {
  if (raw === undefined || raw === null) return null;
  const r = checkManagedNetwork(raw);
  if (r.ok) return r.value;
  ctx.addIssue({ code: 'custom', message: r.message });
  return z.NEVER;
}

/** The -32602 text of a bad `managedNetwork` member (the table's field error map). */
export function managedNetworkParamMessage(raw: unknown): string {
  const r = checkManagedNetwork(raw);
  return r.ok ? 'invalid managedNetwork' : r.message;
}

/** 0.169 `networkProxy.proxy` (§2.6): every boolean required; the client sends no URLs. */
export const RemoteProxyConfigSchema = z.object({
  enabled: z.boolean(),
  enableSocks5: z.boolean(),
  enableSocks5Udp: z.boolean(),
  allowUpstreamProxy: z.boolean(),
  dangerouslyAllowAllUnixSockets: z.boolean(),
  mode: NetworkModeSchema.nullish(),
  domains: z.record(z.string(), z.enum(['allow', 'deny', 'none'])).nullish(),
  unixSockets: z.record(z.string(), z.enum(['allow', 'deny', 'none'])).nullish(),
  allowLocalBinding: z.boolean(),
  requestPolicyDecisions: z.boolean().nullish(),
});

/** 0.169 `process/start` `networkProxy` (`RemoteNetworkProxyLaunchConfig`, #33906). */
export const NetworkProxyParamSchema = z.object({
  proxy: RemoteProxyConfigSchema,
  auditMetadata: z.unknown().optional(),
  environmentId: z.string().nullish(),
  executionId: z.string().nullish(),
});
export type NetworkProxyParam = z.infer<typeof NetworkProxyParamSchema>;

/**
 * The -32602 text of a bad `networkProxy` member (the table's field error map): a missing member is named alone
 * (``missing field `enableSocks5` ``), anything else in serde's dialect under RemoteNetworkProxyLaunchConfig.
 */
export function networkProxyParamMessage(raw: unknown): string {
  const r = NetworkProxyParamSchema.safeParse(raw);
  if (r.success) return 'invalid networkProxy';
  const issue = r.error.issues[0];
  const path = (issue?.path ?? []).filter((p) => typeof p !== 'symbol') as (string | number)[];
  let v: unknown = raw;
  for (const k of path) v = isMap(v) ? v[k] : undefined;
  if (issue?.code === 'invalid_type' && v === undefined && path.length > 0)
    return `missing field \`${String(path[path.length - 1])}\``;
  return serdeMessage(r.error, raw, 'RemoteNetworkProxyLaunchConfig');
}

// ---- events ----------------------------------------------------------------------------------------------------

export const BlockReasonSchema = z.string();

/** §4.8 `BlockedRequest`, serialised in this key order (decision/source/port omitted when absent). */
export const BlockedRequestSchema = z.object({
  host: z.string(),
  reason: z.string(),
  client: z.string().nullable(),
  method: z.string().nullable(),
  mode: NetworkModeSchema.nullable(),
  protocol: z.enum(['http', 'http-connect', 'socks5', 'socks5-udp', 'https']),
  decision: z.enum(['deny', 'ask']).optional(),
  source: z.enum(['baseline_policy', 'mode_guard', 'proxy_state', 'decider']).optional(),
  port: z.number().int().optional(),
  timestamp: z.number().int(),
});
export type BlockedRequest = z.infer<typeof BlockedRequestSchema>;

export const BlockedSnapshotSchema = z.object({
  events: z.array(BlockedRequestSchema),
  blocked_total: z.number().int(),
});
export type BlockedSnapshot = z.infer<typeof BlockedSnapshotSchema>;

/** A blocked record as published on the event bus: tagged with the process (and session) it belongs to. */
export const BlockedEventSchema = z.object({
  processId: z.string(),
  sessionId: z.string().optional(),
  record: BlockedRequestSchema,
  blocked_total: z.number().int(),
});
export type BlockedEvent = z.infer<typeof BlockedEventSchema>;

/**
 * §4.9 `codex.network_proxy.policy_decision`, emitted for every decision (allowed ones included), with Codex's
 * dotted field names. Audit metadata fields appear only when set. No URL or query is ever included; an intercepted
 * request (protocol `https`) carries its path.
 */
export const NetworkAuditEventSchema = z.object({
  processId: z.string(),
  sessionId: z.string().optional(),
  'event.name': z.literal('codex.network_proxy.policy_decision'),
  'event.timestamp': z.string(),
  'conversation.id': z.string().optional(),
  'app.version': z.string().optional(),
  'user.account_id': z.string().optional(),
  'user.email': z.string().optional(),
  auth_mode: z.string().optional(),
  originator: z.string().optional(),
  'terminal.type': z.string().optional(),
  model: z.string().optional(),
  slug: z.string().optional(),
  'network.policy.scope': z.enum(['domain', 'non_domain']),
  'network.policy.decision': z.enum(['allow', 'deny', 'ask']),
  'network.policy.source': z.enum(['baseline_policy', 'mode_guard', 'proxy_state', 'decider']),
  'network.policy.reason': z.string(),
  /** `https`: a request inside a tunnel the proxy intercepted (TLS terminated, issue 34). */
  'network.transport.protocol': z.enum(['http', 'https_connect', 'socks5_tcp', 'socks5_udp', 'https']),
  'server.address': z.string(),
  'server.port': z.number().int(),
  'http.request.method': z.string(),
  'client.address': z.string(),
  'network.policy.override': z.boolean(),
  /**
   * What decided the request (issue 37, item 2): the rule's id in its origin (`allow:<pattern>`, `deny:<pattern>`,
   * a project rule's or remembered decision's id, `not_allowed_local`, `method_not_allowed`, …).
   */
  'network.policy.rule_id': z.string().optional(),
  /** Where that rule lives. */
  'network.policy.rule_origin': z
    .enum([
      'config',
      'local_guard',
      'limited_mode',
      'default',
      'repository',
      'project',
      'session',
      'panel',
      'harness',
      'timeout',
      'learning',
      'broker',
    ])
    .optional(),
  /** The approval prompt's id when a prompt was involved: its approval audit rows carry the same id. */
  'correlation.id': z.string().optional(),
  /** An intercepted request's path, without its query (the query may carry secrets). */
  'url.path': z.string().optional(),
  /** Present (true) on the events of requests inside an intercepted tunnel. */
  'network.intercepted': z.literal(true).optional(),
  /** The name (never the value) of the credential the broker or a hook injected into this request. */
  'network.credential.injected': z.string().optional(),
  /**
   * Present (true) when the command made a plain TCP connect that the connect supervisor turned into this SOCKS5
   * request for it (`--linux-sandbox-transparent-tcp`, issue 35): the program ignored the proxy variables.
   */
  'network.transport.transparent': z.literal(true).optional(),
});
export type NetworkAuditEvent = z.infer<typeof NetworkAuditEventSchema>;

/** The audit metadata fields an audit event may carry (from the request's `auditMetadata`). */
export const AUDIT_METADATA_FIELDS = [
  'conversation.id',
  'app.version',
  'user.account_id',
  'user.email',
  'auth_mode',
  'originator',
  'terminal.type',
  'model',
  'slug',
] as const;

/** The audit metadata an event carries, as an object of the fields that are set. */
export function auditMetadataOf(e: NetworkAuditEvent): Record<string, unknown> {
  const metadata: Record<string, unknown> = {};
  for (const k of AUDIT_METADATA_FIELDS) if (e[k] !== undefined) metadata[k] = e[k];
  return metadata;
}
