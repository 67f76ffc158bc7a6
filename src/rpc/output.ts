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

/**
 * The arenas of leased messages (encodeOutputs with an OutputLease: a connection's stdout and stderr, most of what a
 * server sends): carved the same way, but their memory is carved again once every message carved from it has been
 * written out. A 64 MiB stream is ~90 MiB of notifications; as arenas that are never reused it is that much memory
 * outside V8's heap made and dropped, which Node 24's V8 (Electron's main process) answers with full mark-compacts,
 * two to three per 64 MiB: the stream cost 100-135 ms of server CPU there, against 41-79 ms on Node 20 (whose V8
 * answers with scavenges), and 39-68 ms on Node 24 with the reuse. Reused, a stream runs in the few arenas its socket
 * has in flight.
 */
interface LeasedArena {
  readonly buf: Buffer;
  used: number;
  /** Messages carved from it whose lease is not released yet: while > 0 none of its memory is carved again. */
  outstanding: number;
}
/** Arenas kept for reuse beyond the current one (2 MiB); a release past that drops the arena (the GC frees it). */
const MAX_FREE_ARENAS = 8;
const freeArenas: LeasedArena[] = [];
let leasedArena: LeasedArena = { buf: Buffer.allocUnsafeSlow(ARENA_BYTES), used: 0, outstanding: 0 };

/**
 * The messages of one write carved from the leased arenas. `release()` once the transport has written them (the
 * Transport's onWritten: they have left this process's buffers, so nothing reads them again): their memory is then
 * carved for later messages. A lease never released (its connection closed first) only keeps its arenas from being
 * reused: they are dropped, as unleased ones are.
 */
export class OutputLease {
  private readonly arenas: LeasedArena[] = [];
  private readonly counts: number[] = [];

  /** A message carved from `a` under this lease. */
  carved(a: LeasedArena): void {
    const last = this.arenas.length - 1;
    if (last >= 0 && this.arenas[last] === a) this.counts[last]!++;
    else {
      this.arenas.push(a);
      this.counts.push(1);
    }
  }

  /** The messages have been written out: their memory may be carved again. Idempotent. */
  release(): void {
    for (let i = 0; i < this.arenas.length; i++) {
      const a = this.arenas[i]!;
      a.outstanding -= this.counts[i]!;
      if (a.outstanding > 0) continue;
      a.used = 0;
      if (a !== leasedArena && freeArenas.length < MAX_FREE_ARENAS) freeArenas.push(a);
    }
    this.arenas.length = 0;
    this.counts.length = 0;
  }
}

function leasedBuffer(n: number, lease: OutputLease): Buffer {
  if (n > ARENA_BYTES / 8) return Buffer.allocUnsafeSlow(n);
  let a = leasedArena;
  if (a.used + n > ARENA_BYTES) {
    // Its messages still in flight: it goes back to freeArenas at their release (OutputLease.release).
    a = leasedArena = freeArenas.pop() ?? {
      buf: Buffer.allocUnsafeSlow(ARENA_BYTES),
      used: 0,
      outstanding: 0,
    };
  }
  const b = a.buf.subarray(a.used, a.used + n);
  a.used += (n + 7) & ~7;
  a.outstanding++;
  lease.carved(a);
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
  lease?: OutputLease,
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
  const n = head.length + digits + fields.length + Math.ceil(data.length / 3) * 4 + 3 + extra;
  const buf = lease ? leasedBuffer(n, lease) : messageBuffer(n);
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
 * their total length. With `lease`, they are carved from the leased arenas: release it once they are written.
 */
export function encodeOutputs(
  head: OutputHead,
  firstSeq: number,
  stream: OutputStream,
  data: Uint8Array,
  chunkSize: number,
  out: Buffer[],
  lease?: OutputLease,
): number {
  let bytes = 0;
  for (let off = 0, seq = firstSeq; off < data.length; off += chunkSize, seq++) {
    const m = encodeOutput(head, seq, stream, data.subarray(off, off + chunkSize), undefined, lease);
    out.push(m);
    bytes += m.length;
  }
  return bytes;
}
