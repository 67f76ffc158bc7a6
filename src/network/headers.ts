/** Request and response headers: hop-by-hop ones (network-proxy.md §4.2 step 6) are never passed on either way. */
import type { IncomingMessage } from 'node:http';

const HOP_BY_HOP: ReadonlySet<string> = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'proxy-authenticate',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'te',
]);

/** The header names listed in `Connection` (and `Proxy-Connection` when `proxyConnection`), lower case. */
function connectionTokens(raw: readonly string[], proxyConnection: boolean): Set<string> {
  const tokens = new Set<string>();
  for (let i = 0; i < raw.length; i += 2) {
    const k = raw[i]!.toLowerCase();
    if (k === 'connection' || (proxyConnection && k === 'proxy-connection')) {
      for (const t of raw[i + 1]!.split(',')) tokens.add(t.trim().toLowerCase());
    }
  }
  return tokens;
}

/**
 * The end-to-end headers of a request or response (`raw` as Node's `rawHeaders`: name, value, name, value…), names
 * in their original case and order: the hop-by-hop ones and those the `Connection` header lists are dropped.
 */
export function endToEndHeaders(raw: readonly string[], kind: 'request' | 'response'): string[] {
  const tokens = connectionTokens(raw, kind === 'request');
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const lk = raw[i]!.toLowerCase();
    if (HOP_BY_HOP.has(lk) || tokens.has(lk)) continue;
    out.push(raw[i]!, raw[i + 1]!);
  }
  return out;
}

/**
 * The headers of a request forwarded to its origin in origin form: the end-to-end ones, with `host: <authority>` in
 * front when the client sent no Host.
 */
export function forwardedRequestHeaders(raw: readonly string[], authority: string): string[] {
  const out = endToEndHeaders(raw, 'request');
  let hasHost = false;
  for (let i = 0; i < out.length; i += 2) if (out[i]!.toLowerCase() === 'host') hasHost = true;
  if (!hasHost) out.unshift('host', authority);
  return out;
}

/** The first value of a request header. */
export function headerValue(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}
