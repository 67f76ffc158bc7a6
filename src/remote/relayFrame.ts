/**
 * The relay's cleartext frame of Codex's Noise transport: protobuf `codex.exec_server.relay.v1.RelayMessageFrame`
 * (codex-rs/exec-server/src/proto/codex.exec_server.relay.v1.proto), one per binary WebSocket message:
 *
 *   RelayMessageFrame { uint32 version = 1; string stream_id = 2; uint32 ack = 3; uint32 ack_bits = 4;
 *     oneof body { RelayData data = 5; RelayAck ack_frame = 6; RelayResume resume = 7; RelayReset reset = 8;
 *                  RelayHeartbeat heartbeat = 9; RelayHandshake handshake = 10; } }
 *   RelayData { uint32 seq = 1; uint32 segment_index = 2; uint32 segment_count = 3; bytes payload = 4; }
 *   RelayResume { uint32 next_seq = 1; }  RelayReset { string reason = 1; }  RelayHandshake { bytes payload = 1; }
 *   RelayAck {}  RelayHeartbeat {}
 *
 * A hand codec (six flat messages, one level of nesting): proto3 rules as prost applies them — unknown fields are
 * skipped, the last of repeated scalars and of the oneof wins, a uint32 varint keeps its low 32 bits — and then
 * Codex's `validate()`: version 1, a canonical non-empty stream id of at most 128 bytes, data with segment 0 of 1 and
 * a non-empty payload, a reset reason of 1..256 bytes, a non-empty handshake payload. Groups (wire types 3/4) and
 * anything truncated or longer than {@link MAX_RELAY_FRAME_BYTES} are errors; nothing recurses.
 */

export const RELAY_MESSAGE_FRAME_VERSION = 1;
/** Codex's WebSocket frame and message limit on every Noise relay endpoint. */
export const MAX_RELAY_FRAME_BYTES = 256 * 1024;
export const MAX_RELAY_STREAM_ID_BYTES = 128;
export const MAX_RELAY_RESET_REASON_BYTES = 256;

export type RelayBody =
  | { kind: 'data'; seq: number; segmentIndex: number; segmentCount: number; payload: Uint8Array }
  | { kind: 'ack' }
  | { kind: 'resume'; nextSeq: number }
  | { kind: 'reset'; reason: string }
  | { kind: 'heartbeat' }
  | { kind: 'handshake'; payload: Uint8Array };

export interface RelayFrame {
  version: number;
  streamId: string;
  ack: number;
  ackBits: number;
  body: RelayBody | null;
}

export class RelayFrameError extends Error {}

// ---------- encoding ----------

function varint(out: number[], v: number): void {
  let x = v >>> 0;
  while (x > 0x7f) {
    out.push((x & 0x7f) | 0x80);
    x >>>= 7;
  }
  out.push(x);
}

function tag(out: number[], field: number, wire: number): void {
  varint(out, (field << 3) | wire);
}

function uintField(out: number[], field: number, v: number): void {
  if (v === 0) return; // proto3 default: not written
  tag(out, field, 0);
  varint(out, v);
}

function bytesField(out: number[], field: number, bytes: Uint8Array, always = false): void {
  if (bytes.length === 0 && !always) return;
  tag(out, field, 2);
  varint(out, bytes.length);
  for (const b of bytes) out.push(b);
}

function encodeBody(body: RelayBody): { field: number; bytes: Uint8Array } {
  const out: number[] = [];
  switch (body.kind) {
    case 'data':
      uintField(out, 1, body.seq);
      uintField(out, 2, body.segmentIndex);
      uintField(out, 3, body.segmentCount);
      bytesField(out, 4, body.payload);
      return { field: 5, bytes: Uint8Array.from(out) };
    case 'ack':
      return { field: 6, bytes: new Uint8Array(0) };
    case 'resume':
      uintField(out, 1, body.nextSeq);
      return { field: 7, bytes: Uint8Array.from(out) };
    case 'reset':
      bytesField(out, 1, Buffer.from(body.reason, 'utf8'));
      return { field: 8, bytes: Uint8Array.from(out) };
    case 'heartbeat':
      return { field: 9, bytes: new Uint8Array(0) };
    case 'handshake':
      bytesField(out, 1, body.payload);
      return { field: 10, bytes: Uint8Array.from(out) };
  }
}

export function encodeRelayFrame(frame: RelayFrame): Uint8Array {
  const out: number[] = [];
  uintField(out, 1, frame.version);
  bytesField(out, 2, Buffer.from(frame.streamId, 'utf8'));
  uintField(out, 3, frame.ack);
  uintField(out, 4, frame.ackBits);
  if (frame.body) {
    const { field, bytes } = encodeBody(frame.body);
    bytesField(out, field, bytes, true); // a oneof member is written even when empty
  }
  return Uint8Array.from(out);
}

const frameOf = (streamId: string, body: RelayBody): RelayFrame => ({
  version: RELAY_MESSAGE_FRAME_VERSION,
  streamId,
  ack: 0,
  ackBits: 0,
  body,
});

export const relayData = (streamId: string, seq: number, payload: Uint8Array): RelayFrame =>
  frameOf(streamId, { kind: 'data', seq, segmentIndex: 0, segmentCount: 1, payload });
export const relayHandshake = (streamId: string, payload: Uint8Array): RelayFrame =>
  frameOf(streamId, { kind: 'handshake', payload });
export const relayReset = (streamId: string, reason: string): RelayFrame =>
  frameOf(streamId, { kind: 'reset', reason });
export const relayResume = (streamId: string): RelayFrame =>
  frameOf(streamId, { kind: 'resume', nextSeq: 0 });

// ---------- decoding ----------

class Cursor {
  at = 0;
  constructor(readonly buf: Uint8Array) {}
  done(): boolean {
    return this.at >= this.buf.length;
  }
  /** A varint of up to 10 bytes; returns its low 32 bits (what prost keeps for a uint32). */
  varint(): number {
    let low = 0;
    for (let i = 0; i < 10; i++) {
      if (this.at >= this.buf.length)
        throw new RelayFrameError('invalid relay message frame: truncated varint');
      const b = this.buf[this.at++]!;
      if (i < 5) low |= (b & 0x7f) << (7 * i);
      if ((b & 0x80) === 0) return low >>> 0;
    }
    throw new RelayFrameError('invalid relay message frame: varint too long');
  }
  take(n: number): Uint8Array {
    if (n > this.buf.length - this.at)
      throw new RelayFrameError('invalid relay message frame: truncated field');
    const out = this.buf.subarray(this.at, this.at + n);
    this.at += n;
    return out;
  }
  /** Skip a field of this wire type (unknown fields are ignored, as prost does). */
  skip(wire: number): void {
    if (wire === 0) this.varint();
    else if (wire === 1) this.take(8);
    else if (wire === 2) this.take(this.varint());
    else if (wire === 5) this.take(4);
    else throw new RelayFrameError(`invalid relay message frame: unsupported wire type ${wire}`);
  }
}

function fields(buf: Uint8Array, each: (field: number, wire: number, c: Cursor) => boolean): void {
  const c = new Cursor(buf);
  while (!c.done()) {
    const key = c.varint();
    const field = key >>> 3;
    const wire = key & 7;
    if (field === 0) throw new RelayFrameError('invalid relay message frame: field number 0');
    if (!each(field, wire, c)) c.skip(wire);
  }
}

function expectWire(wire: number, want: number): void {
  if (wire !== want) throw new RelayFrameError('invalid relay message frame: wrong wire type');
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

function str(bytes: Uint8Array): string {
  try {
    return utf8.decode(bytes);
  } catch {
    throw new RelayFrameError('invalid relay message frame: string is not UTF-8');
  }
}

function decodeBody(field: number, bytes: Uint8Array): RelayBody {
  switch (field) {
    case 5: {
      const d: Extract<RelayBody, { kind: 'data' }> = {
        kind: 'data',
        seq: 0,
        segmentIndex: 0,
        segmentCount: 0,
        payload: new Uint8Array(0),
      };
      fields(bytes, (f, w, c) => {
        if (f >= 1 && f <= 3) {
          expectWire(w, 0);
          const v = c.varint();
          if (f === 1) d.seq = v;
          else if (f === 2) d.segmentIndex = v;
          else d.segmentCount = v;
          return true;
        }
        if (f === 4) {
          expectWire(w, 2);
          d.payload = c.take(c.varint());
          return true;
        }
        return false;
      });
      return d;
    }
    case 6:
      fields(bytes, () => false);
      return { kind: 'ack' };
    case 7: {
      let nextSeq = 0;
      fields(bytes, (f, w, c) => {
        if (f !== 1) return false;
        expectWire(w, 0);
        nextSeq = c.varint();
        return true;
      });
      return { kind: 'resume', nextSeq };
    }
    case 8: {
      let reason = '';
      fields(bytes, (f, w, c) => {
        if (f !== 1) return false;
        expectWire(w, 2);
        reason = str(c.take(c.varint()));
        return true;
      });
      return { kind: 'reset', reason };
    }
    case 9:
      fields(bytes, () => false);
      return { kind: 'heartbeat' };
    default: {
      let payload: Uint8Array = new Uint8Array(0);
      fields(bytes, (f, w, c) => {
        if (f !== 1) return false;
        expectWire(w, 2);
        payload = c.take(c.varint());
        return true;
      });
      return { kind: 'handshake', payload };
    }
  }
}

/** Parse one frame (protobuf only; {@link validateRelayFrame} applies Codex's checks). */
export function decodeRelayFrame(buf: Uint8Array): RelayFrame {
  if (buf.length > MAX_RELAY_FRAME_BYTES) throw new RelayFrameError('invalid relay message frame: too large');
  const frame: RelayFrame = { version: 0, streamId: '', ack: 0, ackBits: 0, body: null };
  fields(buf, (f, w, c) => {
    if (f === 1 || f === 3 || f === 4) {
      expectWire(w, 0);
      const v = c.varint();
      if (f === 1) frame.version = v;
      else if (f === 3) frame.ack = v;
      else frame.ackBits = v;
      return true;
    }
    if (f === 2) {
      expectWire(w, 2);
      frame.streamId = str(c.take(c.varint()));
      return true;
    }
    if (f >= 5 && f <= 10) {
      expectWire(w, 2);
      frame.body = decodeBody(f, c.take(c.varint()));
      return true;
    }
    return false;
  });
  return frame;
}

/** Codex's `RelayMessageFrame::validate` (its texts). */
export function validateRelayFrame(frame: RelayFrame): RelayBody {
  if (frame.version !== RELAY_MESSAGE_FRAME_VERSION)
    throw new RelayFrameError(`unsupported relay message frame version ${frame.version}`);
  if (frame.streamId === '') throw new RelayFrameError('relay message frame is missing stream_id');
  if (frame.streamId.trim() !== frame.streamId)
    throw new RelayFrameError('relay message frame stream_id is not canonical');
  if (Buffer.byteLength(frame.streamId, 'utf8') > MAX_RELAY_STREAM_ID_BYTES)
    throw new RelayFrameError('relay message frame stream_id is too long');
  const body = frame.body;
  if (!body) throw new RelayFrameError('relay message frame is missing body');
  if (
    body.kind === 'data' &&
    (body.segmentIndex !== 0 || body.segmentCount !== 1 || body.payload.length === 0)
  )
    throw new RelayFrameError('relay data message frame is missing required fields');
  if (body.kind === 'reset') {
    const n = Buffer.byteLength(body.reason, 'utf8');
    if (n === 0 || n > MAX_RELAY_RESET_REASON_BYTES)
      throw new RelayFrameError('relay reset message frame has invalid reason');
  }
  if (body.kind === 'handshake' && body.payload.length === 0)
    throw new RelayFrameError('relay handshake message frame is missing payload');
  return body;
}
