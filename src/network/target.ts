/**
 * The one reader of request targets for the managed proxy (network-proxy.md §4.2 steps 2–3, §4.3 step 1, §5 item 4):
 * absolute-form URLs, CONNECT authorities, the Host cross-check and host normalisation. Every HTTP entry point, the
 * fast path and the policy debugger read a target here, so none of them can disagree on what host a request names.
 */
import { normalizeHost } from './host.js';

const DEFAULT_PORTS: Readonly<Record<string, number>> = { http: 80, https: 443, ws: 80, wss: 443, ftp: 21 };

/** The port a scheme implies when the URL gives none (80 for schemes the proxy does not know). */
export function defaultPort(scheme: string): number {
  return DEFAULT_PORTS[scheme] ?? 80;
}

export interface AbsoluteTarget {
  /** Lower case. */
  scheme: string;
  /** The host as written (brackets kept, not normalised); '' when the URL has none. */
  rawHost: string;
  /** NaN when the URL's port is not a number in range. */
  port: number;
  explicitPort: boolean;
  /** Origin-form path and query (fragment dropped), at least `/`. */
  path: string;
  /** `host[:port]` as written, without any `user@`. */
  authority: string;
  /**
   * False when the authority as written (`user@` included) has characters outside RFC 3986's, which parsers read
   * differently (`http://a.test\\@b.test/` is b.test here and a.test to a WHATWG URL parser): not a valid target.
   */
  wellFormed: boolean;
}

/** The characters of an RFC 3986 authority (userinfo, host, port). */
const AUTHORITY_CHARS = /^[A-Za-z0-9\-._~%!$&'()*+,;=:@[\]]*$/;

/** Parses `scheme://[user@]host[:port]/path` (absolute-form). Null for origin-form or garbage. */
export function parseAbsoluteTarget(url: string): AbsoluteTarget | null {
  const m = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\/([^/?#]*)(.*)$/.exec(url);
  if (!m) return null;
  const scheme = m[1]!.toLowerCase();
  let authority = m[2]!;
  const at = authority.lastIndexOf('@');
  if (at >= 0) authority = authority.slice(at + 1);
  let path = m[3]!;
  const hash = path.indexOf('#');
  if (hash >= 0) path = path.slice(0, hash);
  if (!path.startsWith('/')) path = `/${path}`;
  const { host, port } = splitAuthority(authority);
  return {
    scheme,
    rawHost: host,
    port: port ?? defaultPort(scheme),
    explicitPort: port !== null,
    path,
    authority,
    wellFormed: AUTHORITY_CHARS.test(m[2]!),
  };
}

/** Splits `host:port` / `[v6]:port` / `host`. A port that is not a number in range gives port NaN. */
export function splitAuthority(authority: string): { host: string; port: number | null } {
  if (authority.startsWith('[')) {
    const end = authority.indexOf(']');
    if (end < 0) return { host: authority, port: null };
    const rest = authority.slice(end + 1);
    const host = authority.slice(0, end + 1);
    if (rest === '') return { host, port: null };
    if (!rest.startsWith(':')) return { host: authority, port: Number.NaN };
    return { host, port: parsePort(rest.slice(1)) };
  }
  const first = authority.indexOf(':');
  if (first < 0 || first !== authority.lastIndexOf(':')) return { host: authority, port: null };
  return { host: authority.slice(0, first), port: parsePort(authority.slice(first + 1)) };
}

function parsePort(s: string): number {
  if (!/^[0-9]{1,5}$/.test(s)) return Number.NaN;
  const n = Number(s);
  return n <= 65535 ? n : Number.NaN;
}

/** Host header vs absolute target (§4.2 step 3): same host, and the same port (a header without one: the default). */
export function hostHeaderMatches(
  header: string,
  target: Pick<AbsoluteTarget, 'rawHost' | 'port' | 'scheme'>,
): boolean {
  const { host, port } = splitAuthority(header.trim());
  const h = normalizeHost(host);
  const t = normalizeHost(target.rawHost);
  if (!h.ok || !t.ok || h.host !== t.host) return false;
  if (port === null) return target.port === defaultPort(target.scheme);
  return port === target.port;
}

/** The 400 texts of a target the proxy cannot take (§4.2, §4.3, §5 items 3–4). */
export type TargetError =
  | 'missing host'
  | 'absolute-form request target required'
  | 'Host header does not match request target'
  | 'invalid host'
  | 'missing authority';

/** A target read for the policy: the normalised host (possibly '', which the policy blocks) and the port. */
export type TargetRead<T> =
  | ({ ok: true; host: string; port: number } & T)
  | { ok: false; error: TargetError };

/**
 * A non-CONNECT request's target (§4.2 steps 2–3, §5 items 3–4): absolute-form only, the Host header (when sent)
 * must match it, and the host must be a valid host name or IP literal.
 */
export function readRequestTarget(
  url: string,
  hostHeader: string | undefined,
): TargetRead<{ target: AbsoluteTarget }> {
  const target = parseAbsoluteTarget(url);
  if (target === null) {
    const none = hostHeader === undefined || hostHeader.trim() === '';
    return { ok: false, error: none ? 'missing host' : 'absolute-form request target required' };
  }
  if (target.rawHost === '') return { ok: false, error: 'missing host' };
  if (hostHeader !== undefined && !hostHeaderMatches(hostHeader, target)) {
    return { ok: false, error: 'Host header does not match request target' };
  }
  const norm = normalizeHost(target.rawHost);
  if (!norm.ok || !target.wellFormed || Number.isNaN(target.port))
    return { ok: false, error: 'invalid host' };
  return { ok: true, host: norm.host, port: target.port, target };
}

/** A CONNECT request's authority (§4.3 step 1): `host:port`, or `host` alone with port 443. */
export function readConnectTarget(authority: string): TargetRead<object> {
  const { host: rawHost, port } = splitAuthority(authority);
  if (authority === '' || Number.isNaN(port) || /[/?#@]/.test(authority)) {
    return { ok: false, error: 'missing authority' };
  }
  const norm = normalizeHost(rawHost);
  if (!norm.ok || norm.host === '') return { ok: false, error: 'invalid host' };
  return { ok: true, host: norm.host, port: port ?? 443 };
}

/**
 * A target as a person writes it (the policy debugger): a URL is read as a request target, `host[:port]` as a
 * CONNECT authority but with port 80 when none is given. `scheme` says how the proxy would meet it: `https` (such a
 * URL, or port 443) arrives as a CONNECT.
 */
export function readTargetText(text: string): TargetRead<{ scheme: string }> {
  const t = text.trim();
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(t)) {
    const r = readRequestTarget(t, undefined);
    return r.ok ? { ok: true, host: r.host, port: r.port, scheme: r.target.scheme } : r;
  }
  const c = readConnectTarget(t);
  if (!c.ok) return c;
  const port = splitAuthority(t).port ?? 80;
  return { ok: true, host: c.host, port, scheme: port === 443 ? 'https' : 'http' };
}
