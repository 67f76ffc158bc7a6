import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { type AddressInfo, isIP, type Socket } from 'node:net';
import { networkInterfaces } from 'node:os';
import type { Duplex } from 'node:stream';
import { type WebSocket, WebSocketServer } from 'ws';
import { MAX_MESSAGE_BYTES } from '../../protocol/methods.js';
import type { RpcConnection, Transport } from '../../rpc/connection.js';
import type { Authenticated, Authenticator, Principal } from '../core/auth.js';
import type { ExecServer } from '../execServer.js';
import { answerHealth, defaultReadiness, type Readiness } from './health.js';
import { type CommandTable, sandboxedPeer } from './peerProcess.js';

export interface ListenOptions {
  host?: string;
  port?: number;
  /** Who may connect, and as what (src/server/core/auth.ts). `openAccess()` is the explicit "anyone" (`--ws-auth none`). */
  auth: Authenticator;
  /** More names a request's `Host` may carry (`--allow-host`), e.g. the Kubernetes Service name of the pod. */
  allowedHosts?: readonly string[];
  /** Browser origins allowed to open the WebSocket (a list, or a predicate). Any other `Origin` header → 403. */
  allowedOrigins?: string[] | ((origin: string) => boolean);
  /** Extra HTTP routes (the panel). Return true when handled. */
  httpHandler?: (req: IncomingMessage, res: ServerResponse, url: URL) => boolean;
  /** Called for each accepted connection. */
  onConnection?: (conn: RpcConnection, info: { principal: Principal; origin: string | null }) => void;
  /** The checks behind `GET /readyz` (src/server/connection/health.ts); default: the sandbox backend. */
  readiness?: Readiness;
  /**
   * Why an authenticated upgrade from this peer is refused (403), or null. Default: it comes from one of the server's
   * own sandboxed commands (src/server/connection/peerProcess.ts).
   */
  refusePeer?: (peer: Socket) => Promise<string | null>;
}

export interface Listener {
  readonly url: string;
  readonly port: number;
  readonly http: Server;
  /** Register more readiness checks here (e.g. the audit database). */
  readonly readiness: Readiness;
  close(): Promise<void>;
}

const LOOPBACK_NAMES = new Set(['localhost', '127.0.0.1', '::1']);
const WILDCARD = new Set(['0.0.0.0', '::', '']);

/**
 * Whether a request's `Host` header names this server: a loopback name or the bound address. A page that rebinds its
 * own DNS name to 127.0.0.1 still sends its own name, and gets nothing (421). The port is not checked: a client behind
 * a port forward (`ssh -L`, a relay) names the forwarder's port. Bound to a wildcard address (`--allow-non-loopback`),
 * the addresses of this machine's interfaces count as well.
 */
export function hostHeaderAllowed(
  header: string | undefined,
  boundHost: string,
  extraHosts: readonly string[] = [],
): boolean {
  if (!header) return false;
  const m = /^(\[[0-9a-f:.]+\]|[^:[\]]+)(?::\d{1,5})?$/i.exec(header.trim());
  if (!m) return false;
  const name = m[1]!.replace(/^\[|\]$/g, '').toLowerCase();
  if (LOOPBACK_NAMES.has(name) || name === boundHost.toLowerCase()) return true;
  if (extraHosts.some((h) => h.toLowerCase() === name)) return true;
  if (!WILDCARD.has(boundHost) || isIP(name) === 0) return false;
  return Object.values(networkInterfaces()).some((list) => list?.some((a) => a.address === name));
}

/** Headers on every response of the listener itself (the panel's files add CSP and more, src/app/host.ts). */
const BASE_HEADERS = {
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
} as const;

const TEXT_FRAME = { binary: false } as const;

/**
 * A `ws` WebSocket as an RPC transport: each message one text frame (`websocket.send`; ws masks the frames of a
 * socket we dialled, a remote executor's link). With `socket` (the upgrade's), the messages of one loop turn leave
 * in one socket write: it is corked until the next tick (a 64 KiB pipe read is 8 notifications: one writev instead
 * of eight).
 */
export function webSocketTransport(ws: WebSocket, peer: string, socket?: Duplex): Transport {
  let corked = false;
  const uncork = () => {
    corked = false;
    socket?.uncork();
  };
  return {
    peer,
    write(messages, onWritten) {
      if (ws.readyState !== ws.OPEN) return;
      if (socket && !corked) {
        corked = true;
        socket.cork();
        process.nextTick(uncork);
      }
      const last = messages.length - 1;
      for (let i = 0; i < last; i++) ws.send(messages[i]!, TEXT_FRAME);
      ws.send(messages[last]!, TEXT_FRAME, onWritten);
    },
    close(code, reason) {
      if (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING) ws.close(code, reason);
    },
  };
}

/**
 * Serves the exec server over WebSocket (protocol.md §2): upgrade on `/` only, `GET /healthz` and `GET /readyz`
 * without credentials (src/server/connection/health.ts), plain `GET /` → 400, other paths → 404; no
 * compression; 16 MiB messages; a `Host` that does not name this server → 421; browser origins refused unless
 * allow-listed (403); a credential `auth` refuses → 401; a peer that is one of our own sandboxed commands → 403
 * whatever it presented (src/server/connection/peerProcess.ts), all before the upgrade.
 */
export async function listenWebSocket(server: ExecServer, opts: ListenOptions): Promise<Listener> {
  const host = opts.host ?? '127.0.0.1';
  const list = opts.allowedOrigins;
  const originAllowed = typeof list === 'function' ? list : (o: string) => (list ?? []).includes(o);
  const wss = new WebSocketServer({
    noServer: true,
    perMessageDeflate: false,
    maxPayload: MAX_MESSAGE_BYTES,
  });
  const auth = opts.auth;
  // Our own sandboxed commands are refused whatever they present (src/server/connection/peerProcess.ts).
  const commands: CommandTable = {
    *commands() {
      for (const p of server.allProcesses())
        if (p.pid > 0 && p.state !== 'closed') yield { pid: p.pid, sandboxed: p.sandboxType !== 'none' };
    },
    get cgroupBases() {
      return server.commandResources.cgroups.status.dirs;
    },
  };
  const refusedPeer = opts.refusePeer ?? ((peer: Socket) => sandboxedPeer(peer, commands));
  // Whatever the listener accepts as a credential, no child may see (src/process/env.ts).
  server.protectSecrets(auth.secrets);
  const readiness =
    opts.readiness ??
    defaultReadiness({
      clock: server.clock,
      onFailure: (n, why) => server.log.warn(`not ready: ${n}: ${why}`),
    });
  const http = createServer((req, res) => {
    // Kubelet probes name the pod by its IP, an address of this machine's interfaces: allowed when bound to a wildcard.
    if (!hostHeaderAllowed(req.headers.host, host, opts.allowedHosts)) {
      res.writeHead(421, { ...BASE_HEADERS, 'content-type': 'text/plain' }).end('unknown Host');
      return;
    }
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (answerHealth(req, res, url, readiness)) return;
    if (opts.httpHandler?.(req, res, url)) return;
    if (url.pathname === '/') {
      res
        .writeHead(400, { ...BASE_HEADERS, 'content-type': 'text/plain' })
        .end('expected a WebSocket upgrade');
      return;
    }
    res.writeHead(404, { ...BASE_HEADERS, 'content-type': 'text/plain' }).end('not found');
  });

  http.on('upgrade', (req, socket, head) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const reject = (status: number, text: string) => {
      socket.end(`HTTP/1.1 ${status} ${text}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
    };
    if (!hostHeaderAllowed(req.headers.host, host, opts.allowedHosts))
      return reject(421, 'Misdirected Request');
    if (url.pathname !== '/') return reject(404, 'Not Found');
    const origin = req.headers.origin ?? null;
    if (origin !== null && !originAllowed(origin)) return reject(403, 'Forbidden');
    const accept = (r: Authenticated | null) => {
      if (!r) return reject(401, 'Unauthorized');
      // A valid credential is a secret from now on, whoever presented it (a refused peer included).
      if (r.presented !== null) server.protectSecrets([r.presented], r.presentedUntil);
      // Only once the credential passed: a stranger's upgrade never costs a walk of /proc.
      refusedPeer(req.socket).then(
        (why) => {
          if (socket.destroyed) return;
          if (why === null) return acceptUpgrade(req, socket, head, r, origin);
          server.log.warn(
            `refused a connection from ${req.socket.remoteAddress}:${req.socket.remotePort}: ${why}`,
          );
          reject(403, 'Forbidden');
        },
        () => reject(403, 'Forbidden'),
      );
    };
    // The checks below may answer later (a signed token, the peer's process); the socket may be gone by then.
    socket.on('error', () => {});
    const checked = auth.authenticate(req, url);
    if (checked instanceof Promise) {
      checked.then(
        (r) => (socket.destroyed ? undefined : accept(r)),
        () => reject(401, 'Unauthorized'),
      );
      return;
    }
    accept(checked);
  });

  const acceptUpgrade = (
    req: IncomingMessage,
    socket: import('node:stream').Duplex,
    head: Buffer,
    result: Authenticated,
    origin: string | null,
  ) => {
    wss.handleUpgrade(req, socket, head, (ws) => {
      const peer = `${req.socket.remoteAddress ?? '?'}:${req.socket.remotePort ?? 0}`;
      const conn = server.connect(webSocketTransport(ws, peer, socket), result.principal);
      ws.on('message', (data, isBinary) => {
        conn.receive(isBinary || typeof data !== 'string' ? data.toString() : data);
      });
      ws.on('close', () => conn.transportClosed());
      ws.on('error', () => conn.transportClosed());
      opts.onConnection?.(conn, { principal: result.principal, origin });
    });
  };

  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(opts.port ?? 0, host, () => {
      http.off('error', reject);
      resolve();
    });
  });
  const port = (http.address() as AddressInfo).port;
  const hostForUrl = host.includes(':') ? `[${host}]` : host;
  return {
    url: `ws://${hostForUrl}:${port}`,
    port,
    http,
    readiness,
    close: () =>
      new Promise<void>((resolve) => {
        for (const ws of wss.clients) ws.terminate();
        wss.close();
        http.close(() => resolve());
        http.closeAllConnections();
      }),
  };
}
