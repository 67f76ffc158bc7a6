/**
 * TLS interception of an admitted tunnel (issue 34, items 3, 4 and 7): the proxy completes the client's handshake
 * with a leaf of its CA for the tunnel's host (ALPN http/1.1 only), reads the HTTP/1.1 requests inside with Node's
 * parser, decides each one, and forwards the allowed ones over its own TLS connection to the checked addresses of the
 * tunnel (through the proxy's dialer, so an upstream proxy applies), verified against the system roots and the
 * server's startup CA files, never its own CA.
 *
 * Each request inside, in this order (Codex's): a nested CONNECT is 405; a Host (or absolute-form authority) that is
 * not the tunnel's target is 400 `host mismatch`; then the one admission (`admitAndRecord`, protocol `https`, the
 * request's method and path, the tunnel's admission): a hook of the host may refuse (`mitm_hook_denied`) or rewrite
 * headers; limited mode refuses other methods than GET/HEAD/OPTIONS with the plain-HTTP 403 (`method_not_allowed`);
 * a tunnel the decider admitted or deferred asks it for the request, so endpoint rules apply inside TLS. TRACE and
 * TRACK are refused (405). A WebSocket upgrade is refused in limited mode and spliced after the request head in full
 * mode. An upstream failure is 502. Every decided request is an audit event with protocol `https`, its method, path
 * and receipt.
 *
 * Limits: 256 intercepted tunnels per proxy (the caller answers 503 when `reserve` fails), a 10 s handshake, Node's
 * parser with the proxy port's head limits, and streams piped with backpressure (nothing is buffered whole).
 */
import http from 'node:http';
import https from 'node:https';
import { isIP, Socket } from 'node:net';
import { Duplex } from 'node:stream';
import tls from 'node:tls';
import { type AdmissionPolicy, type AdmissionRequest, type Admitted, admitAndRecord } from '../admission.js';
import { type Dialer, openTunnel } from '../dial.js';
import { relay } from '../forward.js';
import { forwardedRequestHeaders } from '../headers.js';
import { limitStatus, PARSER_MAX_HEADERS_COUNT, PARSER_OPTIONS } from '../limits.js';
import type { Recorder } from '../recorder.js';
import {
  blockedHttpResponse,
  CLOSE,
  emptyResponse,
  PARSE_ERROR,
  send,
  serialize,
  textResponse,
} from '../responses.js';
import { hostHeaderMatches, parseAbsoluteTarget } from '../target.js';
import { tunnel } from '../tunnel.js';
import type { UpstreamProxies } from '../upstream.js';
import type { MitmTrust } from './trust.js';

export const MAX_INTERCEPTED_TUNNELS = 256;
/** The longest path an audit event keeps of an intercepted request. */
const MAX_AUDIT_PATH = 2048;
export const HANDSHAKE_TIMEOUT_MS = 10_000;
/** A client that says nothing this long after its tunnel opened is not starting TLS (a server-first protocol). */
export const PEEK_TIMEOUT_MS = 1_000;
/** The first byte of a TLS record carrying a handshake (a ClientHello). */
const TLS_HANDSHAKE = 0x16;

/** The client's first bytes (`head` if it already sent some), or none at the timeout or the end; `s` left paused. */
function firstBytes(s: Duplex, head: Buffer, timeoutMs: number): Promise<Buffer> {
  if (head.length > 0) return Promise.resolve(head);
  return new Promise((resolve) => {
    const done = (b: Buffer) => {
      clearTimeout(timer);
      s.off('data', onData);
      s.off('end', onEnd);
      s.off('close', onEnd);
      s.pause();
      resolve(b);
    };
    const onData = (d: Buffer) => done(d);
    const onEnd = () => done(Buffer.alloc(0));
    const timer = setTimeout(onEnd, timeoutMs);
    s.on('data', onData);
    s.once('end', onEnd);
    s.once('close', onEnd);
    s.resume();
  });
}

/** What hooks and the broker make of one request: a refusal, or the headers to send and the injected credential's name. */
export interface RequestRewrite {
  refusal?: string;
  /** The request's headers as they go upstream (`rawHeaders` form), when changed. */
  headers?: readonly string[];
  /** The name of the credential injected (audited; never its value). */
  credential?: string;
}

/** Rewrites the requests of an intercepted host (hooks, the credential broker); undefined when nothing applies. */
export type RequestRewriter = (req: {
  host: string;
  method: string;
  path: string;
  rawHeaders: readonly string[];
}) => RequestRewrite | undefined;

export interface InterceptorDeps {
  trust: MitmTrust;
  policy: AdmissionPolicy;
  recorder: Recorder;
  dial: Dialer;
  upstream: UpstreamProxies;
  idleTimeoutMs: number;
  rewrite?: RequestRewriter;
  /** Hosts whose TLS tunnels are intercepted outside limited mode too (hooks, brokered credentials). */
  wantsHost?: (host: string) => boolean;
  handshakeTimeoutMs?: number;
  /** How long a tunnel to such a host waits for the client's first bytes before it is left opaque. */
  peekTimeoutMs?: number;
}

/** An admitted tunnel to terminate. */
export interface InterceptedTarget {
  host: string;
  port: number;
  admitted: Admitted;
  client: string | null;
}

interface TunnelState extends InterceptedTarget {
  agent: https.Agent;
}

/** Verified TLS to the tunnel's host over a connection the proxy's dialer opened to a checked address. */
function upstreamTls(raw: Duplex, host: string, trust: MitmTrust): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const s = tls.connect({
      socket: raw,
      host,
      ...(isIP(host) ? {} : { servername: host }),
      secureContext: trust.upstream,
      ALPNProtocols: ['http/1.1'],
    });
    const onError = (e: Error) => {
      raw.destroy();
      reject(e);
    };
    s.once('error', onError);
    s.once('secureConnect', () => {
      s.off('error', onError);
      resolve(s);
    });
  });
}

/** A stream that yields `head` then what `s` reads (a TLS server cannot be handed bytes already read off a socket). */
function withHead(s: Duplex, head: Buffer): Duplex {
  const d = new Duplex({
    read() {
      s.resume();
    },
    write(chunk, encoding, cb) {
      s.write(chunk, encoding, cb);
    },
    final(cb) {
      s.end();
      cb();
    },
    destroy(err, cb) {
      s.destroy();
      cb(err);
    },
  });
  if (head.length > 0) d.push(head);
  s.on('data', (c: Buffer) => {
    if (!d.push(c)) s.pause();
  });
  s.on('end', () => d.push(null));
  s.on('close', () => d.destroy());
  s.on('error', (e) => d.destroy(e));
  return d;
}

const HOP_HEAD = new Set(['proxy-authorization', 'proxy-connection', 'keep-alive']);

/** An upgrade request's head, in origin form, for the upstream (its Upgrade and Connection kept). */
function upgradeHead(method: string, path: string, raw: readonly string[]): string {
  let text = `${method} ${path} HTTP/1.1\r\n`;
  for (let i = 0; i < raw.length; i += 2) {
    if (!HOP_HEAD.has(raw[i]!.toLowerCase())) text += `${raw[i]}: ${raw[i + 1]}\r\n`;
  }
  return `${text}\r\n`;
}

export class Interceptor {
  private active = 0;
  private readonly server: http.Server;
  private readonly tunnels = new WeakMap<object, TunnelState>();
  private readonly sockets = new Set<Duplex>();
  private closed = false;

  constructor(private readonly deps: InterceptorDeps) {
    this.server = http.createServer({ ...PARSER_OPTIONS, requestTimeout: 0, noDelay: true });
    this.server.maxHeadersCount = PARSER_MAX_HEADERS_COUNT;
    this.server.timeout = 0;
    this.server.keepAliveTimeout = Math.max(1, deps.idleTimeoutMs - 1000);
    this.server.on('request', (req, res) => {
      req.socket.setTimeout(0);
      this.onRequest(req, res).catch(() => res.destroy());
    });
    this.server.on('connect', (_req: http.IncomingMessage, socket: Duplex) => {
      socket.end(serialize(textResponse(405, 'CONNECT is not allowed inside an intercepted tunnel'), CLOSE));
    });
    this.server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
      this.onUpgrade(req, socket, head).catch(() => socket.destroy());
    });
    this.server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
      if (err.code === 'ECONNRESET' || !socket.writable) socket.destroy();
      else socket.end(PARSE_ERROR);
    });
  }

  /** How many tunnels are intercepted now. */
  get count(): number {
    return this.active;
  }

  /** Takes one of the MAX_INTERCEPTED_TUNNELS places (given back when that tunnel closes); false when none is left. */
  reserve(): boolean {
    if (this.closed || this.active >= MAX_INTERCEPTED_TUNNELS) return false;
    this.active++;
    return true;
  }

  /**
   * Terminates TLS on `client` (after the CONNECT 200 or the SOCKS5 success reply) for a reserved place; `head` is
   * what the client sent after its CONNECT, already read.
   */
  intercept(client: Duplex, head: Buffer, target: InterceptedTarget): void {
    let released = false;
    const release = () => {
      if (!released) {
        released = true;
        this.active--;
      }
    };
    this.track(client);
    client.once('close', release);
    if (this.closed) {
      client.destroy();
      return;
    }
    const direct = client instanceof Socket && head.length === 0 && client.readableLength === 0;
    const secure = new tls.TLSSocket(direct ? client : withHead(client, head), {
      isServer: true,
      secureContext: this.deps.trust.ca.contextFor(target.host),
      ALPNProtocols: ['http/1.1'],
    });
    this.track(secure);
    secure.once('close', release);
    secure.on('error', () => secure.destroy());
    // A client that ends before its handshake is done is gone (the proxy's sockets are half-open capable).
    let secured = false;
    secure.once('end', () => {
      if (!secured) secure.destroy();
    });
    // Real time, like the proxy's other socket-level timers (idle, headersTimeout): not policy time.
    const timer = setTimeout(() => secure.destroy(), this.deps.handshakeTimeoutMs ?? HANDSHAKE_TIMEOUT_MS);
    secure.once('close', () => clearTimeout(timer));
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
    agent.createConnection = ((_o: unknown, cb: (err: Error | null, s?: Duplex) => void) => {
      this.openUpstream(target).then((s) => cb(null, s), cb);
      return undefined;
    }) as unknown as typeof agent.createConnection;
    secure.once('close', () => agent.destroy());
    this.tunnels.set(secure, { ...target, agent });
    secure.once('secure', () => {
      secured = true;
      clearTimeout(timer);
      secure.setTimeout(this.deps.idleTimeoutMs);
      this.server.emit('connection', secure);
    });
  }

  /** Whether tunnels to `host` are intercepted when they carry TLS (it has hooks or a brokered credential). */
  wantsHost(host: string): boolean {
    return this.deps.wantsHost?.(host) ?? false;
  }

  /**
   * For a tunnel to a host that `wantsHost` (its 200 or SOCKS5 success already sent): waits briefly for the client's
   * first bytes; a ClientHello is intercepted (null is returned), anything else — other bytes, silence, no place
   * left — stays an opaque tunnel, for which the bytes read so far are returned.
   */
  async interceptIfTls(client: Duplex, head: Buffer, target: InterceptedTarget): Promise<Buffer | null> {
    const first = await firstBytes(client, head, this.deps.peekTimeoutMs ?? PEEK_TIMEOUT_MS);
    if (first[0] === TLS_HANDSHAKE && !client.destroyed && this.reserve()) {
      this.intercept(client, first, target);
      return null;
    }
    return first;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const s of this.sockets) s.destroy();
    this.server.closeAllConnections();
  }

  private track(s: Duplex): void {
    this.sockets.add(s);
    s.once('close', () => this.sockets.delete(s));
  }

  private async openUpstream(t: InterceptedTarget): Promise<tls.TLSSocket> {
    const raw = await openTunnel(this.deps, { host: t.host, addresses: t.admitted.addresses, port: t.port });
    this.track(raw);
    if (this.closed) {
      raw.destroy();
      throw new Error('proxy closed');
    }
    return upstreamTls(raw, t.host, this.deps.trust);
  }

  /** The checks before the policy (§ item 4): an error answer, or the request's path. */
  private check(
    req: http.IncomingMessage,
    t: InterceptedTarget,
  ): { ok: true; path: string } | { ok: false; status: number; text: string } {
    const method = req.method ?? '';
    if (method === 'TRACE' || method === 'TRACK')
      return { ok: false, status: 405, text: 'method not allowed' };
    let path = req.url ?? '';
    const target = { rawHost: t.host, port: t.port, scheme: 'https' };
    const absolute = parseAbsoluteTarget(path);
    if (absolute !== null) {
      if (absolute.scheme !== 'https' || !hostHeaderMatches(absolute.authority, target))
        return { ok: false, status: 400, text: 'host mismatch' };
      path = absolute.path;
    } else if (!path.startsWith('/') && !(path === '*' && method === 'OPTIONS')) {
      return { ok: false, status: 400, text: 'invalid request target' };
    }
    const host = req.headers.host;
    if (host === undefined || host.trim() === '') return { ok: false, status: 400, text: 'missing host' };
    // Node keeps the first of several Host headers, but all of them would go upstream: one only.
    let hosts = 0;
    for (let i = 0; i < req.rawHeaders.length; i += 2)
      if (req.rawHeaders[i]!.toLowerCase() === 'host') hosts++;
    if (hosts > 1) return { ok: false, status: 400, text: 'host mismatch' };
    if (!hostHeaderMatches(host, target)) return { ok: false, status: 400, text: 'host mismatch' };
    return { ok: true, path };
  }

  /** Decides and records one request (the one admission); the refusal's answer, or the rewrite to forward with. */
  private async decide(
    req: http.IncomingMessage,
    t: InterceptedTarget,
    path: string,
    upgrade = false,
  ): Promise<
    | { allowed: true; rewrite: RequestRewrite | undefined }
    | { allowed: false; answer: ReturnType<typeof blockedHttpResponse> }
  > {
    const method = req.method ?? 'GET';
    const rewrite = this.deps.rewrite?.({ host: t.host, method, path, rawHeaders: req.rawHeaders });
    const r: AdmissionRequest = {
      protocol: 'https',
      host: t.host,
      port: t.port,
      method,
      path,
      client: t.client,
      tunnel: t.admitted,
      ...(rewrite?.refusal !== undefined ? { hookRefusal: rewrite.refusal } : {}),
      ...(upgrade ? { upgrade } : {}),
    };
    const bare = path.split('?', 1)[0]!.slice(0, MAX_AUDIT_PATH);
    const a = await admitAndRecord(this.deps, r, 'all', {
      path: bare,
      ...(rewrite?.credential !== undefined ? { credential: rewrite.credential } : {}),
    });
    if (!a.allowed) return { allowed: false, answer: blockedHttpResponse(a, t.port) };
    return { allowed: true, rewrite };
  }

  private async onRequest(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const t = this.tunnels.get(req.socket);
    if (t === undefined) {
      res.destroy();
      return;
    }
    const limit = limitStatus(req);
    if (limit !== null) {
      res.socket?.end(serialize(emptyResponse(limit), CLOSE));
      return;
    }
    const c = this.check(req, t);
    if (!c.ok) {
      send(res, textResponse(c.status, c.text));
      return;
    }
    const d = await this.decide(req, t, c.path);
    if (!d.allowed) {
      send(res, d.answer);
      return;
    }
    if (res.destroyed || this.closed) return;
    const authority = t.port === 443 ? t.host : `${t.host}:${t.port}`;
    const headers = forwardedRequestHeaders(d.rewrite?.headers ?? req.rawHeaders, authority);
    const upstream = https.request({
      agent: t.agent,
      method: req.method,
      host: t.host,
      port: t.port,
      path: c.path,
      setHost: false,
      headers: headers as unknown as http.OutgoingHttpHeaders,
    });
    relay(req, res, upstream);
  }

  private async onUpgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const t = this.tunnels.get(socket);
    if (t === undefined) {
      socket.destroy();
      return;
    }
    const fail = (status: number, text: string) => socket.end(serialize(textResponse(status, text), CLOSE));
    const limit = limitStatus(req);
    if (limit !== null) {
      socket.end(serialize(emptyResponse(limit), CLOSE));
      return;
    }
    const c = this.check(req, t);
    if (!c.ok) {
      fail(c.status, c.text);
      return;
    }
    const method = req.method ?? 'GET';
    const d = await this.decide(req, t, c.path, true);
    if (!d.allowed) {
      socket.end(serialize(d.answer, CLOSE));
      return;
    }
    (socket as Partial<Socket>).setTimeout?.(0);
    let up: tls.TLSSocket;
    try {
      up = await this.openUpstream(t);
    } catch {
      fail(502, 'upstream failure');
      return;
    }
    if (socket.destroyed) {
      up.destroy();
      return;
    }
    up.write(upgradeHead(method, c.path, d.rewrite?.headers ?? req.rawHeaders));
    tunnel(socket, up, head, (s) => this.track(s));
  }
}
