/**
 * CONNECT on the HTTP proxy port (network-proxy.md §4.3): the authority, admission, then `200 OK` before the dial
 * (as Codex) and a byte tunnel to a checked address. A refused or malformed CONNECT is answered and the connection
 * stays open for further requests.
 */
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { type AdmissionRequest, admitAndRecord, intercepts } from './admission.js';
import { tunnelFor } from './dial.js';
import { clientAddr } from './host.js';
import type { SocketEntry } from './httpContext.js';
import { limitStatus } from './limits.js';
import {
  blockedConnectResponse,
  CLOSE,
  emptyResponse,
  type ProxyResponse,
  serialize,
  textResponse,
} from './responses.js';
import { readConnectTarget } from './target.js';
import { tunnel } from './tunnel.js';

export const onConnect: SocketEntry = async (ctx, req, socket, head) => {
  ctx.adopt(socket);
  /** Answers and keeps the connection: the bytes after the CONNECT head are read as the next request. */
  const answer = (r: ProxyResponse) => {
    socket.write(serialize(r));
    if (head.length > 0) socket.unshift(head);
    (socket as Partial<Socket>).setTimeout?.(ctx.idleTimeoutMs);
    ctx.reattach(socket);
  };
  const limit = limitStatus(req);
  if (limit !== null) {
    socket.end(serialize(emptyResponse(limit), CLOSE));
    return;
  }
  const c = readConnectTarget(req.url ?? '');
  if (!c.ok) {
    answer(textResponse(400, c.error));
    return;
  }
  const r: AdmissionRequest = {
    protocol: 'https_connect',
    host: c.host,
    port: c.port,
    method: 'CONNECT',
    client: clientAddr(req.socket),
  };
  const a = await admitAndRecord(ctx, r);
  if (!a.allowed) {
    answer(blockedConnectResponse(a));
    return;
  }
  const target = { host: a.host, port: c.port, admitted: a, client: r.client };
  if (intercepts(ctx.policy, r)) {
    // Terminated here (issue 34): never an opaque tunnel. No place left: 503, and the connection stays.
    if (!ctx.mitm?.reserve()) {
      answer(textResponse(503, 'too many intercepted tunnels'));
      return;
    }
    socket.write(`HTTP/1.1 200 OK\r\ndate: ${new Date().toUTCString()}\r\n\r\n`);
    ctx.mitm.intercept(socket, head, target);
    return;
  }
  socket.write(`HTTP/1.1 200 OK\r\ndate: ${new Date().toUTCString()}\r\n\r\n`);
  if (ctx.closed) {
    socket.destroy();
    return;
  }
  let first = head;
  if (ctx.mitm?.wantsHost(a.host)) {
    // A host with hooks or a brokered credential: a ClientHello is intercepted, anything else stays opaque.
    const rest = await ctx.mitm.interceptIfTls(socket, head, target);
    if (rest === null) return;
    first = rest;
  }
  socket.pause();
  // The 200 went out before the dial (as Codex): a failed dial just closes the tunnel.
  let upstream: Duplex | null = null;
  try {
    upstream = await tunnelFor(ctx, socket, { host: a.host, addresses: a.addresses, port: c.port });
  } catch {
    socket.destroy();
  }
  if (upstream) tunnel(socket, upstream, first, ctx.track);
};
