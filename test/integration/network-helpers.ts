/** Shared helpers of the network-proxy integration tests: loopback origins, a raw socket client, stub DNS. */
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import type { Dialer } from '../../src/network/dial.js';
import { NetworkEvents } from '../../src/network/events.js';
import { parseManagedNetwork } from '../../src/network/managedNetwork.js';
import type { Resolver } from '../../src/network/policy.js';
import {
  defaultDialer,
  type ManagedProxy,
  type StartProxyOptions,
  startManagedProxy,
} from '../../src/network/proxy.js';
import type { BlockedEvent, NetworkAuditEvent } from '../../src/protocol/network.js';

/** A dialer that only reaches 127.x and records any other host it was asked for (tests assert none). */
export function loopbackOnlyDialer(offMachine: string[]): Dialer {
  return (t) => {
    if (!/^127\./.test(t.host)) {
      offMachine.push(t.host);
      return Promise.reject(new Error('non-loopback dial refused by the test'));
    }
    return defaultDialer(t);
  };
}

/** The spec's resolver stub (§6). */
export const stubResolver: Resolver = (host) => {
  switch (host) {
    case 'rebind.test':
      return Promise.resolve(['127.0.0.1']);
    case 'public.test':
      return Promise.resolve(['192.0.2.10']);
    case 'hang.test':
      return new Promise(() => {});
    case 'err.test':
      return Promise.reject(
        Object.assign(new Error('getaddrinfo ENOTFOUND err.test'), { code: 'ENOTFOUND' }),
      );
    default:
      return Promise.reject(new Error(`stub resolver: unexpected lookup of ${host}`));
  }
};

const isLoopback = (ip: string) => /^127\./.test(ip) || ip === '::1';

export interface ProxyFixture {
  proxy: ManagedProxy;
  logs: string[];
  blocked: BlockedEvent[];
  audits: NetworkAuditEvent[];
  /** Dial attempts, as `ip:port`. */
  dials: string[];
  /** Dial attempts to non-loopback addresses: always a test failure. */
  offMachine: string[];
  close(): Promise<void>;
}

/**
 * Starts a proxy for `network` settings with the stub resolver and a dialer that refuses (and records) every
 * non-loopback address, so a policy bug can never send traffic off this machine.
 */
export async function startProxy(
  network: Record<string, unknown>,
  opts: Partial<StartProxyOptions> & { redirect?: Record<string, number> } = {},
): Promise<ProxyFixture> {
  const spec = parseManagedNetwork({
    config: { network: { enabled: true, ...network } },
    auditMetadata: opts.sessionId ? {} : { conversationId: 'conv-1', appVersion: '9.9.9' },
  });
  assert.ok(spec, 'proxy spec');
  const events = opts.events ?? new NetworkEvents();
  const logs: string[] = [];
  const blocked: BlockedEvent[] = [];
  const audits: NetworkAuditEvent[] = [];
  const dials: string[] = [];
  const offMachine: string[] = [];
  events.on('blocked', (e) => blocked.push(e));
  events.on('audit', (e) => audits.push(e));
  const dialer: Dialer = (target) => {
    dials.push(`${target.host}:${target.port}`);
    if (!isLoopback(target.host)) {
      offMachine.push(`${target.host}:${target.port}`);
      return Promise.reject(new Error(`test dialer refuses non-loopback ${target.host}`));
    }
    return defaultDialer(target);
  };
  const proxy = await startManagedProxy(spec, {
    processId: 'proc-test',
    resolver: stubResolver,
    dialer,
    events,
    log: (l) => logs.push(l),
    ...opts,
  });
  return {
    proxy,
    logs,
    blocked,
    audits,
    dials,
    offMachine,
    async close() {
      await proxy.close();
      assert.deepEqual(offMachine, [], 'no dial may ever leave the machine');
    },
  };
}

export interface OriginRequest {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  rawHeaders: string[];
}

/** A loopback HTTP origin that answers 200 with `ok <method> <url>` and records every request. */
export async function startOrigin(host = '127.0.0.1'): Promise<{
  port: number;
  requests: OriginRequest[];
  connections: number;
  close(): Promise<void>;
}> {
  const requests: OriginRequest[] = [];
  const state = { connections: 0 };
  const server = http.createServer((req, res) => {
    requests.push({
      method: req.method ?? '',
      url: req.url ?? '',
      headers: req.headers,
      rawHeaders: req.rawHeaders,
    });
    req.resume();
    req.on('end', () => {
      const body = `ok ${req.method} ${req.url}`;
      res.writeHead(200, {
        'content-type': 'text/plain',
        'X-Origin-Case': 'Kept',
        'content-length': Buffer.byteLength(body),
      });
      res.end(req.method === 'HEAD' ? undefined : body);
    });
  });
  server.on('connection', () => state.connections++);
  await new Promise<void>((r) => server.listen(0, host, () => r()));
  return {
    port: (server.address() as net.AddressInfo).port,
    requests,
    get connections() {
      return state.connections;
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** A loopback TCP echo server that counts connections. */
export async function startEcho(
  host = '127.0.0.1',
): Promise<{ port: number; connections: number; close(): Promise<void> }> {
  const state = { connections: 0 };
  const sockets = new Set<net.Socket>();
  const server = net.createServer((s) => {
    state.connections++;
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => {});
    s.pipe(s);
  });
  await new Promise<void>((r) => server.listen(0, host, () => r()));
  return {
    port: (server.address() as net.AddressInfo).port,
    get connections() {
      return state.connections;
    },
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

/** A port on 127.0.0.1 with nothing listening (bound then released). */
export async function closedPort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

export interface RawResponse {
  statusLine: string;
  status: number;
  headers: [string, string][];
  header(name: string): string | undefined;
  body: string;
}

/** A raw TCP client that reads HTTP responses (content-length framed) and raw bytes, waiting on data, not time. */
export class RawClient {
  readonly socket: net.Socket;
  private buf = Buffer.alloc(0);
  private waiters: (() => void)[] = [];
  closed = false;
  readonly connected: Promise<void>;

  constructor(port: number, host = '127.0.0.1') {
    this.socket = net.connect(port, host);
    this.connected = new Promise((resolve, reject) => {
      this.socket.once('connect', () => resolve());
      this.socket.once('error', reject);
    });
    this.socket.on('data', (d) => {
      this.buf = Buffer.concat([this.buf, d]);
      this.wake();
    });
    this.socket.on('error', () => {});
    this.socket.on('close', () => {
      this.closed = true;
      this.wake();
    });
  }

  static async open(port: number, host = '127.0.0.1'): Promise<RawClient> {
    const c = new RawClient(port, host);
    await c.connected;
    return c;
  }

  private wake() {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  private async until<T>(take: () => T | undefined, what: string): Promise<T> {
    for (;;) {
      const v = take();
      if (v !== undefined) return v;
      if (this.closed)
        throw new Error(
          `connection closed while waiting for ${what}; buffered ${JSON.stringify(this.buf.toString('latin1'))}`,
        );
      await new Promise<void>((r) => this.waiters.push(r));
    }
  }

  write(data: string | Buffer): void {
    this.socket.write(data);
  }

  /** Reads exactly n bytes. */
  read(n: number): Promise<Buffer> {
    return this.until(() => {
      if (this.buf.length < n) return undefined;
      const out = this.buf.subarray(0, n);
      this.buf = this.buf.subarray(n);
      return out;
    }, `${n} bytes`);
  }

  /** Reads one HTTP response; the body is framed by content-length (absent = none, unless `bodyToClose`). */
  readResponse(opts: { bodyToClose?: boolean; noBody?: boolean } = {}): Promise<RawResponse> {
    return this.until(() => {
      const end = this.buf.indexOf('\r\n\r\n');
      if (end < 0) return undefined;
      const head = this.buf.subarray(0, end).toString('latin1').split('\r\n');
      const statusLine = head[0]!;
      const headers = head.slice(1).map((l) => {
        const i = l.indexOf(':');
        return [l.slice(0, i), l.slice(i + 1).trim()] as [string, string];
      });
      const header = (name: string) => headers.find(([k]) => k.toLowerCase() === name.toLowerCase())?.[1];
      const cl = header('content-length');
      let bodyLen = opts.noBody ? 0 : cl !== undefined ? Number(cl) : 0;
      if (opts.bodyToClose && cl === undefined) {
        if (!this.closed) return undefined;
        bodyLen = this.buf.length - end - 4;
      }
      if (this.buf.length < end + 4 + bodyLen) return undefined;
      const body = this.buf.subarray(end + 4, end + 4 + bodyLen).toString('utf8');
      this.buf = this.buf.subarray(end + 4 + bodyLen);
      return { statusLine, status: Number(statusLine.split(' ')[1]), headers, header, body };
    }, 'an HTTP response');
  }

  /** Waits for the peer to close; returns every byte that arrived before. */
  async waitClose(): Promise<Buffer> {
    await this.until(() => (this.closed ? true : undefined), 'close');
    return this.buf;
  }

  /** Whether the connection is still open after the server has handled a later request on it. */
  get isOpen(): boolean {
    return !this.closed;
  }

  close(): void {
    this.socket.destroy();
  }
}

/** One request on a fresh connection; returns the response. */
export async function request(port: number, text: string): Promise<RawResponse> {
  const c = await RawClient.open(port);
  try {
    c.write(text);
    return await c.readResponse();
  } finally {
    c.close();
  }
}

/** Waits until `cond()` holds, polling on the event loop (for counters updated by other sockets). */
export async function waitFor(cond: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}
