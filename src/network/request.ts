/**
 * Plain HTTP requests on the proxy port (network-proxy.md §4.2, §3.8, §4.10): the limits, the unix-socket branch,
 * the target, admission, then a block answer or forwarding. Also the requests whose method token Node's parser
 * refuses (`post`): those are admitted the same way and never forwarded.
 */
import http from 'node:http';
import type { Duplex } from 'node:stream';
import { type AdmissionRequest, admitAndRecord, LIMITED_METHODS } from './admission.js';
import { forward, relay } from './forward.js';
import { endToEndHeaders, headerValue } from './headers.js';
import { clientAddr } from './host.js';
import type { HttpContext } from './httpContext.js';
import { limitStatus } from './limits.js';
import { plainCarrier } from './mitm/broker.js';
import {
  blockedHttpResponse,
  blockedUnixSocketResponse,
  CLOSE,
  emptyResponse,
  PARSE_ERROR,
  send,
  serialize,
  textResponse,
} from './responses.js';
import { readRequestTarget } from './target.js';
import { allowedUnixSocket, connectNoFollow, UNIX_SOCKETS_SUPPORTED } from './unixSocket.js';

export async function onRequest(
  ctx: HttpContext,
  req: http.IncomingMessage,
  res: http.ServerResponse,
): Promise<void> {
  const limit = limitStatus(req);
  if (limit !== null) {
    res.socket?.end(serialize(emptyResponse(limit), CLOSE));
    return;
  }
  const unixSocket = req.headers['x-unix-socket'];
  if (unixSocket !== undefined) {
    onUnixSocket(ctx, req, res, unixSocket);
    return;
  }
  const t = readRequestTarget(req.url ?? '', headerValue(req, 'host'));
  if (!t.ok) {
    send(res, textResponse(400, t.error));
    return;
  }
  const r: AdmissionRequest = {
    protocol: 'http',
    host: t.host,
    port: t.port,
    method: req.method ?? 'GET',
    client: clientAddr(req.socket),
  };
  const a = await admitAndRecord(ctx, r);
  if (!a.allowed) {
    send(res, blockedHttpResponse(a, t.port));
    return;
  }
  // The credential broker (issue 34) on plain HTTP: only to a loopback target, or with
  // dangerously_allow_plaintext_credential_injection.
  const brokered = ctx.broker?.rewrite(a.host, req.rawHeaders, plainCarrier(a.addresses));
  forward(ctx, req, res, t.target, a, brokered?.headers);
}

/**
 * §3.8: a limited-mode write method gets the short 403 JSON; a path neither listed (raw or canonical) nor allowed by
 * `dangerously_allow_all_unix_sockets` 403 JSON `not_allowed`; an allowed one gets the request forwarded over a
 * socket opened without following symlinks (unixSocket.ts), or 502 `unix socket proxy failed` when it cannot be
 * opened. Where the platform has no such open, 501. Every decision is an audit event; blocks are not in the ring.
 */
function onUnixSocket(
  ctx: HttpContext,
  req: http.IncomingMessage,
  res: http.ServerResponse,
  header: string | string[],
): void {
  const path = Array.isArray(header) ? header[0] : header;
  if (path === undefined || !path.startsWith('/') || Array.isArray(header)) {
    send(res, textResponse(400, 'invalid x-unix-socket header'));
    return;
  }
  const method = req.method ?? 'GET';
  /** The audit event of this request's decision (a unix socket is no domain: host unix-socket, port 0). */
  const audit = (decision: 'allow' | 'deny', source: 'mode_guard' | 'baseline_policy', reason: string) =>
    ctx.recorder.audit({
      protocol: 'http',
      host: 'unix-socket',
      port: 0,
      method,
      client: clientAddr(req.socket),
      scope: 'non_domain',
      decision,
      source,
      reason,
    });
  if (ctx.policy.mode === 'limited' && !LIMITED_METHODS.has(method)) {
    audit('deny', 'mode_guard', 'method_not_allowed');
    send(res, blockedUnixSocketResponse('method_not_allowed'));
    return;
  }
  if (!UNIX_SOCKETS_SUPPORTED) {
    send(res, textResponse(501, 'unix sockets unsupported'));
    return;
  }
  const target = allowedUnixSocket(ctx.policy.settings, path);
  audit(target ? 'allow' : 'deny', 'baseline_policy', target ? 'allow' : 'not_allowed');
  if (!target) {
    send(res, blockedUnixSocketResponse('not_allowed'));
    return;
  }
  connectNoFollow(target).then(
    (socket) => {
      if (ctx.closed || res.destroyed) {
        socket.destroy();
        return;
      }
      ctx.track(socket);
      const headers = endToEndHeaders(req.rawHeaders, 'request').filter(
        (_, i, all) => all[i - (i % 2)]!.toLowerCase() !== 'x-unix-socket',
      );
      const upstream = http.request({
        method,
        path: originPath(req.url ?? '/'),
        setHost: false,
        createConnection: () => socket,
        headers: headers as unknown as http.OutgoingHttpHeaders,
      });
      relay(req, res, upstream);
    },
    () => send(res, textResponse(502, 'unix socket proxy failed')),
  );
}

/** The path and query of a request target (absolute-form or origin-form) to send to a local daemon. */
function originPath(url: string): string {
  if (url.startsWith('/')) return url;
  try {
    const u = new URL(url);
    return `${u.pathname}${u.search}`;
  } catch {
    return '/';
  }
}

/**
 * A request whose method token Node's parser cannot read (it knows only upper-case tokens; Codex takes `post` as a
 * method, which limited mode then blocks, T13). A refusal is answered and recorded like any other; a request that
 * would pass is a parse error, as it cannot be forwarded.
 */
export async function onOddMethod(
  ctx: HttpContext,
  socket: Duplex,
  method: string,
  url: string,
): Promise<void> {
  const t = readRequestTarget(url, undefined);
  if (!t.ok || t.host === '') {
    socket.end(PARSE_ERROR);
    return;
  }
  const r: AdmissionRequest = {
    protocol: 'http',
    host: t.host,
    port: t.port,
    method,
    client: clientAddr(socket as Partial<import('node:net').Socket>),
  };
  const a = await admitAndRecord(ctx, r, 'refusals');
  if (a.allowed) {
    socket.end(PARSE_ERROR);
    return;
  }
  socket.end(serialize(blockedHttpResponse(a, t.port), CLOSE));
}
