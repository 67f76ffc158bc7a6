/**
 * Differential test of the proxy's fast-path request parser (src/network/fastHead.ts) against Node's own (llhttp,
 * configured as the proxy configures it): random and adversarial request streams — CL/TE smuggling, obs-fold,
 * pipelining, odd whitespace and line ends, absolute vs origin form, Host mismatches, unknown methods, huge heads — go
 * through both. Wherever the fast path takes a request, llhttp must have parsed the same request at the same place:
 * same method, target, Host, forwarded headers and body bytes (the framing), within the Node path's limits, and the
 * admission decision taken on each side's reading must be the same. Where the fast path declines, Node's parser gets
 * the bytes in the real proxy, so there is nothing to compare.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { after, before, test } from 'node:test';
import { admit } from '../../src/network/admission.js';
import { parseNetworkConfig } from '../../src/network/config.js';
import { readFastHead } from '../../src/network/fastHead.js';
import { forwardedRequestHeaders } from '../../src/network/headers.js';
import { limitStatus, PARSER_MAX_HEADERS_COUNT, PARSER_OPTIONS } from '../../src/network/limits.js';
import { PolicyEngine } from '../../src/network/policy.js';
import { readRequestTarget } from '../../src/network/target.js';

// ---- Node's side: a real server on loopback with the proxy's parser options ----------------------------------

type NodeEvent =
  | {
      kind: 'request';
      method: string;
      url: string;
      version: string;
      rawHeaders: string[];
      chunks: Buffer[];
      req: http.IncomingMessage;
    }
  | { kind: 'error'; code: string }
  | { kind: 'connect' | 'upgrade'; method: string; url: string };

let server: http.Server;
let port = 0;
const pending = new Map<number, { events: NodeEvent[]; done: () => void }>();

function slot(socket: net.Socket) {
  return pending.get(socket.remotePort ?? -1);
}

before(async () => {
  server = http.createServer({ ...PARSER_OPTIONS });
  server.maxHeadersCount = PARSER_MAX_HEADERS_COUNT;
  server.on('connection', (socket) => {
    const remote = socket.remotePort ?? -1;
    socket.on('close', () => pending.get(remote)?.done());
  });
  server.on('request', (req, res) => {
    const chunks: Buffer[] = [];
    slot(req.socket)?.events.push({
      kind: 'request',
      method: req.method ?? '',
      url: req.url ?? '',
      version: req.httpVersion,
      rawHeaders: req.rawHeaders,
      chunks,
      req,
    });
    req.on('data', (d: Buffer) => chunks.push(d));
    req.on('end', () => res.end());
    req.on('error', () => {});
  });
  server.on('clientError', (err: NodeJS.ErrnoException, socket: net.Socket) => {
    slot(socket)?.events.push({ kind: 'error', code: err.code ?? String(err) });
    // Later: the bytes of a request parsed before the error are still being delivered to its handlers.
    setImmediate(() => socket.destroy());
  });
  for (const kind of ['connect', 'upgrade'] as const) {
    server.on(kind, (req: http.IncomingMessage, socket: net.Socket) => {
      slot(socket)?.events.push({ kind, method: req.method ?? '', url: req.url ?? '' });
      socket.destroy();
    });
  }
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  port = (server.address() as net.AddressInfo).port;
});

after(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});

/** What llhttp makes of `bytes` sent on one connection (then half-closed). */
async function nodeParse(bytes: Buffer): Promise<NodeEvent[]> {
  const client = net.connect({ port, host: '127.0.0.1' });
  client.on('error', () => {});
  client.resume();
  await new Promise<void>((r) => client.once('connect', () => r()));
  const events: NodeEvent[] = [];
  const closed = new Promise<void>((done) => pending.set(client.localPort!, { events, done }));
  client.end(bytes);
  await closed;
  pending.delete(client.localPort!);
  client.destroy();
  return events;
}

// ---- the fast path's side ------------------------------------------------------------------------------------

interface FastRequest {
  method: string;
  url: string;
  host: string;
  port: number;
  headers: string[];
  body: Buffer;
}

/** The requests the fast path takes from the start of `bytes`, in order, until it would hand the rest to Node. */
function fastParse(bytes: Buffer): FastRequest[] {
  const out: FastRequest[] = [];
  let buf = bytes;
  for (;;) {
    const end = buf.indexOf('\r\n\r\n');
    if (end < 0) return out;
    const h = readFastHead(buf, end);
    if (h === null || buf.length < h.headLength + h.bodyLength) return out;
    const total = h.headLength + h.bodyLength;
    out.push({ ...h, body: buf.subarray(h.headLength, total) });
    buf = buf.subarray(total);
  }
}

// ---- the decision on each side's reading ---------------------------------------------------------------------

const policy = new PolicyEngine(
  parseNetworkConfig({
    network: {
      enabled: true,
      mode: 'limited',
      domains: { localhost: 'allow', 'a.test': 'allow', 'evil.test': 'deny', '127.0.0.1': 'allow' },
    },
  }),
  { resolver: async () => ['127.0.0.1'] },
);

/** The admission of a plain request, as the proxy takes it on either path. */
async function decisionOf(method: string, host: string, port: number): Promise<string> {
  const a = await admit(policy, { protocol: 'http', host, port, method, client: null });
  return a.allowed ? `allow ${a.addresses.join(',')}` : `deny ${a.reason}`;
}

function headerOf(raw: string[], name: string): string | undefined {
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === name) return raw[i + 1];
  return undefined;
}

/** Runs one case through both parsers; returns how many requests the fast path took. */
async function compare(bytes: Buffer, label: string): Promise<number> {
  const fast = fastParse(bytes);
  if (fast.length === 0) return 0;
  const node = await nodeParse(bytes);
  const show = () => `${label}\n  bytes: ${JSON.stringify(bytes.toString('latin1').slice(0, 400))}`;
  for (let i = 0; i < fast.length; i++) {
    const f = fast[i]!;
    const n = node[i];
    assert.ok(n, `fast path took request #${i} but llhttp saw nothing there: ${show()}`);
    assert.equal(
      n.kind,
      'request',
      `fast path took request #${i}, llhttp gave ${n.kind === 'request' ? `${n.method} ${n.url}` : JSON.stringify(n)}: ${show()}`,
    );
    if (n.kind !== 'request') continue;
    assert.equal(n.version, '1.1', `version of #${i}: ${show()}`);
    assert.equal(n.method, f.method, `method of #${i}: ${show()}`);
    assert.equal(n.url, f.url, `target of #${i}: ${show()}`);
    assert.equal(limitStatus(n), null, `#${i} is past the Node path's limits: ${show()}`);
    const body = Buffer.concat(n.chunks);
    assert.ok(n.req.complete, `llhttp did not see #${i} complete: ${show()}`);
    assert.ok(
      body.equals(f.body),
      `body (framing) of #${i}: node ${body.length} B, fast ${f.body.length} B: ${show()}`,
    );
    const t = readRequestTarget(n.url, headerOf(n.rawHeaders, 'host'));
    assert.ok(t.ok, `the Node path rejects #${i} (${t.ok ? '' : t.error}): ${show()}`);
    if (!t.ok) continue;
    assert.deepEqual([t.host, t.port], [f.host, f.port], `host of #${i}: ${show()}`);
    assert.deepEqual(
      forwardedRequestHeaders(n.rawHeaders, t.target.authority),
      f.headers,
      `forwarded headers of #${i}: ${show()}`,
    );
    assert.equal(
      await decisionOf(n.method, t.host, t.port),
      await decisionOf(f.method, f.host, f.port),
      `decision of #${i}: ${show()}`,
    );
  }
  return fast.length;
}

// ---- cases ---------------------------------------------------------------------------------------------------

/** Small seeded PRNG (mulberry32), so a failure names a reproducible seed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function generator(seed: number) {
  const r = rng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const chance = (p: number) => r() < p;
  /** Mostly the ordinary value, sometimes one of the odd ones: most cases stay close enough to valid to be taken. */
  const mostly = <T>(usual: readonly T[], odd: readonly T[], p = 0.85): T =>
    chance(p) ? pick(usual) : pick(odd);
  const method = () =>
    mostly(
      ['GET', 'GET', 'GET', 'HEAD', 'POST', 'PUT', 'OPTIONS', 'DELETE', 'PATCH'],
      [...http.METHODS, 'CONNECT', 'get', 'Get', 'FOO', 'GETX', 'PRI', 'BREW', 'G\u00c9T', 'GET\u0000'],
    );
  const host = () =>
    mostly(
      ['localhost', 'a.test', '127.0.0.1', 'evil.test'],
      [
        'EVIL.TEST.',
        'A.Test',
        '[::1]',
        '0x7f.1',
        '2130706433',
        '',
        'user@a.test',
        'user:pw@localhost',
        'a.test.',
        'a b',
        'a\tb',
        'b\u00fccher.test',
        'a%2etest',
        'a_b.test',
        '-a.test',
        '[::ffff:7f00:1]',
        'a.test@evil.test',
        'a..test',
        '[::1',
        'a.test]',
        'a.test#x',
        'a"b.test',
        'a<b>.test',
        'a\\b.test',
        'a^b.test',
        'a`b.test',
        'a{b}.test',
        'a|b.test',
        "a'b.test",
        'a%41.test',
        'a\\b@localhost',
        'a"b@localhost',
        'a{b}@a.test',
        'a|b@a.test',
        'a^b@a.test',
        'a`b@a.test',
        'a<b>@a.test',
        'a b@a.test',
      ],
      0.8,
    );
  const port = () =>
    mostly(['', '', ':80', ':8080'], [':0', ':65535', ':65536', ':99999', ':', ':8o', ': 80', ':+80']);
  const path = () =>
    mostly(
      ['/', '/', '/p?q=1', '/a/b', '', '/a.b/c-d_e~f', "/!$&'()*+,;=:@", '/%41'],
      [
        '/#frag',
        '?q',
        '/%00',
        '/\u00fc',
        '/a b',
        '/\u007f',
        '/*',
        '/"<>',
        '/a#b',
        '/%zz',
        '/a{b}',
        '/a|b',
        '/a\\b',
        '/a^b',
        '/a`b',
        '/a[b]',
      ],
      0.8,
    );
  const scheme = () => mostly(['http'], ['HTTP', 'https', 'ws', 'ftp', 'Http', 'http:/', 'htp'], 0.9);
  const version = () =>
    mostly(
      ['HTTP/1.1'],
      ['HTTP/1.0', 'HTTP/1.2', 'http/1.1', 'HTTP/2.0', 'HTTP/1.1 ', 'HTTP/1', 'HTTP/1.10'],
      0.9,
    );
  const sep = () => mostly([' '], ['  ', '\t', ' \t'], 0.95);
  const eol = () => mostly(['\r\n'], ['\n', '\r', '\r\r\n'], 0.98);

  function target(): { url: string; authority: string } {
    const authority = `${host()}${port()}`;
    const form = r();
    if (form < 0.9) return { url: `${scheme()}://${authority}${path()}`, authority };
    if (form < 0.96) return { url: pick(['/', '/x', '*', '/?a']), authority };
    return { url: authority, authority };
  }

  function hostHeader(authority: string): string[] {
    // What a client would put there: the authority up to its end, without any user@.
    const bare = authority.replace(/[/?#].*$/, '').replace(/^.*@/, '');
    const v = r();
    if (v < 0.55) return [`Host: ${bare}`];
    if (v < 0.62) return [];
    if (v < 0.68) return [`Host: ${bare.toUpperCase()}`];
    if (v < 0.72) return ['Host: other.test'];
    if (v < 0.75) return [`Host: ${bare}`, `Host: ${bare}`];
    if (v < 0.78) return [`Host: ${bare}`, 'Host: evil.test'];
    if (v < 0.8) return ['Host:'];
    if (v < 0.83) return [`host:${bare}`];
    if (v < 0.86) return [`Host : ${bare}`];
    if (v < 0.88) return [`Host:\t${bare}\t`];
    if (v < 0.9) return ['Host: evil.test', ` ${bare}`];
    if (v < 0.92) return [`Host: ${bare}:80`];
    if (v < 0.94) return [`Host: ${bare}.`];
    return [`HOST: ${bare}`];
  }

  function framing(body: Buffer): { headers: string[]; body: Buffer } {
    const n = body.length;
    const v = r();
    if (v < 0.45) return { headers: [], body: Buffer.alloc(0) };
    if (v < 0.7) return { headers: [`Content-Length: ${n}`], body };
    const te = 'Transfer-Encoding: chunked';
    const chunked = Buffer.from(`${n.toString(16)}\r\n${body.toString('latin1')}\r\n0\r\n\r\n`, 'latin1');
    const variants: [string[], Buffer][] = [
      [['Content-Length: 0'], Buffer.alloc(0)],
      [[`Content-Length: ${n}`, `Content-Length: ${n}`], body],
      [[`Content-Length: ${n}`, `Content-Length: ${n + 1}`], body],
      [[`Content-Length: ${n}, ${n}`], body],
      [[`Content-Length:  ${n} `], body],
      [[`Content-Length: +${n}`], body],
      [[`Content-Length: -${n}`], body],
      [[`Content-Length: 0x${n.toString(16)}`], body],
      [['Content-Length: 99999999999999999999'], body],
      [['Content-Length:'], body],
      [[`Content-Length: ${n + 5}`], body],
      [[`Content-Length: ${Math.max(0, n - 3)}`], body],
      [[te], chunked],
      [[te, `Content-Length: ${n}`], chunked],
      [[`Content-Length: ${chunked.length}`, te], chunked],
      [['Transfer-Encoding: identity'], body],
      [['Transfer-Encoding:  chunked'], chunked],
      [['Transfer-Encoding: xchunked'], chunked],
      [['Transfer-Encoding: chunked, gzip'], chunked],
      [['Transfer-Encoding: gzip, chunked'], chunked],
      [['Transfer-Encoding: chunked', 'Transfer-Encoding: chunked'], chunked],
      [['Transfer-Encoding:\tchunked'], chunked],
      [['Transfer-Encoding : chunked'], chunked],
      [['X: y', ' Transfer-Encoding: chunked'], chunked],
      [[`Content-Length: ${n}`, ` ${n}`], body],
      [[`content-length: ${n}`], body],
      [[`CONTENT-LENGTH: ${n}`], body],
      [[`Content-Length\t: ${n}`], body],
      [[`Content-Length:${n}`], body],
      [[`Content-Length: 00${n}`], body],
      [[`Content-Length: ${n}\t`], body],
      [[`Content-Length: ${n}`, 'Content-Length: 0'], body],
    ];
    const [headers, b] = pick(variants);
    return { headers, body: b };
  }

  function extraHeaders(): string[] {
    const out: string[] = [];
    const count = Math.floor(r() * 5);
    for (let i = 0; i < count; i++) {
      out.push(
        mostly(
          [
            'Accept: */*',
            'User-Agent: differential/1',
            'X-Keep: 1',
            'Proxy-Authorization: Basic eDp5',
            'Connection: keep-alive',
            'Proxy-Connection: keep-alive',
            'Keep-Alive: timeout=5',
            'X-Empty:',
            'X-Tab: a\tb',
            'X-Spaces:    padded    ',
            'X-Tabs:\t\tpadded\t\t',
            'X-Mixed: \t padded \t ',
            'Connection: Keep-Alive',
            'Connection: keep-alive,',
            'Connection:  keep-alive  ',
            "X-Token!#$%&'*+-.^_`|~: 1",
            'Cookie: a=1; b=2',
            'X-Quote: "a,b"',
          ],
          [
            'Connection: close',
            'Connection: Upgrade',
            'Connection: keep-alive, x-keep',
            'Connection: ,keep-alive',
            'Connection:',
            'Proxy-Connection: close',
            'TE: trailers',
            'Trailer: x',
            'Upgrade: websocket',
            'Expect: 100-continue',
            'X-Unix-Socket: /run/x.sock',
            ' folded',
            '\tfolded',
            'Garbage',
            ': novalue',
            'X Y: 1',
            'X@Y: 1',
            'X-Nul: a\u0000b',
            'X-Del: a\u007fb',
            'X-High: caf\u00e9',
            'X-Cr: a\rb',
            'X-Lf: a\nb',
          ],
          0.8,
        ),
      );
    }
    if (chance(0.03)) for (let i = 0; i < 60 + Math.floor(r() * 50); i++) out.push(`X-N${i}: v`);
    if (chance(0.03)) out.push(`X-Big: ${'b'.repeat(6000 + Math.floor(r() * 12000))}`);
    return out;
  }

  function one(): Buffer {
    const { url, authority } = target();
    const bodyText = chance(0.2) ? 'GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n' : 'hello';
    const f = framing(Buffer.from(bodyText, 'latin1'));
    const lines = [`${method()}${sep()}${url}${sep()}${version()}`];
    const headers = [...hostHeader(authority), ...f.headers, ...extraHeaders()];
    for (let i = headers.length - 1; i > 0; i--) {
      if (chance(0.3)) {
        const j = Math.floor(r() * (i + 1));
        [headers[i], headers[j]] = [headers[j]!, headers[i]!];
      }
    }
    lines.push(...headers);
    let text = chance(0.03) ? '\r\n' : '';
    for (const l of lines) text += l + eol();
    text += eol();
    return Buffer.concat([Buffer.from(text, 'latin1'), f.body]);
  }

  return (): Buffer => {
    const n = chance(0.7) ? 1 : chance(0.7) ? 2 : 3;
    const parts: Buffer[] = [];
    for (let i = 0; i < n; i++) parts.push(one());
    if (chance(0.05))
      parts.push(Buffer.from(pick(['garbage\r\n\r\n', '\r\n', 'GET http://a.test/ HTTP/1.1\r\n'])));
    return Buffer.concat(parts);
  };
}

/** Hand-written cases: the classic smuggling and parser-confusion shapes, each on an otherwise valid request. */
const ADVERSARIAL: string[] = [
  // CL.TE / TE.CL / TE.TE
  'POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 13\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nSMUGGLED',
  'POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n8\r\nSMUGGLED\r\n0\r\n\r\n',
  'POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\nTransfer-encoding: x\r\n\r\n0\r\n\r\n',
  'POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding : chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n',
  'POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nhello',
  'POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello',
  'POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5, 5\r\n\r\nhello',
  'POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length:\r\n 5\r\n\r\nhello',
  'POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX: a\r\nContent-Length: 5\r\n\r\nhelloGET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n',
  'GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 0\r\n\r\nGET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n',
  'GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 44\r\n\r\nGET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n',
  // obs-fold and whitespace
  'GET http://a.test/ HTTP/1.1\r\nHost: evil.test\r\n a.test\r\n\r\n',
  'GET http://a.test/ HTTP/1.1\r\nX: 1\r\n Host: evil.test\r\n\r\n',
  'GET http://a.test/ HTTP/1.1\r\n Host: a.test\r\n\r\n',
  'GET http://a.test/ HTTP/1.1\r\nHost : a.test\r\n\r\n',
  'GET  http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'GET http://a.test/  HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'GET\thttp://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'GET http://a.test/ HTTP/1.1 \r\nHost: a.test\r\n\r\n',
  ' GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
  '\r\nGET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'GET http://a.test/ HTTP/1.1\nHost: a.test\n\n',
  'GET http://a.test/ HTTP/1.1\r\nHost: a.test\n\r\n',
  'GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\rX: 1\r\n\r\n',
  'GET http://a.test/ HTTP/1.1\r\nHost: a.te\u0000st\r\n\r\n',
  // methods Node does not know, and method case
  'FOO http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'BREW http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'get http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'PRI http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'CONNECT http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'SOURCE http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'QUERY http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
  // target forms and the Host cross-check
  'GET / HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'GET a.test:80 HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'GET http://a.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n',
  'GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nHost: evil.test\r\n\r\n',
  'GET http://a.test:8080/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'GET http://a.test/ HTTP/1.1\r\nHost: a.test:80\r\n\r\n',
  'GET http://evil.test@a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'GET http://a.test@evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n',
  'GET http://a.test#@evil.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'GET http://a.test\\@evil.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'GET http://evil.test\\@a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'GET http://evil.test\\@a.test/ HTTP/1.1\r\n\r\n',
  'GET http://a.test%2f@evil.test/ HTTP/1.1\r\n\r\n',
  'GET http://[::1]:80/ HTTP/1.1\r\nHost: [::1]\r\n\r\n',
  'GET http:/a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'GET HTTP://A.TEST/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'GET http://a.test/ HTTP/1.0\r\nHost: a.test\r\n\r\n',
  'GET http://a.test/ HTTP/1.1\r\n\r\n',
  // connection options, upgrades, expect
  'GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n',
  'GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n',
  'GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\n\r\n',
  'POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello',
  'GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nConnection: keep-alive, Host\r\n\r\n',
  // pipelining
  'GET http://a.test/1 HTTP/1.1\r\nHost: a.test\r\n\r\nGET http://localhost/2 HTTP/1.1\r\nHost: localhost\r\n\r\nPOST http://a.test/3 HTTP/1.1\r\nHost: a.test\r\nContent-Length: 2\r\n\r\nhi',
  'GET http://a.test/1 HTTP/1.1\r\nHost: a.test\r\n\r\nGET / HTTP/1.1\r\nHost: a.test\r\n\r\n',
  'GET http://a.test/1 HTTP/1.1\r\nHost: a.test\r\n\r\n\r\nGET http://a.test/2 HTTP/1.1\r\nHost: a.test\r\n\r\n',
  // huge heads
  `GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX-Big: ${'b'.repeat(8100)}\r\n\r\n`,
  `GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX-Big: ${'b'.repeat(17000)}\r\n\r\n`,
  `GET http://a.test/${'p'.repeat(70000)} HTTP/1.1\r\nHost: a.test\r\n\r\n`,
  `GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n${'X: v\r\n'.repeat(101)}\r\n`,
  `GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n${'X: v\r\n'.repeat(62)}\r\n`,
];

test('adversarial request heads: wherever the fast path takes a request, llhttp reads the same one', async () => {
  let taken = 0;
  for (const [i, text] of ADVERSARIAL.entries())
    taken += await compare(Buffer.from(text, 'latin1'), `case ${i}`);
  // The comparison means something only if the fast path takes some of these.
  assert.ok(taken >= 8, `fast path took ${taken} requests`);
});

test('random request streams (seeded): the fast path and llhttp agree on every request the fast path takes', async () => {
  const seed = Number(process.env.FASTHEAD_SEED ?? 20260511);
  const next = generator(seed);
  let taken = 0;
  const cases = Number(process.env.FASTHEAD_CASES ?? 3000);
  for (let i = 0; i < cases; i++) taken += await compare(next(), `seed ${seed}, case ${i}`);
  assert.ok(taken >= cases / 10, `fast path took only ${taken} requests of ${cases} cases`);
  if (process.env.FASTHEAD_CASES)
    console.log(`seed ${seed}: the fast path took ${taken} requests in ${cases} cases`);
});
