import type { OutputStream } from '../protocol/exec.js';

export interface RetainedChunk {
  seq: number;
  stream: OutputStream;
  data: Buffer;
}

/** Default retention per process for `process/read` (protocol.md §5.9): the newest whole chunks totalling ≤ 1 MiB. */
export const RETAINED_BYTES = 1024 * 1024;

/**
 * The retained output of one process: the most recent whole chunks whose total size stays within `limit`.
 * Older chunks are dropped from here only; notifications carry everything.
 */
export class OutputBuffer {
  private chunks: RetainedChunk[] = [];
  private head = 0;
  private bytes = 0;

  constructor(private readonly limit = RETAINED_BYTES) {}

  get retainedBytes(): number {
    return this.bytes;
  }

  push(chunk: RetainedChunk): void {
    this.chunks.push(chunk);
    this.bytes += chunk.data.length;
    while (this.bytes > this.limit && this.head < this.chunks.length) {
      const old = this.chunks[this.head]!;
      this.bytes -= old.data.length;
      this.chunks[this.head] = undefined as unknown as RetainedChunk;
      this.head++;
    }
    if (this.head > 1024 && this.head * 2 > this.chunks.length) {
      this.chunks = this.chunks.slice(this.head);
      this.head = 0;
    }
  }

  /** Chunks with seq > afterSeq, stopping before the chunk that would exceed maxBytes (but always at least one). */
  read(afterSeq: number, maxBytes: number | null): RetainedChunk[] {
    const out: RetainedChunk[] = [];
    let i = this.firstAfter(afterSeq);
    let total = 0;
    for (; i < this.chunks.length; i++) {
      const c = this.chunks[i]!;
      if (maxBytes !== null && out.length > 0 && total + c.data.length > maxBytes) break;
      out.push(c);
      total += c.data.length;
    }
    return out;
  }

  /** All retained chunks with seq > afterSeq. */
  since(afterSeq: number): RetainedChunk[] {
    return this.chunks.slice(this.firstAfter(afterSeq));
  }

  /** The retained text of some streams, for denial classification (newest bytes last). */
  text(streams: readonly OutputStream[]): string {
    const parts: Buffer[] = [];
    for (let i = this.head; i < this.chunks.length; i++) {
      const c = this.chunks[i]!;
      if (streams.includes(c.stream)) parts.push(c.data);
    }
    return Buffer.concat(parts).toString('utf8');
  }

  private firstAfter(afterSeq: number): number {
    // Seqs are increasing: binary search for the first chunk with seq > afterSeq.
    let lo = this.head;
    let hi = this.chunks.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.chunks[mid]!.seq <= afterSeq) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}
