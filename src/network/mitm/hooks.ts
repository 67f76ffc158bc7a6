/**
 * `mitm_hooks` (issue 34, item 5), in Codex's runtime shape: per host, hooks that match a request inside an
 * intercepted tunnel (methods, path prefixes, query values, header values; all listed must match) and act on it
 * (strip request headers, inject headers whose values are secrets). A hooked host whose request matches no hook is
 * refused with `mitm_hook_denied`. The first matching hook wins.
 *
 * Secrets are read when the proxy starts, from the server's own environment or files, never from anything the
 * request carries — and only those the server's operator lists: `CORRAL_MITM_SECRET_ENV` (variable names, comma
 * separated) and `CORRAL_MITM_SECRET_FILES` (absolute paths or directories, colon separated). The agent writes the
 * config, so without that list a hook could send any of the server's variables or readable files to a host the agent
 * picks. A secret that is not listed, not set, or unreadable fails the start naming the hook.
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { resolve } from 'node:path';
import type { MitmHookWire } from '../../protocol/network.js';
import { normalizeHost } from '../host.js';

/** The reason of a request to a hooked host that matches none of its hooks. */
export const HOOK_DENIED = 'mitm_hook_denied';
/** The server's own list of the variables hooks may read. */
export const SECRET_ENV_LIST = 'CORRAL_MITM_SECRET_ENV';
/** The server's own list of the files (or directories) hooks may read. */
export const SECRET_FILES_LIST = 'CORRAL_MITM_SECRET_FILES';
const MAX_SECRET_BYTES = 64 * 1024;

/** What a matching hook does: headers stripped (lower-case names), headers set, the audit's name for its secrets. */
export interface HookActions {
  strip: readonly string[];
  inject: readonly (readonly [string, string])[];
  credential?: string;
}

/** A hooked host's answer for one request: its first matching hook's actions, or the refusal. */
export type HookResult = HookActions | { refusal: string };

interface CompiledHook {
  methods: ReadonlySet<string> | null;
  pathPrefixes: readonly string[];
  query: readonly [string, readonly string[]][];
  headers: readonly [string, readonly string[]][];
  actions: HookActions;
}

/** The headers after a hook's actions: stripped and injected names dropped, the injected ones appended. */
export function applyActions(raw: readonly string[], a: HookActions): string[] {
  const drop = new Set([...a.strip, ...a.inject.map(([k]) => k.toLowerCase())]);
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2)
    if (!drop.has(raw[i]!.toLowerCase())) out.push(raw[i]!, raw[i + 1]!);
  for (const [k, v] of a.inject) out.push(k, v);
  return out;
}

/** Reads a secret file: a regular file, at most 64 KiB, its trailing newline dropped. */
function readSecretFile(path: string): string {
  const fd = openSync(path, 'r');
  try {
    const st = fstatSync(fd);
    if (!st.isFile() || st.size > MAX_SECRET_BYTES) throw new Error('not a regular file of at most 64 KiB');
    const buf = Buffer.alloc(st.size);
    const n = readSync(fd, buf, 0, buf.length, 0);
    return buf
      .subarray(0, n)
      .toString('utf8')
      .replace(/\r?\n$/, '');
  } finally {
    closeSync(fd);
  }
}

function fileListed(path: string, listed: readonly string[]): boolean {
  const p = resolve(path);
  return listed.some((l) => p === l || p.startsWith(l.endsWith('/') ? l : `${l}/`));
}

/** Where hooks get their secrets: the server's environment and the operator's lists in it. */
export interface SecretSource {
  env: Record<string, string | undefined>;
}

function secretOf(
  h: { secret_env_var?: string | null | undefined; secret_file?: string | null | undefined },
  where: string,
  src: SecretSource,
): string {
  if (h.secret_env_var != null) {
    const listed = (src.env[SECRET_ENV_LIST] ?? '').split(',').map((s) => s.trim());
    if (!listed.includes(h.secret_env_var))
      throw new Error(
        `${where}: secret_env_var ${h.secret_env_var} is not listed in the server's ${SECRET_ENV_LIST}`,
      );
    const v = src.env[h.secret_env_var];
    if (v === undefined || v === '')
      throw new Error(`${where}: secret_env_var ${h.secret_env_var} is not set`);
    return v;
  }
  const file = h.secret_file!;
  const listed = (src.env[SECRET_FILES_LIST] ?? '')
    .split(':')
    .filter((s) => s.startsWith('/'))
    .map((s) => resolve(s));
  if (!fileListed(file, listed))
    throw new Error(`${where}: secret_file ${file} is not under the server's ${SECRET_FILES_LIST}`);
  try {
    return readSecretFile(file);
  } catch (e) {
    throw new Error(
      `${where}: secret_file ${file} cannot be read (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`,
    );
  }
}

/** The hooks of one proxy, by normalised host. */
export class MitmHooks {
  private readonly byHost = new Map<string, CompiledHook[]>();

  constructor(hooks: readonly MitmHookWire[], src: SecretSource = { env: process.env }) {
    hooks.forEach((h, i) => {
      const where = `mitm_hooks[${i}]`;
      const host = normalizeHost(h.host);
      if (!host.ok || host.host === '')
        throw new Error(`${where}.host: invalid host ${JSON.stringify(h.host)}`);
      const inject = (h.actions?.inject_request_headers ?? []).map((x, j) => {
        const secret = secretOf(x, `${where}.actions.inject_request_headers[${j}]`, src);
        const value = `${x.prefix ?? ''}${secret}`;
        if (/[\r\n\0]/.test(value)) throw new Error(`${where}: the secret holds CR, LF or NUL`);
        return [x.name, value] as const;
      });
      const compiled: CompiledHook = {
        methods: h.match?.methods?.length ? new Set(h.match.methods.map((m) => m.toUpperCase())) : null,
        pathPrefixes: h.match?.path_prefixes ?? [],
        query: Object.entries(h.match?.query ?? {}),
        headers: Object.entries(h.match?.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v] as const),
        actions: {
          strip: (h.actions?.strip_request_headers ?? []).map((s) => s.toLowerCase()),
          inject,
          ...(inject.length > 0 ? { credential: `mitm_hooks[${i}]` } : {}),
        },
      };
      const list = this.byHost.get(host.host) ?? [];
      list.push(compiled);
      this.byHost.set(host.host, list);
    });
  }

  get size(): number {
    return this.byHost.size;
  }

  /** Whether a host has hooks (its tunnels are intercepted when they carry TLS). */
  has(host: string): boolean {
    return this.byHost.has(host);
  }

  /** A request to `host`: its first matching hook's actions, a refusal when none matches, undefined when unhooked. */
  apply(req: {
    host: string;
    method: string;
    path: string;
    rawHeaders: readonly string[];
  }): HookResult | undefined {
    const hooks = this.byHost.get(req.host);
    if (hooks === undefined) return undefined;
    for (const h of hooks) if (matches(h, req)) return h.actions;
    return { refusal: HOOK_DENIED };
  }
}

function matches(
  h: CompiledHook,
  req: { method: string; path: string; rawHeaders: readonly string[] },
): boolean {
  if (h.methods !== null && !h.methods.has(req.method.toUpperCase())) return false;
  const q = req.path.indexOf('?');
  const path = q < 0 ? req.path : req.path.slice(0, q);
  if (h.pathPrefixes.length > 0 && !h.pathPrefixes.some((p) => path.startsWith(p))) return false;
  if (h.query.length > 0) {
    const params = new URLSearchParams(q < 0 ? '' : req.path.slice(q + 1));
    for (const [name, values] of h.query) {
      const got = params.getAll(name);
      if (!got.some((v) => values.length === 0 || values.includes(v))) return false;
    }
  }
  for (const [name, values] of h.headers) {
    let hit = false;
    for (let i = 0; i < req.rawHeaders.length && !hit; i += 2) {
      if (req.rawHeaders[i]!.toLowerCase() !== name) continue;
      hit = values.length === 0 || values.includes(req.rawHeaders[i + 1]!.trim());
    }
    if (!hit) return false;
  }
  return true;
}
