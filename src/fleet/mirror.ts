/**
 * What a fleet host holds of one joined server: the last known state of its processes, sessions, network events and
 * approval prompts, rebuilt from every snapshot the server sends and kept up to date by its batches — a cache, for
 * the host's own subscribers' snapshots, never a second source of truth. Every row is tagged with the server's id
 * here (what the server put in `server` is dropped) and is bounded in size and count, so a hostile server can fill
 * nothing but its own bounded share:
 * - every row is measured (src/protocol/boundedJson.ts, never JSON.stringify: a tree too deep for it is a bound
 *   broken, not a crash): a row over `rowBytes` or `rowValues` is refused and counted;
 * - its `unknown` subtrees (`metadata`, `policy`) are bounded in depth and values (`unknownBounds`): a server whose
 *   rows break that is not a Corral server (ours redact at depth 8), and the link is dropped (a JsonBoundError);
 * - everything kept of one server weighs at most `keptBytes` (JSON size plus VALUE_BYTES per value, about its heap):
 *   over it, its oldest finished processes, then network and approval events, then any processes are forgotten, and
 *   `overBudget` says so; a session, prompt or decision that still does not fit is refused.
 */
import type {
  ApprovalAuditEvent,
  ApprovalPrompt,
  ApprovalsState,
  RememberedDecision,
} from '../protocol/approvals.js';
import { JsonBoundError, type JsonBounds, measureJson } from '../protocol/boundedJson.js';
import type { OutputStream } from '../protocol/exec.js';
import type {
  MonitorAudit,
  MonitorBatch,
  MonitorBlocked,
  MonitorProcess,
  MonitorServer,
  MonitorSession,
  MonitorSnapshot,
  SessionChangeKind,
} from '../protocol/monitor.js';

/** What the mirror tells the host's monitor (Monitor's relay* methods). */
export interface Relay {
  relayProcess(rec: MonitorProcess): void;
  relaySession(kind: SessionChangeKind, rec: MonitorSession): void;
  relayNetwork(kind: 'blocked' | 'audit', rec: MonitorBlocked | MonitorAudit): void;
  relayServer(rec: MonitorServer): void;
  relayOutput(rec: MonitorProcess, seq: number, stream: OutputStream, data: Buffer): void;
}

export interface MirrorLimits {
  processes: number;
  sessions: number;
  /** Largest process row or approval prompt (JSON bytes) accepted. */
  rowBytes: number;
  /** Largest session, network event, remembered decision or approval event (JSON bytes) accepted. */
  eventBytes: number;
  /** Most values (strings, numbers, arrays, objects…) in one row accepted. */
  rowValues: number;
  /** Bounds of a row's `unknown` subtrees (`metadata`, `policy`): breaking them drops the link. */
  unknownBounds: JsonBounds;
  /** What the host keeps of one server, at most (estimated bytes: see VALUE_BYTES). */
  keptBytes: number;
  network: number;
  prompts: number;
  approvalAudit: number;
}

export const DEFAULT_LIMITS: MirrorLimits = {
  processes: 20_000,
  sessions: 1000,
  rowBytes: 64 * 1024,
  eventBytes: 16 * 1024,
  rowValues: 8192,
  unknownBounds: { maxDepth: 12, maxValues: 4096 },
  keptBytes: 64 * 1024 * 1024,
  network: 1000,
  prompts: 1024,
  approvalAudit: 500,
};

/**
 * What one value of a kept row is counted as, on top of its JSON text: about what V8 spends on a slot and a small
 * object or string. (`{}` is 2 bytes of JSON and some 50 of heap: counting text only, 64 KiB rows of empty objects
 * grew a host to gigabytes.)
 */
export const VALUE_BYTES = 32;

/** Deep enough for every row of the protocol with its unknown subtrees at their bound. */
const ROW_DEPTH = 24;

type Tagged<T> = Omit<T, 'server'> & { server: string };

/** A copy of `row` as server `id`'s (whatever it said its server was). */
function tag<T extends { server?: string | undefined }>(id: string, row: T): T {
  const { server: _claimed, ...rest } = row;
  return { server: id, ...rest } as unknown as T;
}

export class ServerMirror {
  readonly processes = new Map<string, MonitorProcess>();
  readonly sessions = new Map<string, MonitorSession>();
  blocked: MonitorBlocked[] = [];
  audit: MonitorAudit[] = [];
  readonly prompts = new Map<string, ApprovalPrompt>();
  decisions: RememberedDecision[] = [];
  approvalAudit: ApprovalAuditEvent[] = [];
  /** Rows confirmed by the snapshot being paged in (the others become stale when it completes). */
  private confirmed: Set<string> | null = null;
  rejected = 0;
  /** Estimated bytes of everything kept (rows charged with their cost, credited when forgotten). */
  kept = 0;
  /** Rows were forgotten (or refused) to stay within `keptBytes`. */
  overBudget = false;
  private readonly costs = new WeakMap<object, number>();

  constructor(
    readonly id: string,
    private readonly relay: Relay,
    private readonly limits: MirrorLimits = DEFAULT_LIMITS,
    private readonly onReject: (why: string) => void = () => {},
  ) {}

  private reject(why: string): void {
    this.rejected++;
    this.onReject(why);
  }

  /**
   * The cost of keeping `row` (a `kind`), or null if it is refused (too large: counted). Throws a JsonBoundError when
   * one of `unknowns` (its metadata, policy) breaks the bounds of an unknown subtree.
   */
  private measure(kind: string, row: object, maxBytes: number, unknowns: unknown[] = []): number | null {
    for (const u of unknowns) {
      if (u === null || u === undefined) continue;
      const m = measureJson(u, this.limits.unknownBounds);
      if (m.broken) throw new JsonBoundError(`a ${kind} whose metadata or policy has ${m.broken}`);
    }
    const m = measureJson(row, { maxDepth: ROW_DEPTH, maxValues: this.limits.rowValues });
    if (m.broken) {
      this.reject(`a ${kind} with ${m.broken}`);
      return null;
    }
    if (m.bytes > maxBytes) {
      this.reject(`a ${kind} over ${maxBytes} bytes`);
      return null;
    }
    return m.bytes + VALUE_BYTES * m.values;
  }

  /** `rec` is kept, at `cost`. */
  private charge<T extends object>(rec: T, cost: number): T {
    this.costs.set(rec, cost);
    this.kept += cost;
    return rec;
  }

  /** `rec` is forgotten. */
  private credit(rec: object | undefined): void {
    if (!rec) return;
    this.kept -= this.costs.get(rec) ?? 0;
    this.costs.delete(rec);
  }

  /** Whether `cost` more fits the budget once what can be forgotten is (flagging the server when it did not fit). */
  private makeRoom(cost: number): boolean {
    while (this.kept + cost > this.limits.keptBytes) {
      this.overBudget = true;
      if (!this.forgetOne()) return false;
    }
    return true;
  }

  /** Forgets one row to make room: the oldest finished process, network event, approval event, any process. */
  private forgetOne(): boolean {
    let n = 0;
    for (const [k, p] of this.processes) {
      if (++n > 256) break;
      if (p.state !== 'closed' && !p.stale) continue;
      this.forgetProcess(k);
      return true;
    }
    for (const list of [this.blocked, this.audit, this.approvalAudit] as object[][]) {
      if (list.length === 0) continue;
      this.credit(list.shift());
      return true;
    }
    const first = this.processes.keys().next();
    if (first.done) return false;
    this.forgetProcess(first.value);
    return true;
  }

  private forgetProcess(k: string): void {
    this.credit(this.processes.get(k));
    this.processes.delete(k);
  }

  // ---- monitor feed ------------------------------------------------------------------------------------------

  /** A fresh snapshot (subscribe answer or resync): sessions and network lists replaced, processes upserted. */
  snapshot(s: MonitorSnapshot): void {
    this.confirmed = new Set();
    const seen = new Set<string>();
    for (const x of s.sessions.slice(0, this.limits.sessions)) {
      const rec = tag(this.id, { ...x, self: false });
      const cost = this.measure('session', rec, this.limits.eventBytes);
      if (cost === null) continue;
      const old = this.sessions.get(rec.sessionId);
      this.credit(old);
      if (!this.makeRoom(cost)) {
        this.sessions.delete(rec.sessionId);
        this.reject('a session over the budget the host keeps per server');
        continue;
      }
      seen.add(rec.sessionId);
      this.sessions.set(rec.sessionId, this.charge(rec, cost));
      if (!old || old.attached !== rec.attached)
        this.relay.relaySession(rec.attached ? (old ? 'attached' : 'created') : 'detached', rec);
    }
    for (const [sid, old] of this.sessions) {
      if (seen.has(sid)) continue;
      this.credit(old);
      this.sessions.delete(sid);
      this.relay.relaySession('expired', old);
    }
    this.blocked = this.replaceNetwork('blocked', this.blocked, s.blocked);
    this.audit = this.replaceNetwork('audit', this.audit, s.audit);
    this.upsert(s.processes);
    if (!s.pendingProcesses) this.snapshotDone();
  }

  batch(b: MonitorBatch): void {
    this.upsert(b.processes);
    for (const c of b.sessions) this.session(c.kind, c.session);
    for (const e of b.blocked) this.network('blocked', e);
    for (const e of b.audit) this.network('audit', e);
    if (b.snapshotRemaining === 0) this.snapshotDone();
  }

  private upsert(rows: MonitorProcess[]): void {
    for (const row of rows) {
      const rec = tag(this.id, row);
      delete rec.stale;
      const cost = this.measure('process row', rec, this.limits.rowBytes, [rec.metadata, rec.policy]);
      if (cost === null) continue;
      const k = `${rec.sessionId}\u0000${rec.processId}`;
      if (!this.processes.has(k) && this.processes.size >= this.limits.processes) this.evictOne();
      this.forgetProcess(k);
      if (!this.makeRoom(cost)) {
        this.reject('a process row over the budget the host keeps per server');
        continue;
      }
      this.processes.set(k, this.charge(rec, cost));
      this.confirmed?.add(k);
      this.relay.relayProcess(rec);
    }
  }

  /** Forgets the oldest finished row (or the oldest row): the host keeps a bounded share per server. */
  private evictOne(): void {
    let n = 0;
    for (const [k, p] of this.processes) {
      if (p.state === 'closed' || ++n > 256) {
        this.forgetProcess(k);
        return;
      }
    }
    const first = this.processes.keys().next();
    if (!first.done) this.forgetProcess(first.value);
  }

  /** The snapshot is complete: rows it did not confirm are the server's no longer (it restarted, or forgot them). */
  private snapshotDone(): void {
    const confirmed = this.confirmed;
    this.confirmed = null;
    if (!confirmed) return;
    for (const [k, p] of this.processes) {
      if (confirmed.has(k) || p.stale) continue;
      const rec = { ...p, stale: true };
      const m = measureJson(rec, { maxDepth: ROW_DEPTH, maxValues: Number.MAX_SAFE_INTEGER });
      this.credit(p);
      this.processes.set(k, this.charge(rec, m.bytes + VALUE_BYTES * m.values));
      this.relay.relayProcess(rec);
    }
  }

  private session(kind: SessionChangeKind, s: MonitorSession): void {
    const rec = tag(this.id, { ...s, self: false });
    const cost = this.measure('session', rec, this.limits.eventBytes);
    if (cost === null) return;
    if (kind === 'expired') {
      this.credit(this.sessions.get(rec.sessionId));
      this.sessions.delete(rec.sessionId);
    } else {
      if (!this.sessions.has(rec.sessionId) && this.sessions.size >= this.limits.sessions) {
        this.reject('more sessions than the host keeps per server');
        return;
      }
      this.credit(this.sessions.get(rec.sessionId));
      this.sessions.delete(rec.sessionId);
      if (!this.makeRoom(cost)) {
        this.reject('a session over the budget the host keeps per server');
        return;
      }
      this.sessions.set(rec.sessionId, this.charge(rec, cost));
    }
    this.relay.relaySession(kind, rec);
  }

  private network(kind: 'blocked' | 'audit', e: MonitorBlocked | MonitorAudit): void {
    const rec = this.keptEvent(`${kind} event`, tag(this.id, e), 'metadata' in e ? [e.metadata] : []);
    if (!rec) return;
    const list: (MonitorBlocked | MonitorAudit)[] = kind === 'blocked' ? this.blocked : this.audit;
    list.push(rec);
    if (list.length > this.limits.network) this.credit(list.shift());
    this.relay.relayNetwork(kind, rec);
  }

  /** `rec` charged as kept (room made for it), or null when it is refused. */
  private keptEvent<T extends object>(kind: string, rec: T, unknowns: unknown[] = []): T | null {
    const cost = this.measure(kind, rec, this.limits.eventBytes, unknowns);
    if (cost === null) return null;
    if (!this.makeRoom(cost)) {
      this.reject(`a ${kind} over the budget the host keeps per server`);
      return null;
    }
    return this.charge(rec, cost);
  }

  /** `now` tagged, measured and charged in place of `old` (which is credited). */
  private replaceList<T extends object>(
    kind: string,
    old: T[],
    now: T[],
    unknowns: (e: T) => unknown[],
  ): T[] {
    for (const e of old) this.credit(e);
    const next: T[] = [];
    for (const e of now) {
      const rec = this.keptEvent(kind, tag(this.id, e as T & { server?: string }), unknowns(e));
      if (rec) next.push(rec);
    }
    return next;
  }

  private replaceNetwork<T extends MonitorBlocked | MonitorAudit>(
    kind: 'blocked' | 'audit',
    old: T[],
    now: T[],
  ): T[] {
    const known = new Set(old.map((e) => e.id));
    const next = this.replaceList(`${kind} event`, old, now.slice(-this.limits.network), (e) =>
      'metadata' in e ? [e.metadata] : [],
    );
    for (const e of next) if (!known.has(e.id)) this.relay.relayNetwork(kind, e);
    return next;
  }

  /** Live output of one of its processes (only relayed for a row the host knows). */
  output(sessionId: string, processId: string, seq: number, stream: OutputStream, data: Buffer): boolean {
    const rec = this.processes.get(`${sessionId}\u0000${processId}`);
    if (!rec) return false;
    this.relay.relayOutput(rec, seq, stream, data);
    return true;
  }

  // ---- approvals -----------------------------------------------------------------------------------------------

  approvalsState(s: ApprovalsState): void {
    for (const p of this.prompts.values()) this.credit(p);
    this.prompts.clear();
    for (const p of s.pending.slice(0, this.limits.prompts)) this.prompt(p);
    this.setDecisions(s.decisions);
    this.approvalAudit = this.replaceList(
      'approval event',
      this.approvalAudit,
      s.audit.slice(-this.limits.approvalAudit),
      () => [],
    );
  }

  prompt(p: ApprovalPrompt): ApprovalPrompt | null {
    if (!this.prompts.has(p.id) && this.prompts.size >= this.limits.prompts) {
      this.reject('more approval prompts than the host keeps per server');
      return null;
    }
    const rec = tag(this.id, p);
    const cost = this.measure('approval prompt', rec, this.limits.rowBytes);
    if (cost === null) return null;
    this.resolved(rec.id);
    if (!this.makeRoom(cost)) {
      this.reject('an approval prompt over the budget the host keeps per server');
      return null;
    }
    this.prompts.set(rec.id, this.charge(rec, cost));
    return rec;
  }

  resolved(id: string): void {
    this.credit(this.prompts.get(id));
    this.prompts.delete(id);
  }

  setDecisions(list: RememberedDecision[]): RememberedDecision[] {
    this.decisions = this.replaceList(
      'decision',
      this.decisions,
      list.slice(0, this.limits.prompts),
      () => [],
    );
    return this.decisions;
  }

  approvalEvent(e: ApprovalAuditEvent): ApprovalAuditEvent | null {
    const rec = this.keptEvent('approval event', tag(this.id, e));
    if (!rec) return null;
    this.approvalAudit.push(rec);
    if (this.approvalAudit.length > this.limits.approvalAudit) this.credit(this.approvalAudit.shift());
    return rec;
  }

  /** The link dropped: its prompts cannot be answered any more (they time out on the server). */
  disconnected(): ApprovalPrompt[] {
    const gone = [...this.prompts.values()];
    for (const p of gone) this.credit(p);
    this.prompts.clear();
    return gone;
  }
}

export type { Tagged };
