/**
 * The HTTP/1.1 side of the managed proxy (network-proxy.md §4.2, §4.3, §4.7, §4.10, §5): absolute-form forwarding
 * over pooled upstream connections to the checked address, CONNECT tunnels, exact block responses and limits.
 */
import http from 'node:http';
import https from 'node:https';
import { isIP } from 'node:net';
import type { Duplex } from 'node:stream';
import tls from 'node:tls';
import { blockMessage, blockTag } from './events.js';
import { FastHttp } from './fastpath.js';
import { endToEndHeaders, forwardedRequestHeaders } from './headers.js';
import { hostPort, normalizeHost } from './host.js';
import { limitStatus, overflowStatus, PARSER_MAX_HEADERS_COUNT, PARSER_OPTIONS } from './limits.js';
import { listenLoopback } from './listen.js';
import type { HostDecision, PolicyEngine } from './policy.js';
import type { Recorder } from './recorder.js';
import { hostHeaderMatches, parseAbsoluteTarget, splitAuthority } from './target.js';
import { tunnel } from './tunnel.js';
import { connectVia, mayUseUpstream, UpstreamAgents, type UpstreamProxies, upstreamFor } from './upstream.js';

export type Dialer = (target: { host: string; port: number; hostname: string }) => Promise<Duplex>;

export interface HttpProxyDeps {
  policy: PolicyEngine;
  recorder: Recorder;
  dial: Dialer;
  idleTimeoutMs: number;
  /** Upstream proxies to chain to (empty unless `allow_upstream_proxy`). */
  upstream: UpstreamProxies;
}

/**
 * Opens a byte stream to an allowed target: through the upstream proxy when one applies (public targets only),
 * otherwise straight to the first checked address.
 */
export function openTunnel(
  deps: { dial: Dialer; upstream: UpstreamProxies },
  target: { host: string; addresses: readonly string[]; port: number },
): Promise<Duplex> {
  const up = upstreamFor('tunnel', deps.upstream);
  if (up && mayUseUpstream(target.host, target.addresses)) return connectVia(up, target.host, target.port);
  if (target.addresses.length === 0) return Promise.reject(new Error('no address'));
  // Try the checked addresses in order (never anything else): a name with a dead IPv6 answer still connects.
  const attempt = async (i: number): Promise<Duplex> => {
    try {
      return await deps.dial({ host: target.addresses[i]!, port: target.port, hostname: target.host });
    } catch (e) {
      if (i + 1 >= target.addresses.length) throw e;
      return attempt(i + 1);
    }
  };
  return attempt(0);
}

const LIMITED_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

function rawResponse(status: string, headers: [string, string][], body = ''): string {
  const lines = headers.map(([k, v]) => `${k}: ${v}\r\n`).join('');
  return `HTTP/1.1 ${status}\r\n${lines}\r\n${body}`;
}

/** The 400 Codex (hyper) answers to bytes it cannot parse: empty body, `connection: close`. */
const PARSE_ERROR = rawResponse('400 Bad Request', [
  ['content-length', '0'],
  ['connection', 'close'],
]);

function statusOnly(code: 431 | 414): string {
  const text = code === 431 ? '431 Request Header Fields Too Large' : '414 URI Too Long';
  return rawResponse(text, [
    ['content-length', '0'],
    ['connection', 'close'],
  ]);
}

function sendText(
  res: http.ServerResponse,
  status: number,
  body: string,
  extra: [string, string][] = [],
): void {
  const buf = Buffer.from(body);
  res.sendDate = false;
  res.writeHead(status, [
    ['content-type', 'text/plain'],
    ...extra,
    ['content-length', String(buf.length)],
    ['date', new Date().toUTCString()],
  ] as unknown as http.OutgoingHttpHeaders);
  res.end(buf);
}

/** The §4.7 JSON body, in Codex's key order. */
function blockedJsonBody(
  reason: string,
  host: string,
  port: number,
  decision: string,
  source: string,
): string {
  return JSON.stringify({
    status: 'blocked',
    host,
    reason,
    decision,
    source,
    protocol: 'http',
    port,
    message: blockMessage(reason),
  });
}

function clientAddr(socket: {
  remoteAddress?: string | undefined;
  remotePort?: number | undefined;
}): string | null {
  if (!socket.remoteAddress || socket.remotePort === undefined) return null;
  const a = socket.remoteAddress.replace(/^::ffff:/, '');
  return hostPort(a, socket.remotePort);
}

function headerValue(req: http.IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

export class HttpProxy {
  readonly server: http.Server;
  private readonly agent: http.Agent;
  private readonly tlsAgent: https.Agent;
  private readonly upstreamAgents = new UpstreamAgents();
  private readonly sockets = new Set<Duplex>();
  private readonly fast: FastHttp;
  /** Decisions the fast path already took for the first request of a socket it handed over (see fastpath.ts). */
  private readonly presetDecisions = new WeakMap<Duplex, HostDecision>();
  private closed = false;

  constructor(private readonly deps: HttpProxyDeps) {
    const idle = deps.idleTimeoutMs;
    this.server = http.createServer({
      ...PARSER_OPTIONS,
      headersTimeout: idle,
      requestTimeout: 0,
      // Node adds a 1 s grace to keepAliveTimeout: subtract it so quiet keep-alive connections close at `idle` too.
      keepAliveTimeout: idle > 2000 ? idle - 1000 : idle,
      connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(idle / 10))),
      noDelay: true,
    });
    this.server.maxHeadersCount = PARSER_MAX_HEADERS_COUNT;
    this.server.timeout = 0;
    const dial = deps.dial;
    class PinnedAgent extends http.Agent {
      override createConnection(
        options: { host?: string; port?: number; servername?: string },
        cb: (err: Error | null, socket?: Duplex) => void,
      ): undefined {
        dial({
          host: options.host ?? '',
          port: options.port ?? 80,
          hostname: options.servername ?? options.host ?? '',
        }).then(
          (s) => cb(null, s),
          (e: Error) => cb(e),
        );
        return undefined;
      }
    }
    this.agent = new PinnedAgent({
      keepAlive: true,
      maxSockets: 256,
      maxFreeSockets: 64,
      scheduling: 'lifo',
    });
    /** `https://` absolute-form targets: the proxy speaks TLS itself, over a socket to the checked address. */
    class PinnedTlsAgent extends https.Agent {
      override createConnection(
        options: { host?: string; port?: number; servername?: string },
        cb: (err: Error | null, socket?: Duplex) => void,
      ): undefined {
        const name = options.servername ?? '';
        dial({ host: options.host ?? '', port: options.port ?? 443, hostname: name }).then((raw) => {
          const secure = tls.connect({
            socket: raw,
            ...(isIP(name) ? { host: name } : { servername: name, host: name }),
            ALPNProtocols: ['http/1.1'],
          });
          const onError = (e: Error) => {
            raw.destroy();
            cb(e);
          };
          secure.once('error', onError);
          secure.once('secureConnect', () => {
            secure.off('error', onError);
            cb(null, secure);
          });
        }, cb);
        return undefined;
      }
    }
    this.tlsAgent = new PinnedTlsAgent({
      keepAlive: true,
      maxSockets: 256,
      maxFreeSockets: 64,
      scheduling: 'lifo',
    });
    // New connections start on the fast path (fastpath.ts), which hands a socket to Node's own HTTP connection
    // handling (captured here) at a request boundary whenever a request is not its simple case.
    const nodeConnection = this.server.listeners('connection') as ((s: import('node:net').Socket) => void)[];
    this.server.removeAllListeners('connection');
    const toNode = (socket: import('node:net').Socket) => {
      for (const l of nodeConnection) l.call(this.server, socket);
    };
    this.fast = new FastHttp({
      policy: deps.policy,
      recorder: deps.recorder,
      dial,
      idleTimeoutMs: idle,
      keepAliveTimeoutMs: this.server.keepAliveTimeout,
      enabled: () => upstreamFor('http', this.deps.upstream) === undefined,
      handoff: (socket, buffered, decision, ended) => {
        if (decision) this.presetDecisions.set(socket, decision);
        if (ended) {
          // The stream has ended (nothing can be unshifted): give Node's handlers the bytes and the end directly.
          toNode(socket);
          if (buffered.length > 0) socket.emit('data', buffered);
          socket.emit('end');
          return;
        }
        if (buffered.length > 0) socket.unshift(buffered);
        toNode(socket);
        socket.resume();
      },
      clientAddr,
      limitedMethods: LIMITED_METHODS,
      track: (s) => {
        this.sockets.add(s);
        s.once('close', () => this.sockets.delete(s));
      },
    });
    this.server.on('connection', (socket: import('node:net').Socket) => {
      this.onConnection(socket);
      if (this.closed) socket.destroy();
      else this.fast.accept(socket);
    });
    this.server.on('request', (req, res) => {
      // The idle timer is for silent connections only: a request in flight may wait on its upstream for as long as
      // it takes (Node re-arms keepAliveTimeout once the response is done).
      req.socket.setTimeout(0);
      this.onRequest(req, res).catch(() => {
        if (!res.headersSent) sendText(res, 500, 'error');
        else res.destroy();
      });
    });
    this.server.on('connect', (req, socket, head) => {
      this.onConnect(req, socket, head).catch(() => socket.destroy());
    });
    this.server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
      this.onUpgrade(req, socket, head).catch(() => socket.destroy());
    });
    this.server.on('clientError', (err: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Duplex) =>
      this.onClientError(err, socket),
    );
  }

  listen(): Promise<number> {
    return listenLoopback(this.server);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const done = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const s of this.sockets) s.destroy();
    this.server.closeAllConnections();
    this.fast.destroy();
    this.agent.destroy();
    this.tlsAgent.destroy();
    this.upstreamAgents.destroy();
    await done;
  }

  private onConnection(socket: import('node:net').Socket): void {
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
    // Silent connections are closed after the idle timeout with no bytes (§5 item 6). Node resets the socket
    // timeout itself once a request arrives and applies keepAliveTimeout between requests.
    socket.setTimeout(this.deps.idleTimeoutMs);
  }

  private onClientError(err: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Duplex): void {
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT' || err.code === 'ECONNRESET' || !socket.writable) {
      socket.destroy();
      return;
    }
    let reply = PARSE_ERROR;
    if (err.code === 'HPE_INVALID_METHOD' && err.rawPacket) {
      // Node's parser knows only upper-case method tokens; Codex treats `post` as a method like any other, which
      // limited mode then blocks (T13). Answer such a request ourselves (it is never forwarded), then close.
      const m = /^([A-Za-z]{1,20}) (\S+) HTTP\/1\.[01]\r\n/.exec(
        err.rawPacket.subarray(0, 8192).toString('latin1'),
      );
      if (m && /[a-z]/.test(m[1]!)) {
        this.onOddMethod(socket, m[1]!, m[2]!).catch(() => socket.destroy());
        return;
      }
    }
    if (err.code === 'HPE_HEADER_OVERFLOW') {
      reply = statusOnly(overflowStatus(err.rawPacket));
    }
    socket.end(reply);
  }

  private async onRequest(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const limit = limitStatus(req);
    if (limit !== null) {
      res.socket?.end(statusOnly(limit));
      return;
    }
    const unixSocket = req.headers['x-unix-socket'];
    if (unixSocket !== undefined) {
      this.onUnixSocket(req, res, unixSocket);
      return;
    }
    const url = req.url ?? '';
    const target = parseAbsoluteTarget(url);
    if (target === null) {
      const host = headerValue(req, 'host');
      sendText(
        res,
        400,
        host === undefined || host.trim() === '' ? 'missing host' : 'absolute-form request target required',
      );
      return;
    }
    if (target.rawHost === '') {
      sendText(res, 400, 'missing host');
      return;
    }
    const hostHeader = headerValue(req, 'host');
    if (hostHeader !== undefined && !hostHeaderMatches(hostHeader, target)) {
      sendText(res, 400, 'Host header does not match request target');
      return;
    }
    const norm = normalizeHost(target.rawHost);
    if (!norm.ok || Number.isNaN(target.port)) {
      sendText(res, 400, 'invalid host');
      return;
    }
    const method = req.method ?? 'GET';
    const client = clientAddr(req.socket);
    const { policy, recorder } = this.deps;
    const preset = this.presetDecisions.get(req.socket);
    if (preset) this.presetDecisions.delete(req.socket);
    const decision =
      preset ?? (await policy.evaluate(norm.host, target.port, { protocol: 'http', client, method }));
    const base = { protocol: 'http' as const, host: decision.host, port: target.port, method, client };
    if (!decision.allowed) {
      recorder.blocked({
        ...base,
        scope: 'domain',
        reason: decision.reason,
        source: decision.source,
        decision: decision.decision,
      });
      this.sendBlockedJson(
        res,
        decision.reason,
        decision.host,
        target.port,
        decision.decision,
        decision.source,
      );
      return;
    }
    recorder.allowed(base, decision);
    if (policy.mode === 'limited' && !LIMITED_METHODS.has(method)) {
      recorder.blocked({
        ...base,
        scope: 'non_domain',
        reason: 'method_not_allowed',
        source: 'mode_guard',
        decision: 'deny',
      });
      this.sendBlockedJson(res, 'method_not_allowed', decision.host, target.port, 'deny', 'mode_guard');
      return;
    }
    const secure = target.scheme === 'https' || target.scheme === 'wss';
    const up = upstreamFor(secure ? 'tunnel' : 'http', this.deps.upstream);
    const viaUpstream = up !== undefined && mayUseUpstream(decision.host, decision.addresses);
    const address = decision.addresses[0];
    if (address === undefined && !viaUpstream) {
      sendText(res, 502, 'upstream failure');
      return;
    }
    this.forward(
      req,
      res,
      viaUpstream ? { proxy: up } : { address: address! },
      target,
      norm.host,
      decision.addresses,
    );
  }

  /**
   * §3.8 on Linux: unix-socket forwarding is macOS-only. A limited-mode write method gets the short 403 JSON; anything
   * else gets 501. Audit events only: these blocks are not recorded in the ring.
   */
  private onUnixSocket(req: http.IncomingMessage, res: http.ServerResponse, header: string | string[]): void {
    const path = Array.isArray(header) ? header[0] : header;
    if (path === undefined || !path.startsWith('/') || Array.isArray(header)) {
      sendText(res, 400, 'invalid x-unix-socket header');
      return;
    }
    const method = req.method ?? 'GET';
    const client = clientAddr(req.socket);
    const base = {
      protocol: 'http' as const,
      host: 'unix-socket',
      port: 0,
      method,
      client,
      scope: 'non_domain' as const,
    };
    if (this.deps.policy.mode === 'limited' && !LIMITED_METHODS.has(method)) {
      this.deps.recorder.audit({
        ...base,
        decision: 'deny',
        source: 'mode_guard',
        reason: 'method_not_allowed',
      });
      const body = Buffer.from(
        JSON.stringify({ status: 'blocked', host: 'unix-socket', reason: 'method_not_allowed' }),
      );
      res.sendDate = false;
      res.writeHead(403, [
        ['content-type', 'application/json'],
        ['x-proxy-error', blockTag('method_not_allowed')],
        ['content-length', String(body.length)],
        ['date', new Date().toUTCString()],
      ] as unknown as http.OutgoingHttpHeaders);
      res.end(body);
      return;
    }
    sendText(res, 501, 'unix sockets unsupported');
  }

  /**
   * A plain-HTTP upgrade (`ws://` through the proxy, as http-proxy-agent sends it): the same checks as a request,
   * then the request head goes to the checked address and the two sockets are piped.
   */
  private async onUpgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    (socket as import('node:net').Socket).setTimeout?.(0);
    const fail = (status: string, body: string) =>
      socket.end(
        rawResponse(
          status,
          [
            ['content-type', 'text/plain'],
            ['content-length', String(Buffer.byteLength(body))],
            ['connection', 'close'],
          ],
          body,
        ),
      );
    const limit = limitStatus(req);
    if (limit !== null) {
      socket.end(statusOnly(limit));
      return;
    }
    const target = parseAbsoluteTarget(req.url ?? '');
    const hostHeader = headerValue(req, 'host');
    if (target === null || target.rawHost === '') {
      fail('400 Bad Request', hostHeader ? 'absolute-form request target required' : 'missing host');
      return;
    }
    if (hostHeader !== undefined && !hostHeaderMatches(hostHeader, target)) {
      fail('400 Bad Request', 'Host header does not match request target');
      return;
    }
    const norm = normalizeHost(target.rawHost);
    if (!norm.ok || Number.isNaN(target.port)) {
      fail('400 Bad Request', 'invalid host');
      return;
    }
    if (target.scheme === 'https' || target.scheme === 'wss') {
      fail('501 Not Implemented', 'use CONNECT for TLS upgrades');
      return;
    }
    const method = req.method ?? 'GET';
    const client = clientAddr(req.socket);
    const { policy, recorder } = this.deps;
    const decision = await policy.evaluate(norm.host, target.port, { protocol: 'http', client, method });
    const base = { protocol: 'http' as const, host: decision.host, port: target.port, method, client };
    let blocked: {
      reason: string;
      source: 'baseline_policy' | 'mode_guard' | 'proxy_state' | 'decider';
      decision: 'deny' | 'ask';
    } | null = null;
    if (!decision.allowed) {
      blocked = { reason: decision.reason, source: decision.source, decision: decision.decision };
      recorder.blocked({ ...base, scope: 'domain', ...blocked });
    } else {
      recorder.allowed(base, decision);
      if (policy.mode === 'limited' && !LIMITED_METHODS.has(method)) {
        blocked = { reason: 'method_not_allowed', source: 'mode_guard', decision: 'deny' };
        recorder.blocked({ ...base, scope: 'non_domain', ...blocked });
      }
    }
    if (blocked) {
      const body = blockedJsonBody(
        blocked.reason,
        decision.host,
        target.port,
        blocked.decision,
        blocked.source,
      );
      socket.end(
        rawResponse(
          '403 Forbidden',
          [
            ['content-type', 'application/json'],
            ['x-proxy-error', blockTag(blocked.reason)],
            ['content-length', String(Buffer.byteLength(body))],
            ['date', new Date().toUTCString()],
            ['connection', 'close'],
          ],
          body,
        ),
      );
      return;
    }
    let upstream: Duplex;
    try {
      upstream = await openTunnel(this.deps, {
        host: decision.host,
        addresses: decision.allowed ? decision.addresses : [],
        port: target.port,
      });
    } catch {
      fail('502 Bad Gateway', 'upstream failure');
      return;
    }
    if (socket.destroyed || this.closed) {
      upstream.destroy();
      socket.destroy();
      return;
    }
    this.sockets.add(upstream);
    upstream.once('close', () => this.sockets.delete(upstream));
    const raw = req.rawHeaders;
    let text = `${method} ${target.path} HTTP/1.1\r\n`;
    let hasHost = false;
    for (let i = 0; i < raw.length; i += 2) {
      const lk = raw[i]!.toLowerCase();
      if (lk === 'proxy-authorization' || lk === 'proxy-connection' || lk === 'keep-alive') continue;
      if (lk === 'host') hasHost = true;
      text += `${raw[i]}: ${raw[i + 1]}\r\n`;
    }
    if (!hasHost) text = text.replace('\r\n', `\r\nhost: ${target.authority}\r\n`);
    upstream.write(`${text}\r\n`);
    tunnel(socket, upstream, head);
  }

  /** A request whose method token Node cannot parse: policy, then the limited-mode method check, else 400. */
  private async onOddMethod(socket: Duplex, method: string, url: string): Promise<void> {
    const target = parseAbsoluteTarget(url);
    const norm = target ? normalizeHost(target.rawHost) : null;
    if (!target || !norm?.ok || norm.host === '' || Number.isNaN(target.port)) {
      socket.end(PARSE_ERROR);
      return;
    }
    const client = clientAddr(socket as import('node:net').Socket);
    const { policy, recorder } = this.deps;
    const decision = await policy.evaluate(norm.host, target.port, { protocol: 'http', client, method });
    const base = { protocol: 'http' as const, host: decision.host, port: target.port, method, client };
    let reason: string;
    let source: 'baseline_policy' | 'mode_guard' | 'proxy_state' | 'decider';
    let verdict: 'deny' | 'ask' = 'deny';
    if (!decision.allowed) {
      ({ reason, source } = decision);
      verdict = decision.decision;
      recorder.blocked({ ...base, scope: 'domain', reason, source, decision: verdict });
    } else if (policy.mode === 'limited') {
      recorder.allowed(base, decision);
      reason = 'method_not_allowed';
      source = 'mode_guard';
      recorder.blocked({ ...base, scope: 'non_domain', reason, source, decision: 'deny' });
    } else {
      socket.end(PARSE_ERROR);
      return;
    }
    const body = blockedJsonBody(reason, decision.host, target.port, verdict, source);
    socket.end(
      rawResponse(
        '403 Forbidden',
        [
          ['content-type', 'application/json'],
          ['x-proxy-error', blockTag(reason)],
          ['content-length', String(Buffer.byteLength(body))],
          ['date', new Date().toUTCString()],
          ['connection', 'close'],
        ],
        body,
      ),
    );
  }

  private sendBlockedJson(
    res: http.ServerResponse,
    reason: string,
    host: string,
    port: number,
    decision: string,
    source: string,
  ): void {
    const buf = Buffer.from(blockedJsonBody(reason, host, port, decision, source));
    res.sendDate = false;
    res.writeHead(403, [
      ['content-type', 'application/json'],
      ['x-proxy-error', blockTag(reason)],
      ['content-length', String(buf.length)],
      ['date', new Date().toUTCString()],
    ] as unknown as http.OutgoingHttpHeaders);
    res.end(buf);
  }

  private forward(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    route: { address: string } | { proxy: URL },
    target: { scheme: string; path: string; port: number; authority: string },
    hostname: string,
    addresses: readonly string[],
  ): void {
    const headers = forwardedRequestHeaders(req.rawHeaders, target.authority);
    const secure = target.scheme === 'https' || target.scheme === 'wss';
    let upstream: http.ClientRequest;
    if ('address' in route) {
      upstream = (secure ? https : http).request({
        agent: secure ? this.tlsAgent : this.agent,
        host: route.address,
        port: target.port,
        ...({ servername: hostname } as http.RequestOptions),
        method: req.method,
        path: target.path,
        headers: headers as unknown as http.OutgoingHttpHeaders,
        setHost: false,
      });
    } else if (!secure) {
      // Plain HTTP through the upstream proxy: absolute-form, as a client would send it.
      const authority = target.authority;
      const { module, options } = this.upstreamAgents.requestOptions(
        route.proxy,
        `http://${authority}${target.path}`,
      );
      const auth = (options.headers as Record<string, string> | undefined)?.['proxy-authorization'];
      if (auth) headers.push('proxy-authorization', auth);
      upstream = module.request({
        ...options,
        method: req.method,
        headers: headers as unknown as http.OutgoingHttpHeaders,
        setHost: false,
      });
    } else {
      // https:// through the upstream proxy: CONNECT, then TLS to the target inside the tunnel.
      const proxy = route.proxy;
      upstream = https.request({
        agent: false,
        createConnection: ((_o: unknown, cb: (err: Error | null, s?: Duplex) => void) => {
          openTunnel(
            { dial: this.deps.dial, upstream: { https: proxy } },
            { host: hostname, addresses, port: target.port },
          ).then((raw) => {
            const s = tls.connect({
              socket: raw,
              ...(isIP(hostname) ? { host: hostname } : { servername: hostname, host: hostname }),
              ALPNProtocols: ['http/1.1'],
            });
            s.once('error', (e) => cb(e));
            s.once('secureConnect', () => cb(null, s));
          }, cb);
          return undefined;
        }) as unknown as http.RequestOptions['createConnection'],
        host: hostname,
        port: target.port,
        method: req.method,
        path: target.path,
        headers: headers as unknown as http.OutgoingHttpHeaders,
        setHost: false,
      });
    }
    let responded = false;
    upstream.on('response', (up) => {
      responded = true;
      const out = endToEndHeaders(up.rawHeaders, 'response');
      res.sendDate = false;
      try {
        res.writeHead(up.statusCode ?? 502, up.statusMessage, out as unknown as http.OutgoingHttpHeaders);
      } catch {
        up.destroy();
        sendText(res, 502, 'upstream failure');
        return;
      }
      up.pipe(res);
      up.on('error', () => res.destroy());
    });
    upstream.on('error', () => {
      if (!responded && !res.headersSent) sendText(res, 502, 'upstream failure');
      else res.destroy();
    });
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
    });
    const te = req.headers['transfer-encoding'];
    const cl = req.headers['content-length'];
    if (te === undefined && (cl === undefined || cl === '0')) {
      // No body: skip the pipe machinery on the hot path.
      upstream.end();
      req.resume();
    } else {
      req.pipe(upstream);
    }
  }

  private async onConnect(req: http.IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    (socket as import('node:net').Socket).setTimeout?.(0);
    const reattach = () => {
      // A blocked CONNECT keeps the connection open for further requests, as Codex does.
      if (head.length > 0) socket.unshift(head);
      (socket as import('node:net').Socket).setTimeout?.(this.deps.idleTimeoutMs);
      this.server.emit('connection', socket);
    };
    const text = (status: string, body: string, extra: [string, string][] = []) => {
      const buf = Buffer.from(body);
      socket.write(
        rawResponse(
          status,
          [
            ['content-type', 'text/plain'],
            ...extra,
            ['content-length', String(buf.length)],
            ['date', new Date().toUTCString()],
          ],
          body,
        ),
      );
    };
    const limit = limitStatus(req);
    if (limit !== null) {
      socket.end(statusOnly(limit));
      return;
    }
    const authority = req.url ?? '';
    const { host: rawHost, port: maybePort } = splitAuthority(authority);
    if (authority === '' || Number.isNaN(maybePort) || /[/?#@]/.test(authority)) {
      text('400 Bad Request', 'missing authority');
      reattach();
      return;
    }
    const norm = normalizeHost(rawHost);
    if (!norm.ok || norm.host === '') {
      text('400 Bad Request', 'invalid host');
      reattach();
      return;
    }
    const port = maybePort ?? 443;
    const client = clientAddr(req.socket);
    const { policy, recorder } = this.deps;
    const decision = await policy.evaluate(norm.host, port, {
      protocol: 'https_connect',
      client,
      method: 'CONNECT',
    });
    const base = { protocol: 'https_connect' as const, host: decision.host, port, method: 'CONNECT', client };
    if (!decision.allowed) {
      recorder.blocked({
        ...base,
        scope: 'domain',
        reason: decision.reason,
        source: decision.source,
        decision: decision.decision,
      });
      text('403 Forbidden', blockMessage(decision.reason), [['x-proxy-error', blockTag(decision.reason)]]);
      reattach();
      return;
    }
    recorder.allowed(base, decision);
    if (policy.mode === 'limited') {
      // No MITM here: limited-mode HTTPS cannot be method-checked, so it is refused (§3.5, §4.5).
      recorder.blocked({
        ...base,
        scope: 'non_domain',
        reason: 'mitm_required',
        source: 'mode_guard',
        decision: 'deny',
      });
      text('403 Forbidden', blockMessage('mitm_required'), [['x-proxy-error', blockTag('mitm_required')]]);
      reattach();
      return;
    }
    socket.write(`HTTP/1.1 200 OK\r\ndate: ${new Date().toUTCString()}\r\n\r\n`);
    if (this.closed) {
      socket.destroy();
      return;
    }
    socket.pause();
    let upstream: Duplex;
    try {
      upstream = await openTunnel(this.deps, { host: decision.host, addresses: decision.addresses, port });
    } catch {
      socket.destroy();
      return;
    }
    if (socket.destroyed || this.closed) {
      upstream.destroy();
      socket.destroy();
      return;
    }
    this.sockets.add(upstream);
    upstream.once('close', () => this.sockets.delete(upstream));
    tunnel(socket, upstream, head);
  }
}
