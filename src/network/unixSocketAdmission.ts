/**
 * The one decision for an `x-unix-socket` request (network-proxy.md §3.8), plain or upgrade (request.ts, upgrade.ts):
 * the header must be given once, an absolute path (400 otherwise); limited mode's method rule first (403 JSON
 * `method_not_allowed`); 501 where the platform has no unix sockets; then the allowed list (unixSocket.ts), 403 JSON
 * `not_allowed` for host `unix-socket` when neither the raw nor the canonical path is listed. Every decision after the
 * header check is an audit event; none goes to the blocked ring.
 */
import type http from 'node:http';
import { LIMITED_METHODS } from './admission.js';
import { endToEndHeaders } from './headers.js';
import { clientAddr } from './host.js';
import type { HttpContext } from './httpContext.js';
import type { DecisionReceipt, PolicySource } from './policy.js';
import { blockedUnixSocketResponse, type ProxyResponse, textResponse } from './responses.js';
import { allowedUnixSocket, UNIX_SOCKETS_SUPPORTED } from './unixSocket.js';

export type UnixSocketAdmission = { ok: true; path: string } | { ok: false; response: ProxyResponse };

export function admitUnixSocket(
  ctx: HttpContext,
  req: http.IncomingMessage,
  header: string | string[],
): UnixSocketAdmission {
  // Node joins repeated headers with a comma: count the raw ones, so that two paths are refused, not one guessed.
  let count = 0;
  for (let i = 0; i < req.rawHeaders.length; i += 2)
    if (req.rawHeaders[i]!.toLowerCase() === 'x-unix-socket') count++;
  const requested = Array.isArray(header) || count !== 1 ? undefined : header;
  if (requested === undefined || !requested.startsWith('/'))
    return { ok: false, response: textResponse(400, 'invalid x-unix-socket header') };
  const method = req.method ?? 'GET';
  const audit = (allowed: boolean, source: PolicySource, reason: string, receipt: DecisionReceipt) =>
    ctx.recorder.audit({
      protocol: 'http',
      host: 'unix-socket',
      port: 0,
      method,
      client: clientAddr(req.socket),
      scope: 'non_domain',
      decision: allowed ? 'allow' : 'deny',
      source,
      reason,
      receipt,
    });
  if (ctx.policy.mode === 'limited' && !LIMITED_METHODS.has(method)) {
    audit(false, 'mode_guard', 'method_not_allowed', {
      ruleId: 'method_not_allowed',
      origin: 'limited_mode',
    });
    return { ok: false, response: blockedUnixSocketResponse('method_not_allowed') };
  }
  if (!UNIX_SOCKETS_SUPPORTED) return { ok: false, response: textResponse(501, 'unix sockets unsupported') };
  const path = allowedUnixSocket(ctx.policy.settings, requested);
  audit(path !== null, 'baseline_policy', path ? 'allow' : 'not_allowed', unixSocketReceipt(ctx, path));
  return path ? { ok: true, path } : { ok: false, response: blockedUnixSocketResponse('not_allowed') };
}

/**
 * What decided a unix-socket request (issue 37, item 2): the listed path that let it through
 * (`allow_unix_sockets:<path>`), the all-sockets switch, or nothing (`not_allowed`, origin `default`).
 */
function unixSocketReceipt(ctx: HttpContext, path: string | null): DecisionReceipt {
  if (path === null) return { ruleId: 'not_allowed', origin: 'default' };
  const s = ctx.policy.settings;
  if (s.allow_unix_sockets.includes(path)) return { ruleId: `allow_unix_sockets:${path}`, origin: 'config' };
  return { ruleId: 'dangerously_allow_all_unix_sockets', origin: 'config' };
}

/** The request's end-to-end headers (raw pairs) for the daemon, without `x-unix-socket`. */
export function unixSocketRequestHeaders(raw: readonly string[]): string[] {
  return endToEndHeaders(raw, 'request').filter(
    (_, i, all) => all[i - (i % 2)]!.toLowerCase() !== 'x-unix-socket',
  );
}

/** The path and query of a request target (absolute-form or origin-form) to send to a local daemon. */
export function originPath(url: string): string {
  if (url.startsWith('/')) return url;
  try {
    const u = new URL(url);
    return `${u.pathname}${u.search}`;
  } catch {
    return '/';
  }
}
