/**
 * Fast path of the HTTP proxy for the common case: plain absolute-form `http://` HTTP/1.1 requests with no body or a
 * small Content-Length body already received, on raw sockets. The request head is parsed here (strictly, with
 * smaller bounds than the Node path's limits), the same policy runs, and the rewritten head goes to a pooled
 * upstream socket for the checked address; the response is relayed parsing only its framing.
 *
 * Anything unusual (parse doubts, limits, Expect/Upgrade/Transfer-Encoding, `Connection: close`, https targets,
 * blocked requests, upstream proxies) is handed to the Node path at a request boundary with the bytes unread, so
 * every answer and event of the Node path stays exactly as it is. A blocked decision is handed over with the request
 * so that the policy is not asked twice.
 */
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { normalizeHost } from './host.js';
import type { HostDecision, PolicyEngine } from './policy.js';
import type { Recorder } from './recorder.js';

export interface FastPathDeps {
  policy: PolicyEngine;
  recorder: Recorder;
  dial: (target: { host: string; port: number; hostname: string }) => Promise<Duplex>;
  idleTimeoutMs: number;
  /** Node's keepAliveTimeout on the server, for the `Keep-Alive: timeout=` header Node would write. */
  keepAliveTimeoutMs: number;
  /** True when plain HTTP may take the fast path now (no upstream proxy applies). */
  enabled(): boolean;
  /**
   * Gives the socket to the Node path with `buffered` unread; `decision` answers the first request's policy.
   * `ended`: the client's end was already read here, so Node must be told of it too.
   */
  handoff(socket: Socket, buffered: Buffer, decision: HostDecision | undefined, ended: boolean): void;
  clientAddr(socket: Socket): string | null;
  hostHeaderMatches(header: string, target: { rawHost: string; port: number; scheme: string }): boolean;
  parseAbsoluteTarget(
    url: string,
  ): { scheme: string; rawHost: string; port: number; path: string; authority: string } | null;
  limitedMethods: ReadonlySet<string>;
  track(s: Duplex): void;
}

/** Far under the Node path's 16 KiB / 100-line / 64 KiB URI rules: anything near them goes there for the answer. */
const MAX_HEAD = 8 * 1024;
const MAX_LINES = 64;
const MAX_BODY_IN_HEAD = 64 * 1024;
const MAX_RESPONSE_HEAD = 16 * 1024;
const MAX_FREE_PER_KEY = 64;
const MAX_PENDING = 1024 * 1024;

const REQUEST_LINE = /^([A-Z]{1,20}) (http:\/\/[!-~]+) HTTP\/1\.1$/;
const HEADER_LINE = /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*(.*?)[ \t]*$/;
const BAD_BYTES = /[^\t\x20-\x7e]/;
const STATUS_LINE = /^HTTP\/1\.([01]) ([1-9][0-9]{2})(?: ([\t\x20-\x7e]*))?$/;
const DIGITS = /^[0-9]{1,15}$/;
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'proxy-authenticate',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'te',
]);

interface ParsedHead {
  method: string;
  path: string;
  port: number;
  authority: string;
  host: string;
  lines: string[];
  bodyLength: number;
  headLength: number;
}

interface Upstream {
  socket: Duplex;
  key: string;
}

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

class ClientConn {
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

  private handoff(decision?: HostDecision): void {
    this.detach();
    const rest = this.buf;
    this.buf = Buffer.alloc(0);
    if (this.socket.destroyed) return;
    this.socket.setTimeout(this.deps.idleTimeoutMs);
    this.deps.handoff(this.socket, rest, decision, this.ended);
  }

  private data(d: Buffer): void {
    this.buf = this.buf.length === 0 ? d : Buffer.concat([this.buf, d]);
    if (this.busy) {
      if (this.buf.length > MAX_PENDING) this.socket.pause();
      return;
    }
    this.next();
  }

  private end(): void {
    this.ended = true;
    if (!this.busy && this.buf.length === 0) this.socket.end();
    else if (!this.busy) this.handoffEnded();
  }

  /** The client half-closed with a partial request left: the Node path answers it as it would. */
  /** The client half-closed with a partial request left: the Node path answers it as it would. */
  private handoffEnded(): void {
    this.handoff();
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
      if (this.ended) this.handoffEnded();
      else this.handoff();
      return;
    }
    if (end + 4 > MAX_HEAD) {
      this.handoff();
      return;
    }
    const head = this.parse(end);
    if (head === null || this.buf.length < head.headLength + head.bodyLength) {
      if (head !== null && this.ended) {
        this.handoffEnded();
        return;
      }
      if (head !== null && head.bodyLength <= MAX_BODY_IN_HEAD) {
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

  /** Strict parse of one request head; null means "let the Node path have it". */
  private parse(end: number): ParsedHead | null {
    const text = this.buf.toString('latin1', 0, end);
    if (BAD_BYTES.test(text.replaceAll('\r\n', ''))) return null;
    const lines = text.split('\r\n');
    if (lines.length > MAX_LINES) return null;
    const rl = REQUEST_LINE.exec(lines[0]!);
    if (!rl) return null;
    const method = rl[1]!;
    if (method === 'CONNECT') return null;
    const target = this.deps.parseAbsoluteTarget(rl[2]!);
    if (target?.scheme !== 'http' || target.rawHost === '' || Number.isNaN(target.port)) return null;
    const norm = normalizeHost(target.rawHost);
    if (!norm.ok || norm.host === '') return null;
    const out: string[] = [];
    let host: string | undefined;
    let bodyLength = 0;
    let sawLength = false;
    for (let i = 1; i < lines.length; i++) {
      const m = HEADER_LINE.exec(lines[i]!);
      if (!m) return null;
      const name = m[1]!;
      const value = m[2]!;
      const lk = name.toLowerCase();
      switch (lk) {
        case 'host':
          if (host !== undefined) return null;
          host = value;
          break;
        case 'content-length':
          if (sawLength || !DIGITS.test(value)) return null;
          sawLength = true;
          bodyLength = Number(value);
          break;
        case 'connection':
        case 'proxy-connection':
          for (const t of value.split(',')) {
            const tok = t.trim().toLowerCase();
            if (tok !== '' && tok !== 'keep-alive') return null;
          }
          continue;
        case 'transfer-encoding':
        case 'expect':
        case 'upgrade':
        case 'x-unix-socket':
          return null;
      }
      if (HOP_BY_HOP.has(lk)) continue;
      out.push(`${name}: ${value}\r\n`);
    }
    if (host !== undefined && !this.deps.hostHeaderMatches(host, target)) return null;
    if (host === undefined) out.unshift(`host: ${target.authority}\r\n`);
    return {
      method,
      path: target.path,
      port: target.port,
      authority: target.authority,
      host: norm.host,
      lines: out,
      bodyLength,
      headLength: end + 4,
    };
  }

  private async run(head: ParsedHead): Promise<void> {
    const { policy, recorder } = this.deps;
    const client = this.deps.clientAddr(this.socket);
    const decision = await policy.evaluate(head.host, head.port, {
      protocol: 'http',
      client,
      method: head.method,
    });
    if (this.gone) return;
    const address = decision.allowed ? decision.addresses[0] : undefined;
    if (
      !decision.allowed ||
      address === undefined ||
      (policy.mode === 'limited' && !this.deps.limitedMethods.has(head.method)) ||
      !this.deps.enabled()
    ) {
      // Blocked answers, events and odd cases stay with the Node path, which gets this decision with the request.
      this.busy = false;
      this.handoff(decision);
      return;
    }
    recorder.allowed(
      { protocol: 'http', host: decision.host, port: head.port, method: head.method, client },
      decision,
    );
    const reqHead = `${head.method} ${head.path} HTTP/1.1\r\n${head.lines.join('')}Connection: keep-alive\r\n\r\n`;
    const total = head.headLength + head.bodyLength;
    const body = head.bodyLength > 0 ? this.buf.subarray(head.headLength, total) : null;
    this.buf = this.buf.length === total ? Buffer.alloc(0) : this.buf.subarray(total);
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

  /** Upstream failed before any response byte went to the client: the Node path's 502. */
  fail(): void {
    this.upstream?.socket.destroy();
    this.upstream = null;
    if (this.gone) return;
    const body = 'upstream failure';
    this.socket.write(
      `HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/plain\r\ncontent-length: ${body.length}\r\ndate: ${new Date().toUTCString()}\r\n${keepAliveLines(this.deps.keepAliveTimeoutMs)}\r\n${body}`,
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
    this.socket.resume();
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

function keepAliveLines(ms: number): string {
  const s = Math.floor(ms / 1000);
  return ms > 0 ? `Connection: keep-alive\r\nKeep-Alive: timeout=${s}\r\n` : 'Connection: keep-alive\r\n';
}

type BodyMode = 'none' | 'length' | 'chunked' | 'close';

/** Relays one response from the upstream socket to the client, parsing only its framing. */
class ResponseRelay {
  private buf: Buffer = Buffer.alloc(0);
  private headSent = false;
  /** The rewritten response head, until it goes out with the first body bytes. */
  private prefix: string | null = null;
  private mode: BodyMode = 'none';
  private left = 0;
  private reuse = false;
  /** Chunked decoder state: 'size' line, 'data' bytes, 'crlf' after data, 'trailer' lines. */
  private cstate: 'size' | 'data' | 'crlf' | 'trailer' = 'size';
  private line = '';
  private readonly client: Socket;

  constructor(
    private readonly conn: ClientConn,
    private readonly up: Upstream,
    private readonly isHead: boolean,
    private readonly keepAliveMs: number,
  ) {
    this.client = conn.client;
  }

  private settled = false;
  private readonly onData = (d: Buffer) => {
    if (!this.settled) this.data(d);
  };
  private readonly onError = () => this.broken();
  private readonly onClose = () => this.closed();

  start(): void {
    const s = this.up.socket;
    s.on('data', this.onData);
    s.on('error', this.onError);
    s.on('close', this.onClose);
    s.resume();
  }

  /** Stops listening to the upstream socket; true the first time only. */
  private settle(): boolean {
    if (this.settled) return false;
    this.settled = true;
    const s = this.up.socket;
    s.off('data', this.onData).off('close', this.onClose).off('error', this.onError);
    return true;
  }

  private fail(): void {
    if (this.settle()) this.conn.fail();
  }

  private abort(): void {
    if (this.settle()) this.conn.abort();
  }

  private broken(): void {
    if (!this.headSent) this.fail();
    else this.abort();
  }

  private closed(): void {
    if (this.headSent && this.mode === 'close') {
      if (this.settle()) this.conn.finished(false, true);
      return;
    }
    this.broken();
  }

  private write(b: Buffer): void {
    if (this.prefix !== null) {
      // The response head goes out with the first body bytes: one write, one syscall.
      b = Buffer.concat([Buffer.from(this.prefix, 'latin1'), b]);
      this.prefix = null;
    }
    if (!this.client.write(b)) {
      const s = this.up.socket;
      s.pause();
      this.client.once('drain', () => s.resume());
    }
  }

  private data(d: Buffer): void {
    if (!this.headSent) {
      this.buf = this.buf.length === 0 ? d : Buffer.concat([this.buf, d]);
      for (;;) {
        const end = this.buf.indexOf('\r\n\r\n');
        if (end < 0) {
          if (this.buf.length > MAX_RESPONSE_HEAD) this.fail();
          return;
        }
        const r = this.head(end);
        if (r === 'fail') {
          this.fail();
          return;
        }
        this.buf = this.buf.subarray(end + 4);
        if (r === 'sent') break;
      }
      d = this.buf;
      this.buf = Buffer.alloc(0);
      if (this.mode === 'none' || d.length === 0) {
        this.client.write(this.prefix!, 'latin1');
        this.prefix = null;
        if (this.mode === 'none') this.complete(d.length);
        return;
      }
    }
    this.body(d);
  }

  /** Parses one response head: 'skip' for a 1xx, 'sent' once the head went to the client. */
  private head(end: number): 'skip' | 'sent' | 'fail' {
    const text = this.buf.toString('latin1', 0, end);
    const lines = text.split('\r\n');
    const st = STATUS_LINE.exec(lines[0]!);
    if (!st) return 'fail';
    const status = Number(st[2]);
    if (status < 200) return status === 101 ? 'fail' : 'skip';
    const tokens = new Set<string>();
    let te: string | undefined;
    let cl: string | undefined;
    const kept: [string, string, string][] = [];
    for (let i = 1; i < lines.length; i++) {
      const m = HEADER_LINE.exec(lines[i]!);
      if (!m) return 'fail';
      const lk = m[1]!.toLowerCase();
      if (lk === 'connection') {
        for (const t of m[2]!.split(',')) tokens.add(t.trim().toLowerCase());
      } else if (lk === 'transfer-encoding') {
        if (te !== undefined) return 'fail';
        te = m[2]!.toLowerCase();
      } else if (lk === 'content-length') {
        if ((cl !== undefined && cl !== m[2]) || !DIGITS.test(m[2]!)) return 'fail';
        cl = m[2]!;
      }
      kept.push([lk, m[1]!, m[2]!]);
    }
    let out = `HTTP/1.1 ${st[2]} ${st[3] ?? ''}\r\n`;
    for (const [lk, name, value] of kept) {
      if (HOP_BY_HOP.has(lk) || tokens.has(lk)) continue;
      out += `${name}: ${value}\r\n`;
    }
    const http11 = st[1] === '1';
    let closeClient = false;
    if (this.isHead || status === 204 || status === 304) {
      this.mode = 'none';
    } else if (te !== undefined) {
      if (te !== 'chunked' || cl !== undefined) return 'fail';
      this.mode = 'chunked';
      out += 'Transfer-Encoding: chunked\r\n';
    } else if (cl !== undefined) {
      this.left = Number(cl);
      this.mode = this.left === 0 ? 'none' : 'length';
    } else {
      this.mode = 'close';
      closeClient = true;
    }
    this.reuse = http11 && !tokens.has('close') && this.mode !== 'close';
    out += closeClient ? 'Connection: close\r\n\r\n' : `${keepAliveLines(this.keepAliveMs)}\r\n`;
    this.headSent = true;
    this.prefix = out;
    return 'sent';
  }

  private body(d: Buffer): void {
    if (this.mode === 'close') {
      this.write(d);
      return;
    }
    if (this.mode === 'length') {
      if (d.length < this.left) {
        this.left -= d.length;
        this.write(d);
        return;
      }
      const extra = d.length - this.left;
      this.write(extra > 0 ? d.subarray(0, this.left) : d);
      this.left = 0;
      this.complete(extra);
      return;
    }
    // chunked: forward bytes verbatim while tracking where the message ends.
    let i = 0;
    while (i < d.length) {
      if (this.cstate === 'data') {
        const n = Math.min(this.left, d.length - i);
        i += n;
        this.left -= n;
        if (this.left === 0) {
          this.cstate = 'crlf';
          this.line = '';
        }
        continue;
      }
      const nl = d.indexOf(10, i);
      const stop = nl < 0 ? d.length : nl + 1;
      this.line += d.toString('latin1', i, stop);
      i = stop;
      if (this.line.length > 4096) {
        this.abort();
        return;
      }
      if (nl < 0) break;
      const l = this.line.slice(0, -1).replace(/\r$/, '');
      this.line = '';
      if (this.cstate === 'crlf') {
        if (l !== '') {
          this.abort();
          return;
        }
        this.cstate = 'size';
      } else if (this.cstate === 'size') {
        const m = /^([0-9a-fA-F]{1,12})[ \t]*(;.*)?$/.exec(l);
        if (!m) {
          this.abort();
          return;
        }
        this.left = Number.parseInt(m[1]!, 16);
        this.cstate = this.left === 0 ? 'trailer' : 'data';
      } else if (l === '') {
        // End of the trailer section: the message is complete.
        this.write(d.subarray(0, i));
        this.complete(d.length - i);
        return;
      }
    }
    this.write(d);
  }

  /** The response is complete; `extra` bytes beyond it mean the upstream connection cannot be trusted again. */
  private complete(extra: number): void {
    if (this.settle()) this.conn.finished(this.reuse && extra === 0, false);
  }
}
