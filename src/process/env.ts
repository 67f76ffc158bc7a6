import type { EnvPolicy } from '../protocol/exec.js';
import { SecretScrub } from './secretScrub.js';

/** Variables a coding client's child needs from the server when it asks for `inherit: "core"`. */
const CORE_VARS = [
  'PATH',
  'SHELL',
  'TMPDIR',
  'TEMP',
  'TMP',
  'HOME',
  'LANG',
  'LC_ALL',
  'LC_CTYPE',
  'LOGNAME',
  'USER',
];
const DEFAULT_EXCLUDES = ['*KEY*', '*SECRET*', '*TOKEN*'];
/** Our own process's variables that must never leak into children (Electron, Node, Corral internals). */
const INTERNAL = [/^ELECTRON_/i, /^NODE_OPTIONS$/i, /^CORRAL_/i, /^NODE_CHANNEL_FD$/i, /^npm_/i];

/** The server's environment with internal variables removed: the base that `envPolicy` inherits from. */
export function sanitizedServerEnv(source: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(source)) {
    if (v === undefined || INTERNAL.some((re) => re.test(k))) continue;
    out[k] = v;
  }
  return out;
}

function wildcard(pattern: string): RegExp {
  const body = pattern.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*');
  return new RegExp(`^${body}$`, 'i');
}

/**
 * Builds a child's environment (protocol.md §5.10). Without envPolicy the child gets exactly `env`. With one: inherit
 * from the (sanitised) server environment, drop default excludes unless told not to, drop `exclude`, apply `set`,
 * keep only `includeOnly` when non-empty, then overlay `env`.
 */
export function buildChildEnv(
  env: Record<string, string>,
  policy: EnvPolicy | null | undefined,
  serverEnv: Record<string, string> = sanitizedServerEnv(),
): { env: Record<string, string>; inherited: string[] } {
  if (!policy) return { env: { ...env }, inherited: [] };
  let base: Record<string, string> = {};
  if (policy.inherit === 'all') base = { ...serverEnv };
  else if (policy.inherit === 'core') {
    for (const k of CORE_VARS) if (serverEnv[k] !== undefined) base[k] = serverEnv[k]!;
  }
  const drop = [...(policy.ignoreDefaultExcludes ? [] : DEFAULT_EXCLUDES), ...policy.exclude].map(wildcard);
  for (const k of Object.keys(base)) if (drop.some((re) => re.test(k))) delete base[k];
  const inherited = Object.keys(base);
  Object.assign(base, policy.set);
  if (policy.includeOnly.length > 0) {
    const keep = policy.includeOnly.map(wildcard);
    for (const k of Object.keys(base)) if (!keep.some((re) => re.test(k))) delete base[k];
  }
  Object.assign(base, env);
  return { env: base, inherited: inherited.filter((k) => !(k in env)) };
}

/**
 * The environment without every variable whose value (or name) holds one of `secrets` — the server's credentials — in
 * any of the forms of src/process/secretScrub.ts (raw, percent-, form-, JSON-escaped, base64, hex, inside a longer
 * value). Codex 0.120 forwards `CODEX_EXEC_SERVER_URL`, token included, to every command it runs; a sandboxed command
 * that learnt it could connect back and start an unsandboxed process. Applied to every child, sandboxed or not. A
 * server keeps one SecretScrub (its needles are computed once); this is the one-off form.
 */
export function withoutSecrets(
  env: Record<string, string>,
  secrets: Iterable<string>,
): { env: Record<string, string>; removed: string[] } {
  return new SecretScrub(secrets).scrub(env);
}
