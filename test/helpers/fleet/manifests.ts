/**
 * The Kubernetes manifests of deploy/kubernetes/ checked the way a cluster would check them, without a cluster:
 *
 * - `CrdSchemas` compiles the OpenAPI v3 schemas inside agent-sandbox's CRD YAML (vendored in
 *   test/fixtures/agent-sandbox, or $CORRAL_AGENT_SANDBOX_CRDS) into JSON Schema validators, with the API
 *   server's rules on top: unknown fields are errors (strict field validation; structural schemas without
 *   x-kubernetes-preserve-unknown-fields), list-type map/set items are unique, and metadata is an ObjectMeta.
 * - `corralDeploymentProblems` checks what the schemas cannot: that the template, the warm pool and the claim fit
 *   together and fit Corral (the port, probes, token file, no claim env).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { parseAllDocuments } from 'yaml';

export const REPO = join(import.meta.dirname, '..', '..', '..');
export const MANIFEST_DIR = join(REPO, 'deploy', 'kubernetes');

type Json = Record<string, unknown>;

/** The agent-sandbox CRDs vendored with the tests (their source and version: the README beside them). */
export const VENDORED_CRD_DIR = join(REPO, 'test', 'fixtures', 'agent-sandbox');

/** Where the agent-sandbox CRDs are read from: $CORRAL_AGENT_SANDBOX_CRDS (to try another release), else the vendored copy. */
export function crdDirectory(): string {
  return process.env.CORRAL_AGENT_SANDBOX_CRDS || VENDORED_CRD_DIR;
}

/** Every document of a YAML file, parsed as Kubernetes does (YAML 1.1: `0440` is octal). Throws on syntax errors. */
export function readYamlDocuments(file: string): Json[] {
  const docs = parseAllDocuments(readFileSync(file, 'utf8'), { version: '1.1' });
  const list = Array.isArray(docs) ? docs : [docs];
  const out: Json[] = [];
  for (const d of list) {
    if (d.errors.length > 0) throw new Error(`${file}: ${d.errors.map((e) => e.message).join('; ')}`);
    const v = d.toJS() as Json | null;
    if (v !== null) out.push(v);
  }
  return out;
}

/** The manifests of deploy/kubernetes/, with the file each came from. */
export function readManifests(dir = MANIFEST_DIR): { file: string; doc: Json }[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .flatMap((f) => readYamlDocuments(join(dir, f)).map((doc) => ({ file: f, doc })));
}

const DNS_SUBDOMAIN = '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$';
const DNS_LABEL = '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$';
const STRING_MAP = { type: 'object', additionalProperties: { type: 'string' } };

/** The part of ObjectMeta a manifest may set (the rest is the API server's to fill in). */
const OBJECT_META = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 253, pattern: DNS_SUBDOMAIN },
    generateName: { type: 'string' },
    namespace: { type: 'string', maxLength: 63, pattern: DNS_LABEL },
    labels: STRING_MAP,
    annotations: STRING_MAP,
  },
  additionalProperties: false,
};

const K8S_ANNOTATIONS = [
  'x-kubernetes-int-or-string',
  'x-kubernetes-map-type',
  'x-kubernetes-list-map-keys',
  'x-kubernetes-preserve-unknown-fields',
  'x-kubernetes-embedded-resource',
  // CEL rules; the only one in these CRDs compares with oldSelf (updates), which a create never meets.
  'x-kubernetes-validations',
];

/** The CRD schema made strict like the API server: unknown fields are errors wherever the schema lists fields. */
function strict(schema: Json): Json {
  const s: Json = { ...schema };
  if (s.properties) {
    const props: Json = {};
    for (const [k, v] of Object.entries(s.properties as Json)) props[k] = strict(v as Json);
    s.properties = props;
    if (s.additionalProperties === undefined && !s['x-kubernetes-preserve-unknown-fields']) {
      s.additionalProperties = false;
    }
  }
  if (typeof s.additionalProperties === 'object')
    s.additionalProperties = strict(s.additionalProperties as Json);
  if (s.items) s.items = strict(s.items as Json);
  for (const k of ['anyOf', 'allOf', 'oneOf'] as const) {
    if (Array.isArray(s[k])) s[k] = (s[k] as Json[]).map(strict);
  }
  return s;
}

function keyOf(item: unknown, keys: string[]): string {
  const o = (item ?? {}) as Json;
  return JSON.stringify(keys.map((k) => o[k] ?? null));
}

export class CrdSchemas {
  private readonly validators = new Map<string, ValidateFunction>();

  /** Compiles every served version of every CRD in `dir`. */
  static load(dir: string): CrdSchemas {
    const ajv = new Ajv({ allErrors: true, strict: true, strictTypes: false, allowUnionTypes: true });
    (addFormatsModule as unknown as (a: Ajv) => void)(ajv);
    ajv.addVocabulary(K8S_ANNOTATIONS);
    ajv.addKeyword({
      keyword: 'x-kubernetes-list-type',
      type: 'array',
      schemaType: 'string',
      // `map` items are unique by their x-kubernetes-list-map-keys, `set` items by value; `atomic` is any list.
      compile: (kind: string, parent: Json) => {
        if (kind === 'atomic') return () => true;
        const keys = (parent['x-kubernetes-list-map-keys'] as string[] | undefined) ?? [];
        return (list: unknown[]) => {
          const seen = list.map((x) => (kind === 'map' ? keyOf(x, keys) : JSON.stringify(x)));
          return new Set(seen).size === seen.length;
        };
      },
      error: { message: 'has duplicate items (x-kubernetes-list-type)' },
    });
    const schemas = new CrdSchemas();
    for (const f of readdirSync(dir).filter((n) => n.endsWith('.yaml'))) {
      for (const crd of readYamlDocuments(join(dir, f))) {
        if (crd.kind !== 'CustomResourceDefinition') continue;
        const spec = crd.spec as { group: string; names: { kind: string }; versions: Json[] };
        for (const v of spec.versions) {
          if (!v.served) continue;
          const open = (v.schema as { openAPIV3Schema: Json }).openAPIV3Schema;
          const root = strict(open);
          const props = root.properties as Json;
          props.apiVersion = { const: `${spec.group}/${v.name as string}` };
          props.kind = { const: spec.names.kind };
          props.metadata = OBJECT_META;
          root.required = [
            ...new Set(['apiVersion', 'kind', 'metadata', ...((root.required as string[]) ?? [])]),
          ];
          schemas.validators.set(`${spec.group}/${v.name as string} ${spec.names.kind}`, ajv.compile(root));
        }
      }
    }
    return schemas;
  }

  kinds(): string[] {
    return [...this.validators.keys()];
  }

  /** What the API server would refuse in `doc` ("/spec/…: message"); empty when it is valid. */
  validate(doc: Json): string[] {
    const v = this.validators.get(`${doc.apiVersion} ${doc.kind}`);
    if (!v) return [`no CRD serves ${doc.apiVersion} ${doc.kind}`];
    if (v(doc)) return [];
    return (v.errors ?? []).map((e: ErrorObject) => {
      const at = e.instancePath || '/';
      if (e.keyword === 'additionalProperties')
        return `${at}: unknown field "${e.params.additionalProperty}"`;
      return `${at}: ${e.message}`;
    });
  }
}

/** Corral's container in a SandboxTemplate. */
export function corralContainer(template: Json): Json {
  const spec = (template.spec as Json).podTemplate as Json;
  const containers = (spec.spec as Json).containers as Json[];
  const c = containers.find((x) => x.name === 'corral');
  if (!c) throw new Error('the SandboxTemplate has no container named corral');
  return c;
}

function flagValue(args: string[], flag: string): string | undefined {
  const i = args.indexOf(flag);
  return i >= 0 ? args[i + 1] : undefined;
}

/**
 * What the schemas cannot see: the three manifests fit together, and fit Corral and the router. Returns the problems
 * (empty when fine).
 */
export function corralDeploymentProblems(docs: Json[]): string[] {
  const problems: string[] = [];
  const byKind = (k: string) => docs.filter((d) => d.kind === k);
  const [template] = byKind('SandboxTemplate');
  const [pool] = byKind('SandboxWarmPool');
  const claims = byKind('SandboxClaim');
  if (!template || !pool || claims.length === 0)
    return ['expected a SandboxTemplate, a SandboxWarmPool and a claim'];
  const tspec = template.spec as Json;
  if (tspec.envVarsInjectionPolicy !== 'Disallowed') {
    problems.push('template: envVarsInjectionPolicy must be Disallowed (claim env bypasses the warm pool)');
  }
  const policy = tspec.networkPolicy as { ingress?: Json[] } | undefined;
  if (tspec.networkPolicyManagement !== 'Unmanaged' && policy) {
    const fromRouter = (policy.ingress ?? []).some(
      (r) =>
        ((r.from as Json[] | undefined) ?? []).some(
          (f) =>
            ((f.podSelector as Json | undefined)?.matchLabels as Json | undefined)?.app === 'sandbox-router',
        ) && ((r.ports as Json[] | undefined) ?? []).some((p) => p.port === 8888),
    );
    if (!fromRouter) problems.push('template: the NetworkPolicy must let the router reach port 8888');
  }
  const c = corralContainer(template);
  const args = (c.args as string[] | undefined) ?? [];
  if (args[0] !== 'exec-server') problems.push('corral container: args must start with exec-server');
  const listen = flagValue(args, '--listen');
  let port = Number.NaN;
  try {
    const u = new URL(listen ?? '');
    port = Number(u.port);
    if (u.protocol !== 'ws:') problems.push('corral container: --listen must be a ws:// URL');
    if (u.hostname !== '0.0.0.0')
      problems.push('corral container: --listen must bind 0.0.0.0 (probes dial the pod IP)');
    else if (!args.includes('--allow-non-loopback')) {
      problems.push('corral container: a non-loopback --listen needs --allow-non-loopback');
    }
  } catch {
    problems.push(`corral container: --listen ${listen} is not a URL`);
  }
  if (port !== 8888)
    problems.push('corral container: --listen port must be 8888 (the router default X-Sandbox-Port)');
  const ports = (c.ports as Json[] | undefined) ?? [];
  const named = ports.find((p) => p.containerPort === port);
  if (!named) problems.push(`corral container: containerPort ${port} is not declared`);
  for (const [probe, path] of [
    ['livenessProbe', '/healthz'],
    ['readinessProbe', '/readyz'],
  ] as const) {
    const get = ((c[probe] as Json | undefined)?.httpGet ?? {}) as Json;
    const probePort =
      typeof get.port === 'string' ? ports.find((p) => p.name === get.port)?.containerPort : get.port;
    if (get.path !== path || probePort !== port)
      problems.push(`corral container: ${probe} must GET ${path} on ${port}`);
  }
  const tokenFile = flagValue(args, '--ws-token-file');
  const mounts = (c.volumeMounts as Json[] | undefined) ?? [];
  if (!tokenFile) problems.push('corral container: the token must come from --ws-token-file');
  else if (!mounts.some((m) => tokenFile.startsWith(`${m.mountPath as string}/`))) {
    problems.push(`corral container: --ws-token-file ${tokenFile} is not on a mounted volume`);
  }
  const env = (c.env as Json[] | undefined) ?? [];
  for (const e of env) {
    const fromSecret = (e.valueFrom as Json | undefined)?.secretKeyRef !== undefined;
    if (fromSecret || /token|secret/i.test(e.name as string)) {
      problems.push(`corral container: env ${e.name as string} carries a credential (use the token file)`);
    }
  }
  if (args.some((a) => /token=/i.test(a))) problems.push('corral container: a token in argv');
  if (
    (pool.spec as Json & { sandboxTemplateRef: Json }).sandboxTemplateRef.name !==
    (template.metadata as Json).name
  ) {
    problems.push('warm pool: sandboxTemplateRef does not name the template');
  }
  for (const claim of claims) {
    const spec = claim.spec as Json & { warmPoolRef: Json };
    const name = (claim.metadata as Json).name as string;
    if (spec.warmPoolRef.name !== (pool.metadata as Json).name) problems.push(`claim ${name}: warmPoolRef`);
    if (spec.env !== undefined)
      problems.push(`claim ${name}: env bypasses the warm pool (settings go over the protocol)`);
    if (spec.volumeClaimTemplates !== undefined)
      problems.push(`claim ${name}: volumeClaimTemplates bypass the warm pool`);
    const labels = ((spec.additionalPodMetadata as Json | undefined)?.labels ?? {}) as Json;
    for (const key of Object.keys(labels)) {
      const domain = key.includes('/') ? key.split('/')[0]! : '';
      if (domain !== 'sandbox.users.io' && !domain.endsWith('.sandbox.users.io')) {
        problems.push(
          `claim ${name}: label ${key} is outside the controller's default allowed domain sandbox.users.io`,
        );
      }
    }
  }
  return problems;
}
