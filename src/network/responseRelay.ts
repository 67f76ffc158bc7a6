/**
 * The fast path's relay of one upstream response to the client (see fastpath.ts), parsing only its framing: the
 * status line and headers (hop-by-hop ones dropped), then a Content-Length, chunked or close-delimited body, so
 * that the upstream connection can go back to the pool exactly at the end of the message — or is closed when that
 * end is in any doubt.
 */
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { endToEndHeaders } from './headers.js';

const MAX_RESPONSE_HEAD = 16 * 1024;
const STATUS_LINE = /^HTTP\/1\.([01]) ([1-9][0-9]{2})(?: ([\t\x20-\x7e]*))?$/;
const HEADER_LINE = /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*(.*?)[ \t]*$/;
const DIGITS = /^[0-9]{1,15}$/;

/** A pooled upstream connection, keyed by checked address, port and host name. */
export interface Upstream {
  socket: Duplex;
  key: string;
}

/** The client side of a relay: where the response goes and who is told how it ended. */
export interface RelayClient {
  readonly client: Socket;
  /** Upstream failed before any response byte went to the client. */
  fail(): void;
  /** Upstream broke mid-response. */
  abort(): void;
  /** The response went out in full; `reuse` returns the upstream socket to the pool. */
  finished(reuse: boolean, closeClient: boolean): void;
}

/** The `Connection` / `Keep-Alive` lines Node's server would write for a keep-alive response. */
export function keepAliveLines(ms: number): string {
  const s = Math.floor(ms / 1000);
  return ms > 0 ? `Connection: keep-alive\r\nKeep-Alive: timeout=${s}\r\n` : 'Connection: keep-alive\r\n';
}

type BodyMode = 'none' | 'length' | 'chunked' | 'close';

/** Relays one response from the upstream socket to the client, parsing only its framing. */
export class ResponseRelay {
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
    private readonly conn: RelayClient,
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
    let close = false;
    let te: string | undefined;
    let cl: string | undefined;
    const raw: string[] = [];
    for (let i = 1; i < lines.length; i++) {
      const m = HEADER_LINE.exec(lines[i]!);
      if (!m) return 'fail';
      const lk = m[1]!.toLowerCase();
      if (lk === 'connection') {
        for (const t of m[2]!.split(',')) if (t.trim().toLowerCase() === 'close') close = true;
      } else if (lk === 'transfer-encoding') {
        if (te !== undefined) return 'fail';
        te = m[2]!.toLowerCase();
      } else if (lk === 'content-length') {
        if ((cl !== undefined && cl !== m[2]) || !DIGITS.test(m[2]!)) return 'fail';
        cl = m[2]!;
      }
      raw.push(m[1]!, m[2]!);
    }
    let out = `HTTP/1.1 ${st[2]} ${st[3] ?? ''}\r\n`;
    const kept = endToEndHeaders(raw, 'response');
    for (let i = 0; i < kept.length; i += 2) out += `${kept[i]}: ${kept[i + 1]}\r\n`;
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
    this.reuse = http11 && !close && this.mode !== 'close';
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
