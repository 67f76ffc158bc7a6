/**
 * The executor side of Codex 0.171's Noise remote transport (`--remote-transport noise`, docs/remote-noise.md).
 *
 * Registration (registry.ts, `POST {base}/cloud/environment/{id}/register` with this process's hybrid public key)
 * and the link loop are direct.ts's (startRegistryLinks: same retry schedule, same relay-host rule); the link to the
 * rendezvous URL carries no credential, as Codex's does not. On that one physical link the relay multiplexes
 * virtual streams (protobuf frames, relayFrame.ts). For each stream:
 *
 *   handshake frame → parse the hybrid IK request (noiseChannel.ts): the harness's static key is authenticated and
 *   the payload is the registry's authorization → ask the registry (`POST …/validate`, 10 s) whether that key may use
 *   this registration → only then complete the handshake (send the response) and open one exec-server connection
 *   (`ExecServer.connect`, principal `remote:<environment id>`) whose messages are length-prefixed, cut into 60 KiB
 *   records, encrypted and sent as data frames (noiseStream.ts); inbound data frames are reordered, decrypted and
 *   reassembled before they reach it.
 *
 * Codex's limits: 128 active streams, 32 validations pending, 4096-byte UTF-8 authorization, a stream id in use or
 * pending is reset, data before the handshake completes is reset, any error on a stream resets it
 * (`noise_relay_protocol_error`, the reason Codex sends), after 8 failed handshakes new ones are reset for 10 s (the
 * link and its streams stay; the budget starts again), a 30 s keepalive ping. Reset reasons from the relay are not trusted and not logged.
 */
import type { WebSocket } from 'ws';
import type { Clock } from '../clock.js';
import type { Transport } from '../rpc/connection.js';
import type { Logger } from '../server/core/log.js';
import type { ExecServer } from '../server/execServer.js';
import type { RegistrationAuth } from './auth.js';
import { type DirectExecutor, remotePrincipal, startRegistryLinks } from './direct.js';
import {
  type NoiseIdentity,
  type NoiseTransport,
  noiseChannelPrologue,
  PendingResponderHandshake,
  publicKeyJson,
} from './noiseChannel.js';
import { frameJsonRpcRecords, JsonRpcMessageDecoder, OrderedCiphertextFrames } from './noiseStream.js';
import type { Registration, RegistryClient } from './registry.js';
import {
  decodeRelayFrame,
  encodeRelayFrame,
  MAX_RELAY_FRAME_BYTES,
  type RelayFrame,
  relayData,
  relayHandshake,
  relayReset,
  validateRelayFrame,
} from './relayFrame.js';

export const MAX_ACTIVE_NOISE_RELAY_STREAMS = 128;
export const MAX_FAILED_NOISE_HANDSHAKES = 8;
/** After MAX_FAILED_NOISE_HANDSHAKES on a link, new handshakes are reset for this long (recorded from 0.171: the link
 * stays open, a good handshake is accepted again ~10 s later, and the failure budget starts again). */
export const NOISE_HANDSHAKE_PAUSE_MS = 10_000;
export const MAX_HARNESS_KEY_AUTHORIZATION_BYTES = 4096;
export const MAX_PENDING_HANDSHAKE_VALIDATIONS = 32;
export const HARNESS_KEY_VALIDATION_TIMEOUT_MS = 10_000;
export const NOISE_RELAY_KEEPALIVE_MS = 30_000;
/** The reset reason Codex's executor sends for every reset (recorded from 0.171). */
export const NOISE_RELAY_RESET_REASON = 'noise_relay_protocol_error';

export interface NoiseExecutorOptions {
  registry: RegistryClient;
  auth: RegistrationAuth;
  log: Logger;
  identity: NoiseIdentity;
  initialRetryMs?: number;
  maxRetryMs?: number;
}

/** Decides whether a harness key may use a registration (the registry, or a test's stand-in). */
export type HarnessKeyValidator = (
  registrationId: string,
  key: ReturnType<typeof publicKeyJson>,
  authorization: string,
) => Promise<void>;

/** Registers with this process's Noise key and serves the registry's links as Codex's executor does. */
export function startNoiseExecutor(server: ExecServer, o: NoiseExecutorOptions): DirectExecutor {
  server.protectSecrets(o.auth.secrets);
  o.auth.onSecret?.((secret) => server.protectSecrets([secret]));
  const principal = remotePrincipal(o.registry.environmentId);
  return startNoiseLinks(server.clock, o, (transport) => server.connect(transport, principal));
}

/** The registration and link loop with Noise streams, each authorised stream handed to `open` (the executor's
 * exec-server connection, or forward.ts's dial to `--connect`). */
export function startNoiseLinks(
  clock: Clock,
  o: NoiseExecutorOptions,
  open: (transport: Transport) => NoiseStreamSink,
): DirectExecutor {
  const validate: HarnessKeyValidator = (reg, key, authz) => o.registry.validateHarnessKey(reg, key, authz);
  return startRegistryLinks(
    clock,
    { ...o, signLink: false, maxPayload: MAX_RELAY_FRAME_BYTES },
    (ws, _peer, reg) =>
      serveNoiseLink(ws, reg, {
        identity: o.identity,
        validate,
        log: o.log,
        open,
        setTimeout: (f, ms) => clock.setTimeout(f, ms),
        setInterval: (f, ms) => clock.setInterval(f, ms).unref(),
        clearTimeout: (t) => clock.clearTimeout(t as ReturnType<typeof clock.setTimeout>),
        now: () => clock.now(),
      }),
  );
}

/** What an authorised stream's plaintext goes to: an exec-server connection, or forward's dial to `--connect`. */
export interface NoiseStreamSink {
  /** One JSON-RPC message's text from the harness. */
  receive(text: string): void;
  /** The stream ended (reset, link closed, or an error on it). */
  transportClosed(): void;
}

export interface NoiseLinkOptions {
  identity: NoiseIdentity;
  validate: HarnessKeyValidator;
  log: Logger;
  /** Opens what serves an authorised stream: `transport` sends its messages, encrypted, to the harness. */
  open(transport: Transport): NoiseStreamSink;
  setTimeout(f: () => void, ms: number): unknown;
  setInterval(f: () => void, ms: number): unknown;
  clearTimeout(t: unknown): void;
  now(): number;
}

interface ActiveStream {
  conn: NoiseStreamSink;
  transport: NoiseTransport;
  ordered: OrderedCiphertextFrames;
  decoder: JsonRpcMessageDecoder;
  closed: boolean;
}

/** Serves one physical relay link; returns its close hook (as a LinkServer). */
export function serveNoiseLink(ws: WebSocket, reg: Registration, o: NoiseLinkOptions): { closed(): void } {
  const { log } = o;
  const streams = new Map<string, ActiveStream>();
  const pending = new Map<string, { id: number; handshake: PendingResponderHandshake }>();
  let failed = 0;
  let pausedUntil = 0;
  let nextValidation = 0;
  let linkClosed = false;

  const send = (frame: RelayFrame, cb?: () => void) => {
    if (ws.readyState === ws.OPEN) ws.send(encodeRelayFrame(frame), { binary: true }, cb);
  };
  const reset = (streamId: string) => send(relayReset(streamId, NOISE_RELAY_RESET_REASON));
  const failure = () => {
    failed++;
    if (failed >= MAX_FAILED_NOISE_HANDSHAKES) {
      log.warn('remote: pausing Noise relay handshakes after repeated failures');
      failed = 0;
      pausedUntil = o.now() + NOISE_HANDSHAKE_PAUSE_MS;
    }
  };
  const dropStream = (streamId: string, s: ActiveStream, sendReset: boolean) => {
    if (streams.get(streamId) === s) streams.delete(streamId);
    if (s.closed) return;
    s.closed = true;
    if (sendReset) reset(streamId);
    s.conn.transportClosed();
  };

  const keepalive = o.setInterval(() => {
    if (ws.readyState === ws.OPEN) ws.ping();
  }, NOISE_RELAY_KEEPALIVE_MS);

  const activate = (streamId: string, transport: NoiseTransport) => {
    let seq = 0;
    const stream: ActiveStream = {
      conn: null as unknown as NoiseStreamSink,
      transport,
      ordered: new OrderedCiphertextFrames(),
      decoder: new JsonRpcMessageDecoder(),
      closed: false,
    };
    const t: Transport = {
      peer: `noise:${streamId.slice(0, 64)}`,
      write(messages, onWritten) {
        if (stream.closed || ws.readyState !== ws.OPEN) return;
        try {
          let last: Uint8Array | null = null;
          for (const m of messages)
            for (const rec of frameJsonRpcRecords(m.toString('utf8'))) {
              if (last) send(relayData(streamId, seq++, last));
              if (seq >= 0xffffffff) throw new Error('Noise relay sequence number exhausted');
              last = transport.encrypt(rec);
            }
          if (last) send(relayData(streamId, seq++, last), onWritten);
          else onWritten();
        } catch (e) {
          log.warn(`remote: failed to encrypt Noise virtual stream payload: ${(e as Error).message}`);
          dropStream(streamId, stream, true);
        }
      },
      close() {
        dropStream(streamId, stream, true);
      },
    };
    streams.set(streamId, stream);
    stream.conn = o.open(t);
  };

  const onHandshake = (streamId: string, request: Uint8Array) => {
    if (streams.has(streamId) || pending.has(streamId)) return reset(streamId);
    // Paused after repeated failures: no hybrid handshake, no registry request until the pause is over.
    if (o.now() < pausedUntil) return reset(streamId);
    if (streams.size >= MAX_ACTIVE_NOISE_RELAY_STREAMS) {
      log.warn('remote: Noise relay has too many active streams');
      return reset(streamId);
    }
    if (pending.size >= MAX_PENDING_HANDSHAKE_VALIDATIONS) {
      log.warn('remote: Noise relay has too many pending harness key validations');
      return reset(streamId);
    }
    let hs: PendingResponderHandshake;
    try {
      hs = PendingResponderHandshake.readRequest(
        o.identity,
        noiseChannelPrologue(reg.environmentId, reg.registrationId, streamId),
        request,
      );
    } catch (e) {
      log.warn(`remote: failed to read Noise relay handshake request: ${(e as Error).message}`);
      reset(streamId);
      return failure();
    }
    let authorization: string | null = null;
    try {
      if (hs.payload.length <= MAX_HARNESS_KEY_AUTHORIZATION_BYTES)
        authorization = new TextDecoder('utf-8', { fatal: true }).decode(hs.payload);
      else log.warn('remote: Noise relay handshake authorization is too long');
    } catch {
      log.warn('remote: Noise relay handshake authorization is not UTF-8');
    }
    if (authorization === null) {
      reset(streamId);
      return failure();
    }
    const id = nextValidation++;
    pending.set(streamId, { id, handshake: hs });
    const key = publicKeyJson(hs.initiatorPublicKey);
    let timer: unknown;
    const timeout = new Promise<never>((_, reject) => {
      timer = o.setTimeout(
        () => reject(new Error('timed out validating Noise relay harness key')),
        HARNESS_KEY_VALIDATION_TIMEOUT_MS,
      );
    });
    Promise.race([o.validate(reg.registrationId, key, authorization), timeout])
      .then(
        () => null,
        (e: Error) => e,
      )
      .then((error) => {
        o.clearTimeout(timer);
        const p = pending.get(streamId);
        if (!p || p.id !== id || linkClosed) return; // reset, reused or gone while the registry answered
        pending.delete(streamId);
        if (error) {
          // The validator's error may quote what the registry said; the authorization itself is never logged.
          log.warn(`remote: Noise harness authorization failed: ${error.message}`);
          reset(streamId);
          return failure();
        }
        if (streams.size >= MAX_ACTIVE_NOISE_RELAY_STREAMS) {
          log.warn('remote: Noise relay has too many active streams');
          return reset(streamId);
        }
        let done: { transport: NoiseTransport; response: Uint8Array };
        try {
          done = p.handshake.complete();
        } catch (e) {
          log.warn(`remote: failed to complete Noise relay handshake: ${(e as Error).message}`);
          reset(streamId);
          return failure();
        }
        send(relayHandshake(streamId, done.response));
        log.info('remote: Noise executor handshake completed');
        activate(streamId, done.transport);
      });
  };

  ws.on('message', (data, isBinary) => {
    if (!isBinary) {
      log.warn('remote: dropping non-binary Noise relay frame from harness');
      return;
    }
    const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as Buffer);
    let frame: RelayFrame;
    let body: ReturnType<typeof validateRelayFrame>;
    try {
      frame = decodeRelayFrame(bytes);
      body = validateRelayFrame(frame);
    } catch (e) {
      log.warn(`remote: dropping invalid Noise relay frame: ${(e as Error).message}`);
      return;
    }
    const streamId = frame.streamId;
    switch (body.kind) {
      case 'handshake':
        onHandshake(streamId, body.payload);
        return;
      case 'data': {
        const s = streams.get(streamId);
        if (!s) {
          pending.delete(streamId);
          return reset(streamId);
        }
        try {
          for (const ct of s.ordered.push(body.seq, body.payload)) {
            const texts = s.decoder.push(s.transport.decrypt(ct));
            for (const text of texts) if (!s.closed) s.conn.receive(text);
          }
        } catch (e) {
          log.warn(`remote: failed to process Noise relay payload: ${(e as Error).message}`);
          dropStream(streamId, s, true);
        }
        return;
      }
      case 'reset': {
        pending.delete(streamId);
        const s = streams.get(streamId);
        if (s) dropStream(streamId, s, false);
        return;
      }
      default:
        return; // ack, resume, heartbeat: nothing to do on this side
    }
  });

  return {
    closed() {
      linkClosed = true;
      o.clearTimeout(keepalive);
      pending.clear();
      for (const [id, s] of [...streams]) dropStream(id, s, false);
    },
  };
}
