/**
 * A stand-in for the agent-sandbox router (kubernetes-sigs/agent-sandbox, sandbox-router/, the Go router that
 * replaced the Python one with the same contract), written from its README and behaviour, for the one-machine
 * cluster of issue 19.3:
 *
 * - `/healthz` (any method, any headers) is the router's own: 200 `{"status":"ok"}`.
 * - Routing headers: `X-Sandbox-ID` required, a DNS-1123 label (≤ 63, `[a-z0-9]([-a-z0-9]*[a-z0-9])?`);
 *   `X-Sandbox-Namespace` the same rule, default `default` (also when empty); `X-Sandbox-Port` what Go's
 *   strconv.Atoi accepts (optional sign, decimal digits) in [1, 65535], default 8888; `X-Sandbox-Pod-IP` an IP
 *   literal that is not unspecified, link-local, multicast or (unless allowed) loopback. The first value of a repeated
 *   header counts (Go's Header.Get). Failures: 400 `{"detail":"…"}` with the router's exact messages.
 * - Upstream: `http://<id>.<ns>.svc.<cluster-domain>:<port>` + the path and query as sent. `Host` becomes that
 *   authority, `Authorization` is removed, `X-Forwarded-For` is replaced by the client address and
 *   `X-Forwarded-Host`/`-Proto` set; on upgrades `Origin` is removed too. Hop-by-hop headers (and those named in
 *   `Connection`) are dropped; an upgrade keeps `Connection: Upgrade` and its `Upgrade`. Everything else passes,
 *   the `X-Sandbox-*` headers included.
 * - Dial failures are retried (default 3 times, 200 ms doubling to 800 ms), then 502
 *   `{"detail":"Could not connect to the backend sandbox: <id>"}`. WebSocket upgrades are relayed byte for byte.
 *
 * "DNS" is the `resolve` callback: it maps (namespace, id) to something that can dial a port of that pod (a
 * NetnsDialer in the rig). A valid `X-Sandbox-Pod-IP` has nothing to dial here (no pod network exists on this
 * machine), so it ends in 502 like an unreachable IP. Not modelled: TLS, authz modes, the Pod-IP cache
 * (`X-Sandbox-UID`), Go's ServeMux path cleaning (301 for `//x` or `/a/../b`), timeouts.
 */
import { createServer, type IncomingMessage, request, type Server, type ServerResponse } from 'node:http';
import { BlockList, connect, isIP, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';

export interface PodDialer {
  dial(port: number): Promise<Socket>;
}

export interface SandboxRouterOptions {
  /** The cluster's DNS: the pod named `id` in `namespace`, or undefined (NXDOMAIN). */
  resolve(namespace: string, id: string): PodDialer | undefined;
  clusterDomain?: string;
  /** Dial retries after the first attempt (the Go router's --upstream-max-retries). */
  retries?: number;
  retryInitialDelayMs?: number;
  retryMaxDelayMs?: number;
  /** The router's --allow-loopback-pod-ip. */
  allowLoopbackPodIP?: boolean;
}

export interface SandboxRouter {
  /** http://127.0.0.1:PORT */
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

export interface Target {
  id: string;
  namespace: string;
  port: number;
  podIP: string | null;
}

export class RoutingError extends Error {
  constructor(
    readonly status: number,
    readonly detail: string,
  ) {
    super(detail);
  }
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const ATOI = /^[+-]?[0-9]+$/;

const validLabel = (s: string): boolean => s.length > 0 && s.length <= 63 && DNS_LABEL.test(s);

/** The first value of a header, as Go's Header.Get returns it ("" when absent). */
function first(req: IncomingMessage, name: string): string {
  return req.headersDistinct[name]?.[0] ?? '';
}

/** The address classes the router refuses in X-Sandbox-Pod-IP (Go: IsUnspecified, IsLinkLocal*, IsMulticast). */
const REFUSED_POD_IPS = new BlockList();
REFUSED_POD_IPS.addAddress('0.0.0.0');
REFUSED_POD_IPS.addSubnet('169.254.0.0', 16);
REFUSED_POD_IPS.addSubnet('224.0.0.0', 4);
REFUSED_POD_IPS.addAddress('::', 'ipv6');
REFUSED_POD_IPS.addSubnet('fe80::', 10, 'ipv6');
REFUSED_POD_IPS.addSubnet('ff00::', 8, 'ipv6');
const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8);
LOOPBACK.addAddress('::1', 'ipv6');

function podIPAllowed(s: string, allowLoopback: boolean): boolean {
  const v = isIP(s);
  // Go's net.ParseIP takes no zone (`fe80::1%eth0`).
  if (v === 0 || s.includes('%')) return false;
  const family = v === 4 ? 'ipv4' : 'ipv6';
  if (REFUSED_POD_IPS.check(s, family)) return false;
  return allowLoopback || !LOOPBACK.check(s, family);
}

/** The routing headers of a request, validated as the router does (throws RoutingError 400). */
export function parseSandboxHeaders(req: IncomingMessage, allowLoopbackPodIP = false): Target {
  const id = first(req, 'x-sandbox-id');
  if (id === '') throw new RoutingError(400, 'X-Sandbox-ID header is required.');
  if (!validLabel(id)) throw new RoutingError(400, 'Invalid sandbox ID format.');
  const namespace = first(req, 'x-sandbox-namespace') || 'default';
  if (!validLabel(namespace)) throw new RoutingError(400, 'Invalid namespace format.');
  let port = 8888;
  const rawPort = first(req, 'x-sandbox-port');
  if (rawPort !== '') {
    port = ATOI.test(rawPort) ? Number(rawPort) : Number.NaN;
    if (!(port >= 1 && port <= 65535)) throw new RoutingError(400, 'Invalid port format.');
  }
  const podIP = first(req, 'x-sandbox-pod-ip');
  if (podIP !== '' && !podIPAllowed(podIP, allowLoopbackPodIP)) {
    throw new RoutingError(400, 'Invalid target IP address.');
  }
  return { id, namespace, port, podIP: podIP || null };
}

const HOP_BY_HOP = [
  'connection',
  'proxy-connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
];

/** Header pairs of `req` minus hop-by-hop ones, those `Connection` names and `drop`. */
export function forwardableHeaders(req: IncomingMessage, drop: string[]): [string, string][] {
  const named = (req.headers.connection ?? '')
    .split(',')
    .map((t) => t.trim().toLowerCase())
    .filter(Boolean);
  const skip = new Set([...HOP_BY_HOP, ...named, ...drop]);
  const out: [string, string][] = [];
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i]!;
    if (!skip.has(name.toLowerCase())) out.push([name, req.rawHeaders[i + 1]!]);
  }
  return out;
}

export function isUpgrade(req: IncomingMessage): boolean {
  const tokens = (req.headers.connection ?? '').split(',').map((t) => t.trim().toLowerCase());
  return tokens.includes('upgrade') && !!req.headers.upgrade;
}

/** Writes a whole HTTP/1.1 response onto a raw socket (an upgrade request that is not relayed) and closes it. */
export function rawResponse(socket: Duplex, status: number, reason: string, body: string): void {
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}

/** Relays an upgrade request to `upstream` (head + bytes both ways); the upstream's answer goes back verbatim. */
export function relayUpgrade(
  req: IncomingMessage,
  client: Duplex,
  head: Buffer,
  upstream: Socket,
  headers: [string, string][],
): void {
  const lines = headers.map(([k, v]) => `${k}: ${v}\r\n`).join('');
  upstream.write(`${req.method} ${req.url} HTTP/1.1\r\n${lines}\r\n`);
  if (head.length > 0) upstream.write(head);
  upstream.resume();
  upstream.pipe(client);
  client.pipe(upstream);
  const end = () => {
    client.destroy();
    upstream.destroy();
  };
  upstream.on('error', end).on('close', end);
  client.on('error', end).on('close', end);
}

/** Relays a plain request to `upstream` and its response to `res`. */
export function relayRequest(
  req: IncomingMessage,
  res: ServerResponse,
  upstream: Socket,
  headers: [string, string][],
): void {
  const out = request(
    { method: req.method, path: req.url, headers: headers.flat(), createConnection: () => upstream },
    (up) => {
      const kept: Record<string, string | string[]> = {};
      const drop = new Set([...HOP_BY_HOP, ...(up.headers.connection ?? '').split(',').map((t) => t.trim())]);
      for (const [k, v] of Object.entries(up.headers)) if (v !== undefined && !drop.has(k)) kept[k] = v;
      res.writeHead(up.statusCode ?? 502, kept);
      up.pipe(res);
    },
  );
  out.on('error', () => res.destroy());
  req.pipe(out);
}

/** Listens on an ephemeral loopback port; `close` also drops open connections. */
async function listenLoopback(server: Server): Promise<{ port: number; close(): Promise<void> }> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

const HEALTHZ = '{"status":"ok"}';

export async function startSandboxRouter(opts: SandboxRouterOptions): Promise<SandboxRouter> {
  const domain = opts.clusterDomain ?? 'cluster.local';
  const retries = opts.retries ?? 3;
  const firstDelay = opts.retryInitialDelayMs ?? 200;
  const maxDelay = opts.retryMaxDelayMs ?? 800;

  async function dialTarget(t: Target): Promise<Socket> {
    let delay = firstDelay;
    for (let attempt = 0; ; attempt++) {
      try {
        const pod = t.podIP === null ? opts.resolve(t.namespace, t.id) : undefined;
        if (!pod) throw new Error('no such host');
        return await pod.dial(t.port);
      } catch (e) {
        if (attempt >= retries) throw e;
        await sleep(delay);
        delay = Math.min(delay * 2, maxDelay);
      }
    }
  }

  /** The request headers for the upstream: the router's rewrites on top of the forwardable ones. */
  function upstreamHeaders(req: IncomingMessage, t: Target, upgrade: boolean): [string, string][] {
    const drop = ['host', 'authorization', 'x-forwarded-for', 'x-forwarded-host', 'x-forwarded-proto'];
    if (upgrade) drop.push('origin');
    const h = forwardableHeaders(req, drop);
    const authority = t.podIP ?? `${t.id}.${t.namespace}.svc.${domain}`;
    h.unshift(['Host', `${authority.includes(':') ? `[${authority}]` : authority}:${t.port}`]);
    if (upgrade) h.push(['Connection', 'Upgrade'], ['Upgrade', req.headers.upgrade!]);
    h.push(
      ['X-Forwarded-For', req.socket.remoteAddress ?? ''],
      ['X-Forwarded-Host', req.headers.host ?? ''],
      ['X-Forwarded-Proto', 'http'],
    );
    return h;
  }

  const detail = (s: string) => `${JSON.stringify({ detail: s })}\n`;
  /** A small JSON answer, with its length (as Go's net/http sends a body written at once). */
  const json = (res: ServerResponse, status: number, body: string) =>
    res
      .writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) })
      .end(body);
  const pathOf = (req: IncomingMessage) => (req.url ?? '/').split('?')[0];

  const server: Server = createServer(async (req, res) => {
    if (pathOf(req) === '/healthz') {
      json(res, 200, HEALTHZ);
      return;
    }
    let t: Target;
    try {
      t = parseSandboxHeaders(req, opts.allowLoopbackPodIP);
    } catch (e) {
      const r = e as RoutingError;
      json(res, r.status, detail(r.detail));
      return;
    }
    let upstream: Socket;
    try {
      upstream = await dialTarget(t);
    } catch {
      json(res, 502, detail(`Could not connect to the backend sandbox: ${t.id}`));
      return;
    }
    relayRequest(req, res, upstream, upstreamHeaders(req, t, false));
  });

  server.on('upgrade', async (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => socket.destroy());
    if (pathOf(req) === '/healthz') return rawResponse(socket, 200, 'OK', HEALTHZ);
    let t: Target;
    try {
      t = parseSandboxHeaders(req, opts.allowLoopbackPodIP);
    } catch (e) {
      const r = e as RoutingError;
      return rawResponse(socket, r.status, 'Bad Request', detail(r.detail));
    }
    let upstream: Socket;
    try {
      upstream = await dialTarget(t);
    } catch {
      return rawResponse(
        socket,
        502,
        'Bad Gateway',
        detail(`Could not connect to the backend sandbox: ${t.id}`),
      );
    }
    if (socket.destroyed) {
      upstream.destroy();
      return;
    }
    relayUpgrade(req, socket, head, upstream, upstreamHeaders(req, t, true));
  });

  const { port, close } = await listenLoopback(server);
  return { url: `http://127.0.0.1:${port}`, port, close };
}

export interface HeaderHop {
  /** ws://127.0.0.1:PORT — what a client that takes only a URL (the Codex CLI) is pointed at, plus its query. */
  readonly url: string;
  close(): Promise<void>;
}

/**
 * The header-injecting hop of docs/kubernetes.md, in miniature: a local listener that forwards every request and
 * upgrade to `target` (the router) with `headers` set (e.g. X-Sandbox-ID), so a client configured with nothing but a
 * URL reaches one sandbox. In a cluster the same job is an HTTPRoute RequestHeaderModifier or an nginx
 * `proxy_set_header`.
 */
export async function startHeaderHop(target: string, headers: Record<string, string>): Promise<HeaderHop> {
  const t = new URL(target);
  const injected = Object.entries(headers);
  const drop = ['host', ...injected.map(([k]) => k.toLowerCase())];
  const rewrite = (req: IncomingMessage): [string, string][] => {
    const h = forwardableHeaders(req, drop);
    h.unshift(['Host', t.host], ...injected);
    if (isUpgrade(req)) h.push(['Connection', 'Upgrade'], ['Upgrade', req.headers.upgrade!]);
    return h;
  };
  const dial = () =>
    new Promise<Socket>((resolve, reject) => {
      const s = connect({ host: t.hostname, port: Number(t.port) });
      s.once('connect', () => resolve(s)).once('error', reject);
    });
  const server = createServer((req, res) => {
    dial().then(
      (s) => relayRequest(req, res, s, rewrite(req)),
      () => res.writeHead(502).end(),
    );
  });
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => socket.destroy());
    dial().then(
      (s) => relayUpgrade(req, socket, head, s, rewrite(req)),
      () => socket.destroy(),
    );
  });
  const { port, close } = await listenLoopback(server);
  return { url: `ws://127.0.0.1:${port}`, close };
}
