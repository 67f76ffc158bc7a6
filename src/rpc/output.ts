/**
 * The text of output notifications (`process/output`, the panel's `monitor/output`): the one place it is built.
 *
 * They are most of what a server sends (64 MiB of stdout are ~8200 of them), so they are written straight into
 * bytes instead of going through JSON.stringify: the fixed start of a process's notifications (method, ids) is
 * encoded once, and each chunk adds its seq, stream and base64. The result is exactly what JSON.stringify gives for
 * `{method, params: {...fields, seq, stream, chunk}}` (test/unit/rpc-output.test.ts).
 */
import { base64Into } from '../platform/base64.js';
import type { OutputStream } from '../protocol/exec.js';

/** `{"method":<method>,"params":{<fields>,"seq":` as UTF-8: the part every notification of one process shares. */
export type OutputHead = Buffer & { readonly __outputHead: true };

export function outputHead(method: string, fields: Readonly<Record<string, string>>): OutputHead {
  let text = `{"method":${JSON.stringify(method)},"params":{`;
  for (const [k, v] of Object.entries(fields)) text += `${JSON.stringify(k)}:${JSON.stringify(v)},`;
  return Buffer.from(`${text}"seq":`) as OutputHead;
}

/** `,"stream":"<stream>","chunk":"` after the seq digits, per stream. */
const STREAM_FIELDS: Record<OutputStream, Buffer> = {
  stdout: Buffer.from(',"stream":"stdout","chunk":"'),
  stderr: Buffer.from(',"stream":"stderr","chunk":"'),
  pty: Buffer.from(',"stream":"pty","chunk":"'),
};

function decimalLength(n: number): number {
  let len = 1;
  while (n >= 10) {
    n = Math.floor(n / 10);
    len++;
  }
  return len;
}

/** Writes the decimal digits of a non-negative integer at `off`; returns the offset after them. */
function writeDecimal(buf: Buffer, off: number, n: number, len: number): number {
  const end = off + len;
  for (let i = end - 1; i >= off; i--) {
    buf[i] = 0x30 + (n % 10);
    n = Math.floor(n / 10);
  }
  return end;
}

/**
 * Notifications are carved out of shared arenas (one allocation per ~20 notifications instead of one each). An arena
 * is never reused: once full, a new one is started, and the old one lives as long as its last message.
 */
const ARENA_BYTES = 256 * 1024;
let arena = Buffer.allocUnsafeSlow(ARENA_BYTES);
let arenaUsed = 0;

function messageBuffer(n: number): Buffer {
  if (n > ARENA_BYTES / 8) return Buffer.allocUnsafeSlow(n);
  if (arenaUsed + n > ARENA_BYTES) {
    arena = Buffer.allocUnsafeSlow(ARENA_BYTES);
    arenaUsed = 0;
  }
  const b = arena.subarray(arenaUsed, arenaUsed + n);
  arenaUsed += (n + 7) & ~7;
  return b;
}

/** `,"firstSeq":` and `,"skippedBytes":`: the panel feed's optional fields (monitor/output). */
const FIRST_SEQ = Buffer.from(',"firstSeq":');
const SKIPPED_BYTES = Buffer.from(',"skippedBytes":');

/**
 * What a notification may carry besides one chunk: `firstSeq` when it joins the chunks firstSeq..seq, and
 * `skippedBytes` when output before it was dropped (both monitor/output only; written when > 0).
 */
export interface OutputExtras {
  firstSeq?: number;
  skippedBytes?: number;
}

/**
 * The notification of one chunk: `{method, params: {...fields, seq, firstSeq?, stream, chunk, skippedBytes?}}`, as
 * JSON.stringify gives it.
 */
export function encodeOutput(
  head: OutputHead,
  seq: number,
  stream: OutputStream,
  data: Uint8Array,
  extras?: OutputExtras,
): Buffer {
  const digits = decimalLength(seq);
  const fields = STREAM_FIELDS[stream];
  const first = extras?.firstSeq ?? 0;
  const skipped = extras?.skippedBytes ?? 0;
  const firstDigits = first > 0 ? decimalLength(first) : 0;
  const skippedDigits = skipped > 0 ? decimalLength(skipped) : 0;
  const extra =
    (first > 0 ? FIRST_SEQ.length + firstDigits : 0) +
    (skipped > 0 ? SKIPPED_BYTES.length + skippedDigits : 0);
  const buf = messageBuffer(
    head.length + digits + fields.length + Math.ceil(data.length / 3) * 4 + 3 + extra,
  );
  buf.set(head, 0);
  let off = writeDecimal(buf, head.length, seq, digits);
  if (first > 0) {
    buf.set(FIRST_SEQ, off);
    off = writeDecimal(buf, off + FIRST_SEQ.length, first, firstDigits);
  }
  buf.set(fields, off);
  off += fields.length;
  off += base64Into(data, buf, off);
  buf[off++] = 0x22; // "
  if (skipped > 0) {
    buf.set(SKIPPED_BYTES, off);
    off = writeDecimal(buf, off + SKIPPED_BYTES.length, skipped, skippedDigits);
  }
  buf[off] = 0x7d; // }}
  buf[off + 1] = 0x7d;
  return buf;
}

/**
 * The notifications of `data` cut into chunks of `chunkSize` bytes, seqs from `firstSeq`, appended to `out`. Returns
 * their total length.
 */
export function encodeOutputs(
  head: OutputHead,
  firstSeq: number,
  stream: OutputStream,
  data: Uint8Array,
  chunkSize: number,
  out: Buffer[],
): number {
  let bytes = 0;
  for (let off = 0, seq = firstSeq; off < data.length; off += chunkSize, seq++) {
    const m = encodeOutput(head, seq, stream, data.subarray(off, off + chunkSize));
    out.push(m);
    bytes += m.length;
  }
  return bytes;
}
