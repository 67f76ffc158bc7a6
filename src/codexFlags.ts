/**
 * The options `codex exec-server` 0.171 has that Corral adds, with Codex's spellings, defaults and error texts
 * (recorded from the released binary: test/fixtures/codex-0.171.0-flags.txt): the sandbox's pid namespace, transparent
 * TCP, the TCP upstream proxy, -c / --enable / --disable / --strict-config, and the remote credential flags.
 *
 * A bad value is refused in clap's words (`error: invalid value …`, exit 2) and a bad configuration in Codex's runtime
 * words (`Error: …`, exit 1), so a command line moved from one server to the other fails the same way.
 */
import { CODEX_171_FEATURES } from './codexFeatures.js';
import type { UpstreamSettings } from './network/upstream.js';

/** The parseArgs table of these options (single-valued ones are `multiple` so that a repetition can be refused). */
export const CODEX_171_OPTIONS = {
  config: { type: 'string', short: 'c', multiple: true, default: [] as string[] },
  enable: { type: 'string', multiple: true, default: [] as string[] },
  disable: { type: 'string', multiple: true, default: [] as string[] },
  'strict-config': { type: 'boolean', default: false },
  'linux-sandbox-pid-namespace': { type: 'string', multiple: true, default: [] as string[] },
  'linux-sandbox-transparent-tcp': { type: 'boolean', default: false },
  'tcp-upstream-proxy': { type: 'string', multiple: true, default: [] as string[] },
  'proxy-private-ips-via-upstream': { type: 'boolean', default: false },
} as const;

/** The 0.171 credential options of `--remote` (remote/credentials: what each one does here). */
export const CODEX_171_CREDENTIAL_OPTIONS = {
  'use-agent-identity-auth': { type: 'boolean', default: false },
  'executor-credential-stdin': { type: 'boolean', default: false },
  'chatgpt-token-stdin': { type: 'boolean', default: false },
  'chatgpt-account-id': { type: 'string' },
} as const;

export const CODEX_171_USAGE = `codex exec-server 0.171 options (same spelling, defaults and error texts as Codex):
  --linux-sandbox-pid-namespace MODE  isolate: every Linux sandbox gets its own pid namespace (bwrap --unshare-pid);
                          inherit: it shares the server's, so a sandboxed command can signal other processes of the
                          same user (enable only when provisioning a dedicated environment)  [isolate]
  --linux-sandbox-transparent-tcp  in a managed-network Linux sandbox (bwrap or Landlock) every TCP connect, also
                          of programs that ignore proxy variables, is asked of the command's SOCKS5 proxy: its policy
                          admits (audited) or refuses it (ECONNREFUSED). Needs Linux >= 5.9 and the native addon
  --tcp-upstream-proxy HOST:PORT  raw TCP from a managed SOCKS listener leaves only through this HTTP CONNECT proxy
                          (loopback stays local; private addresses stay local unless the next flag)
  --proxy-private-ips-via-upstream  permitted private destinations also use the upstream proxy that applies (this
                          one, or HTTPS_PROXY/HTTP_PROXY/ALL_PROXY); none applies: direct. Loopback stays local
                          [env: CODEX_EXEC_SERVER_PROXY_PRIVATE_IPS_VIA_UPSTREAM=true|false]
  Upstream precedence (README "Upstream proxies"): SOCKS raw TCP: --tcp-upstream-proxy, else the server's own
  HTTPS_PROXY, HTTP_PROXY, ALL_PROXY (upper case first); HTTP CONNECT and https://: HTTPS_PROXY, HTTP_PROXY,
  ALL_PROXY; plain http://: HTTP_PROXY, ALL_PROXY. NO_PROXY (the server's) exempts names and addresses from those
  variables, never from --tcp-upstream-proxy. A policy with allow_upstream_proxy false uses none of the variables.
  -c, --config KEY=VALUE  a configuration override; VALUE is TOML, else a literal string. Corral honours
                          features.<name> (checked against 0.171's feature list; features steer the harness and change
                          nothing in an exec server); any other key is ignored with a warning, or refused under
                          --strict-config. Corral reads no config.toml
  --enable FEATURE, --disable FEATURE  the same as -c features.FEATURE=true / false (repeatable)
  --strict-config         refuse an override Corral cannot honour (Codex: a field it does not know)`;

/** Refuses the command line in clap's words and exits 2. */
export function clapFail(text: string): never {
  process.stderr.write(`error: ${text}\n\nFor more information, try '--help'.\n`);
  process.exit(2);
}

/** A configuration Codex would refuse at run time: `Error: …`, exit 1. */
export function configFail(text: string): never {
  process.stderr.write(`Error: ${text}\n`);
  process.exit(1);
}

export type PidNamespaceMode = 'isolate' | 'inherit';

function single(flag: string, values: readonly string[]): string | undefined {
  if (values.length > 1) clapFail(`the argument '${flag}' cannot be used multiple times`);
  return values[0];
}

/** `--linux-sandbox-pid-namespace`: isolate (default) or inherit. */
export function pidNamespaceMode(values: readonly string[]): PidNamespaceMode {
  const flag = '--linux-sandbox-pid-namespace <MODE>';
  const v = single(flag, values) ?? 'isolate';
  if (v !== 'isolate' && v !== 'inherit')
    clapFail(`invalid value '${v}' for '${flag}': expected 'isolate' or 'inherit'`);
  return v;
}

/** Why a HOST:PORT does not parse (Codex's words, one CRLF-separated line per cause, as it prints them), or its parts. */
export function parseHostPort(text: string): { host: string; port: number } | { error: string } {
  const colon = text.lastIndexOf(':');
  if (colon < 0) return { error: 'missing port' };
  const hostText = text.slice(0, colon);
  // The port is read first (Codex: `[::1]` is a bad port, not a bad host).
  const port = parseU16(text.slice(colon + 1));
  if (typeof port === 'string') return { error: `parse port as u16\r\n ↪ ${port}` };
  let host: string;
  if (/^\[[0-9A-Fa-f:.]+\]$/.test(hostText) && isIpv6(hostText.slice(1, -1))) host = hostText.slice(1, -1);
  else if (isIpv6(hostText))
    return { error: 'missing brackets for IPv6 address with port (in host-with-port)' };
  else if (/^[A-Za-z0-9._-]+$/.test(hostText)) host = hostText;
  else return { error: 'parse host from host-with-port\r\n ↪ parse host from string\r\n ↪ Option is None' };
  return { host, port };
}

function isIpv6(text: string): boolean {
  // Shape only (hex groups, at most one ::, an optional IPv4 tail); the network layer canonicalises it.
  if (!/^[0-9A-Fa-f:.]+$/.test(text) || !text.includes(':') || text.length > 45) return false;
  const double = text.split('::').length - 1;
  if (double > 1) return false;
  const groups = text.split(':').filter((g) => g !== '');
  const tail = groups.at(-1) ?? '';
  const v4 = tail.includes('.');
  if (v4 && !/^\d{1,3}(\.\d{1,3}){3}$/.test(tail)) return false;
  const hex = v4 ? groups.slice(0, -1) : groups;
  if (!hex.every((g) => /^[0-9A-Fa-f]{1,4}$/.test(g))) return false;
  const count = hex.length + (v4 ? 2 : 0);
  return double === 1 ? count < 8 : count === 8;
}

/** Rust's `u16::from_str`: an optional `+`, decimal digits; its error texts otherwise. */
function parseU16(text: string): number | string {
  if (text === '') return 'cannot parse integer from empty string';
  const digits = text.startsWith('+') ? text.slice(1) : text;
  if (!/^\d+$/.test(digits)) return 'invalid digit found in string';
  const significant = digits.replace(/^0+(?=\d)/, '');
  if (significant.length > 5 || Number(significant) > 65535) return 'number too large to fit in target type';
  return Number(significant);
}

/** `--tcp-upstream-proxy HOST:PORT`, or null. */
export function tcpUpstreamProxy(values: readonly string[]): { host: string; port: number } | null {
  const flag = '--tcp-upstream-proxy <HOST:PORT>';
  const v = single(flag, values);
  if (v === undefined) return null;
  const r = parseHostPort(v);
  if ('error' in r) clapFail(`invalid value '${v}' for '${flag}': ${r.error}`);
  if (r.port === 0) clapFail(`invalid value '${v}' for '${flag}': TCP upstream proxy port must be nonzero`);
  return r;
}

/**
 * A boolean flag that Codex also reads from the environment (`[env: NAME=]`): the flag, else `true`/`false` there
 * (empty: unset); anything else is refused as clap refuses it.
 */
export function envFlag(flag: string, given: boolean, env: NodeJS.ProcessEnv, name: string): boolean {
  if (given) return true;
  const v = env[name];
  if (v === undefined || v === '') return false;
  if (v === 'true') return true;
  if (v === 'false') return false;
  process.stderr.write(
    `error: invalid value '${v}' for '--${flag}'\n  [possible values: true, false]\n\nFor more information, try '--help'.\n`,
  );
  process.exit(2);
}

/** A -c value read as TOML's scalars, strings, arrays and flat inline tables know it; null: not TOML (a literal). */
type TomlValue =
  | { type: 'boolean'; value: boolean }
  | { type: 'integer'; text: string }
  | { type: 'float'; text: string }
  | { type: 'string'; value: string }
  | { type: 'sequence' }
  | { type: 'map'; entries: [string, TomlValue][] | null };

const MAX_OVERRIDE_CHARS = 64 * 1024;

/** Reads one -c value: TOML where it is (the subset an override of Corral's keys can use), else a literal string. */
export function parseOverrideValue(text: string): TomlValue {
  const t = text.trim();
  return scalar(t) ?? { type: 'string', value: text };
}

function scalar(t: string): TomlValue | null {
  // Longer than any value of a key Corral honours: a literal, unread (no scan of a huge argument).
  if (t.length > MAX_OVERRIDE_CHARS) return null;
  if (t === 'true' || t === 'false') return { type: 'boolean', value: t === 'true' };
  if (/^[+-]?(0|[1-9](_?\d)*)$/.test(t)) return { type: 'integer', text: t.replace(/_/g, '') };
  if (/^[+-]?(0|[1-9](_?\d)*)(\.\d(_?\d)*)?([eE][+-]?\d(_?\d)*)?$/.test(t) || /^[+-]?(inf|nan)$/.test(t))
    return { type: 'float', text: t };
  if (t.length >= 2 && t.startsWith('"') && t.endsWith('"')) {
    // TOML's basic string is JSON's string (less \/, which JSON also takes): JSON.parse reads it without backtracking.
    try {
      const value: unknown = JSON.parse(t);
      return typeof value === 'string' ? { type: 'string', value } : null;
    } catch {
      return null;
    }
  }
  if (/^'[^'\n]*'$/.test(t)) return { type: 'string', value: t.slice(1, -1) };
  if (t.startsWith('[') && t.endsWith(']') && balanced(t)) return { type: 'sequence' };
  if (t.startsWith('{') && t.endsWith('}') && balanced(t)) return { type: 'map', entries: inlineTable(t) };
  return null;
}

/** Brackets and braces close in order (quotes skipped), bounded in size: no recursion, whatever the depth. */
function balanced(t: string): boolean {
  if (t.length > MAX_OVERRIDE_CHARS) return false;
  const stack: string[] = [];
  let quote: string | null = null;
  for (let i = 0; i < t.length; i++) {
    const c = t[i]!;
    if (quote) {
      if (c === '\\' && quote === '"') i++;
      else if (c === quote) quote = null;
      continue;
    }
    if (c === '"' || c === "'") quote = c;
    else if (c === '[' || c === '{') stack.push(c === '[' ? ']' : '}');
    else if (c === ']' || c === '}') {
      if (stack.pop() !== c) return false;
      if (stack.length === 0 && i !== t.length - 1) return false;
    }
  }
  return quote === null && stack.length === 0;
}

/** A flat inline table `{ a = true, b = 1 }`; null when it nests (its entries are then not Corral's to read). */
function inlineTable(t: string): [string, TomlValue][] | null {
  const body = t.slice(1, -1).trim();
  if (body === '') return [];
  if (/[{["']/.test(body)) return null;
  const out: [string, TomlValue][] = [];
  for (const part of body.split(',')) {
    const eq = part.indexOf('=');
    if (eq < 0) return null;
    const key = part.slice(0, eq).trim();
    const value = scalar(part.slice(eq + 1).trim());
    if (!/^[A-Za-z0-9_-]+$/.test(key) || value === null) return null;
    out.push([key, value]);
  }
  return out;
}

function describeType(v: TomlValue): string {
  switch (v.type) {
    case 'boolean':
      return `boolean \`${v.value}\``;
    case 'integer':
      return `integer \`${v.text}\``;
    case 'float':
      return `floating point \`${v.text}\``;
    case 'string':
      return `string ${JSON.stringify(v.value)}`;
    case 'sequence':
      return 'sequence';
    case 'map':
      return 'map';
  }
}

export interface ConfigOverrides {
  /** features.<name> as the overrides, --enable and --disable leave them (later wins, --enable/--disable last). */
  readonly features: ReadonlyMap<string, boolean>;
  /** Overrides Corral does not honour (without --strict-config), to be logged once. */
  readonly ignored: readonly string[];
  /** `-c chatgpt_base_url=…`: where `--chatgpt-token-stdin` loads the account policy (remote/chatgptPolicy.ts). */
  readonly chatgptBaseUrl?: string;
}

/**
 * -c / --enable / --disable / --strict-config, with Codex's semantics for the keys Corral honours (features.<name>).
 * Without --strict-config an override Corral cannot honour is kept in `ignored`; with it, refused (`Error: …`).
 */
export function configOverrides(v: {
  config: readonly string[];
  enable: readonly string[];
  disable: readonly string[];
  strict: boolean;
}): ConfigOverrides {
  const features = new Map<string, boolean>();
  const ignored: string[] = [];
  let chatgptBaseUrl: string | undefined;
  // Codex's text, also for keys Codex knows and Corral does not honour (--help lists what Corral honours).
  const unknown = (key: string) => `unknown configuration field \`${key}\` in -c/--config override`;
  const feature = (name: string, value: TomlValue, raw: string) => {
    if (!CODEX_171_FEATURES.has(name)) {
      if (v.strict) configFail(unknown(`features.${name}`));
      ignored.push(raw);
      return;
    }
    if (value.type !== 'boolean') {
      if (v.strict) configFail(`invalid type: ${describeType(value)}, expected a boolean\nin \`features\``);
      ignored.push(raw);
      return;
    }
    features.set(name, value.value);
  };
  for (const raw of v.config) {
    const eq = raw.indexOf('=');
    if (eq < 0) {
      if (v.strict) configFail(`Invalid override (missing '='): ${raw}`);
      ignored.push(raw);
      continue;
    }
    const key = raw.slice(0, eq).trim();
    const value = parseOverrideValue(raw.slice(eq + 1));
    if (key.startsWith('features.') && key.split('.').length === 2) {
      feature(key.slice('features.'.length), value, raw);
    } else if (key === 'features' && value.type === 'map' && value.entries !== null) {
      for (const [name, entry] of value.entries) feature(name, entry, raw);
    } else if (key === 'chatgpt_base_url' && value.type === 'string') {
      chatgptBaseUrl = value.value;
    } else {
      if (v.strict) configFail(unknown(key));
      ignored.push(raw);
    }
  }
  for (const [names, on] of [
    [v.enable, true],
    [v.disable, false],
  ] as const) {
    for (const name of names) {
      if (!CODEX_171_FEATURES.has(name)) configFail(`Unknown feature flag: ${name}`);
      features.set(name, on);
    }
  }
  return { features, ignored, ...(chatgptBaseUrl !== undefined ? { chatgptBaseUrl } : {}) };
}

/** What the 0.171 options of `corral exec-server` amount to. */
export interface CodexServerFlags {
  pidNamespace: PidNamespaceMode;
  transparentTcp: boolean;
  upstream: UpstreamSettings;
  config: ConfigOverrides;
  exitOnStdinClose: boolean;
}

/** Reads the 0.171 options (and the variables Codex reads them from), refusing a bad one as Codex does. */
export function codexServerFlags(
  values: {
    config: string[];
    enable: string[];
    disable: string[];
    'strict-config': boolean;
    'linux-sandbox-pid-namespace': string[];
    'linux-sandbox-transparent-tcp': boolean;
    'tcp-upstream-proxy': string[];
    'proxy-private-ips-via-upstream': boolean;
    'exit-on-stdin-close': boolean;
  },
  env: NodeJS.ProcessEnv,
): CodexServerFlags {
  const pidNamespace = pidNamespaceMode(values['linux-sandbox-pid-namespace']);
  const tcp = tcpUpstreamProxy(values['tcp-upstream-proxy']);
  const privateIps = envFlag(
    'proxy-private-ips-via-upstream',
    values['proxy-private-ips-via-upstream'],
    env,
    'CODEX_EXEC_SERVER_PROXY_PRIVATE_IPS_VIA_UPSTREAM',
  );
  const exitOnStdinClose = envFlag(
    'exit-on-stdin-close',
    values['exit-on-stdin-close'],
    env,
    'CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE',
  );
  const config = configOverrides({
    config: values.config,
    enable: values.enable,
    disable: values.disable,
    strict: values['strict-config'],
  });
  return {
    pidNamespace,
    transparentTcp: values['linux-sandbox-transparent-tcp'],
    upstream: { tcp, privateIps, env },
    config,
    exitOnStdinClose,
  };
}
