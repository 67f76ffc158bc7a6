/**
 * Delivery of the monitor feed to its subscribers, coalesced and bounded.
 *
 * The exec path only marks things dirty: a process event is one Map.set per subscriber, nothing is described or
 * serialised there. `batchMs` (25 ms) after a change that follows a quiet spell, then, while changes keep coming,
 * once per `paceMs` (100 ms: a person reads no faster, and each batch costs a panel a message, a parse and a frame
 * whatever it carries), and only while something is pending, a tick sends each subscriber one `monitor/batch` with
 * the latest state of every process, session and server that changed (a process that started and closed within one
 * batch is sent once), the network events in order, and the live output of the processes it follows, joined per
 * stream and capped (the newest bytes are kept; what was skipped is counted on the chunk that follows, for
 * `monitor/read`).
 *
 * Each subscriber's memory is bounded: what is dirty is at most one entry per process (a key, not a copy), network
 * events and output have caps, and while the transport holds more than `highWater` bytes nothing is sent to it. A
 * subscriber that falls further behind than `maxDirty` entries is dropped to a resync: everything queued for it is
 * forgotten, and once it has drained it gets `monitor/resync` — a fresh snapshot whose processes are paged in with
 * the next batches (`snapshotRemaining`), like the first one. A slow panel therefore costs neither memory without
 * bound nor time on the exec path.
 */
import { type Clock, realClock, type Timer } from '../../clock.js';
import type { OutputStream } from '../../protocol/exec.js';
import type { DroppedCounts, MonitorSnapshot, SessionChangeKind } from '../../protocol/monitor.js';
import type { RpcConnection } from '../../rpc/connection.js';
import { encodeOutput, type OutputHead } from '../../rpc/output.js';

export const BATCH_MS = 25;
/** While changes keep coming, one batch per this many batchMs. Live output and a backlog go at batchMs. */
export const PACE_BATCHES = 4;
/** Processes per page of a snapshot (and the most a batch carries). */
export const SNAPSHOT_PAGE = 2000;
/** Dirty processes a subscriber that is not draining may accumulate before it is dropped to a resync. */
export const MAX_DIRTY = 20_000;
/** Network events (of each kind) queued for a subscriber between batches; beyond, they are dropped and counted. */
export const MAX_PENDING_NETWORK = 1000;
/** Live output of one process per batch: the newest bytes are kept. */
export const PROCESS_BYTES_PER_BATCH = 64 * 1024;
/** Live output of all processes per batch, for one subscriber (beyond: dropped, counted). */
export const OUTPUT_BYTES_PER_BATCH = 1024 * 1024;

/** What the feed asks of its owner (the monitor): how things are described, and a snapshot. */
export interface FeedSource<P, S> {
  /** A process as MonitorProcess JSON, in its current state. */
  processJson(item: P): string;
  /** A session change as MonitorSessionChange JSON, for a subscriber whose own session is `self`. */
  sessionJson(kind: SessionChangeKind, item: S, self: unknown): string;
  /** A network event (blocked or audit) as JSON. */
  networkJson(rec: object): string;
  /** The start of the process's monitor/output notifications (its `server`, `sessionId`, `processId`): rpc/output.ts. */
  outputHead(item: P): OutputHead;
  /** A snapshot for `self` whose `processes` holds the first page; `rest` the other processes, newest first. */
  snapshot(self: unknown): { snapshot: MonitorSnapshot; rest: P[] };
}

interface OutputPart {
  seq: number;
  stream: OutputStream;
  data: Buffer;
}

interface PendingOutput<P> {
  item: P;
  parts: OutputPart[];
  bytes: number;
  /** Bytes dropped before the first part (older parts, or carried over from the last batch). */
  skipped: number;
}

export class FeedSubscriber<P, S> {
  /** Set once the snapshot answer is on the wire: nothing is sent before it. */
  live = false;
  outputAll = false;
  readonly followed = new Set<string>();
  queued = 0;
  /** The transport held more than highWater at the last tick: wait for it to drain. */
  waiting = false;
  /** Fell behind too far: everything queued was dropped; a resync follows once it drains. */
  resync = false;
  snapshotQueue: P[] = [];
  snapshotPos = 0;
  readonly dirty = new Map<string, P>();
  readonly sessions = new Map<string, { kind: SessionChangeKind; item: S }>();
  readonly servers = new Map<string, object>();
  blocked: object[] = [];
  audit: object[] = [];
  readonly output = new Map<string, PendingOutput<P>>();
  /** Output dropped from a batch with nothing of that process left in it: told with the process's next chunk. */
  readonly skippedCarry = new Map<string, number>();
  outputBytes = 0;
  readonly dropped = { output: 0, network: 0 };
  droppedChanged = false;

  constructor(
    readonly conn: RpcConnection,
    /** The subscriber's own session (the snapshot marks it `self`). */
    readonly self: unknown,
  ) {}

  get pending(): boolean {
    return (
      this.resync ||
      this.dirty.size > 0 ||
      this.sessions.size > 0 ||
      this.servers.size > 0 ||
      this.blocked.length > 0 ||
      this.audit.length > 0 ||
      this.output.size > 0 ||
      this.droppedChanged ||
      this.snapshotPos < this.snapshotQueue.length
    );
  }
}

export interface FeedOptions<P, S> {
  batchMs?: number;
  /** The least time between two batches while changes keep coming (default PACE_BATCHES × batchMs). */
  paceMs?: number;
  /** The server's clock (its batch timer). */
  clock?: Clock;
  highWaterBytes: number;
  lowWaterBytes: number;
  maxDirty?: number;
  /** Processes per page of a snapshot and per batch (default SNAPSHOT_PAGE). */
  page?: number;
  /** Global counters that every `dropped` report carries. */
  counters(): { evicted: number; forgottenProcesses: number };
  /** A subscriber left (unsubscribed, closed, or replaced by a new subscription of its connection). */
  onRemove?(sub: FeedSubscriber<P, S>): void;
}

export class Feed<P, S> {
  readonly subscribers = new Set<FeedSubscriber<P, S>>();
  readonly batchMs: number;
  readonly paceMs: number;
  private readonly maxDirty: number;
  readonly page: number;
  private timer: Timer | null = null;
  /** When the pending timer fires (the clock's time). */
  private timerAt = 0;
  /** When the last tick ran. */
  private lastTick = Number.NEGATIVE_INFINITY;
  private readonly clock: Clock;
  private immediate: NodeJS.Immediate | null = null;

  constructor(
    private readonly source: FeedSource<P, S>,
    private readonly opts: FeedOptions<P, S>,
  ) {
    this.batchMs = opts.batchMs ?? BATCH_MS;
    this.paceMs = opts.paceMs ?? PACE_BATCHES * this.batchMs;
    this.clock = opts.clock ?? realClock;
    this.maxDirty = opts.maxDirty ?? MAX_DIRTY;
    this.page = opts.page ?? SNAPSHOT_PAGE;
  }

  /** A new subscriber; returns it with the snapshot to answer (pages of the rest follow once it is live). */
  subscribe(
    conn: RpcConnection,
    self: unknown,
    outputAll: boolean,
  ): { sub: FeedSubscriber<P, S>; snapshot: MonitorSnapshot } {
    this.unsubscribe(conn);
    const sub = new FeedSubscriber<P, S>(conn, self);
    sub.outputAll = outputAll;
    const { snapshot, rest } = this.source.snapshot(self);
    sub.snapshotQueue = rest;
    this.subscribers.add(sub);
    return { sub, snapshot };
  }

  /** The snapshot answer was sent: start delivering. */
  start(sub: FeedSubscriber<P, S>): void {
    sub.live = true;
    if (sub.pending) this.scheduleNow();
  }

  unsubscribe(conn: RpcConnection): void {
    for (const sub of this.subscribers) if (sub.conn === conn) this.remove(sub);
  }

  remove(sub: FeedSubscriber<P, S>): void {
    if (this.subscribers.delete(sub)) this.opts.onRemove?.(sub);
  }

  find(conn: RpcConnection): FeedSubscriber<P, S> | undefined {
    for (const sub of this.subscribers) if (sub.conn === conn) return sub;
    return undefined;
  }

  dispose(): void {
    this.subscribers.clear();
    this.clock.clearTimeout(this.timer);
    if (this.immediate) clearImmediate(this.immediate);
    this.timer = null;
    this.immediate = null;
  }

  // ---- changes (called on the exec path: keep them cheap) --------------------------------------------------------

  process(key: string, item: P): void {
    for (const sub of this.subscribers) {
      if (sub.resync) continue;
      sub.dirty.set(key, item);
      if (sub.dirty.size > this.maxDirty && sub.waiting) this.dropToResync(sub);
    }
    this.schedule();
  }

  session(key: string, kind: SessionChangeKind, item: S): void {
    for (const sub of this.subscribers) {
      if (sub.resync) continue;
      sub.sessions.delete(key);
      sub.sessions.set(key, { kind, item });
    }
    this.schedule();
  }

  server(id: string, rec: object): void {
    for (const sub of this.subscribers) if (!sub.resync) sub.servers.set(id, rec);
    this.schedule();
  }

  network(kind: 'blocked' | 'audit', rec: object): void {
    for (const sub of this.subscribers) {
      if (sub.resync) continue;
      const list = kind === 'blocked' ? sub.blocked : sub.audit;
      if (list.length >= MAX_PENDING_NETWORK) {
        sub.dropped.network++;
        sub.droppedChanged = true;
        continue;
      }
      list.push(rec);
    }
    this.schedule();
  }

  /** True if some subscriber wants this process's output (the caller may skip the copy otherwise). */
  wantsOutput(key: string): boolean {
    for (const sub of this.subscribers) if (sub.outputAll || sub.followed.has(key)) return true;
    return false;
  }

  get wantsAnyOutput(): boolean {
    for (const sub of this.subscribers) if (sub.outputAll || sub.followed.size > 0) return true;
    return false;
  }

  /** Live output of a process. `data` may be a view of a reused buffer: it is copied if kept. */
  output(key: string, item: P, seq: number, stream: OutputStream, data: Buffer): void {
    let copy: Buffer | null = null;
    for (const sub of this.subscribers) {
      if (sub.resync || !(sub.outputAll || sub.followed.has(key))) continue;
      let pend = sub.output.get(key);
      if (!pend) {
        const carried = sub.skippedCarry.get(key) ?? 0;
        sub.skippedCarry.delete(key);
        pend = { item, parts: [], bytes: 0, skipped: carried };
        sub.output.set(key, pend);
      }
      // This batch carries enough output already: the oldest goes (the newest is what a view shows).
      if (sub.outputBytes + data.length > OUTPUT_BYTES_PER_BATCH) this.dropOldest(sub, data.length);
      copy ??= Buffer.from(data);
      pend.parts.push({ seq, stream, data: copy });
      pend.bytes += copy.length;
      sub.outputBytes += copy.length;
      while (pend.bytes > PROCESS_BYTES_PER_BATCH && pend.parts.length > 1) skipOldest(sub, pend);
    }
    this.schedule(true);
  }

  /** Makes room for `need` more bytes of output in this batch: the oldest queued parts go, counted as skipped. */
  private dropOldest(sub: FeedSubscriber<P, S>, need: number): void {
    for (const pend of sub.output.values()) {
      while (pend.parts.length > 0 && sub.outputBytes + need > OUTPUT_BYTES_PER_BATCH) skipOldest(sub, pend);
      if (sub.outputBytes + need <= OUTPUT_BYTES_PER_BATCH) return;
    }
  }

  // ---- delivery ----------------------------------------------------------------------------------------------

  /**
   * The next tick: `batchMs` from now after a quiet spell, else `paceMs` after the last one. `soon`: `batchMs` from now
   * whatever came before (live output — a terminal's echo — and the rest of a batch that could not carry it all).
   */
  private schedule(soon = false): void {
    // A pending tick is never later than a paced one would be (this runs on the exec path: no clock read then).
    if (this.immediate || (this.timer && !soon)) return;
    const now = this.clock.now();
    const at = soon ? now + this.batchMs : Math.max(now + this.batchMs, this.lastTick + this.paceMs);
    if (this.timer) {
      if (this.timerAt <= at) return;
      this.clock.clearTimeout(this.timer);
    }
    this.timerAt = at;
    this.timer = this.clock
      .setTimeout(() => {
        this.timer = null;
        this.tick();
      }, at - now)
      .unref();
  }

  private scheduleNow(): void {
    if (this.immediate) return;
    if (this.timer) {
      this.clock.clearTimeout(this.timer);
      this.timer = null;
    }
    this.immediate = setImmediate(() => {
      this.immediate = null;
      this.tick();
    });
  }

  private dropToResync(sub: FeedSubscriber<P, S>): void {
    sub.resync = true;
    sub.dirty.clear();
    sub.sessions.clear();
    sub.servers.clear();
    sub.dropped.network += sub.blocked.length + sub.audit.length;
    sub.blocked = [];
    sub.audit = [];
    for (const p of sub.output.values()) sub.dropped.output += p.parts.length;
    sub.output.clear();
    sub.skippedCarry.clear();
    sub.outputBytes = 0;
    sub.snapshotQueue = [];
    sub.snapshotPos = 0;
    sub.droppedChanged = true;
  }

  /** One batch to every subscriber that has something and can take it. */
  tick(): void {
    this.lastTick = this.clock.now();
    let again = false;
    for (const sub of this.subscribers) {
      if (sub.conn.closed) {
        this.remove(sub);
        continue;
      }
      if (!sub.live || !sub.pending) continue;
      if (sub.queued > this.opts.highWaterBytes) {
        sub.waiting = true;
        if (sub.dirty.size > this.maxDirty) this.dropToResync(sub);
        continue;
      }
      sub.waiting = false;
      if (sub.resync) this.sendResync(sub);
      this.sendBatch(sub);
      if (sub.pending) again = true;
    }
    if (again) this.schedule(true);
  }

  private send(sub: FeedSubscriber<P, S>, text: string | Buffer): void {
    const len = text.length;
    sub.queued += len;
    sub.conn.send(text, () => {
      sub.queued -= len;
      if (sub.waiting && sub.queued <= this.opts.lowWaterBytes) {
        sub.waiting = false;
        this.scheduleNow();
      }
    });
  }

  private sendResync(sub: FeedSubscriber<P, S>): void {
    sub.resync = false;
    const { snapshot, rest } = this.source.snapshot(sub.self);
    sub.snapshotQueue = rest;
    sub.snapshotPos = 0;
    this.send(sub, `{"method":"monitor/resync","params":${JSON.stringify(snapshot)}}`);
  }

  private sendBatch(sub: FeedSubscriber<P, S>): void {
    const parts: string[] = [];
    const procs: string[] = [];
    // Changed processes first (their state now), then a page of the snapshot being paged in.
    let n = 0;
    for (const [key, item] of sub.dirty) {
      if (n >= this.page) break;
      procs.push(this.source.processJson(item));
      sub.dirty.delete(key);
      n++;
    }
    const q = sub.snapshotQueue;
    const paging = sub.snapshotPos < q.length;
    while (sub.snapshotPos < q.length && n < this.page) {
      procs.push(this.source.processJson(q[sub.snapshotPos++]!));
      n++;
    }
    const remaining = q.length - sub.snapshotPos;
    if (paging && remaining === 0) {
      sub.snapshotQueue = [];
      sub.snapshotPos = 0;
    }
    if (procs.length > 0) parts.push(`"processes":[${procs.join(',')}]`);
    if (sub.sessions.size > 0) {
      const list: string[] = [];
      for (const { kind, item } of sub.sessions.values())
        list.push(this.source.sessionJson(kind, item, sub.self));
      sub.sessions.clear();
      parts.push(`"sessions":[${list.join(',')}]`);
    }
    if (sub.servers.size > 0) {
      parts.push(`"servers":${JSON.stringify([...sub.servers.values()])}`);
      sub.servers.clear();
    }
    if (sub.blocked.length > 0) {
      parts.push(`"blocked":[${sub.blocked.map((r) => this.source.networkJson(r)).join(',')}]`);
      sub.blocked = [];
    }
    if (sub.audit.length > 0) {
      parts.push(`"audit":[${sub.audit.map((r) => this.source.networkJson(r)).join(',')}]`);
      sub.audit = [];
    }
    if (sub.droppedChanged) {
      sub.droppedChanged = false;
      const dropped: DroppedCounts = { ...sub.dropped, ...this.opts.counters() };
      parts.push(`"dropped":${JSON.stringify(dropped)}`);
    }
    if (paging) parts.push(`"snapshotRemaining":${remaining}`);
    if (parts.length > 0) this.send(sub, `{"method":"monitor/batch","params":{${parts.join(',')}}}`);
    if (sub.output.size > 0) this.sendOutput(sub);
  }

  /** The pending output of each process, consecutive chunks of one stream joined into one notification. */
  private sendOutput(sub: FeedSubscriber<P, S>): void {
    for (const [key, pend] of sub.output) {
      // All of it went to make room for others: say so with the process's next chunk.
      if (pend.parts.length === 0) {
        if (pend.skipped > 0) sub.skippedCarry.set(key, pend.skipped);
        continue;
      }
      const head = this.source.outputHead(pend.item);
      let skipped = pend.skipped;
      let i = 0;
      while (i < pend.parts.length) {
        const first = pend.parts[i]!;
        let j = i + 1;
        while (j < pend.parts.length && pend.parts[j]!.stream === first.stream) j++;
        const run = pend.parts.slice(i, j);
        const data = run.length === 1 ? first.data : Buffer.concat(run.map((p) => p.data));
        const last = run[run.length - 1]!;
        this.send(
          sub,
          encodeOutput(head, last.seq, first.stream, data, {
            firstSeq: run.length > 1 ? first.seq : 0,
            skippedBytes: skipped,
          }),
        );
        skipped = 0;
        i = j;
      }
    }
    sub.output.clear();
    sub.outputBytes = 0;
  }
}

/** Drops the oldest queued part of a process's output from this batch, counted as skipped (and as a drop). */
function skipOldest<P, S>(sub: FeedSubscriber<P, S>, pend: PendingOutput<P>): void {
  const old = pend.parts.shift()!;
  pend.bytes -= old.data.length;
  sub.outputBytes -= old.data.length;
  pend.skipped += old.data.length;
  sub.dropped.output++;
  sub.droppedChanged = true;
}
