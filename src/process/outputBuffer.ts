import type { OutputStream } from '../protocol/exec.js';

export interface RetainedChunk {
  seq: number;
  stream: OutputStream;
  data: Buffer;
}

/** Default retention per process for `process/read` (protocol.md §5.9): the newest whole chunks totalling ≤ 1 MiB. */
export const RETAINED_BYTES = 1024 * 1024;

/** Bytes a retention store starts with; it doubles as needed up to limit + STORE_SLACK. */
const STORE_MIN = 4096;
/**
 * Room beyond the limit. With at least the largest chunk's size to spare, a ring that wraps never has to drop a chunk
 * the limit would keep (the free space is capacity − retained ≥ slack + n, minus a skipped end smaller than a chunk).
 */
const STORE_SLACK = 16 * 1024;
const EMPTY = Buffer.alloc(0);

/**
 * The retained output of one process: the most recent whole chunks whose total size stays within `limit`.
 * Older chunks are dropped from here only; notifications carry everything.
 *
 * The bytes are copied into one ring buffer per process (grown on demand up to limit + 16 KiB), so retention holds
 * no per-chunk objects and callers may hand in views of buffers they reuse (the native pipe reader's scratch).
 * Chunks returned by read/since/text are views of that ring: use them before the next push.
 */
export class OutputBuffer {
  private store: Buffer = EMPTY;
  private readonly seqs: number[] = [];
  private readonly starts: number[] = [];
  private readonly lens: number[] = [];
  private readonly streams: OutputStream[] = [];
  /** Index of the oldest retained chunk in the arrays above. */
  private head = 0;
  private bytes = 0;
  /** Where the next chunk goes in `store`. */
  private writePos = 0;
  /** The store's largest allowed size: limit + max(STORE_SLACK, largest chunk so far). */
  private maxStore: number;
  /** Told the change in bytes held (the store's size) whenever it changes: a retention budget books memory by it. */
  onResize: ((delta: number) => void) | null = null;

  constructor(private limit = RETAINED_BYTES) {
    this.maxStore = limit + STORE_SLACK;
  }

  get retainedBytes(): number {
    return this.bytes;
  }

  /** Bytes of memory the store holds (≥ retainedBytes). */
  get capacity(): number {
    return this.store.length;
  }

  /** Frees everything retained; returns the bytes of memory released. */
  release(): number {
    const n = this.store.length;
    this.store = EMPTY;
    this.seqs.length = this.starts.length = this.lens.length = this.streams.length = 0;
    this.head = 0;
    this.bytes = 0;
    this.writePos = 0;
    if (n > 0) this.onResize?.(-n);
    return n;
  }

  /** Lowers the limit (never raises it): the oldest chunks beyond it go, and the store shrinks to what is left. */
  shrinkTo(limit: number): void {
    if (limit >= this.limit) return;
    this.limit = limit;
    this.maxStore = limit + STORE_SLACK;
    while (this.bytes > limit) this.dropOldest();
    if (this.store.length > this.maxStore) {
      this.relocate(Math.min(this.maxStore, Math.max(STORE_MIN, 1 << Math.ceil(Math.log2(this.bytes + 1)))));
    }
  }

  push(chunk: RetainedChunk): void {
    this.pushData(chunk.seq, chunk.stream, chunk.data);
  }

  /** Retains a copy of data[start, end) (the caller may reuse `data` afterwards). */
  pushData(seq: number, stream: OutputStream, data: Uint8Array, start = 0, end = data.length): void {
    const n = end - start;
    if (n > this.limit) {
      // It could never be retained whole: everything older goes too (the newest bytes are not those).
      while (this.head < this.seqs.length) this.dropOldest();
      return;
    }
    while (this.bytes + n > this.limit) this.dropOldest();
    if (this.limit + n > this.maxStore) this.maxStore = this.limit + n;
    let at = this.place(n);
    while (at < 0) {
      if (this.store.length < this.maxStore) this.grow(n);
      else this.dropOldest();
      at = this.place(n);
    }
    this.store.set(start === 0 && end === data.length ? data : data.subarray(start, end), at);
    this.record(seq, stream, at, n);
  }

  /**
   * Retains one read: `data` cut into chunks of `chunkSize` bytes with seqs from firstSeq, exactly as pushData would
   * one by one, but with the eviction done up front and the bytes copied in as few runs as the ring allows (once the
   * ring is full, pushData per chunk copied and evicted chunk by chunk: ~20 % of the server's CPU when streaming).
   */
  pushRead(firstSeq: number, stream: OutputStream, data: Uint8Array, chunkSize: number): void {
    if (data.length > this.limit) {
      // The oldest chunks of this read would be dropped again at once: only the tail that can stay is worth copying.
      for (let off = 0, seq = firstSeq; off < data.length; off += chunkSize, seq++) {
        this.pushData(seq, stream, data, off, Math.min(off + chunkSize, data.length));
      }
      return;
    }
    while (this.bytes + data.length > this.limit) this.dropOldest();
    let runSrc = 0;
    let runDst = -1;
    let runLen = 0;
    const copyRun = () => {
      if (runLen > 0) this.store.set(data.subarray(runSrc, runSrc + runLen), runDst);
      runLen = 0;
    };
    for (let off = 0, seq = firstSeq; off < data.length; off += chunkSize, seq++) {
      const n = Math.min(chunkSize, data.length - off);
      if (this.limit + n > this.maxStore) this.maxStore = this.limit + n;
      let at = this.place(n);
      if (at < 0) {
        copyRun(); // grow() moves the bytes, dropOldest() frees room a later chunk may take
        while (at < 0) {
          if (this.store.length < this.maxStore) this.grow(n);
          else this.dropOldest();
          at = this.place(n);
        }
      }
      if (runLen > 0 && at === runDst + runLen) runLen += n;
      else {
        copyRun();
        runSrc = off;
        runDst = at;
        runLen = n;
      }
      this.record(seq, stream, at, n);
    }
    copyRun();
  }

  /** Books a chunk whose n bytes are (or are about to be) at store[at, at + n). */
  private record(seq: number, stream: OutputStream, at: number, n: number): void {
    this.writePos = at + n;
    this.seqs.push(seq);
    this.starts.push(at);
    this.lens.push(n);
    this.streams.push(stream);
    this.bytes += n;
  }

  /** Chunks with seq > afterSeq, stopping before the chunk that would exceed maxBytes (but always at least one). */
  read(afterSeq: number, maxBytes: number | null): RetainedChunk[] {
    const out: RetainedChunk[] = [];
    let total = 0;
    for (let i = this.firstAfter(afterSeq); i < this.seqs.length; i++) {
      const len = this.lens[i]!;
      if (maxBytes !== null && out.length > 0 && total + len > maxBytes) break;
      out.push(this.chunkAt(i));
      total += len;
    }
    return out;
  }

  /** All retained chunks with seq > afterSeq. */
  since(afterSeq: number): RetainedChunk[] {
    const out: RetainedChunk[] = [];
    for (let i = this.firstAfter(afterSeq); i < this.seqs.length; i++) out.push(this.chunkAt(i));
    return out;
  }

  /** The retained text of some streams, for denial classification (newest bytes last). */
  text(streams: readonly OutputStream[]): string {
    const parts: Buffer[] = [];
    for (let i = this.head; i < this.seqs.length; i++) {
      if (streams.includes(this.streams[i]!)) parts.push(this.view(i));
    }
    return Buffer.concat(parts).toString('utf8');
  }

  private chunkAt(i: number): RetainedChunk {
    return { seq: this.seqs[i]!, stream: this.streams[i]!, data: this.view(i) };
  }

  private view(i: number): Buffer {
    const start = this.starts[i]!;
    return this.store.subarray(start, start + this.lens[i]!);
  }

  /** A free offset for n bytes after the newest chunk (wrapping to 0 when the end is too short), or -1. */
  private place(n: number): number {
    if (this.bytes === 0) return n <= this.store.length ? 0 : -1;
    let i = this.head;
    while (this.lens[i] === 0) i++; // empty chunks occupy nothing
    const oldest = this.starts[i]!;
    const w = this.writePos;
    if (w > oldest) {
      // [oldest, w) is in use: free are [w, end) and [0, oldest)
      if (w + n <= this.store.length) return w;
      return n <= oldest ? 0 : -1;
    }
    // wrapped (or exactly full when w === oldest): [oldest, end) and [0, w) are in use; free is [w, oldest)
    return w + n <= oldest ? w : -1;
  }

  /** A bigger store, the retained chunks copied to its start in order. */
  private grow(n: number): void {
    this.relocate(
      Math.min(
        this.maxStore,
        Math.max(STORE_MIN, this.store.length * 2, 1 << Math.ceil(Math.log2(this.bytes + n + 1))),
      ),
    );
  }

  /** A store of `cap` bytes (≥ the retained bytes), the retained chunks copied to its start in order. */
  private relocate(cap: number): void {
    const before = this.store.length;
    const next = Buffer.allocUnsafe(cap);
    let off = 0;
    for (let i = this.head; i < this.seqs.length; i++) {
      const len = this.lens[i]!;
      this.store.copy(next, off, this.starts[i]!, this.starts[i]! + len);
      this.starts[i] = off;
      off += len;
    }
    this.store = next;
    this.writePos = off;
    this.onResize?.(cap - before);
  }

  private dropOldest(): void {
    this.bytes -= this.lens[this.head]!;
    this.head++;
    if (this.head === this.seqs.length) {
      this.seqs.length = this.starts.length = this.lens.length = this.streams.length = 0;
      this.head = 0;
      this.writePos = 0;
    } else if (this.head > 1024 && this.head * 2 > this.seqs.length) {
      for (const a of [this.seqs, this.starts, this.lens] as number[][]) a.splice(0, this.head);
      this.streams.splice(0, this.head);
      this.head = 0;
    }
  }

  private firstAfter(afterSeq: number): number {
    // Seqs are increasing: binary search for the first chunk with seq > afterSeq.
    let lo = this.head;
    let hi = this.seqs.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.seqs[mid]! <= afterSeq) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}
