/**
 * One fleet host's link to a Corral server it joined: a WebSocket client holding that server's panel credential,
 * which keeps itself connected (reconnecting with backoff when the server goes away), answers none of the server's
 * requests, bounds what it accepts (message size, JSON only, text frames only) and checks every answer against the
 * schema of the method it asked. What the server notifies goes to the handler, which validates it.
 */
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import WebSocket from 'ws';
import type { z } from 'zod';
import { type Clock, realClock, type Timer } from '../clock.js';
import { parseJson } from '../protocol/boundedJson.js';
import { InitializeResult } from '../protocol/exec.js';
import type { Logger } from '../server/core/log.js';

export interface LinkTarget {
  /** ws:// or wss:// URL, without the credential. */
  url: string;
  /** The server's panel credential (sent as `?token=`, which header-stripping routers keep). */
  token: string;
  headers: Record<string, string>;
}

/**
 * `connecting` until the first connection is up; `connected`; `disconnected` from a drop until the link is up again
 * (its retries do not flip it back to `connecting`: the state says whether the server can be reached).
 */
export type LinkState = 'connecting' | 'connected' | 'disconnected';

export interface LinkHandlers {
  /** The state, the last error, or the readiness changed. */
  changed(): void;
  /** Connected and initialized: subscribe here. A throw closes the link. */
  ready(): Promise<void>;
  notification(method: string, params: unknown): void;
  /** A message was refused (malformed, binary, a request, an answer that failed its schema). */
  rejected(why: string): void;
}

export interface LinkOptions {
  log: Logger;
  /** Largest message accepted (bytes). */
  maxPayload?: number;
  requestTimeoutMs?: number;
  /** First and largest reconnection delay (ms). */
  backoffMs?: [number, number];
  /** The time of request timeouts, backoffs, pings and readiness probes (default: the real one). */
  clock?: Clock;
}

/** An error answer of the joined server. */
export class RemoteError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

export const MAX_PAYLOAD = 16 * 1024 * 1024;
const PING_MS = 15_000;
const READY_PROBE_MS = 10_000;

interface Pending {
  resolve(v: unknown): void;
  reject(e: Error): void;
  timer: Timer;
  schema: z.ZodType;
  method: string;
}

export class RemoteLink {
  state: LinkState = 'connecting';
  since: number;
  lastError: string | null = null;
  retryAt: number | null = null;
  ready: boolean | null = null;
  /** The last time the host dropped the link for what the server sent, and why (kept across reconnections). */
  dropped: { reason: string; at: number } | null = null;
  private ws: WebSocket | null = null;
  private attempt = 0;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private stopped = false;
  private retryTimer: Timer | null = null;
  private pingTimer: Timer | null = null;
  private probeTimer: Timer | null = null;
  private alive = true;
  private readonly clock: Clock;

  constructor(
    private readonly target: LinkTarget,
    private readonly handlers: LinkHandlers,
    private readonly opts: LinkOptions,
  ) {
    this.clock = opts.clock ?? realClock;
    this.since = this.clock.now();
  }

  start(): void {
    this.connect();
  }

  stop(): void {
    this.stopped = true;
    this.clock.clearTimeout(this.retryTimer);
    this.clearTimers();
    this.ws?.terminate();
    this.ws = null;
    this.failPending('the server was removed from the fleet');
  }

  /** Reconnect now (a retry button), if not connected. */
  retry(): void {
    if (this.state !== 'disconnected' || this.stopped) return;
    this.clock.clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.connect();
  }

  /** A request to the server; its result must pass `schema`. */
  request<T>(method: string, params: unknown, schema: z.ZodType<T>, timeoutMs?: number): Promise<T> {
    const ws = this.ws;
    if (!ws || ws.readyState !== WebSocket.OPEN) {
      return Promise.reject(
        new RemoteError(-32603, `not connected to the server (${this.lastError ?? this.state})`),
      );
    }
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      const timer = this.clock.setTimeout(
        () => {
          this.pending.delete(id);
          reject(new RemoteError(-32603, `${method}: the server did not answer in time`));
        },
        timeoutMs ?? this.opts.requestTimeoutMs ?? 15_000,
      );
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject, timer, schema, method });
      ws.send(JSON.stringify({ id, method, params }));
    });
  }

  private set(state: LinkState, error?: string | null): void {
    if (error !== undefined) this.lastError = error;
    if (state !== this.state) {
      this.state = state;
      this.since = this.clock.now();
    }
    this.handlers.changed();
  }

  private connect(): void {
    if (this.stopped) return;
    this.retryAt = null;
    this.set(this.state === 'disconnected' ? 'disconnected' : 'connecting');
    const url = new URL(this.target.url);
    url.searchParams.set('token', this.target.token);
    const ws = new WebSocket(url, {
      headers: this.target.headers,
      perMessageDeflate: false,
      maxPayload: this.opts.maxPayload ?? MAX_PAYLOAD,
      // ws's own socket-level timer (not the clock): it bounds one real TCP/TLS handshake.
      handshakeTimeout: 10_000,
      followRedirects: false,
    });
    this.ws = ws;
    let opened = false;
    ws.on('unexpected-response', (_req, res) => {
      res.resume();
      this.closed(ws, `HTTP ${res.statusCode} on the upgrade`);
    });
    ws.on('error', (e) => this.closed(ws, e.message));
    ws.on('close', (code, reason) =>
      this.closed(
        ws,
        opened ? `connection closed (${code}${reason.length ? `: ${reason}` : ''})` : 'connection refused',
      ),
    );
    ws.on('pong', () => {
      this.alive = true;
    });
    ws.on('message', (data, isBinary) => this.message(ws, data as Buffer, isBinary));
    ws.on('open', () => {
      opened = true;
      void this.handshake(ws);
    });
  }

  private async handshake(ws: WebSocket): Promise<void> {
    try {
      await this.request('initialize', { clientName: 'corral-fleet' }, InitializeResult);
      ws.send('{"method":"initialized","params":{}}');
      await this.handlers.ready();
      if (this.ws !== ws) return;
      this.attempt = 0;
      this.alive = true;
      this.pingTimer = this.clock
        .setInterval(() => {
          if (!this.alive) return ws.terminate();
          this.alive = false;
          ws.ping();
        }, PING_MS)
        .unref();
      this.set('connected', null);
      void this.probe();
      this.probeTimer = this.clock.setInterval(() => void this.probe(), READY_PROBE_MS).unref();
    } catch (e) {
      this.opts.log.warn(`fleet: ${this.target.url}: ${(e as Error).message}`);
      this.closed(ws, (e as Error).message);
      ws.terminate();
    }
  }

  /**
   * Drops the connection because of what the server sent (a bound it broke): the reason is kept (`dropped`, shown in
   * the Servers view) and the next attempt waits the longest backoff, so a server that does it again costs little.
   */
  drop(reason: string): void {
    const ws = this.ws;
    if (!ws) return;
    this.dropped = { reason, at: this.clock.now() };
    this.opts.log.warn(`fleet: ${this.target.url}: dropped the link: ${reason}`);
    this.closed(ws, `dropped by the host: ${reason}`, true);
    ws.terminate();
  }

  /** One frame of the server. Never throws: a fault handling it drops the link (with why) instead. */
  private message(ws: WebSocket, data: Buffer, isBinary: boolean): void {
    if (this.ws !== ws) return;
    try {
      this.handle(data, isBinary);
    } catch (e) {
      this.drop(`handling its message failed: ${String((e as Error)?.message ?? e).slice(0, 200)}`);
    }
  }

  private handle(data: Buffer, isBinary: boolean): void {
    if (isBinary) {
      this.handlers.rejected('a binary frame');
      return;
    }
    const parsed = parseJson(data.toString('utf8'));
    if (!parsed.ok) {
      if (parsed.bound) this.drop(`a message with ${parsed.error}`);
      else this.handlers.rejected('a frame that is not JSON');
      return;
    }
    const msg = parsed.value;
    if (msg === null || typeof msg !== 'object' || Array.isArray(msg)) {
      this.handlers.rejected('not a message');
      return;
    }
    const m = msg as Record<string, unknown>;
    if (typeof m.method === 'string') {
      if (m.id !== undefined) {
        // The fleet host serves nothing to the servers it joined: no method of ours is reachable from there.
        this.ws?.send(
          JSON.stringify({
            id: m.id,
            error: { code: -32601, message: 'a fleet host answers no requests from the servers it watches' },
          }),
        );
        this.handlers.rejected(`a request (${m.method.slice(0, 64)})`);
        return;
      }
      this.handlers.notification(m.method, m.params);
      return;
    }
    if (typeof m.id !== 'number') {
      this.handlers.rejected('an answer to no request');
      return;
    }
    const p = this.pending.get(m.id);
    if (!p) {
      this.handlers.rejected('an answer to no request');
      return;
    }
    this.pending.delete(m.id);
    this.clock.clearTimeout(p.timer);
    if (m.error !== undefined) {
      const e = m.error as { code?: unknown; message?: unknown };
      const code = typeof e?.code === 'number' ? e.code : -32603;
      const text = typeof e?.message === 'string' ? e.message.slice(0, 500) : 'error';
      p.reject(new RemoteError(code, text));
      return;
    }
    const r = p.schema.safeParse(m.result);
    if (!r.success) {
      this.handlers.rejected(`an answer to ${p.method} of the wrong shape`);
      p.reject(new RemoteError(-32603, `${p.method}: the server's answer is not of the expected shape`));
      return;
    }
    p.resolve(r.data);
  }

  /** The link `ws` is gone (`why`); `longest`: wait the longest backoff before the next attempt. */
  private closed(ws: WebSocket, why: string, longest = false): void {
    if (this.ws !== ws) return;
    this.ws = null;
    this.clearTimers();
    this.failPending(why);
    this.ready = null;
    if (this.stopped) return;
    const [first, max] = this.opts.backoffMs ?? [250, 10_000];
    const delay =
      (longest ? max : Math.min(max, first * 2 ** Math.min(this.attempt, 10))) * (0.8 + Math.random() * 0.4);
    this.attempt++;
    this.retryAt = this.clock.now() + Math.round(delay);
    this.set('disconnected', why);
    this.retryTimer = this.clock
      .setTimeout(() => {
        this.retryTimer = null;
        this.connect();
      }, delay)
      .unref();
  }

  private clearTimers(): void {
    this.clock.clearTimeout(this.pingTimer);
    this.clock.clearTimeout(this.probeTimer);
    this.pingTimer = null;
    this.probeTimer = null;
  }

  private failPending(why: string): void {
    for (const p of this.pending.values()) {
      this.clock.clearTimeout(p.timer);
      p.reject(new RemoteError(-32603, `${p.method}: ${why}`));
    }
    this.pending.clear();
  }

  /** The server's /readyz, through the same route (headers) as the link. */
  private async probe(): Promise<void> {
    const url = new URL(this.target.url);
    const secure = url.protocol === 'wss:';
    const ok = await new Promise<boolean | null>((resolve) => {
      const req = (secure ? httpsRequest : httpRequest)(
        {
          host: url.hostname.replace(/^\[|\]$/g, ''),
          port: url.port || (secure ? 443 : 80),
          path: '/readyz',
          headers: this.target.headers,
          // Node's socket idle timer (not the clock): it bounds one real HTTP exchange.
          timeout: 3000,
        },
        (res) => {
          res.resume();
          resolve(res.statusCode === 200);
        },
      );
      req.on('timeout', () => req.destroy());
      req.on('error', () => resolve(null));
      req.end();
    });
    if (ok !== this.ready) {
      this.ready = ok;
      this.handlers.changed();
    }
  }
}
