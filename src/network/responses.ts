/**
 * Every answer the proxy makes up itself (network-proxy.md §4.3, §4.7, §4.10, §3.8, §4.4): the blocked responses
 * — 403 JSON for plain HTTP, 403 text for CONNECT, the SOCKS5 "not allowed" reply — and the text and empty
 * statuses. Built here once, then written to a Node `ServerResponse` (`send`) or as raw bytes on a socket
 * (`serialize`); proxy-generated header names are lower case, in the order Codex sends them.
 */
import { type OutgoingHttpHeaders, type ServerResponse, STATUS_CODES } from 'node:http';
import type { Refused } from './admission.js';
import { blockMessage, blockTag } from './events.js';
import { REP, reply } from './socksWire.js';

export interface ProxyResponse {
  status: number;
  headers: [string, string][];
  body: Buffer;
}

function respond(status: number, contentType: string, body: string, tag?: string): ProxyResponse {
  const buf = Buffer.from(body);
  const headers: [string, string][] = [['content-type', contentType]];
  if (tag !== undefined) headers.push(['x-proxy-error', tag]);
  headers.push(['content-length', String(buf.length)], ['date', new Date().toUTCString()]);
  return { status, headers, body: buf };
}

/** A `text/plain` answer: the 400s, 501, 502, 500 (§4.7 "other proxy-generated statuses"). */
export function textResponse(status: number, body: string): ProxyResponse {
  return respond(status, 'text/plain', body);
}

/** An answer with no body and no date: a parse error (400), or a limit (431, 414). Always sent with close. */
export function emptyResponse(status: 400 | 414 | 431): ProxyResponse {
  return { status, headers: [['content-length', '0']], body: Buffer.alloc(0) };
}

/**
 * A refused plain-HTTP request (§4.7): 403 `application/json` with the `x-proxy-error` tag and the body
 * `{status, host, reason, decision, source, protocol, port, message}` in that key order.
 */
export function blockedHttpResponse(a: Refused, port: number): ProxyResponse {
  const body = JSON.stringify({
    status: 'blocked',
    host: a.host,
    reason: a.reason,
    decision: a.decision,
    source: a.source,
    protocol: 'http',
    port,
    message: blockMessage(a.reason),
  });
  return respond(403, 'application/json', body, blockTag(a.reason));
}

/** A refused CONNECT (§4.3 step 3): 403 `text/plain`, the tag, the message as the body (no newline). */
export function blockedConnectResponse(a: Refused): ProxyResponse {
  return respond(403, 'text/plain', blockMessage(a.reason), blockTag(a.reason));
}

/** A refused unix-socket request (§3.8): the short JSON, without the optional details. */
export function blockedUnixSocketResponse(reason: 'method_not_allowed' | 'not_allowed'): ProxyResponse {
  const body = JSON.stringify({ status: 'blocked', host: 'unix-socket', reason });
  return respond(403, 'application/json', body, blockTag(reason));
}

/** The SOCKS5 answer to a refused CONNECT (§4.4): `05 02` (connection not allowed) with `BND 0.0.0.0:0`. */
export function blockedSocksReply(): Buffer {
  return reply(REP.notAllowed);
}

/** Writes `r` through Node's response (keep-alive and pipelining stay Node's), with exactly these headers. */
export function send(res: ServerResponse, r: ProxyResponse): void {
  res.sendDate = false;
  res.writeHead(r.status, r.headers as unknown as OutgoingHttpHeaders);
  res.end(r.body);
}

/** The bytes of `r` for a raw socket; `tail` is more header lines (`name: value\r\n` each), e.g. `CLOSE`. */
export function serialize(r: ProxyResponse, tail = ''): Buffer {
  let head = `HTTP/1.1 ${r.status} ${STATUS_CODES[r.status] ?? ''}\r\n`;
  for (const [k, v] of r.headers) head += `${k}: ${v}\r\n`;
  return Buffer.concat([Buffer.from(`${head}${tail}\r\n`, 'latin1'), r.body]);
}

/** The header line of an answer after which the proxy closes the connection. */
export const CLOSE = 'connection: close\r\n';

/** The answer to bytes the parser cannot read (§4.7): 400, empty body, then close. */
export const PARSE_ERROR = serialize(emptyResponse(400), CLOSE);
