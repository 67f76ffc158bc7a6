/**
 * The byte stream inside one Noise virtual stream of Codex's relay (docs/remote-noise.md): each JSON-RPC message is
 * `u32be(len) || json` (1..64 MiB), the framed bytes are cut into records of at most 60 KiB, each record is one
 * Noise transport message (one nonce) sent as a relay data frame with its own sequence number from 0. The receiver
 * puts records back in sequence order before decrypting (the relay may reorder; a bounded window), then reassembles
 * messages. Codex's limits and texts (noise_relay/message_framing.rs, ordered_ciphertext.rs).
 */

export const NOISE_RECORD_PLAINTEXT_LEN = 60 * 1024;
export const MAX_NOISE_JSONRPC_MESSAGE_LEN = 64 * 1024 * 1024;
export const MAX_REORDER_DISTANCE = 64;
export const MAX_PENDING_FRAMES = 64;
export const MAX_PENDING_BYTES = 1024 * 1024;

export class NoiseStreamError extends Error {}

/** Frame one JSON-RPC message and cut it into record plaintexts. */
export function frameJsonRpcRecords(json: string): Uint8Array[] {
  const body = Buffer.from(json, 'utf8');
  if (body.length > MAX_NOISE_JSONRPC_MESSAGE_LEN)
    throw new NoiseStreamError('Noise relay JSON-RPC message exceeds maximum length');
  const framed = Buffer.allocUnsafe(4 + body.length);
  framed.writeUInt32BE(body.length, 0);
  body.copy(framed, 4);
  const records: Uint8Array[] = [];
  for (let at = 0; at < framed.length; at += NOISE_RECORD_PLAINTEXT_LEN)
    records.push(framed.subarray(at, Math.min(framed.length, at + NOISE_RECORD_PLAINTEXT_LEN)));
  return records;
}

/** Reassembles JSON texts from decrypted records (the caller parses them). */
export class JsonRpcMessageDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;

  push(record: Uint8Array): string[] {
    if (record.length > NOISE_RECORD_PLAINTEXT_LEN)
      throw new NoiseStreamError('Noise relay plaintext record exceeds maximum length');
    this.chunks.push(Buffer.from(record));
    this.buffered += record.length;
    const out: string[] = [];
    for (;;) {
      if (this.buffered < 4) break;
      const head = this.peek(4);
      const len = head.readUInt32BE(0);
      if (len === 0 || len > MAX_NOISE_JSONRPC_MESSAGE_LEN)
        throw new NoiseStreamError('Noise relay JSON-RPC message has invalid length');
      if (this.buffered < 4 + len) break;
      const framed = this.consume(4 + len);
      out.push(framed.subarray(4).toString('utf8'));
    }
    return out;
  }

  private peek(n: number): Buffer {
    if (this.chunks[0]!.length < n) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0]!.subarray(0, n);
  }

  private consume(n: number): Buffer {
    const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
    const out = all.subarray(0, n);
    const rest = all.subarray(n);
    this.chunks = rest.length ? [rest] : [];
    this.buffered = rest.length;
    return out;
  }
}

/** Puts relay records back in sequence order before they reach the Noise receive nonce. Duplicates (a sequence
 * already released or already buffered) are dropped; a gap wider than 64 or more than 64 frames / 1 MiB buffered is
 * an error (the stream is reset). */
export class OrderedCiphertextFrames {
  private nextSeq = 0;
  private readonly pending = new Map<number, Uint8Array>();
  private pendingBytes = 0;

  push(seq: number, payload: Uint8Array): Uint8Array[] {
    if (seq < this.nextSeq || this.pending.has(seq)) return [];
    if (seq > this.nextSeq) {
      if (seq - this.nextSeq > MAX_REORDER_DISTANCE)
        throw new NoiseStreamError('Noise relay ciphertext exceeds reorder window');
      const bytes = this.pendingBytes + payload.length;
      if (this.pending.size >= MAX_PENDING_FRAMES || bytes > MAX_PENDING_BYTES)
        throw new NoiseStreamError('Noise relay pending ciphertext buffer is full');
      this.pending.set(seq, payload);
      this.pendingBytes = bytes;
      return [];
    }
    const ready = [payload];
    this.advance();
    for (let next = this.pending.get(this.nextSeq); next; next = this.pending.get(this.nextSeq)) {
      this.pending.delete(this.nextSeq);
      this.pendingBytes -= next.length;
      ready.push(next);
      this.advance();
    }
    return ready;
  }

  private advance(): void {
    if (this.nextSeq >= 0xffffffff) throw new NoiseStreamError('Noise relay sequence number exhausted');
    this.nextSeq++;
  }
}
