/**
 * The panel's policy debugger: `policy/preview` validates a sandbox (and managed-network) config the way
 * `process/start` would and previews the launch; `policy/checkUrl` decides a target under a network config with the
 * proxy's own target reader and admission rule (src/network/target.ts, admission.ts), so what it says is what the
 * proxy would do. Panel methods: the method table lets only panel connections call them.
 */
import { admit } from '../../network/admission.js';
import { NetworkConfigError, parseNetworkConfig } from '../../network/config.js';
import { blockMessage } from '../../network/events.js';
import { parseManagedNetwork } from '../../network/managedNetwork.js';
import { PolicyEngine, type Resolver } from '../../network/policy.js';
import { readTargetText } from '../../network/target.js';
import {
  type CheckUrlParams,
  type CheckUrlResult,
  type FieldError,
  fieldErrors,
  type PolicyPreviewParams,
  type PolicyPreviewResult,
  redact,
} from '../../protocol/monitor.js';
import { ManagedNetworkSeedSchema, NetworkSettingsWireSchema } from '../../protocol/network.js';
import { type ParsedSandbox, parseSandboxParam } from '../../protocol/sandbox.js';
import type { MethodRegistry } from '../core/dispatch.js';

/** What the sandbox engine answers for a preview (src/sandbox `previewLaunch`). */
export type PreviewFn = (req: {
  sandbox: ParsedSandbox | null | undefined;
  argv: string[];
  cwd: string;
  managedNetwork?: unknown;
}) => Promise<Partial<PolicyPreviewResult>> | Partial<PolicyPreviewResult>;

export interface PolicyDebuggerOptions {
  /** The sandbox engine's preview (bwrap argv / Seatbelt profile). Without it, previews validate only. */
  preview?: PreviewFn | undefined;
  /** Resolver for policy/checkUrl (names that the policy would resolve). Default: the proxy's own (getaddrinfo). */
  resolver?: Resolver | undefined;
}

/** Serves `policy/preview` and `policy/checkUrl`. */
export function registerPolicyDebugger(registry: MethodRegistry, opts: PolicyDebuggerOptions): void {
  registry.handle('policy/preview', (p) => preview(opts, p));
  registry.handle('policy/checkUrl', (p) => checkUrl(opts, p));
}

async function preview(opts: PolicyDebuggerOptions, p: PolicyPreviewParams): Promise<PolicyPreviewResult> {
  const empty: PolicyPreviewResult = {
    valid: false,
    errors: [],
    shape: null,
    sandboxType: null,
    summary: null,
    argv: null,
    seatbeltProfile: null,
    note: null,
  };
  if (p.sandbox === null || p.sandbox === undefined) {
    return {
      ...empty,
      valid: true,
      shape: 'none',
      sandboxType: 'none',
      note: 'no sandbox: the command runs as is',
    };
  }
  const parsed = parseSandboxParam(p.sandbox);
  const shape =
    typeof p.sandbox === 'object' &&
    'permissions' in (p.sandbox as object) &&
    !('sandbox' in (p.sandbox as object))
      ? 'context'
      : 'seed';
  if (!parsed.success) return { ...empty, shape, errors: fieldErrors(parsed.error, 'sandbox') };
  const errors: FieldError[] = [];
  if (p.managedNetwork !== undefined && p.managedNetwork !== null) {
    errors.push(...networkErrors(p.managedNetwork, 'managedNetwork'));
    if (errors.length > 0) return { ...empty, shape, errors };
  }
  if (!opts.preview) {
    return {
      ...empty,
      valid: true,
      shape,
      note: 'valid; the sandbox engine is not wired into this server, so no launch preview is available',
    };
  }
  const cwd = p.cwd ?? '/';
  const argv = p.argv && p.argv.length > 0 ? p.argv : ['/bin/sh', '-c', 'true'];
  try {
    const r = await opts.preview({
      sandbox: parsed.data,
      argv,
      cwd,
      managedNetwork: p.managedNetwork,
    });
    return {
      ...empty,
      valid: true,
      shape,
      ...r,
      summary: r.summary ? (redact(r.summary) as Record<string, unknown>) : null,
      errors: r.errors ?? [],
    };
  } catch (e) {
    return { ...empty, shape, errors: [{ path: 'sandbox', message: (e as Error).message }] };
  }
}

/** Field errors of a managedNetwork (or bare config) object; [] when it is valid. */
function networkErrors(raw: unknown, prefix: string): FieldError[] {
  const obj = raw as Record<string, unknown> | null;
  const isObj = obj !== null && typeof obj === 'object' && !Array.isArray(obj);
  const managed = isObj && 'config' in obj;
  const cfg = (managed ? obj.config : raw) as Record<string, unknown> | null;
  const base = managed ? `${prefix}.config` : prefix;
  const wrapped = cfg !== null && typeof cfg === 'object' && 'network' in cfg;
  const inner = wrapped ? cfg.network : cfg;
  if (inner !== null && inner !== undefined) {
    const r = NetworkSettingsWireSchema.safeParse(inner);
    if (!r.success) return fieldErrors(r.error, wrapped ? `${base}.network` : base);
  }
  try {
    if (managed) parseManagedNetwork(ManagedNetworkSeedSchema.parse(raw));
    else parseNetworkConfig(raw);
  } catch (e) {
    if (e instanceof NetworkConfigError) return [{ path: prefix, message: e.message }];
    throw e;
  }
  return [];
}

async function checkUrl(opts: PolicyDebuggerOptions, p: CheckUrlParams): Promise<CheckUrlResult> {
  const base: CheckUrlResult = {
    valid: false,
    errors: [],
    host: null,
    port: null,
    decision: null,
    reason: null,
    source: null,
    message: null,
    mode: null,
    warnings: [],
  };
  const errors = networkErrors(p.config, 'config');
  if (errors.length > 0) return { ...base, errors };
  const raw = p.config as Record<string, unknown> | null;
  const managed = raw && typeof raw === 'object' && 'config' in raw ? raw : { config: p.config };
  const settings = parseNetworkConfig(managed.config);
  const warnings = settings.enabled
    ? (parseManagedNetwork(ManagedNetworkSeedSchema.parse(managed))?.warnings ?? [])
    : [];
  const target = readTargetText(p.target);
  if (!target.ok) {
    const what = target.error === 'invalid host' ? 'invalid host' : 'not a URL or host:port';
    return { ...base, errors: [{ path: 'target', message: `${what}: ${p.target}` }] };
  }
  const method = (p.method ?? (target.scheme === 'https' ? 'CONNECT' : 'GET')).toUpperCase();
  const result = {
    ...base,
    valid: true,
    host: target.host,
    port: target.port,
    mode: settings.mode,
    warnings,
  };
  if (!settings.enabled) {
    return {
      ...result,
      decision: null,
      reason: 'proxy_disabled',
      source: 'proxy_state',
      message: 'network.enabled is false: no proxy is started and the process gets no proxy environment',
    };
  }
  const engine = new PolicyEngine(settings, opts.resolver ? { resolver: opts.resolver } : {});
  const a = await admit(engine, {
    protocol: method === 'CONNECT' ? 'https_connect' : 'http',
    host: target.host,
    port: target.port,
    method,
    client: null,
  });
  if (!a.allowed) {
    return {
      ...result,
      decision: a.decision,
      reason: a.reason,
      source: a.source,
      message: blockMessage(a.reason),
    };
  }
  return { ...result, decision: 'allow', reason: 'allow', source: a.source, message: null };
}

/** `https://h/p`, `http://h:8080/…`, `h:443`, `[::1]:80`, or a bare host (port 80), as checkUrl reads it. */
export function parseTarget(text: string): { scheme: string; host: string; port: number } | null {
  const t = readTargetText(text);
  return t.ok ? { scheme: t.scheme, host: t.host, port: t.port } : null;
}
