import type { ManagedProcess, ProcessEventSink } from '../../process/managedProcess.js';
import { MAX_CHUNK } from '../../process/managedProcess.js';
import type { OutputStream } from '../../protocol/exec.js';
import type { RpcConnection } from '../../rpc/connection.js';
import { type OutputHead, outputHead } from '../../rpc/output.js';
import type { Principal } from './auth.js';
import type { RetentionShare } from './retention.js';

/** Above this many bytes queued on the transport, the session pauses its children's output (protocol.md §5.9). */
export const HIGH_WATER_BYTES = 8 * 1024 * 1024;
const LOW_WATER_BYTES = 2 * 1024 * 1024;

interface Entry {
  proc: ManagedProcess;
  /** Notifications wait until the process/start response has been sent. */
  held: boolean;
  /** seq of the last event delivered to an attached connection. */
  deliveredSeq: number;
  /**
   * The start every process/output notification of the process shares (src/rpc/output.ts): made at its first output
   * (most short commands have none).
   */
  outputHead: OutputHead | null;
}

function headOf(e: Entry): OutputHead {
  e.outputHead ??= outputHead('process/output', { processId: e.proc.info.processId });
  return e.outputHead;
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
  private backpressured = false;
  /** Stops watching the attached connection's queue. */
  private unwatch: () => void = () => {};

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
      outputHead: null,
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
    this.unwatch();
    this.setBackpressure(false);
    this.conn = conn;
    this.detachedAt = null;
    this.unwatch = conn.watchQueue(HIGH_WATER_BYTES, LOW_WATER_BYTES, (on) => this.setBackpressure(on));
  }

  /** Re-sends, in seq order, every retained event produced while detached (ours: Codex loses them). */
  replayAll(): void {
    for (const e of this.entries.values()) if (!e.held) this.replay(e);
  }

  /** The connection is gone (at `at`, epoch ms): events are held for a resume. */
  detach(at: number): void {
    this.unwatch();
    this.unwatch = () => {};
    this.conn = null;
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
    e.deliveredSeq = firstSeq + Math.ceil(data.length / MAX_CHUNK) - 1;
    this.conn.notifyOutputs(headOf(e), firstSeq, stream, data, MAX_CHUNK);
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
  }

  private sendOutput(e: Entry, seq: number, stream: OutputStream, data: Buffer): void {
    e.deliveredSeq = seq;
    this.conn!.notifyOutput(headOf(e), seq, stream, data);
  }

  private sendExited(e: Entry, seq: number, exitCode: number): void {
    e.deliveredSeq = seq;
    this.conn!.notify('process/exited', {
      processId: e.proc.info.processId,
      seq,
      exitCode,
      sandboxDenied: e.proc.sandboxDenied,
      ...(e.proc.limitHit ? { limitHit: e.proc.limitHit } : {}),
      // Additive (ours): what the command used (src/process/usage.ts), read when it exited.
      ...(e.proc.usage ? { usage: e.proc.usage } : {}),
    });
  }

  private sendClosed(e: Entry, seq: number): void {
    e.deliveredSeq = seq;
    this.conn!.notify('process/closed', { processId: e.proc.info.processId, seq });
  }

  private setBackpressure(on: boolean): void {
    if (on === this.backpressured) return;
    this.backpressured = on;
    for (const e of this.entries.values()) e.proc.setPaused(on);
  }
}
