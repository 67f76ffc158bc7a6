/**
 * What a fleet host holds of one joined server: the last known state of its processes, sessions, network events and
 * approval prompts, rebuilt from every snapshot the server sends and kept up to date by its batches — a cache, for
 * the host's own subscribers' snapshots, never a second source of truth. Every row is tagged with the server's id
 * here (what the server put in `server` is dropped) and is bounded in size and count, so a hostile server can fill
 * nothing but its own bounded share.
 */
import type {
  ApprovalAuditEvent,
  ApprovalPrompt,
  ApprovalsState,
  RememberedDecision,
} from '../protocol/approvals.js';
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
  /** Largest row (JSON bytes) accepted. */
  rowBytes: number;
  network: number;
  prompts: number;
  approvalAudit: number;
}

export const DEFAULT_LIMITS: MirrorLimits = {
  processes: 20_000,
  sessions: 1000,
  rowBytes: 64 * 1024,
  network: 1000,
  prompts: 1024,
  approvalAudit: 500,
};

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

  // ---- monitor feed ------------------------------------------------------------------------------------------

  /** A fresh snapshot (subscribe answer or resync): sessions and network lists replaced, processes upserted. */
  snapshot(s: MonitorSnapshot): void {
    this.confirmed = new Set();
    const seen = new Set<string>();
    for (const x of s.sessions.slice(0, this.limits.sessions)) {
      const rec = tag(this.id, { ...x, self: false });
      seen.add(rec.sessionId);
      const old = this.sessions.get(rec.sessionId);
      this.sessions.set(rec.sessionId, rec);
      if (!old || old.attached !== rec.attached)
        this.relay.relaySession(rec.attached ? (old ? 'attached' : 'created') : 'detached', rec);
    }
    for (const [sid, old] of this.sessions) {
      if (seen.has(sid)) continue;
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
      if (JSON.stringify(row).length > this.limits.rowBytes) {
        this.reject(`a process row over ${this.limits.rowBytes} bytes`);
        continue;
      }
      const rec = tag(this.id, row);
      delete rec.stale;
      const k = `${rec.sessionId}\u0000${rec.processId}`;
      if (!this.processes.has(k) && this.processes.size >= this.limits.processes) this.evictOne();
      this.processes.delete(k);
      this.processes.set(k, rec);
      this.confirmed?.add(k);
      this.relay.relayProcess(rec);
    }
  }

  /** Forgets the oldest finished row (or the oldest row): the host keeps a bounded share per server. */
  private evictOne(): void {
    let n = 0;
    for (const [k, p] of this.processes) {
      if (p.state === 'closed' || ++n > 256) {
        this.processes.delete(k);
        return;
      }
    }
    const first = this.processes.keys().next();
    if (!first.done) this.processes.delete(first.value);
  }

  /** The snapshot is complete: rows it did not confirm are the server's no longer (it restarted, or forgot them). */
  private snapshotDone(): void {
    const confirmed = this.confirmed;
    this.confirmed = null;
    if (!confirmed) return;
    for (const [k, p] of this.processes) {
      if (confirmed.has(k) || p.stale) continue;
      const rec = { ...p, stale: true };
      this.processes.set(k, rec);
      this.relay.relayProcess(rec);
    }
  }

  private session(kind: SessionChangeKind, s: MonitorSession): void {
    const rec = tag(this.id, { ...s, self: false });
    if (kind === 'expired') this.sessions.delete(rec.sessionId);
    else {
      if (!this.sessions.has(rec.sessionId) && this.sessions.size >= this.limits.sessions) {
        this.reject('more sessions than the host keeps per server');
        return;
      }
      this.sessions.set(rec.sessionId, rec);
    }
    this.relay.relaySession(kind, rec);
  }

  private network(kind: 'blocked' | 'audit', e: MonitorBlocked | MonitorAudit): void {
    const list: (MonitorBlocked | MonitorAudit)[] = kind === 'blocked' ? this.blocked : this.audit;
    const rec = tag(this.id, e);
    list.push(rec);
    if (list.length > this.limits.network) list.shift();
    this.relay.relayNetwork(kind, rec);
  }

  private replaceNetwork<T extends MonitorBlocked | MonitorAudit>(
    kind: 'blocked' | 'audit',
    old: T[],
    now: T[],
  ): T[] {
    const known = new Set(old.map((e) => e.id));
    const next = now.slice(-this.limits.network).map((e) => tag(this.id, e));
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
    this.prompts.clear();
    for (const p of s.pending.slice(0, this.limits.prompts)) this.prompts.set(p.id, tag(this.id, p));
    this.decisions = s.decisions.slice(0, this.limits.prompts).map((d) => tag(this.id, d));
    this.approvalAudit = s.audit.slice(-this.limits.approvalAudit).map((e) => tag(this.id, e));
  }

  prompt(p: ApprovalPrompt): ApprovalPrompt | null {
    if (!this.prompts.has(p.id) && this.prompts.size >= this.limits.prompts) {
      this.reject('more approval prompts than the host keeps per server');
      return null;
    }
    const rec = tag(this.id, p);
    this.prompts.set(rec.id, rec);
    return rec;
  }

  resolved(id: string): void {
    this.prompts.delete(id);
  }

  setDecisions(list: RememberedDecision[]): RememberedDecision[] {
    this.decisions = list.slice(0, this.limits.prompts).map((d) => tag(this.id, d));
    return this.decisions;
  }

  approvalEvent(e: ApprovalAuditEvent): ApprovalAuditEvent {
    const rec = tag(this.id, e);
    this.approvalAudit.push(rec);
    if (this.approvalAudit.length > this.limits.approvalAudit) this.approvalAudit.shift();
    return rec;
  }

  /** The link dropped: its prompts cannot be answered any more (they time out on the server). */
  disconnected(): ApprovalPrompt[] {
    const gone = [...this.prompts.values()];
    this.prompts.clear();
    return gone;
  }
}

export type { Tagged };
