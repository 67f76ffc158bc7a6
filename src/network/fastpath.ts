/**
 * Fast path of the HTTP proxy for the common case: plain absolute-form `http://` HTTP/1.1 requests with no body or a
 * small Content-Length body already received, on raw sockets. The request head is read by fastHead.ts (strictly,
 * with smaller bounds than the Node path's limits; a differential test holds it against Node's parser), admitted by
 * the same `admit` as every other entry point, and the rewritten head goes to a pooled upstream socket for the
 * checked address; the response is relayed parsing only its framing (responseRelay.ts).
 *
 * A request the fast path has read is decided and recorded here once (`admitAndRecord`) and answered here: a refusal
 * with the same 403 the Node path sends (responses.ts, with the keep-alive lines Node adds), an admitted one by the
 * upstream's response. Anything it does not read with certainty (parse doubts, limits, Expect/Upgrade/
 * Transfer-Encoding, `Connection: close`, https targets, upstream proxies) is handed to the Node path at a request
 * boundary, before admission, with the bytes unread: the Node path then decides it, once, itself.
 */
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { admitAndRecord, plainHttpRequest, type Refused } from './admission.js';
import type { Dialer } from './dial.js';
import { type FastHead, readFastHead } from './fastHead.js';
import type { PolicyEngine } from './policy.js';
import type { Recorder } from './recorder.js';
import { keepAliveLines, type RelayClient, ResponseRelay, type Upstream } from './responseRelay.js';
import { blockedHttpResponse, serialize, textResponse } from './responses.js';

export interface FastPathDeps {
  policy: PolicyEngine;
  recorder: Recorder;
  dial: Dialer;
  idleTimeoutMs: number;
  /** Node's keepAliveTimeout on the server, for the `Keep-Alive: timeout=` header Node would write. */
  keepAliveTimeoutMs: number;
  /** True when plain HTTP may take the fast path now (no upstream proxy applies). */
  enabled(): boolean;
  /**
   * Gives the socket to the Node path with `buffered` unread (never a request already admitted here).
   * `ended`: the client's end was already read here, so Node must be told of it too.
   */
  handoff(socket: Socket, buffered: Buffer, ended: boolean): void;
  track(s: Duplex): void;
}

const MAX_BODY_IN_HEAD = 64 * 1024;
const MAX_FREE_PER_KEY = 64;
const MAX_PENDING = 1024 * 1024;

export class FastHttp {
  private readonly free = new Map<string, Duplex[]>();
  private readonly idleHandlers = new WeakMap<Duplex, () => void>();
  private closed = false;

  constructor(private readonly deps: FastPathDeps) {}

  destroy(): void {
    this.closed = true;
    for (const list of this.free.values()) for (const s of list) s.destroy();
    this.free.clear();
  }

  accept(socket: Socket): void {
    new ClientConn(this, this.deps, socket).start();
  }

  /** @internal */ take(key: string): Duplex | undefined {
    const list = this.free.get(key);
    const s = list?.pop();
    if (list && list.length === 0) this.free.delete(key);
    if (s) {
      const drop = this.idleHandlers.get(s);
      if (drop) s.off('data', drop).off('close', drop).off('error', drop);
      this.idleHandlers.delete(s);
    }
    return s;
  }

  /** @internal */ release(up: Upstream): void {
    const s = up.socket;
    if (this.closed || s.destroyed || !s.writable) {
      s.destroy();
      return;
    }
    let list = this.free.get(up.key);
    if (!list) {
      list = [];
      this.free.set(up.key, list);
    }
    if (list.length >= MAX_FREE_PER_KEY) {
      s.destroy();
      return;
    }
    const drop = () => {
      s.destroy();
      const l = this.free.get(up.key);
      const i = l ? l.indexOf(s) : -1;
      if (l && i >= 0) {
        l.splice(i, 1);
        if (l.length === 0) this.free.delete(up.key);
      }
    };
    // An idle upstream connection must stay silent: any byte or close ends it.
    s.on('data', drop);
    s.on('close', drop);
    s.on('error', drop);
    this.idleHandlers.set(s, drop);
    list.push(s);
  }
}

class ClientConn implements RelayClient {
  private buf: Buffer = Buffer.alloc(0);
  private busy = false;
  private ended = false;
  private gone = false;
  private readonly onData = (d: Buffer) => this.data(d);
  private readonly onEnd = () => this.end();
  private readonly onTimeout = () => {
    if (!this.busy) this.socket.destroy();
  };
  private readonly onError = () => this.socket.destroy();
  private readonly onClose = () => {
    this.gone = true;
    this.upstream?.socket.destroy();
  };
  private upstream: Upstream | null = null;

  constructor(
    private readonly pool: FastHttp,
    private readonly deps: FastPathDeps,
    private readonly socket: Socket,
  ) {}

  start(): void {
    const s = this.socket;
    s.on('data', this.onData);
    s.on('end', this.onEnd);
    s.on('timeout', this.onTimeout);
    s.on('error', this.onError);
    s.on('close', this.onClose);
  }

  private detach(): void {
    const s = this.socket;
    s.off('data', this.onData);
    s.off('end', this.onEnd);
    s.off('timeout', this.onTimeout);
    s.off('error', this.onError);
    s.off('close', this.onClose);
  }

  private handoff(): void {
    this.detach();
    const rest = this.buf;
    this.buf = Buffer.alloc(0);
    if (this.socket.destroyed) return;
    this.socket.setTimeout(this.deps.idleTimeoutMs);
    this.deps.handoff(this.socket, rest, this.ended);
  }

  private data(d: Buffer): void {
    this.buf = this.buf.length === 0 ? d : Buffer.concat([this.buf, d]);
    // Read no further while this much is unread (pipelined requests): resumed once it is below that again.
    if (this.buf.length > MAX_PENDING) this.socket.pause();
    if (!this.busy) this.next();
  }

  /** The client half-closed: with a partial request left, the Node path answers it as it would. */
  private end(): void {
    this.ended = true;
    if (!this.busy && this.buf.length === 0) this.socket.end();
    else if (!this.busy) this.handoff();
  }

  private next(): void {
    if (this.buf.length === 0) {
      if (this.ended) this.socket.end();
      return;
    }
    if (!this.deps.enabled()) {
      this.handoff();
      return;
    }
    const end = this.buf.indexOf('\r\n\r\n');
    if (end < 0) {
      // A head split over reads (rare: clients write it at once) goes to the Node path, whose headers timeout
      // then bounds a trickling client.
      this.handoff();
      return;
    }
    const head = readFastHead(this.buf, end);
    if (head === null || this.buf.length < head.headLength + head.bodyLength) {
      if (head !== null && !this.ended && head.bodyLength <= MAX_BODY_IN_HEAD) {
        // Wait for a small body to arrive in full; a larger one goes to the Node path's streaming.
        if (this.buf.length < head.headLength + MAX_BODY_IN_HEAD) return;
      }
      this.handoff();
      return;
    }
    this.busy = true;
    this.socket.setTimeout(0);
    this.run(head).catch(() => this.socket.destroy());
  }

  private async run(head: FastHead): Promise<void> {
    const r = plainHttpRequest(head, head.method, this.socket);
    const a = await admitAndRecord(this.deps, r);
    if (this.gone) return;
    const total = head.headLength + head.bodyLength;
    const body = head.bodyLength > 0 ? this.buf.subarray(head.headLength, total) : null;
    this.buf = this.buf.length === total ? Buffer.alloc(0) : this.buf.subarray(total);
    if (!a.allowed) {
      this.refuse(a, head);
      return;
    }
    const address = a.addresses[0];
    if (address === undefined) {
      // Allowed, but the name did not resolve: the Node path's 502 (forward.ts).
      this.fail();
      return;
    }
    let reqHead = `${head.method} ${head.path} HTTP/1.1\r\n`;
    for (let i = 0; i < head.headers.length; i += 2)
      reqHead += `${head.headers[i]}: ${head.headers[i + 1]}\r\n`;
    reqHead += 'Connection: keep-alive\r\n\r\n';
    const key = `${address}|${head.port}|${head.host}`;
    let socket = this.pool.take(key);
    if (!socket) {
      try {
        socket = await this.deps.dial({ host: address, port: head.port, hostname: head.host });
      } catch {
        this.fail();
        return;
      }
      if (this.gone) {
        socket.destroy();
        return;
      }
      this.deps.track(socket);
      // One lasting listener: an error between the relay letting go and the pool taking over is never unhandled.
      socket.on('error', ignore);
    }
    const up: Upstream = { socket, key };
    this.upstream = up;
    new ResponseRelay(this, up, head.method === 'HEAD', this.deps.keepAliveTimeoutMs).start();
    if (body) socket.write(Buffer.concat([Buffer.from(reqHead, 'latin1'), body]));
    else socket.write(reqHead, 'latin1');
  }

  /** @internal */ get client(): Socket {
    return this.socket;
  }

  /**
   * A refused request (already recorded): the 403 JSON of responses.ts, framed as Node frames it on a kept-alive
   * HTTP/1.1 connection (no body to a HEAD); the request's own body, read in full, is dropped, and the connection
   * goes on to the next request once the client has taken the answer (as Node's server, it reads no further request
   * while its answers are not being read: pipelined refusals from a client that never reads stay bounded).
   */
  private refuse(a: Refused, head: FastHead): void {
    const r = blockedHttpResponse(a, head.port);
    if (head.method === 'HEAD') r.body = Buffer.alloc(0);
    if (this.socket.write(serialize(r, keepAliveLines(this.deps.keepAliveTimeoutMs)))) this.done();
    else this.socket.once('drain', () => this.done());
  }

  /** Upstream failed before any response byte went to the client: the Node path's 502. */
  fail(): void {
    this.upstream?.socket.destroy();
    this.upstream = null;
    if (this.gone) return;
    this.socket.write(
      serialize(textResponse(502, 'upstream failure'), keepAliveLines(this.deps.keepAliveTimeoutMs)),
    );
    this.done();
  }

  /** The response went out in full. `reuse` returns the upstream socket to the pool. */
  finished(reuse: boolean, closeClient: boolean): void {
    const up = this.upstream;
    this.upstream = null;
    if (up) {
      if (reuse) this.pool.release(up);
      else up.socket.destroy();
    }
    if (closeClient) {
      // Close-delimited body: the client learns the end by the close; nothing more is read from it.
      this.buf = Buffer.alloc(0);
      this.socket.end();
      return;
    }
    this.done();
  }

  private done(): void {
    this.busy = false;
    if (this.gone) return;
    if (this.buf.length <= MAX_PENDING) this.socket.resume();
    this.socket.setTimeout(this.deps.idleTimeoutMs);
    if (this.buf.length > 0 || this.ended) this.next();
  }

  /** Upstream broke mid-response: the client connection cannot be kept. */
  abort(): void {
    this.upstream?.socket.destroy();
    this.upstream = null;
    this.socket.destroy();
  }
}

function ignore(): void {}
