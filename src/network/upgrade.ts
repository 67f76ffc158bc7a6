/**
 * A plain-HTTP upgrade through the proxy (`ws://`, as http-proxy-agent sends it): the same target and admission as a
 * request, then the request head goes in origin form to the checked address and the two sockets are piped. With
 * `x-unix-socket` (§3.8) the same decision as a plain unix-socket request, and the same pipe to the daemon.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { admitAndRecord, plainHttpRequest } from './admission.js';
import { tunnelFor } from './dial.js';
import { headerValue } from './headers.js';
import type { HttpContext, SocketEntry } from './httpContext.js';
import { limitStatus } from './limits.js';
import { blockedHttpResponse, CLOSE, emptyResponse, serialize, textResponse } from './responses.js';
import { readRequestTarget } from './target.js';
import { tunnel } from './tunnel.js';
import { connectNoFollow } from './unixSocket.js';
import { admitUnixSocket, originPath } from './unixSocketAdmission.js';

/**
 * The head sent upstream: origin form, the client's headers but the proxy's own (and `x-unix-socket`, which names the
 * socket and is not for the daemon), `host` added when missing and known.
 */
function upstreamHead(
  method: string,
  path: string,
  raw: readonly string[],
  authority: string | null,
): string {
  let text = `${method} ${path} HTTP/1.1\r\n`;
  let hasHost = false;
  for (let i = 0; i < raw.length; i += 2) {
    const lk = raw[i]!.toLowerCase();
    if (
      lk === 'proxy-authorization' ||
      lk === 'proxy-connection' ||
      lk === 'keep-alive' ||
      lk === 'x-unix-socket'
    )
      continue;
    if (lk === 'host') hasHost = true;
    text += `${raw[i]}: ${raw[i + 1]}\r\n`;
  }
  if (!hasHost && authority !== null) text = text.replace('\r\n', `\r\nhost: ${authority}\r\n`);
  return `${text}\r\n`;
}

/** What an upgrade goes to: the opened upstream and the head to send it first, or the answer already given. */
type Opened = { upstream: Duplex; head: string } | null;

/** A TCP upgrade: the target, admission, the tunnel through the dialer (or an upstream proxy). */
async function tcpUpstream(ctx: HttpContext, req: IncomingMessage, socket: Duplex): Promise<Opened> {
  const fail = (status: number, body: string) => socket.end(serialize(textResponse(status, body), CLOSE));
  const t = readRequestTarget(req.url ?? '', headerValue(req, 'host'));
  if (!t.ok) {
    fail(400, t.error);
    return null;
  }
  if (t.target.scheme === 'https' || t.target.scheme === 'wss') {
    fail(501, 'use CONNECT for TLS upgrades');
    return null;
  }
  const method = req.method ?? 'GET';
  const r = plainHttpRequest({ ...t, path: t.target.path }, method, req.socket);
  const a = await admitAndRecord(ctx, r);
  if (!a.allowed) {
    socket.end(serialize(blockedHttpResponse(a, t.port), CLOSE));
    return null;
  }
  let upstream: Duplex | null;
  try {
    upstream = await tunnelFor(ctx, socket, { host: a.host, addresses: a.addresses, port: t.port });
  } catch {
    fail(502, 'upstream failure');
    return null;
  }
  if (!upstream) return null;
  return { upstream, head: upstreamHead(method, t.target.path, req.rawHeaders, t.target.authority) };
}

/**
 * An upgrade with `x-unix-socket` (§3.8): the same decision as a plain request (admitUnixSocket: limited mode's method
 * rule, the list, audited), the socket opened without following symlinks, 502 when it cannot be.
 */
async function unixSocketUpstream(
  ctx: HttpContext,
  req: IncomingMessage,
  socket: Duplex,
  header: string | string[],
): Promise<Opened> {
  const d = admitUnixSocket(ctx, req, header);
  if (!d.ok) {
    socket.end(serialize(d.response, CLOSE));
    return null;
  }
  let upstream: Duplex;
  try {
    upstream = await connectNoFollow(d.path);
  } catch {
    socket.end(serialize(textResponse(502, 'unix socket proxy failed'), CLOSE));
    return null;
  }
  if (socket.destroyed || ctx.closed) {
    upstream.destroy();
    return null;
  }
  ctx.track(upstream);
  return {
    upstream,
    head: upstreamHead(req.method ?? 'GET', originPath(req.url ?? '/'), req.rawHeaders, null),
  };
}

/**
 * Every upgrade, TCP or unix socket: the limits, then the upstream opened by its kind, then one tunnel (bounded by
 * stream backpressure; either side's close or error closes both).
 */
export const onUpgrade: SocketEntry = async (ctx, req, socket, head) => {
  ctx.adopt(socket);
  const limit = limitStatus(req);
  if (limit !== null) {
    socket.end(serialize(emptyResponse(limit), CLOSE));
    return;
  }
  const unixSocket = req.headers['x-unix-socket'];
  const opened =
    unixSocket === undefined
      ? await tcpUpstream(ctx, req, socket)
      : await unixSocketUpstream(ctx, req, socket, unixSocket);
  if (!opened) return;
  opened.upstream.write(opened.head);
  tunnel(socket, opened.upstream, head, ctx.track);
};
