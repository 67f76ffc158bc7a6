/**
 * A plain-HTTP upgrade through the proxy (`ws://`, as http-proxy-agent sends it): the same target and admission as a
 * request, then the request head goes in origin form to the checked address and the two sockets are piped.
 */
import type { Duplex } from 'node:stream';
import { type AdmissionRequest, admitAndRecord } from './admission.js';
import { tunnelFor } from './dial.js';
import { headerValue } from './headers.js';
import { clientAddr } from './host.js';
import type { SocketEntry } from './httpContext.js';
import { limitStatus } from './limits.js';
import { blockedHttpResponse, CLOSE, emptyResponse, serialize, textResponse } from './responses.js';
import { readRequestTarget } from './target.js';
import { tunnel } from './tunnel.js';

/** The head sent upstream: origin form, the client's headers but the proxy's own, `host` added when missing. */
function upstreamHead(method: string, path: string, raw: readonly string[], authority: string): string {
  let text = `${method} ${path} HTTP/1.1\r\n`;
  let hasHost = false;
  for (let i = 0; i < raw.length; i += 2) {
    const lk = raw[i]!.toLowerCase();
    if (lk === 'proxy-authorization' || lk === 'proxy-connection' || lk === 'keep-alive') continue;
    if (lk === 'host') hasHost = true;
    text += `${raw[i]}: ${raw[i + 1]}\r\n`;
  }
  if (!hasHost) text = text.replace('\r\n', `\r\nhost: ${authority}\r\n`);
  return `${text}\r\n`;
}

export const onUpgrade: SocketEntry = async (ctx, req, socket, head) => {
  ctx.adopt(socket);
  const fail = (status: number, body: string) => socket.end(serialize(textResponse(status, body), CLOSE));
  const limit = limitStatus(req);
  if (limit !== null) {
    socket.end(serialize(emptyResponse(limit), CLOSE));
    return;
  }
  const t = readRequestTarget(req.url ?? '', headerValue(req, 'host'));
  if (!t.ok) {
    fail(400, t.error);
    return;
  }
  if (t.target.scheme === 'https' || t.target.scheme === 'wss') {
    fail(501, 'use CONNECT for TLS upgrades');
    return;
  }
  const method = req.method ?? 'GET';
  const r: AdmissionRequest = {
    protocol: 'http',
    host: t.host,
    port: t.port,
    method,
    client: clientAddr(req.socket),
  };
  const a = await admitAndRecord(ctx, r);
  if (!a.allowed) {
    socket.end(serialize(blockedHttpResponse(a, t.port), CLOSE));
    return;
  }
  let upstream: Duplex | null;
  try {
    upstream = await tunnelFor(ctx, socket, { host: a.host, addresses: a.addresses, port: t.port });
  } catch {
    fail(502, 'upstream failure');
    return;
  }
  if (!upstream) return;
  upstream.write(upstreamHead(method, t.target.path, req.rawHeaders, t.target.authority));
  tunnel(socket, upstream, head, ctx.track);
};
