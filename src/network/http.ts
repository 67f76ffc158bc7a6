/**
 * The HTTP/1.1 side of the managed proxy (network-proxy.md §4.2, §4.3, §4.10, §5): a TCP listener on a loopback port
 * whose connections start on the fast path (fastpath.ts). The fast path hands a socket to a Node HTTP server at a
 * request boundary whenever a request is not its simple case (by `server.emit('connection', socket)`, the documented
 * way to give an HTTP server a connection); Node's events then go to the entry points — request.ts (plain
 * requests), upgrade.ts, connect.ts — which all admit through admission.ts.
 *
 * The HTTP server listens too, on an ephemeral loopback port of its own that nobody is told about: Node enforces
 * `headersTimeout` (a client trickling a head forever) only on the connections of a server that listens. What
 * reaches that port is handled like anything the fast path hands over (the same entry points, the same admission).
 */
import http from 'node:http';
import net, { type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { onConnect } from './connect.js';
import { type Dialer, ForwardAgents } from './dial.js';
import { FastHttp } from './fastpath.js';
import type { HttpContext } from './httpContext.js';
import { overflowStatus, PARSER_MAX_HEADERS_COUNT, PARSER_OPTIONS } from './limits.js';
import { listenLoopback } from './listen.js';
import type { CredentialBroker } from './mitm/broker.js';
import type { Interceptor } from './mitm/interceptor.js';
import type { PolicyEngine } from './policy.js';
import type { Recorder } from './recorder.js';
import { onOddMethod, onRequest } from './request.js';
import { CLOSE, emptyResponse, PARSE_ERROR, send, serialize, textResponse } from './responses.js';
import { onUpgrade } from './upgrade.js';
import { type UpstreamProxies, upstreamFor } from './upstream.js';

export interface HttpProxyDeps {
  policy: PolicyEngine;
  recorder: Recorder;
  dial: Dialer;
  idleTimeoutMs: number;
  /** Upstream proxies to chain to (empty unless `allow_upstream_proxy`). */
  upstream: UpstreamProxies;
  /** TLS interception, when the config turns it on (issue 34). */
  mitm?: Interceptor | undefined;
  /** The credential broker, when on (issue 34). */
  broker?: CredentialBroker | undefined;
}

/** The request line of a method token Node's parser refuses: letters only, at most 20 (`post http://… HTTP/1.1`). */
const ODD_METHOD_LINE = /^([A-Za-z]{1,20}) (\S+) HTTP\/1\.[01]\r\n/;

export class HttpProxy {
  /** Accepts the proxy's connections (the port clients are given). */
  private readonly listener: net.Server;
  /** Node's HTTP handling, for what the fast path hands over. */
  readonly server: http.Server;
  private readonly sockets = new Set<Duplex>();
  private readonly fast: FastHttp;
  private readonly ctx: HttpContext;
  private closed = false;

  private readonly idleTimeoutMs: number;

  constructor(deps: HttpProxyDeps) {
    const idle = deps.idleTimeoutMs;
    this.idleTimeoutMs = idle;
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
    const isClosed = () => this.closed;
    this.ctx = {
      ...deps,
      agents: new ForwardAgents(deps.dial),
      get closed() {
        return isClosed();
      },
      track: (s) => this.track(s),
      adopt: (socket) => {
        this.track(socket);
        socket.on('error', () => socket.destroy());
        (socket as Partial<Socket>).setTimeout?.(0);
      },
      reattach: (socket) => this.accept(socket as Socket),
    };
    const toNode = (socket: Socket) => this.server.emit('connection', socket);
    this.fast = new FastHttp({
      policy: deps.policy,
      recorder: deps.recorder,
      dial: deps.dial,
      idleTimeoutMs: idle,
      keepAliveTimeoutMs: this.server.keepAliveTimeout,
      // The fast path forwards headers as they came: requests that may carry a brokered dummy take Node's path.
      enabled: () => upstreamFor('http', deps.upstream) === undefined && (deps.broker?.size ?? 0) === 0,
      handoff: (socket, buffered, ended) => {
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
      track: (s) => this.track(s),
    });
    this.listener = net.createServer({ noDelay: true, allowHalfOpen: true }, (socket) => this.accept(socket));
    this.server.on('request', (req, res) => {
      // The idle timer is for silent connections only: a request in flight may wait on its upstream for as long as
      // it takes (Node re-arms keepAliveTimeout once the response is done).
      req.socket.setTimeout(0);
      onRequest(this.ctx, req, res).catch(() => {
        if (!res.headersSent) send(res, textResponse(500, 'error'));
        else res.destroy();
      });
    });
    this.server.on('connect', (req, socket, head) => {
      onConnect(this.ctx, req, socket, head).catch(() => socket.destroy());
    });
    this.server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
      onUpgrade(this.ctx, req, socket, head).catch(() => socket.destroy());
    });
    this.server.on('clientError', (err: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Duplex) =>
      this.onClientError(err, socket),
    );
  }

  /** Starts listening; resolves with the proxy's port. */
  async listen(): Promise<number> {
    await listenLoopback(this.server);
    return listenLoopback(this.listener);
  }

  /**
   * Serves one client connection: one accepted on the proxy's port, or one handed over directly (a sandbox's
   * in-namespace listener, managedNet.ts), which is set up here as the listener would have.
   */
  accept(socket: Socket): void {
    socket.setNoDelay(true);
    this.track(socket);
    // Silent connections are closed after the idle timeout with no bytes (§5 item 6). Node resets the socket
    // timeout itself once a request arrives and applies keepAliveTimeout between requests.
    socket.setTimeout(this.idleTimeoutMs);
    if (this.closed) socket.destroy();
    else this.fast.accept(socket);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const done = Promise.all([
      new Promise<void>((resolve) => this.server.close(() => resolve())),
      new Promise<void>((resolve) => this.listener.close(() => resolve())),
    ]);
    for (const s of this.sockets) s.destroy();
    this.server.closeAllConnections();
    this.fast.destroy();
    this.ctx.agents.destroy();
    await done;
  }

  private track(s: Duplex): void {
    this.sockets.add(s);
    s.once('close', () => this.sockets.delete(s));
  }

  /** What Node's parser could not read: a timeout or reset ends quietly; the rest gets the §4.7/§4.10 answers. */
  private onClientError(err: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Duplex): void {
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT' || err.code === 'ECONNRESET' || !socket.writable) {
      socket.destroy();
      return;
    }
    if (err.code === 'HPE_INVALID_METHOD' && err.rawPacket) {
      const m = ODD_METHOD_LINE.exec(err.rawPacket.subarray(0, 8192).toString('latin1'));
      if (m && /[a-z]/.test(m[1]!)) {
        onOddMethod(this.ctx, socket, m[1]!, m[2]!).catch(() => socket.destroy());
        return;
      }
    }
    if (err.code === 'HPE_HEADER_OVERFLOW') {
      socket.end(serialize(emptyResponse(overflowStatus(err.rawPacket)), CLOSE));
      return;
    }
    socket.end(PARSE_ERROR);
  }
}
