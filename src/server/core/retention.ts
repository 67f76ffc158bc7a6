/**
 * The memory budget of retained output (what `process/read` can still return, protocol.md §5.9). Each process keeps
 * up to 1 MiB; without a budget, 1000 finished processes × 1 MiB held 1 GB for as long as their session lived.
 *
 * The ledger books the bytes each process's ring actually holds (its store, which changes only when it grows or is
 * freed, so the hot path is untouched), per session and server-wide. Past a limit:
 * 1. closed processes' output is freed, oldest closed first (the session's own, or the server's oldest for the
 *    server-wide limit); a later `process/read` of such a process says `outputEvicted: true`;
 * 2. if the session is still over its limit with live processes only, their retention windows shrink to an equal
 *    share (at least MIN_LIVE_SHARE), dropping their oldest chunks as the 1 MiB window always does.
 */
import type { ManagedProcess } from '../../process/managedProcess.js';

export interface RetentionLimits {
  /** Bytes of retained output one session may hold. */
  sessionBytes: number;
  /** Bytes of retained output all sessions together may hold. */
  serverBytes: number;
}

export const DEFAULT_RETENTION: RetentionLimits = {
  sessionBytes: 64 * 1024 * 1024,
  serverBytes: 1024 * 1024 * 1024,
};

/** A live process's retention window never shrinks below this. */
export const MIN_LIVE_SHARE = 64 * 1024;

/** One session's account. */
export class RetentionShare {
  bytes = 0;
  /** Closed processes still holding output, oldest closed first. */
  readonly closed = new Set<ManagedProcess>();
  forgotten = false;
  constructor(
    private readonly ledger: RetentionLedger,
    readonly processes: () => Iterable<ManagedProcess>,
  ) {}

  /** A process's ring grew or shrank by `delta` bytes. */
  resized(delta: number): void {
    this.ledger.resized(this, delta);
  }

  /** A process of the session closed. */
  processClosed(proc: ManagedProcess): void {
    this.ledger.processClosed(this, proc);
  }
}

export class RetentionLedger {
  readonly limits: RetentionLimits;
  private bytes = 0;
  /** Closed processes still holding output, server-wide, oldest closed first. */
  private readonly closed = new Map<ManagedProcess, RetentionShare>();
  private evictedCount = 0;

  constructor(limits: Partial<RetentionLimits> = {}) {
    this.limits = { ...DEFAULT_RETENTION, ...limits };
  }

  /** Bytes of retained output held now, server-wide. */
  get heldBytes(): number {
    return this.bytes;
  }

  /** Closed processes whose output was freed so far. */
  get evicted(): number {
    return this.evictedCount;
  }

  share(processes: () => Iterable<ManagedProcess>): RetentionShare {
    return new RetentionShare(this, processes);
  }

  /** A process's ring grew or shrank by `delta` bytes. */
  resized(share: RetentionShare, delta: number): void {
    if (share.forgotten) return;
    share.bytes += delta;
    this.bytes += delta;
    if (delta > 0) this.enforce(share);
  }

  /** A process closed: its output may now be freed when a budget needs room. */
  processClosed(share: RetentionShare, proc: ManagedProcess): void {
    if (share.forgotten || proc.outputEvicted || proc.buffer.capacity === 0) return;
    share.closed.add(proc);
    this.closed.set(proc, share);
    this.enforce(share);
  }

  /** The session is gone (its processes go with it). */
  forget(share: RetentionShare): void {
    if (share.forgotten) return;
    share.forgotten = true;
    this.bytes -= share.bytes;
    share.bytes = 0;
    for (const p of share.closed) this.closed.delete(p);
    share.closed.clear();
  }

  private enforce(share: RetentionShare): void {
    const { sessionBytes, serverBytes } = this.limits;
    while (share.bytes > sessionBytes && share.closed.size > 0) {
      this.evict(share.closed.values().next().value!, share);
    }
    while (this.bytes > serverBytes && this.closed.size > 0) {
      const [proc, owner] = this.closed.entries().next().value!;
      this.evict(proc, owner);
    }
    if (share.bytes > sessionBytes) this.shrinkLive(share);
  }

  private evict(proc: ManagedProcess, share: RetentionShare): void {
    share.closed.delete(proc);
    this.closed.delete(proc);
    this.evictedCount++;
    proc.evictOutput(); // books the release through resized()
  }

  /** Only live processes are left over the budget: give each an equal share of it. */
  private shrinkLive(share: RetentionShare): void {
    const live: ManagedProcess[] = [];
    for (const p of share.processes()) if (p.state !== 'closed' && p.buffer.capacity > 0) live.push(p);
    if (live.length === 0) return;
    const each = Math.max(MIN_LIVE_SHARE, Math.floor(this.limits.sessionBytes / live.length));
    for (const p of live) p.buffer.shrinkTo(each);
  }
}
