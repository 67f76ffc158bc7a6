/**
 * A fake environment registry and relay for remote executors (`--remote URL --environment-id ID --remote-transport
 * direct`), on 127.0.0.1 only. It speaks the contract recorded from the released Codex 0.169 executor
 * (test/fixtures/remote/codex-0.169.0-direct.json, README "Remote executor"):
 *
 *   executor ──POST {base}/cloud/environment/{id}/direct/register  {"transport":"direct_jsonrpc_v1"}──▶ registry
 *            ◀── 200 {environment_id, transport:"direct_jsonrpc_v1", registration_id, url} ──
 *   executor ──WebSocket GET url (signed or bearer like the registration) ──▶ relay: one idle executor link
 *   harness  ──WebSocket GET {base}/harness/{id}?token=… ──▶ relay pairs it with an idle link, then passes every
 *            message both ways unchanged (recorded), so the executor serves exec-server JSON-RPC on its OUTBOUND link.
 *
 * A harness closing closes its link (the executor dials a fresh one for the next harness); a link dropping drops its
 * harness. An executor handshake for a registration the registry does not know (forgotten by `crash()`, or
 * `expireRegistrations()`) gets 409, and the executor must register again. `crash()` closes every socket at once and
 * stops listening, as a killed relay process would; `restart()` listens again on the same port with no state.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { type RawData, WebSocket, WebSocketServer } from 'ws';

export interface RecordedRequest {
  kind: 'register' | 'executor-handshake' | 'harness-handshake' | 'other';
  /** ms since the registry was created. */
  t: number;
  method: string;
  /** Path and query as sent. */
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** What the registry answered (status). */
  status: number;
}

export interface RelayedFrame {
  /** Pairing number, from 1. */
  link: number;
  dir: 'harness→executor' | 'executor→harness';
  t: number;
  text: string;
}

/** How the registry checks an executor (on registration and on its WebSocket handshake). */
export type ExecutorAuth =
  | { kind: 'none' }
  | { kind: 'bearer'; token: string }
  /** Any of these bearers, as the set holds them at the time (rotating executor credentials). */
  | { kind: 'bearers'; tokens: Set<string> }
  /** AWS SigV4, verified by re-signing the request with the same credentials (aws4). */
  | { kind: 'sigv4'; accessKeyId: string; secretAccessKey: string; region: string; service: string };

export interface RegistryOptions {
  /** Listen on this port (restart on the same one). */
  port?: number;
  executorAuth?: ExecutorAuth;
  /** A harness must present `?token=` (or Bearer) with this value; null: any harness. */
  harnessToken?: string | null;
  /** How long a harness waits for an idle executor link before 503 (ms). */
  harnessWaitMs?: number;
  /** Overrides the URL handed to executors (to test the TLS rule). */
  executorUrl?: (registrationId: string, environmentId: string, base: string) => string;
}

interface Registration {
  environmentId: string;
  registrationId: string;
}

interface Link {
  n: number;
  environmentId: string;
  registrationId: string;
  executor: WebSocket;
  harness: WebSocket | null;
}

export interface FakeRegistry {
  /** http://127.0.0.1:P (the `--remote` base URL). */
  readonly url: string;
  readonly port: number;
  readonly requests: RecordedRequest[];
  readonly frames: RelayedFrame[];
  /** ms since the registry was created (the clock of `requests[].t`). */
  elapsed(): number;
  /** The WebSocket URL a harness connects to for an environment (token included). */
  harnessUrl(environmentId: string): string;
  /** Resolves once an idle executor link of the environment is there. */
  waitForExecutor(environmentId: string, timeoutMs?: number): Promise<void>;
  /** Resolves once `n` requests of `kind` have been recorded. */
  waitForRequests(kind: RecordedRequest['kind'], n: number, timeoutMs?: number): Promise<RecordedRequest[]>;
  /** Idle executor links right now. */
  idleLinks(environmentId: string): number;
  /** Forgets every registration: the next executor handshake of each gets 409. */
  expireRegistrations(): void;
  /** Answers the next `n` executor handshakes with this status (409, 503, 401 …). */
  refuseHandshakes(status: number, n?: number): void;
  /** Drops every link (executor and harness sockets destroyed) but keeps listening and keeps registrations. */
  dropLinks(): void;
  /** Every socket destroyed, listening stops, all state forgotten (a killed relay). */
  crash(): Promise<void>;
  /** Listens again on the same port, with no registrations. */
  restart(): Promise<void>;
  close(): Promise<void>;
}

function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

const sha256 = (s: string | Buffer) => createHash('sha256').update(s).digest('hex');
const hmac = (k: string | Buffer, s: string) => createHmac('sha256', k).update(s).digest();
/** RFC 3986 encoding as SigV4 wants it (unreserved characters kept). */
const enc = (s: string) =>
  encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);

/**
 * Whether a request carries a valid AWS SigV4 signature for these credentials. Written from the SigV4 specification
 * (canonical request, string to sign, derived key), independently of the signer Corral uses (aws4): it accepts the
 * released Codex executor's signatures, so both executors are held to the same check.
 */
export function sigv4Valid(
  req: { method: string; url: string; headers: Record<string, string | string[] | undefined> },
  body: string,
  a: Extract<ExecutorAuth, { kind: 'sigv4' }>,
): boolean {
  const auth = headerValue(req.headers.authorization) ?? '';
  const m =
    /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, ?SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})$/.exec(
      auth,
    );
  if (!m) return false;
  const [, keyId, day, region, service, signedHeaders, signature] = m;
  if (keyId !== a.accessKeyId || region !== a.region || service !== a.service) return false;
  const amzDate = headerValue(req.headers['x-amz-date']);
  if (!amzDate || amzDate.slice(0, 8) !== day) return false;
  const names = signedHeaders!.split(';');
  if (!names.includes('host') || !names.includes('x-amz-date')) return false;
  const canonicalHeaders = names
    .map((n) => `${n}:${(headerValue(req.headers[n]) ?? '').trim().replace(/\s+/g, ' ')}\n`)
    .join('');
  const u = new URL(req.url, 'http://h');
  const query = [...u.searchParams.entries()]
    .map(([k, v]) => [enc(k), enc(v)] as const)
    .sort(([a1, b1], [a2, b2]) => (a1 === a2 ? (b1 < b2 ? -1 : 1) : a1 < a2 ? -1 : 1))
    .map(([k, v]) => `${k}=${v}`)
    .join('&');
  const payload = headerValue(req.headers['x-amz-content-sha256']) ?? sha256(body);
  const canonical = [req.method, u.pathname, query, canonicalHeaders, signedHeaders, payload].join('\n');
  const scope = `${day}/${region}/${service}/aws4_request`;
  const toSign = ['AWS4-HMAC-SHA256', amzDate, scope, sha256(canonical)].join('\n');
  const key = hmac(hmac(hmac(hmac(`AWS4${a.secretAccessKey}`, day!), region!), service!), 'aws4_request');
  const expected = createHmac('sha256', key).update(toSign).digest('hex');
  return timingSafeEqual(Buffer.from(expected), Buffer.from(signature!));
}

export async function startFakeRegistry(opts: RegistryOptions = {}): Promise<FakeRegistry> {
  const started = Date.now();
  const requests: RecordedRequest[] = [];
  const frames: RelayedFrame[] = [];
  let registrations = new Map<string, Registration>();
  const idle = new Map<string, Link[]>();
  const links = new Set<Link>();
  const sockets = new Set<Socket>();
  const harnessWaiters = new Map<string, (() => void)[]>();
  const listeners = new Set<() => void>();
  let refusals: { status: number; left: number } | null = null;
  let linkSeq = 0;
  let regSeq = 0;
  const harnessToken = opts.harnessToken === undefined ? 'harness-secret' : opts.harnessToken;
  const executorAuth = opts.executorAuth ?? { kind: 'none' };
  const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: 64 * 1024 * 1024 });
  let http: Server;
  let port = opts.port ?? 0;
  const changed = () => {
    for (const f of [...listeners]) f();
  };

  const record = (r: Omit<RecordedRequest, 't'>) => {
    requests.push({ ...r, t: Date.now() - started });
    changed();
  };
  const recordUpgrade = (req: IncomingMessage, kind: RecordedRequest['kind']) =>
    record({ kind, method: req.method!, url: req.url!, headers: req.headers, body: '', status: 101 });
  const executorAllowed = (req: IncomingMessage, body: string): boolean => {
    if (executorAuth.kind === 'none') return true;
    if (executorAuth.kind === 'bearer') return req.headers.authorization === `Bearer ${executorAuth.token}`;
    if (executorAuth.kind === 'bearers')
      return [...executorAuth.tokens].some((t) => req.headers.authorization === `Bearer ${t}`);
    return sigv4Valid({ method: req.method!, url: req.url!, headers: req.headers }, body, executorAuth);
  };
  const base = () => `http://127.0.0.1:${port}`;

  const pair = (environmentId: string, harness: WebSocket): boolean => {
    const queue = idle.get(environmentId) ?? [];
    let link = queue.shift();
    while (link && link.executor.readyState !== WebSocket.OPEN) link = queue.shift();
    if (!link) return false;
    link.harness = harness;
    const t = () => Date.now() - started;
    harness.on('message', (data: RawData, isBinary) => {
      const text = data.toString();
      frames.push({ link: link.n, dir: 'harness→executor', t: t(), text });
      if (link.executor.readyState === WebSocket.OPEN) link.executor.send(text, { binary: isBinary });
    });
    harness.on('close', () => {
      if (link.executor.readyState === WebSocket.OPEN) link.executor.close(1000, 'harness closed');
    });
    link.executor.on('message', (data: RawData, isBinary) => {
      const text = data.toString();
      frames.push({ link: link.n, dir: 'executor→harness', t: t(), text });
      if (harness.readyState === WebSocket.OPEN) harness.send(text, { binary: isBinary });
    });
    changed();
    return true;
  };

  const onRequest = (req: IncomingMessage, res: import('node:http').ServerResponse) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (d: string) => {
      body += d;
    });
    req.on('end', () => {
      const m = /^\/cloud\/environment\/([^/?]+)\/direct\/register$/.exec(req.url ?? '');
      const answer = (status: number, json: unknown, kind: RecordedRequest['kind']) => {
        record({ kind, method: req.method!, url: req.url!, headers: req.headers, body, status });
        res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(json));
      };
      if (!m || req.method !== 'POST') return answer(404, { error: { code: 'not_found' } }, 'other');
      if (!executorAllowed(req, body))
        return answer(
          401,
          { error: { code: 'unauthorized', message: 'bad executor credential' } },
          'register',
        );
      let parsed: unknown;
      try {
        parsed = JSON.parse(body);
      } catch {}
      if ((parsed as { transport?: unknown } | undefined)?.transport !== 'direct_jsonrpc_v1')
        return answer(400, { error: { code: 'bad_request', message: 'transport' } }, 'register');
      const environmentId = decodeURIComponent(m[1]!);
      const registrationId = `reg-${++regSeq}-${Math.random().toString(36).slice(2, 8)}`;
      registrations.set(registrationId, { environmentId, registrationId });
      const url =
        opts.executorUrl?.(registrationId, environmentId, base()) ??
        `ws://127.0.0.1:${port}/executor/${encodeURIComponent(environmentId)}?registration=${registrationId}`;
      answer(
        200,
        {
          environment_id: environmentId,
          transport: 'direct_jsonrpc_v1',
          registration_id: registrationId,
          url,
        },
        'register',
      );
    });
  };

  const onUpgrade = (req: IncomingMessage, socket: Socket, head: Buffer) => {
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    const reject = (status: number, kind: RecordedRequest['kind']) => {
      record({ kind, method: req.method!, url: req.url!, headers: req.headers, body: '', status });
      socket.end(`HTTP/1.1 ${status} Refused\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
    };
    const exec = /^\/executor\/([^/]+)$/.exec(url.pathname);
    if (exec) {
      const environmentId = decodeURIComponent(exec[1]!);
      if (refusals && refusals.left > 0) {
        refusals.left--;
        return reject(refusals.status, 'executor-handshake');
      }
      if (!executorAllowed(req, '')) return reject(401, 'executor-handshake');
      const reg = registrations.get(url.searchParams.get('registration') ?? '');
      if (!reg || reg.environmentId !== environmentId) return reject(409, 'executor-handshake');
      recordUpgrade(req, 'executor-handshake');
      wss.handleUpgrade(req, socket, head, (ws) => {
        const link: Link = {
          n: ++linkSeq,
          environmentId,
          registrationId: reg.registrationId,
          executor: ws,
          harness: null,
        };
        links.add(link);
        const drop = () => {
          links.delete(link);
          const q = idle.get(environmentId);
          if (q)
            idle.set(
              environmentId,
              q.filter((l) => l !== link),
            );
          if (link.harness && link.harness.readyState === WebSocket.OPEN) link.harness.terminate();
          changed();
        };
        ws.on('close', drop);
        ws.on('error', drop);
        const q = idle.get(environmentId) ?? [];
        q.push(link);
        idle.set(environmentId, q);
        for (const w of harnessWaiters.get(environmentId)?.splice(0) ?? []) w();
        changed();
      });
      return;
    }
    const harness = /^\/harness\/([^/]+)$/.exec(url.pathname);
    if (harness) {
      const environmentId = decodeURIComponent(harness[1]!);
      const presented =
        url.searchParams.get('token') ?? /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1] ?? null;
      if (harnessToken !== null && presented !== harnessToken) return reject(401, 'harness-handshake');
      const accept = () => {
        recordUpgrade(req, 'harness-handshake');
        wss.handleUpgrade(req, socket, head, (ws) => {
          if (!pair(environmentId, ws)) ws.close(1013, 'no executor');
        });
      };
      const hasIdle = () =>
        (idle.get(environmentId) ?? []).some((l) => l.executor.readyState === WebSocket.OPEN);
      if (hasIdle()) return accept();
      // Wait for the executor to dial (it redials after every harness, with its backoff).
      const timer = setTimeout(() => {
        const list = harnessWaiters.get(environmentId) ?? [];
        harnessWaiters.set(
          environmentId,
          list.filter((w) => w !== go),
        );
        reject(503, 'harness-handshake');
      }, opts.harnessWaitMs ?? 15_000);
      const go = () => {
        clearTimeout(timer);
        if (socket.destroyed) return;
        accept();
      };
      const list = harnessWaiters.get(environmentId) ?? [];
      list.push(go);
      harnessWaiters.set(environmentId, list);
      return;
    }
    reject(404, 'other');
  };

  const listen = async () => {
    http = createServer(onRequest);
    http.on('upgrade', onUpgrade);
    http.on('connection', (s: Socket) => {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
    });
    http.listen(port, '127.0.0.1');
    await once(http, 'listening');
    port = (http.address() as AddressInfo).port;
  };
  await listen();

  const waitUntil = (cond: () => boolean, timeoutMs: number, what: string) =>
    new Promise<void>((resolve, reject) => {
      if (cond()) return resolve();
      const timer = setTimeout(() => {
        listeners.delete(check);
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
      }, timeoutMs);
      const check = () => {
        if (!cond()) return;
        clearTimeout(timer);
        listeners.delete(check);
        resolve();
      };
      listeners.add(check);
    });

  const destroyAll = () => {
    for (const l of links) {
      l.executor.terminate();
      l.harness?.terminate();
    }
    links.clear();
    idle.clear();
    for (const s of sockets) s.destroy();
  };

  return {
    get url() {
      return base();
    },
    get port() {
      return port;
    },
    requests,
    frames,
    elapsed: () => Date.now() - started,
    harnessUrl: (environmentId) =>
      `ws://127.0.0.1:${port}/harness/${encodeURIComponent(environmentId)}${harnessToken ? `?token=${harnessToken}` : ''}`,
    waitForExecutor: (environmentId, timeoutMs = 10_000) =>
      waitUntil(
        () => (idle.get(environmentId) ?? []).some((l) => l.executor.readyState === WebSocket.OPEN),
        timeoutMs,
        `an executor link of ${environmentId}`,
      ),
    async waitForRequests(kind, n, timeoutMs = 10_000) {
      const of = () => requests.filter((r) => r.kind === kind);
      await waitUntil(() => of().length >= n, timeoutMs, `${n} ${kind} request(s)`);
      return of();
    },
    idleLinks: (environmentId) =>
      (idle.get(environmentId) ?? []).filter((l) => l.executor.readyState === WebSocket.OPEN).length,
    expireRegistrations() {
      registrations.clear();
    },
    refuseHandshakes(status, n = 1) {
      refusals = { status, left: n };
    },
    dropLinks() {
      for (const l of links) {
        l.executor.terminate();
        l.harness?.terminate();
      }
    },
    async crash() {
      destroyAll();
      registrations = new Map();
      await new Promise<void>((r) => http.close(() => r()));
    },
    async restart() {
      await listen();
    },
    async close() {
      destroyAll();
      await new Promise<void>((r) => http.close(() => r()));
    },
  };
}
