/**
 * `corral exec-server forward --remote URL --environment-id ID --connect URL` (codex 0.171's `forward`): register an
 * existing exec server (Corral's or Codex's, reached at `--connect`, ws:// or wss://) as a remote environment, and
 * relay each harness link the registry hands over to a WebSocket of its own to that server, frame for frame, text as
 * text. Codex 0.171 forwards only over its noise transport ("direct exec-server transport does not support
 * forwarding"); Corral forwards over direct, the one transport it has.
 *
 * Frames the harness sends before the destination's socket is open are held (bounded: MAX_PENDING_BYTES), and
 * either side closing closes the other; a destination that cannot be reached closes the link (1011), so the harness
 * sees the environment fail instead of hanging, and the next link dials it again.
 */
import { WebSocket } from 'ws';
import { type Clock, realClock } from '../clock.js';
import { MAX_MESSAGE_BYTES } from '../protocol/methods.js';
import {
  type DirectExecutor,
  type DirectExecutorOptions,
  HANDSHAKE_TIMEOUT_MS,
  startRegistryLinks,
} from './direct.js';
import { type NoiseExecutorOptions, startNoiseLinks } from './noiseExecutor.js';

/** The harness's frames held while the destination's socket opens (past it the link is closed, 1009). */
export const MAX_PENDING_BYTES = 2 * MAX_MESSAGE_BYTES;
/** A side stops being read while the other has more than this unsent; it is read again once that is sent. */
export const HIGH_WATER_BYTES = 4 * 1024 * 1024;

/** Checks a `--connect` URL: a ws:// or wss:// URL without credentials in its userinfo. */
export function parseConnectUrl(text: string): URL {
  let u: URL;
  try {
    u = new URL(text);
  } catch {
    throw new Error(`--connect: not a URL: ${text}`);
  }
  if (u.protocol !== 'ws:' && u.protocol !== 'wss:')
    throw new Error(`--connect: expected a ws:// or wss:// URL, got ${u.protocol}`);
  if (u.username || u.password) throw new Error('--connect: credentials in the URL’s userinfo are not sent');
  if (u.hash) throw new Error('--connect: a URL fragment is not sent');
  return u;
}

export interface ForwardOptions extends DirectExecutorOptions {
  connect: URL;
  clock?: Clock;
}

/** Registers and relays every link to `connect` until stopped. */
export function startForwarder(o: ForwardOptions): DirectExecutor {
  const { log } = o;
  return startRegistryLinks(o.clock ?? realClock, o, (harness) => {
    const target = new WebSocket(o.connect, {
      perMessageDeflate: false,
      maxPayload: MAX_MESSAGE_BYTES,
      handshakeTimeout: HANDSHAKE_TIMEOUT_MS,
      followRedirects: false,
    });
    let pending: { data: string | Buffer; binary: boolean }[] = [];
    let pendingBytes = 0;
    const closeBoth = (code: number, reason: string) => {
      for (const ws of [harness, target])
        if (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING) ws.close(code, reason);
    };
    /** Sends on `to`, and stops reading `from` while `to` holds more than HIGH_WATER_BYTES unsent. */
    const relay = (from: WebSocket, to: WebSocket, data: string | Buffer, binary: boolean) => {
      to.send(data, { binary }, () => {
        if (to.bufferedAmount < HIGH_WATER_BYTES && from.isPaused) from.resume();
      });
      if (to.bufferedAmount >= HIGH_WATER_BYTES) from.pause();
    };
    harness.on('message', (data, isBinary) => {
      const frame = isBinary ? (data as Buffer) : data.toString();
      if (target.readyState === target.OPEN) {
        relay(harness, target, frame, isBinary);
        return;
      }
      pendingBytes += typeof frame === 'string' ? Buffer.byteLength(frame) : frame.length;
      if (pendingBytes > MAX_PENDING_BYTES) {
        log.warn('forward: the harness sent more than the destination could take while connecting; closing');
        pending = [];
        closeBoth(1009, 'too much before the destination opened');
        return;
      }
      pending.push({ data: frame, binary: isBinary });
    });
    target.on('open', () => {
      for (const f of pending) relay(harness, target, f.data, f.binary);
      pending = [];
      pendingBytes = 0;
    });
    target.on('message', (data, isBinary) => {
      if (harness.readyState === harness.OPEN)
        relay(target, harness, isBinary ? (data as Buffer) : data.toString(), isBinary);
    });
    target.on('unexpected-response', (_req, res) => {
      res.resume();
      log.warn(`forward: ${o.connect.origin} refused the WebSocket handshake with HTTP ${res.statusCode}`);
      target.terminate();
      closeBoth(1011, 'destination refused');
    });
    target.on('error', (e) => {
      log.warn(`forward: ${o.connect.origin}: ${e.message}`);
      closeBoth(1011, 'destination unreachable');
    });
    target.on('close', (code) => closeBoth(sendable(code), 'destination closed'));
    return { closed: () => closeBoth(1000, 'harness closed') };
  });
}

/** A close code one may send on (RFC 6455 §7.4; ws refuses the others): else 1011. */
function sendable(code: number): number {
  return (code >= 1000 && code <= 1014 && code !== 1004 && code !== 1005 && code !== 1006) ||
    (code >= 3000 && code <= 4999)
    ? code
    : 1011;
}

export interface NoiseForwardOptions extends NoiseExecutorOptions {
  connect: URL;
  clock?: Clock;
}

/**
 * `forward --remote-transport noise` (Codex 0.171's forward): registers with this process's Noise key like the
 * executor (noiseExecutor.ts) and, for each stream the registry authorised, dials `connect` and relays the stream's
 * decrypted JSON-RPC messages to it as text frames, and its frames back into the stream. The stream ending closes the
 * destination's socket; the destination closing or failing resets the stream. Until the destination's socket opens
 * at most MAX_PENDING_BYTES of the harness's messages are held, and once open at most that much unsent to it (past
 * that the stream is reset); the destination is not read while HIGH_WATER_BYTES of its messages wait for the link.
 */
export function startNoiseForwarder(o: NoiseForwardOptions): DirectExecutor {
  const { log } = o;
  return startNoiseLinks(o.clock ?? realClock, o, (stream) => {
    const target = new WebSocket(o.connect, {
      perMessageDeflate: false,
      maxPayload: MAX_MESSAGE_BYTES,
      handshakeTimeout: HANDSHAKE_TIMEOUT_MS,
      followRedirects: false,
    });
    let pending: string[] = [];
    let pendingBytes = 0;
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      stream.close(1011, 'destination closed');
      if (target.readyState === target.OPEN || target.readyState === target.CONNECTING) target.close(1000);
    };
    target.on('open', () => {
      for (const text of pending) target.send(text);
      pending = [];
      pendingBytes = 0;
    });
    // Destination → harness: stop reading the destination while more than HIGH_WATER_BYTES of what it sent is not
    // yet written to the relay link (the link is shared by every stream, so it is never paused for one).
    let unsent = 0;
    target.on('message', (data, isBinary) => {
      if (ended) return;
      const text = isBinary ? Buffer.from(data as Buffer) : Buffer.from(data.toString(), 'utf8');
      unsent += text.length;
      if (unsent >= HIGH_WATER_BYTES) target.pause();
      stream.write([text], () => {
        unsent -= text.length;
        if (unsent < HIGH_WATER_BYTES && target.isPaused) target.resume();
      });
    });
    target.on('unexpected-response', (_req, res) => {
      res.resume();
      log.warn(`forward: ${o.connect.origin} refused the WebSocket handshake with HTTP ${res.statusCode}`);
      target.terminate();
      end();
    });
    target.on('error', (e) => {
      log.warn(`forward: ${o.connect.origin}: ${e.message}`);
      end();
    });
    target.on('close', end);
    return {
      receive(text) {
        if (ended) return;
        if (target.readyState === target.OPEN) {
          // Harness → destination: a destination that does not read gets the stream reset rather than an unbounded
          // queue (the relay link cannot be paused for one stream).
          if (target.bufferedAmount > MAX_PENDING_BYTES) {
            log.warn('forward: the destination is not reading what the harness sends; resetting the stream');
            end();
            return;
          }
          target.send(text);
          return;
        }
        pendingBytes += Buffer.byteLength(text);
        if (pendingBytes > MAX_PENDING_BYTES) {
          log.warn(
            'forward: the harness sent more than the destination could take while connecting; resetting',
          );
          pending = [];
          end();
          return;
        }
        pending.push(text);
      },
      transportClosed() {
        ended = true;
        if (target.readyState === target.OPEN || target.readyState === target.CONNECTING) target.close(1000);
      },
    };
  });
}
