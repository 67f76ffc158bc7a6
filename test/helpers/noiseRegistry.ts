/**
 * A stand-in environment registry, rendezvous relay and harness for Codex's Noise remote transport
 * (`--remote-transport noise`, docs/remote-noise.md), on 127.0.0.1 only:
 *
 *   executor ──POST {base}/cloud/environment/{id}/register {security_profile:"noise_hybrid_ik_v1", executor_public_key}──▶
 *            ◀── {environment_id, url: ws://…/rendezvous/{reg}, security_profile, executor_registration_id} ──
 *   executor ──WebSocket GET url──▶ rendezvous: the executor's one physical link, protobuf relay frames
 *   test     ──WebSocket GET {base}/harness/{id}──▶ the stand-in harness opens a virtual stream on that link: a fresh
 *            harness identity, an authorization it issues for that key, the hybrid IK request (relay handshake frame),
 *            then bridges the test's plaintext JSON-RPC text frames to encrypted data frames and back.
 *   executor ──POST {base}/cloud/environment/{id}/validate {executor_registration_id, harness_public_key,
 *            harness_key_authorization}──▶ registry: valid only for an authorization it issued for that very key
 *            (and what `vouch` says), for the current registration.
 *
 * So a test drives the executor with the ordinary RpcClient (`RpcClient.open(registry.harnessUrl(id))`) while every
 * byte between the stand-in and the executor is Noise. It was first proven against the real `codex exec-server`
 * 0.171 executor (test/integration/remote-noise.test.ts), which makes it a trustworthy harness for Corral's.
 * Hostile knobs: `registerAnswer`/`validateAnswer` replace the registry's answers; `vouch` refuses keys;
 * `sendRaw` writes any bytes on the executor link; every frame from the executor is kept (`fromExecutor`).
 */
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { type RawData, WebSocket, WebSocketServer } from 'ws';
import {
  decodePublicKey,
  generateIdentity,
  InitiatorHandshake,
  type NoiseIdentity,
  type NoisePublicKeyJson,
  type NoiseTransport,
  noiseChannelPrologue,
  publicKeyJson,
} from '../../src/remote/noiseChannel.js';
import {
  frameJsonRpcRecords,
  JsonRpcMessageDecoder,
  OrderedCiphertextFrames,
} from '../../src/remote/noiseStream.js';
import {
  decodeRelayFrame,
  encodeRelayFrame,
  type RelayFrame,
  relayData,
  relayHandshake,
  relayReset,
} from '../../src/remote/relayFrame.js';

export interface NoiseRecordedRequest {
  kind: 'register' | 'validate' | 'rendezvous' | 'other';
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  status: number;
}

export interface NoiseRegistryOptions {
  /** Registration (and validation) must carry `Authorization: Bearer <token>`; null: no check. */
  bearer?: string | null;
  /** Instead: any of these bearers, as the set holds them at the time (rotating executor credentials). */
  bearers?: Set<string>;
  /** Extra say on a harness key the registry issued an authorization for (default: yes). */
  vouch?: (key: NoisePublicKeyJson, authorization: string) => boolean;
  /** Replace the registration answer (hostile registry). */
  registerAnswer?: (regId: string, envId: string, base: string) => { status: number; body: string };
  /** Replace the validation answer (hostile registry). */
  validateAnswer?: () => { status: number; body: string };
}

export interface NoiseRegistry {
  readonly url: string;
  readonly requests: NoiseRecordedRequest[];
  /** Every frame the executor sent on its links, decoded (null: not protobuf). */
  readonly fromExecutor: { streamId: string; frame: RelayFrame | null; bytes: number }[];
  /** Resets the executor sent, by stream id, with their reasons. */
  readonly resets: { streamId: string; reason: string }[];
  /** The executor's registered public key (the last registration). */
  executorKey: NoisePublicKeyJson | null;
  registrationId: string | null;
  harnessUrl(envId: string): string;
  waitForExecutor(envId: string, timeoutMs?: number): Promise<void>;
  waitFor(pred: () => boolean, timeoutMs?: number): Promise<void>;
  /** Write raw bytes (a binary message) on the executor's current link. */
  sendRaw(bytes: Uint8Array | string, binary?: boolean): void;
  /** Start a hybrid IK handshake on a stream of the executor link by hand; resolves with the executor's answer. */
  handshake(opts?: {
    streamId?: string;
    identity?: NoiseIdentity;
    authorization?: string;
    /** Pin this key instead of the registered one. */
    responderKey?: NoisePublicKeyJson;
    /** Do not issue the authorization (the registry will not vouch for this key). */
    unissued?: boolean;
    /** Replace the request bytes before sending. */
    tamper?: (request: Uint8Array) => Uint8Array;
  }): Promise<{ streamId: string; transport: NoiseTransport | null; reset: string | null }>;
  close(): Promise<void>;
}

function readBody(req: IncomingMessage, limit = 1 << 20): Promise<string> {
  return new Promise((resolve, reject) => {
    let size = 0;
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > limit) req.destroy();
      else chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

const canonicalKey = (k: NoisePublicKeyJson) => `${k.suite}|${k.x25519_public_key}|${k.mlkem768_public_key}`;

export async function startNoiseRegistry(opts: NoiseRegistryOptions = {}): Promise<NoiseRegistry> {
  const requests: NoiseRecordedRequest[] = [];
  const fromExecutor: NoiseRegistry['fromExecutor'] = [];
  const resets: NoiseRegistry['resets'] = [];
  /** authorization → the key it was issued for. */
  const issued = new Map<string, string>();
  const executors = new Map<string, WebSocket>(); // envId → link
  const regs = new Map<string, { regId: string; key: NoisePublicKeyJson }>(); // envId → registration
  const streamHandlers = new Map<string, (frame: RelayFrame) => void>(); // streamId → handler
  const sockets = new Set<Socket>();
  const changed: (() => void)[] = [];
  const notify = () => {
    for (const f of changed.splice(0)) f();
  };
  let regCounter = 0;
  let streamCounter = 0;
  let base = '';

  const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: 256 * 1024 });

  const reply = (
    res: import('node:http').ServerResponse,
    rec: NoiseRecordedRequest,
    status: number,
    body: string,
  ) => {
    rec.status = status;
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(body);
  };

  const bearerOk = (req: IncomingMessage) => {
    const got = req.headers.authorization;
    if (opts.bearers) return got?.startsWith('Bearer ') === true && opts.bearers.has(got.slice(7));
    return opts.bearer == null || got === `Bearer ${opts.bearer}`;
  };

  const server: Server = createServer(async (req, res) => {
    const body = await readBody(req).catch(() => '');
    const rec: NoiseRecordedRequest = {
      kind: 'other',
      method: req.method ?? '',
      url: req.url ?? '',
      headers: { ...req.headers },
      body,
      status: 0,
    };
    requests.push(rec);
    notify();
    const m = /^\/cloud\/environment\/([^/]+)\/(register|validate)$/.exec(req.url ?? '');
    if (req.method !== 'POST' || !m) return reply(res, rec, 404, '{"error":"not found"}');
    const envId = decodeURIComponent(m[1]!);
    if (!bearerOk(req)) return reply(res, rec, 401, '{"error":"unauthorized"}');
    if (m[2] === 'register') {
      rec.kind = 'register';
      let parsed: { security_profile?: unknown; executor_public_key?: NoisePublicKeyJson };
      try {
        parsed = JSON.parse(body);
        if (parsed.security_profile !== 'noise_hybrid_ik_v1') throw new Error('profile');
        decodePublicKey(parsed.executor_public_key);
      } catch {
        return reply(res, rec, 400, '{"error":"bad registration"}');
      }
      const regId = `reg-${++regCounter}`;
      regs.set(envId, { regId, key: parsed.executor_public_key! });
      api.executorKey = parsed.executor_public_key!;
      api.registrationId = regId;
      if (opts.registerAnswer) {
        const a = opts.registerAnswer(regId, envId, base);
        return reply(res, rec, a.status, a.body);
      }
      return reply(
        res,
        rec,
        200,
        JSON.stringify({
          environment_id: envId,
          url: `${base.replace(/^http/, 'ws')}/rendezvous/${encodeURIComponent(envId)}/${regId}`,
          security_profile: 'noise_hybrid_ik_v1',
          executor_registration_id: regId,
        }),
      );
    }
    rec.kind = 'validate';
    if (opts.validateAnswer) {
      const a = opts.validateAnswer();
      return reply(res, rec, a.status, a.body);
    }
    let valid = false;
    try {
      const v = JSON.parse(body) as {
        executor_registration_id: string;
        harness_public_key: NoisePublicKeyJson;
        harness_key_authorization: string;
      };
      decodePublicKey(v.harness_public_key);
      valid =
        regs.get(envId)?.regId === v.executor_registration_id &&
        issued.get(v.harness_key_authorization) === canonicalKey(v.harness_public_key) &&
        (opts.vouch ? opts.vouch(v.harness_public_key, v.harness_key_authorization) : true);
    } catch {
      valid = false;
    }
    return reply(res, rec, 200, JSON.stringify({ valid }));
  });

  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });

  server.on('upgrade', (req, socket, head) => {
    const url = req.url ?? '';
    const rv = /^\/rendezvous\/([^/]+)\/([^/?]+)$/.exec(url);
    const hv = /^\/harness\/([^/?]+)$/.exec(url);
    if (rv) {
      requests.push({
        kind: 'rendezvous',
        method: 'GET',
        url,
        headers: { ...req.headers },
        body: '',
        status: 101,
      });
      const envId = decodeURIComponent(rv[1]!);
      wss.handleUpgrade(req, socket, head, (ws) => onExecutor(envId, ws));
      return;
    }
    if (hv) {
      wss.handleUpgrade(req, socket, head, (ws) => onHarness(decodeURIComponent(hv[1]!), ws));
      return;
    }
    socket.destroy();
  });

  function onExecutor(envId: string, ws: WebSocket): void {
    executors.set(envId, ws);
    notify();
    ws.on('message', (data: RawData, isBinary: boolean) => {
      const bytes = new Uint8Array(data as Buffer);
      let frame: RelayFrame | null = null;
      try {
        frame = isBinary ? decodeRelayFrame(bytes) : null;
      } catch {
        frame = null;
      }
      fromExecutor.push({ streamId: frame?.streamId ?? '', frame, bytes: bytes.length });
      if (frame?.body?.kind === 'reset') resets.push({ streamId: frame.streamId, reason: frame.body.reason });
      notify();
      if (frame) streamHandlers.get(frame.streamId)?.(frame);
    });
    ws.on('close', () => {
      if (executors.get(envId) === ws) executors.delete(envId);
      notify();
    });
  }

  function link(envId: string): WebSocket | null {
    const ws = executors.get(envId);
    return ws && ws.readyState === WebSocket.OPEN ? ws : null;
  }

  function startHandshake(
    envId: string,
    o: Parameters<NoiseRegistry['handshake']>[0] = {},
  ): { streamId: string; initiator: InitiatorHandshake; send: (f: RelayFrame) => void } {
    const ws = link(envId);
    const reg = regs.get(envId);
    if (!ws || !reg) throw new Error('no executor link');
    const streamId = o.streamId ?? `stream-${++streamCounter}`;
    const identity = o.identity ?? generateIdentity();
    const authorization = o.authorization ?? `authz-${randomBytes(12).toString('hex')}`;
    const keyJson = publicKeyJson({ dh: identity.dh.publicKey, kem: identity.kem.publicKey });
    if (!o.unissued) issued.set(authorization, canonicalKey(keyJson));
    const prologue = noiseChannelPrologue(envId, reg.regId, streamId);
    const { handshake, request } = InitiatorHandshake.start(
      identity,
      decodePublicKey(o.responderKey ?? reg.key),
      prologue,
      Buffer.from(authorization, 'utf8'),
    );
    const send = (f: RelayFrame) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(encodeRelayFrame(f));
    };
    send(relayHandshake(streamId, o.tamper ? o.tamper(request) : request));
    return { streamId, initiator: handshake, send };
  }

  function onHarness(envId: string, harness: WebSocket): void {
    let started: ReturnType<typeof startHandshake>;
    try {
      started = startHandshake(envId);
    } catch {
      harness.close(1013, 'no executor');
      return;
    }
    const { streamId, initiator, send } = started;
    let transport: NoiseTransport | null = null;
    let seq = 0;
    const queued: string[] = [];
    const ordered = new OrderedCiphertextFrames();
    const decoder = new JsonRpcMessageDecoder();
    const sendJson = (text: string) => {
      for (const rec of frameJsonRpcRecords(text)) send(relayData(streamId, seq++, transport!.encrypt(rec)));
    };
    streamHandlers.set(streamId, (frame) => {
      const body = frame.body;
      if (!body) return;
      try {
        if (body.kind === 'handshake' && !transport) {
          transport = initiator.finish(body.payload);
          for (const q of queued.splice(0)) sendJson(q);
        } else if (body.kind === 'data' && transport) {
          for (const ct of ordered.push(body.seq, body.payload))
            for (const text of decoder.push(transport.decrypt(ct))) harness.send(text);
        } else if (body.kind === 'reset') {
          streamHandlers.delete(streamId);
          harness.close(1011, 'reset');
        }
      } catch {
        send(relayReset(streamId, 'stand-in harness protocol error'));
        streamHandlers.delete(streamId);
        harness.close(1011, 'protocol error');
      }
    });
    harness.on('message', (data: RawData) => {
      const text = data.toString();
      if (transport) sendJson(text);
      else queued.push(text);
    });
    harness.on('close', () => {
      if (streamHandlers.delete(streamId)) send(relayReset(streamId, 'harness closed'));
    });
  }

  const waitFor = (pred: () => boolean, timeoutMs = 20_000) =>
    new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('noise registry: timed out waiting')), timeoutMs);
      const check = () => {
        if (pred()) {
          clearTimeout(timer);
          resolve();
        } else changed.push(check);
      };
      check();
    });

  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const api: NoiseRegistry = {
    url: base,
    requests,
    fromExecutor,
    resets,
    executorKey: null,
    registrationId: null,
    harnessUrl: (envId) => `${base.replace(/^http/, 'ws')}/harness/${encodeURIComponent(envId)}`,
    waitForExecutor: (envId, timeoutMs) => waitFor(() => link(envId) !== null, timeoutMs),
    waitFor,
    sendRaw(bytes, binary = true) {
      for (const ws of executors.values()) ws.send(bytes, { binary });
    },
    async handshake(o = {}) {
      const envId = [...executors.keys()][0]!;
      const { streamId, initiator } = startHandshake(envId, o);
      let transport: NoiseTransport | null = null;
      let reset: string | null = null;
      await new Promise<void>((resolve) => {
        streamHandlers.set(streamId, (frame) => {
          if (frame.body?.kind === 'handshake') {
            try {
              transport = initiator.finish(frame.body.payload);
            } catch (e) {
              reset = `harness could not finish: ${(e as Error).message}`;
            }
            resolve();
          } else if (frame.body?.kind === 'reset') {
            reset = frame.body.reason;
            resolve();
          }
        });
      });
      streamHandlers.delete(streamId);
      return { streamId, transport, reset };
    },
    async close() {
      for (const ws of executors.values()) ws.terminate();
      for (const s of sockets) s.destroy();
      wss.close();
      server.close();
    },
  };
  return api;
}
