/**
 * HTTP exchanges for the cluster-shaped tests: a request over a given socket (one dialed into a pod's network
 * namespace, or a plain loopback connection), with headers given as raw pairs so repeated headers, odd case and
 * upgrade requests go out exactly as written. The answer is read raw too: status, header pairs and body.
 */
import { connect, type Socket } from 'node:net';

export interface Exchange {
  status: number;
  /** Header pairs as received (names lowercased). */
  headers: [string, string][];
  body: string;
}

export function header(x: Exchange, name: string): string | undefined {
  return x.headers.find(([k]) => k === name.toLowerCase())?.[1];
}

/** A loopback connection to the port of an http:// or ws:// URL. */
export function dialUrl(url: string): Promise<Socket> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const s = connect({ host: u.hostname, port: Number(u.port) });
    s.once('connect', () => resolve(s)).once('error', reject);
  });
}

/**
 * Sends one request (`Connection: close` unless the headers say otherwise) and reads the whole answer until the
 * peer closes or Content-Length bytes arrived. An upgrade that succeeds (101) resolves with the head and an empty
 * body, and the socket is closed.
 */
export function exchange(
  socket: Socket,
  req: { method?: string; path?: string; headers?: [string, string][]; body?: string },
): Promise<Exchange> {
  const headers = req.headers ?? [];
  const has = (n: string) => headers.some(([k]) => k.toLowerCase() === n);
  const lines = [...headers];
  if (!has('connection')) lines.push(['Connection', 'close']);
  if (req.body !== undefined) lines.push(['Content-Length', String(Buffer.byteLength(req.body))]);
  const head = `${req.method ?? 'GET'} ${req.path ?? '/'} HTTP/1.1\r\n${lines.map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    let parsed: {
      status: number;
      headers: [string, string][];
      bodyAt: number;
      length: number | null;
    } | null = null;
    const finish = () => {
      if (!parsed)
        return reject(new Error(`connection closed before a response: ${JSON.stringify(buf.toString())}`));
      const end = parsed.length === null ? buf.length : parsed.bodyAt + parsed.length;
      const raw = buf.subarray(parsed.bodyAt, end);
      const chunked = parsed.headers.some(([k, v]) => k === 'transfer-encoding' && /chunked/i.test(v));
      resolve({
        status: parsed.status,
        headers: parsed.headers,
        body: (chunked ? dechunk(raw) : raw).toString(),
      });
      socket.destroy();
    };
    socket.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      if (!parsed) {
        const at = buf.indexOf('\r\n\r\n');
        if (at < 0) return;
        const [statusLine, ...rest] = buf.subarray(0, at).toString('latin1').split('\r\n');
        const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine!)?.[1] ?? 0);
        const pairs = rest.map((l) => {
          const i = l.indexOf(':');
          return [l.slice(0, i).trim().toLowerCase(), l.slice(i + 1).trim()] as [string, string];
        });
        const cl = pairs.find(([k]) => k === 'content-length');
        parsed = {
          status,
          headers: pairs,
          bodyAt: at + 4,
          length: cl ? Number(cl[1]) : status === 101 ? 0 : null,
        };
      }
      if (parsed.length !== null && buf.length >= parsed.bodyAt + parsed.length) finish();
    });
    socket.once('end', finish);
    socket.once('error', (e) => (parsed ? finish() : reject(e)));
    socket.resume();
    socket.write(head);
    if (req.body !== undefined) socket.write(req.body);
  });
}

/** The payload of a chunked body (RFC 9112 §7.1; extensions and trailers ignored). */
function dechunk(raw: Buffer): Buffer {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const eol = raw.indexOf('\r\n', at);
    if (eol < 0) break;
    const size = Number.parseInt(raw.subarray(at, eol).toString('latin1').split(';')[0]!, 16);
    if (!(size > 0)) break;
    parts.push(raw.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
  return Buffer.concat(parts);
}

/** The headers of a WebSocket upgrade request (a fixed key: these exchanges never speak WebSocket afterwards). */
export const UPGRADE_HEADERS: [string, string][] = [
  ['Connection', 'Upgrade'],
  ['Upgrade', 'websocket'],
  ['Sec-WebSocket-Version', '13'],
  ['Sec-WebSocket-Key', 'dGhlIHNhbXBsZSBub25jZQ=='],
];
