import type { ManagedProcess, ProcessEventSink } from '../process/managedProcess.js';
import { MAX_CHUNK } from '../process/managedProcess.js';
import { frameOutputs, base64Into as nativeBase64Into } from '../process/spawner.js';
import type { OutputStream } from '../protocol/exec.js';
import type { Framing, RpcConnection } from '../rpc/connection.js';
import type { Principal } from './auth.js';
import type { RetentionShare } from './retention.js';

/** `,"stream":"<stream>","chunk":"` after the seq digits of an output notification, per stream. */
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

function base64Length(n: number): number {
  return Math.ceil(n / 3) * 4;
}

/** The addon's encoder where it loaded (~13 ms per 64 MiB), else Node's through a string (~30 ms, and garbage). */
const base64Into: (src: Buffer, dst: Buffer, off: number) => number =
  nativeBase64Into ?? ((src, dst, off) => dst.write(src.toString('base64'), off, 'latin1'));

/**
 * Output notifications are carved out of shared arenas (one allocation per ~20 notifications instead of one each).
 * An arena is never reused: once full, a new one is started, and the old one lives as long as its last message.
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
 * Frame buffers whose bytes have all been written out, for reuse. A fresh 256 KiB Buffer per ~22 notifications is
 * external memory churn that makes V8 run full GCs (measured: ~16 mark-compacts per 320 MiB of output), and fresh
 * memory costs a page fault per 4 KiB on first write (~4500 per 64 MiB streamed when only 8 were kept). Up to
 * HIGH_WATER_BYTES can be in flight, so that much is kept while output flows; after FRAMES_IDLE_MS without a new
 * buffer being taken, the pool shrinks back to FREE_FRAMES_IDLE.
 */
const FREE_FRAMES_MAX = 40;
const FREE_FRAMES_IDLE = 4;
const FRAMES_IDLE_MS = 5000;
const freeFrames: Buffer[] = [];
let framesTakenAt = 0;
let framesTrimTimer: NodeJS.Timeout | null = null;

function trimFramesWhenIdle(): void {
  if (framesTrimTimer || freeFrames.length <= FREE_FRAMES_IDLE) return;
  framesTrimTimer = setTimeout(() => {
    framesTrimTimer = null;
    if (Date.now() - framesTakenAt >= FRAMES_IDLE_MS)
      freeFrames.length = Math.min(freeFrames.length, FREE_FRAMES_IDLE);
    trimFramesWhenIdle();
  }, FRAMES_IDLE_MS);
  framesTrimTimer.unref();
}
/** Writes still in flight per frame buffer, and whether the buffer has been replaced (no more writes into it). */
const framesInFlight = new WeakMap<Buffer, { writes: number; retired: boolean }>();

function takeFrames(minBytes: number): Buffer {
  framesTakenAt = Date.now();
  if (minBytes <= ARENA_BYTES) {
    const b = freeFrames.pop();
    if (b) {
      framesInFlight.set(b, { writes: 0, retired: false });
      return b;
    }
  }
  const b = Buffer.allocUnsafeSlow(Math.max(ARENA_BYTES, minBytes));
  framesInFlight.set(b, { writes: 0, retired: false });
  return b;
}

function recycle(b: Buffer): void {
  framesInFlight.delete(b);
  if (b.length === ARENA_BYTES && freeFrames.length < FREE_FRAMES_MAX) {
    freeFrames.push(b);
    trimFramesWhenIdle();
  }
}

function retireFrames(b: Buffer): void {
  const f = framesInFlight.get(b);
  if (!f) return;
  f.retired = true;
  if (f.writes === 0) recycle(b);
}

/** Chunks framed per native call: 16 × ~11 KiB stays well inside one ARENA_BYTES frame buffer. */
const FRAME_GROUP = 16;

/** Above this many bytes queued on the transport, the session pauses its children's output (protocol.md §5.9). */
export const HIGH_WATER_BYTES = 8 * 1024 * 1024;
const LOW_WATER_BYTES = 2 * 1024 * 1024;

interface Entry {
  proc: ManagedProcess;
  /** Notifications wait until the process/start response has been sent. */
  held: boolean;
  /** seq of the last event delivered to an attached connection. */
  deliveredSeq: number;
  /** Pre-built `{"method":"process/output","params":{"processId":…,"seq":` prefix (UTF-8). */
  outputPrefix: Buffer;
}

/** What a session tells the server's observers (the monitor feed, approvals): ServerEvents (events.ts). */
export interface SessionObserver {
  hasOutputListeners(): boolean;
  emitOutput(proc: ManagedProcess, seq: number, stream: OutputStream, data: Buffer): void;
  emitProcess(kind: 'exited' | 'closed', proc: ManagedProcess): void;
}

/**
 * A client session: owns its processes (unique ids for the session's lifetime), routes their events to the attached
 * connection in seq order, holds them while detached and replays them on resume, and applies socket backpressure.
 */
export class Session implements ProcessEventSink {
  private readonly entries = new Map<string, Entry>();
  /** ids being started (async sandbox/proxy setup): taken, but not yet processes. */
  private readonly reserved = new Set<string>();
  /** Registered processes that have not closed yet. */
  private live = 0;
  conn: RpcConnection | null = null;
  /** When the session was last detached (epoch ms), while it is. */
  detachedAt: number | null = null;
  private queuedBytes = 0;
  private backpressured = false;
  private readonly onWrittenFns = new Map<number, () => void>();
  /** Output notifications built but not yet handed to the connection (one write per read; see flush). */
  private batch: Buffer[] = [];
  private batchBytes = 0;
  /** The connection's framing when it takes pre-framed bytes: notifications are then built, framed, straight into
   * `frames` (never rewritten: a full one is replaced), and a batch is the bytes from `batchStart` to `framesUsed`. */
  private framing: Framing | null = null;
  private frames: Buffer | null = null;
  private framesUsed = 0;
  private batchStart = 0;

  /** The `sessionId` its creator was given, and the only thing `resumeSessionId` matches: never shown elsewhere. */
  readonly resumeKey: string;
  /** The credential that created the session; only it may resume the session. */
  readonly owner: Principal;
  readonly retention: RetentionShare;

  /**
   * `id` is the session's public name (the panel, logs, proxy audit events, approvals); `resumeKey` is what the
   * client holds.
   */
  constructor(
    readonly id: string,
    readonly clientName: string,
    private readonly events: SessionObserver,
    opts: { resumeKey: string; owner: Principal; retention: RetentionShare },
  ) {
    this.resumeKey = opts.resumeKey;
    this.owner = opts.owner;
    this.retention = opts.retention;
  }

  get processes(): IterableIterator<ManagedProcess> {
    return Array.from(this.entries.values(), (e) => e.proc)[Symbol.iterator]();
  }

  get processCount(): number {
    return this.entries.size;
  }

  /** Processes not yet closed, plus starts in progress (O(1): start checks it every time). */
  liveProcessCount(): number {
    return this.live + this.reserved.size;
  }

  has(processId: string): boolean {
    return this.entries.has(processId) || this.reserved.has(processId);
  }

  get(processId: string): ManagedProcess | undefined {
    return this.entries.get(processId)?.proc;
  }

  reserve(processId: string): void {
    this.reserved.add(processId);
  }

  unreserve(processId: string): void {
    this.reserved.delete(processId);
  }

  /** Registers a started process; its notifications are held until `release`. */
  add(proc: ManagedProcess): void {
    const id = proc.info.processId;
    this.reserved.delete(id);
    this.live++;
    this.entries.set(id, {
      proc,
      held: true,
      deliveredSeq: 0,
      outputPrefix: Buffer.from(
        `{"method":"process/output","params":{"processId":${JSON.stringify(id)},"seq":`,
      ),
    });
    if (this.backpressured) proc.setPaused(true);
  }

  /** The start response is on the wire: deliver what the process produced meanwhile, then go live. */
  release(proc: ManagedProcess): void {
    const e = this.entries.get(proc.info.processId);
    if (!e) return;
    e.held = false;
    if (this.conn) this.replay(e);
  }

  attach(conn: RpcConnection): void {
    this.flush();
    this.conn = conn;
    this.framing = conn.framing;
    this.detachedAt = null;
    this.queuedBytes = 0;
    this.onWrittenFns.clear();
    this.setBackpressure(false);
  }

  /** Re-sends, in seq order, every retained event produced while detached (ours: Codex loses them). */
  replayAll(): void {
    for (const e of this.entries.values()) if (!e.held) this.replay(e);
  }

  /** The connection is gone (at `at`, epoch ms): events are held for a resume. */
  detach(at: number): void {
    this.flush();
    this.conn = null;
    this.framing = null;
    this.detachedAt = at;
    this.setBackpressure(false);
  }

  /** Kills every process of the session (process group; sandboxed: the bwrap pid namespace). */
  killAll(): void {
    for (const e of this.entries.values()) {
      e.proc.kill('SIGKILL');
      e.proc.killGroup();
    }
  }

  // ---- ProcessEventSink ----------------------------------------------------------------------------------------

  output(p: ManagedProcess, seq: number, stream: OutputStream, data: Buffer): void {
    if (this.events.hasOutputListeners()) this.events.emitOutput(p, seq, stream, data);
    const e = this.entries.get(p.info.processId);
    if (!e || e.held || !this.conn) return;
    this.sendOutput(e, seq, stream, data);
  }

  outputs(p: ManagedProcess, firstSeq: number, stream: OutputStream, data: Buffer): void {
    if (this.events.hasOutputListeners()) {
      for (let off = 0, seq = firstSeq; off < data.length; off += MAX_CHUNK, seq++) {
        this.events.emitOutput(p, seq, stream, data.subarray(off, off + MAX_CHUNK));
      }
    }
    const e = this.entries.get(p.info.processId);
    if (!e || e.held || !this.conn) return;
    const chunks = Math.ceil(data.length / MAX_CHUNK);
    if (frameOutputs && this.framing?.webSocketText) {
      // Native code frames up to FRAME_GROUP chunks per call (the same bytes sendOutput builds chunk by chunk); a
      // group's worst case fits a pooled frame buffer.
      const fields = STREAM_FIELDS[stream];
      const perChunk = 10 + e.outputPrefix.length + 16 + fields.length + 3 + base64Length(MAX_CHUNK);
      for (let i = 0; i < chunks; i += FRAME_GROUP) {
        const group = data.subarray(i * MAX_CHUNK, (i + FRAME_GROUP) * MAX_CHUNK);
        this.reserveFrames(Math.ceil(group.length / MAX_CHUNK) * perChunk);
        const frames = this.frames!;
        const n = frameOutputs(
          group,
          MAX_CHUNK,
          e.outputPrefix,
          firstSeq + i,
          fields,
          frames,
          this.framesUsed,
        );
        this.framesUsed += n;
        this.batchBytes += n;
      }
      e.deliveredSeq = firstSeq + chunks - 1;
      this.scheduleFlush();
      return;
    }
    for (let i = 0; i < chunks; i++) {
      this.sendOutput(e, firstSeq + i, stream, data.subarray(i * MAX_CHUNK, (i + 1) * MAX_CHUNK));
    }
  }

  exited(p: ManagedProcess, seq: number, exitCode: number): void {
    this.events.emitProcess('exited', p);
    const e = this.entries.get(p.info.processId);
    if (!e || e.held || !this.conn) return;
    this.sendExited(e, seq, exitCode);
  }

  closed(p: ManagedProcess, seq: number): void {
    this.live--;
    this.retention.processClosed(p);
    this.events.emitProcess('closed', p);
    const e = this.entries.get(p.info.processId);
    if (!e || e.held || !this.conn) return;
    this.sendClosed(e, seq);
  }

  retainedResized(_p: ManagedProcess, delta: number): void {
    this.retention.resized(delta);
  }

  // ---- delivery ------------------------------------------------------------------------------------------------

  private replay(e: Entry): void {
    const p = e.proc;
    const chunks = p.buffer.since(e.deliveredSeq);
    let i = 0;
    for (let seq = e.deliveredSeq + 1; seq <= p.lastSeq; seq++) {
      if (seq === p.exitSeq) this.sendExited(e, seq, p.exitCode ?? -1);
      else if (seq === p.closeSeq) this.sendClosed(e, seq);
      else {
        while (i < chunks.length && chunks[i]!.seq < seq) i++;
        const c = chunks[i];
        if (c && c.seq === seq) this.sendOutput(e, c.seq, c.stream, c.data);
        // chunks older than the retention window are gone: skip them
      }
    }
    e.deliveredSeq = p.lastSeq;
    this.flush();
  }

  /** Builds the notification as one Buffer (framed, when the transport takes that) and queues it for `flush`. */
  private sendOutput(e: Entry, seq: number, stream: OutputStream, data: Buffer): void {
    e.deliveredSeq = seq;
    const prefix = e.outputPrefix;
    const digits = decimalLength(seq);
    const fields = STREAM_FIELDS[stream];
    const length = prefix.length + digits + fields.length + base64Length(data.length) + 3;
    const framing = this.framing;
    let buf: Buffer;
    let off: number;
    if (framing) {
      const header = framing.headerLength(length);
      this.reserveFrames(header + length);
      buf = this.frames!;
      framing.writeHeader(buf, this.framesUsed, length);
      off = this.framesUsed + header;
      this.framesUsed = off + length;
      this.batchBytes += header + length;
    } else {
      buf = messageBuffer(length);
      off = 0;
      this.batch.push(buf);
      this.batchBytes += length;
    }
    buf.set(prefix, off);
    off = writeDecimal(buf, off + prefix.length, seq, digits);
    buf.set(fields, off);
    off += fields.length;
    off += base64Into(data, buf, off);
    buf[off] = 0x22; // "}}
    buf[off + 1] = 0x7d;
    buf[off + 2] = 0x7d;
    this.scheduleFlush();
  }

  /** Makes room for `bytes` more in the current frame buffer (the batch so far is flushed if a new one is needed). */
  private reserveFrames(bytes: number): void {
    if (this.frames && this.framesUsed + bytes <= this.frames.length) return;
    this.flush();
    if (this.frames) retireFrames(this.frames);
    this.frames = takeFrames(bytes);
    this.framesUsed = 0;
    this.batchStart = 0;
  }

  private scheduleFlush(): void {
    if (!this.flushQueued) {
      this.flushQueued = true;
      process.nextTick(this.flushFn);
    }
  }

  private flushQueued = false;
  private readonly flushFn = () => {
    this.flushQueued = false;
    this.flush();
  };

  /** Hands the batched output notifications to the connection in one write (ProcessEventSink: end of a read). */
  flush(): void {
    const len = this.batchBytes;
    if (len === 0) return;
    this.batchBytes = 0;
    const batch = this.batch;
    if (batch.length > 0) this.batch = [];
    const start = this.batchStart;
    this.batchStart = this.framesUsed;
    if (!this.conn) return;
    this.queuedBytes += len;
    if (batch.length > 0) this.conn.sendBatch(batch, this.writtenFn(len));
    else {
      const frames = this.frames!;
      const inFlight = framesInFlight.get(frames);
      const written = this.writtenFn(len);
      if (inFlight) inFlight.writes++;
      this.conn.sendFramed(frames.subarray(start, this.framesUsed), () => {
        written();
        if (inFlight && --inFlight.writes === 0 && inFlight.retired) recycle(frames);
      });
    }
    if (!this.backpressured && this.queuedBytes > HIGH_WATER_BYTES) this.setBackpressure(true);
  }

  private sendExited(e: Entry, seq: number, exitCode: number): void {
    this.flush();
    e.deliveredSeq = seq;
    this.conn!.notify('process/exited', {
      processId: e.proc.info.processId,
      seq,
      exitCode,
      sandboxDenied: e.proc.sandboxDenied,
      ...(e.proc.limitHit ? { limitHit: e.proc.limitHit } : {}),
    });
  }

  private sendClosed(e: Entry, seq: number): void {
    this.flush();
    e.deliveredSeq = seq;
    this.conn!.notify('process/closed', { processId: e.proc.info.processId, seq });
  }

  private writtenFn(len: number): () => void {
    let fn = this.onWrittenFns.get(len);
    if (!fn) {
      const conn = this.conn;
      fn = () => {
        if (this.conn !== conn) return;
        this.queuedBytes -= len;
        if (this.backpressured && this.queuedBytes < LOW_WATER_BYTES) this.setBackpressure(false);
      };
      if (this.onWrittenFns.size < 64) this.onWrittenFns.set(len, fn);
    }
    return fn;
  }

  private setBackpressure(on: boolean): void {
    if (on === this.backpressured) return;
    this.backpressured = on;
    for (const e of this.entries.values()) e.proc.setPaused(on);
  }
}
