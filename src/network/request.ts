/**
 * Plain HTTP requests on the proxy port (network-proxy.md §4.2, §3.8, §4.10): the limits, the unix-socket branch,
 * the target, admission, then a block answer or forwarding. Also the requests whose method token Node's parser
 * refuses (`post`): those are admitted the same way and never forwarded.
 */
import http from 'node:http';
import type { Duplex } from 'node:stream';
import { admitAndRecord, plainHttpRequest } from './admission.js';
import { forward, relay } from './forward.js';
import { headerValue } from './headers.js';
import type { HttpContext } from './httpContext.js';
import { limitStatus } from './limits.js';
import { plainCarrier } from './mitm/broker.js';
import {
  blockedHttpResponse,
  CLOSE,
  emptyResponse,
  PARSE_ERROR,
  send,
  serialize,
  textResponse,
} from './responses.js';
import { readRequestTarget } from './target.js';
import { connectNoFollow } from './unixSocket.js';
import { admitUnixSocket, originPath, unixSocketRequestHeaders } from './unixSocketAdmission.js';

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
  const r = plainHttpRequest({ ...t, path: t.target.path }, req.method ?? 'GET', req.socket);
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
 * §3.8: the decision is admitUnixSocket's (unixSocketAdmission.ts); an allowed path gets the request forwarded over
 * a socket opened without following symlinks (unixSocket.ts), or 502 `unix socket proxy failed` when it cannot be.
 */
function onUnixSocket(
  ctx: HttpContext,
  req: http.IncomingMessage,
  res: http.ServerResponse,
  header: string | string[],
): void {
  const d = admitUnixSocket(ctx, req, header);
  if (!d.ok) {
    send(res, d.response);
    return;
  }
  connectNoFollow(d.path).then(
    (socket) => {
      if (ctx.closed || res.destroyed) {
        socket.destroy();
        return;
      }
      ctx.track(socket);
      const upstream = http.request({
        method: req.method ?? 'GET',
        path: originPath(req.url ?? '/'),
        setHost: false,
        createConnection: () => socket,
        headers: unixSocketRequestHeaders(req.rawHeaders) as unknown as http.OutgoingHttpHeaders,
      });
      relay(req, res, upstream);
    },
    () => send(res, textResponse(502, 'unix socket proxy failed')),
  );
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
  const r = plainHttpRequest(
    { ...t, path: t.target.path },
    method,
    socket as Partial<import('node:net').Socket>,
  );
  const a = await admitAndRecord(ctx, r, 'refusals');
  if (a.allowed) {
    socket.end(PARSE_ERROR);
    return;
  }
  socket.end(serialize(blockedHttpResponse(a, t.port), CLOSE));
}
