/**
 * Output chunks with their times, for replay (issue 37, item 4): what a process wrote, as it arrived, kept per process
 * until its close and stored then in `process_chunks` (covered by the close entry's digest, chain.ts).
 *
 * Bounded per process: at most `maxBytes` of data and MAX_REPLAY_PARTS timed parts; and over every process still
 * running, at most `maxTotalBytes` held (DEFAULT_REPLAY_TOTAL_BYTES: many busy processes at once cannot make the
 * server hold their bound each). Chunks of one stream that arrive
 * within COALESCE_MS of the part they follow join it (a flood of tiny chunks costs one part per COALESCE_MS, not one
 * per chunk). Past either bound nothing more is kept and the record says how many bytes were dropped: the store
 * writes a last row of stream `truncated` whose data is that count (decimal text).
 *
 * Per chunk: a map lookup, a clock read and a copy of its bytes into the process's buffer (the reader may reuse the
 * chunk's memory), which grows by doubling up to the bound.
 */
import type { OutputStream } from '../protocol/exec.js';

export const DEFAULT_REPLAY_BYTES = 1024 * 1024;
export const MAX_REPLAY_BYTES = 64 * 1024 * 1024;
export const DEFAULT_REPLAY_TOTAL_BYTES = 256 * 1024 * 1024;

/** The bytes held by every open replay of one recorder. */
interface Budget {
  held: number;
  readonly max: number;
}
export const MAX_REPLAY_PARTS = 10_000;
export const COALESCE_MS = 5;

/** The stream name of the row that marks a cut replay (its data: the dropped byte count, decimal). */
export const TRUNCATED_STREAM = 'truncated';

/** One timed part: `bytes` bytes of `stream` from the joined data, first seen at `at` (ms since the epoch). */
export interface ReplayPart {
  at: number;
  stream: OutputStream;
  bytes: number;
}

/** A process's timed output as it crosses to the worker (`data` is its own buffer: transferred). */
export interface ReplayChunks {
  data: Uint8Array;
  parts: ReplayPart[];
  /** Bytes written after a bound was reached (0: the replay is whole). */
  droppedBytes: number;
}

class ProcessReplay {
  /** The kept bytes, grown by doubling up to maxBytes (chunks are copied: a reader may reuse its buffer). */
  private data = new Uint8Array(0);
  readonly parts: ReplayPart[] = [];
  bytes = 0;
  dropped = 0;

  constructor(
    private readonly maxBytes: number,
    private readonly budget: Budget,
  ) {}

  add(at: number, stream: OutputStream, data: Buffer): void {
    const n = data.length;
    if (n === 0) return;
    const room =
      this.dropped > 0 ? 0 : Math.min(this.maxBytes - this.bytes, this.budget.max - this.budget.held);
    if (n > room) {
      // Keep what fits of the chunk that crosses a bound, then nothing more.
      if (room > 0) this.push(at, stream, data.subarray(0, room));
      this.dropped += n - room;
      return;
    }
    this.push(at, stream, data);
  }

  private push(at: number, stream: OutputStream, data: Buffer): void {
    const last = this.parts[this.parts.length - 1];
    if (last && last.stream === stream && at - last.at < COALESCE_MS) last.bytes += data.length;
    else if (this.parts.length < MAX_REPLAY_PARTS) this.parts.push({ at, stream, bytes: data.length });
    else {
      this.dropped += data.length;
      return;
    }
    const need = this.bytes + data.length;
    if (need > this.data.length) {
      const grown = new Uint8Array(Math.min(this.maxBytes, Math.max(need, this.data.length * 2, 4096)));
      grown.set(this.data.subarray(0, this.bytes));
      this.data = grown;
    }
    this.data.set(data, this.bytes);
    this.bytes = need;
    this.budget.held += data.length;
  }

  take(): ReplayChunks {
    this.budget.held -= this.bytes;
    // Its own buffer of exactly the kept bytes: it is transferred to the worker.
    const data = this.bytes === this.data.length ? this.data : this.data.slice(0, this.bytes);
    return { data, parts: this.parts, droppedBytes: this.dropped };
  }
}

/** The replays of the processes running now, keyed by anything that names one process. */
export class ReplayRecorder<K> {
  private readonly open = new Map<K, ProcessReplay>();
  private readonly budget: Budget;

  constructor(
    private readonly maxBytes: number = DEFAULT_REPLAY_BYTES,
    maxTotalBytes: number = DEFAULT_REPLAY_TOTAL_BYTES,
  ) {
    if (!Number.isInteger(maxBytes) || maxBytes <= 0)
      throw new RangeError('replay bytes: a positive integer');
    if (!Number.isInteger(maxTotalBytes) || maxTotalBytes <= 0)
      throw new RangeError('replay total bytes: a positive integer');
    this.budget = { held: 0, max: maxTotalBytes };
  }

  start(key: K, maxBytes: number = this.maxBytes): void {
    this.take(key);
    this.open.set(key, new ProcessReplay(Math.min(maxBytes, this.maxBytes), this.budget));
  }

  /** Bytes held now over every open replay. */
  get heldBytes(): number {
    return this.budget.held;
  }

  /** Forgets every open replay (the observer stops). */
  clear(): void {
    for (const k of [...this.open.keys()]) this.take(k);
  }

  output(key: K, at: number, stream: OutputStream, data: Buffer): void {
    this.open.get(key)?.add(at, stream, data);
  }

  /** The process's timed output, forgotten here; null when it was never started here. */
  take(key: K): ReplayChunks | null {
    const r = this.open.get(key);
    if (!r) return null;
    this.open.delete(key);
    return r.take();
  }

  get size(): number {
    return this.open.size;
  }
}
