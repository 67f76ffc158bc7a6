// The panel's state, fed by the monitor snapshot, its pages and the live `monitor/batch` notifications. Data work
// only: a notification updates the tables at once and says what changed; views render at most once per frame.

// host/info: one definition, in src/protocol.
import type { DoctorReport } from '../src/protocol/doctor.js';
import type { HostInfo } from '../src/protocol/host.js';
import type {
  DroppedCounts,
  HostCount,
  MonitorAudit,
  MonitorBatch,
  MonitorBlocked,
  MonitorOutputNotification,
  MonitorProcess,
  MonitorServer,
  MonitorSession,
  MonitorSessionChange,
  MonitorSnapshot,
} from '../src/protocol/monitor.js';
import type { SelftestReport } from '../src/protocol/selftest.js';
import { ProcessTable, type Row, rowKey, sessionKey } from './processTable.js';

export type { HostInfo };

export type Change =
  | 'processes'
  | 'sessions'
  | 'network'
  | 'dropped'
  | 'info'
  | 'connection'
  | 'servers'
  | 'snapshot';

export { rowKey, sessionKey };
/** A process's key in the panel: its server, session and id. */
export const procKey = (p: { server?: string | undefined; sessionId: string; processId: string }) =>
  rowKey(p.server ?? '', p.sessionId, p.processId);

const MAX_BLOCKED = 500;
const MAX_AUDIT = 1000;

export class Store {
  readonly processes = new ProcessTable();
  /** By sessionKey(server, sessionId). */
  readonly sessions = new Map<string, MonitorSession>();
  readonly servers = new Map<string, MonitorServer>();
  blocked: MonitorBlocked[] = [];
  audit: MonitorAudit[] = [];
  readonly hosts = new Map<string, HostCount>();
  dropped: DroppedCounts = { output: 0, network: 0, evicted: 0, forgottenProcesses: 0 };
  networkWired = false;
  previewWired = false;
  info: HostInfo | null = null;
  /** host/doctor, once it has answered. */
  doctor: DoctorReport | null = null;
  /** monitor/selftest: the last `corral selftest` result kept on the host (null: none); undefined until it answers. */
  selftest: SelftestReport | null | undefined = undefined;
  /** The panel's own session (sessionKey). */
  selfSession: string | null = null;
  /** Clock offset: server time − local time at snapshot. */
  skew = 0;
  /** Processes of the snapshot still being paged in. */
  pending = 0;
  /** Keys of the rows the current snapshot confirmed (the rest become stale when it completes). */
  private confirmed: Set<string> | null = null;
  private readonly listeners = new Set<(c: Change) => void>();
  private readonly outputListeners = new Set<(n: MonitorOutputNotification) => void>();

  constructor() {
    this.processes.serverName = (id) => this.serverName(id);
  }

  on(f: (c: Change) => void): () => void {
    this.listeners.add(f);
    return () => this.listeners.delete(f);
  }

  onOutput(f: (n: MonitorOutputNotification) => void): () => void {
    this.outputListeners.add(f);
    return () => this.outputListeners.delete(f);
  }

  emit(c: Change): void {
    for (const f of [...this.listeners]) f(c);
  }

  /** Whether this host watches other servers (the server column and filter are shown then). */
  get fleet(): boolean {
    return this.servers.size > 1;
  }

  serverName(id: string): string {
    return this.servers.get(id)?.name ?? (id === '' ? 'this host' : id);
  }

  /** A row of a server whose link is down is shown as stale too. */
  isStale(r: Row): boolean {
    return r.stale || (r.server !== '' && this.servers.get(r.server)?.state === 'disconnected');
  }

  /** A subscription's snapshot (first or after a resync): the lists are replaced, processes upserted. */
  loadSnapshot(s: MonitorSnapshot): void {
    this.sessions.clear();
    for (const x of s.sessions) {
      const k = sessionKey(x.server ?? '', x.sessionId);
      this.sessions.set(k, x);
      if (x.self) this.selfSession = k;
    }
    this.servers.clear();
    for (const sv of s.servers ?? []) this.servers.set(sv.id, sv);
    this.blocked = s.blocked.slice(-MAX_BLOCKED);
    this.audit = s.audit.slice(-MAX_AUDIT);
    this.hosts.clear();
    for (const c of s.hosts) this.count(c.host, 'allowed', c.allowed, c.blocked);
    this.dropped = s.dropped;
    this.networkWired = s.networkWired;
    this.previewWired = s.previewWired;
    this.skew = s.serverTime - Date.now();
    this.confirmed = new Set();
    this.upsert(s.processes);
    this.pending = s.pendingProcesses ?? 0;
    if (this.pending === 0) this.snapshotDone();
    this.emit('snapshot');
    this.emit('servers');
    this.emit('processes');
    this.emit('sessions');
    this.emit('network');
    this.emit('dropped');
  }

  private upsert(list: MonitorProcess[]): void {
    const rows = this.processes.upsertAll(list);
    const c = this.confirmed;
    if (c) for (const r of rows) c.add(r.key);
  }

  /** The snapshot is complete: live rows it did not mention are no longer known to their server. */
  private snapshotDone(): void {
    const c = this.confirmed;
    this.confirmed = null;
    if (!c) return;
    this.processes.update((r) => {
      if (c.has(r.key) || r.stale || r.state === 'closed') return false;
      r.stale = true;
      return true;
    });
  }

  notification(method: string, params: unknown): void {
    switch (method) {
      case 'monitor/batch':
        this.batch(params as MonitorBatch);
        break;
      case 'monitor/resync':
        this.loadSnapshot(params as MonitorSnapshot);
        break;
      case 'monitor/output': {
        const n = params as MonitorOutputNotification;
        for (const f of [...this.outputListeners]) f(n);
        break;
      }
    }
  }

  private batch(b: MonitorBatch): void {
    if (b.processes?.length) this.upsert(b.processes);
    if (b.snapshotRemaining !== undefined) {
      this.pending = b.snapshotRemaining;
      if (this.pending === 0) this.snapshotDone();
    }
    if (b.processes?.length || b.snapshotRemaining !== undefined) this.emit('processes');
    if (b.sessions?.length) {
      for (const c of b.sessions) this.session(c);
      this.emit('sessions');
    }
    if (b.servers?.length) {
      for (const s of b.servers) {
        if (s.lastError === 'removed from the fleet') this.servers.delete(s.id);
        else this.servers.set(s.id, s);
      }
      this.emit('servers');
      this.emit('processes');
    }
    if (b.blocked?.length || b.audit?.length) {
      for (const e of b.blocked ?? []) {
        this.blocked.push(e);
        this.count(e.host, 'blocked', 0, 1);
      }
      for (const e of b.audit ?? []) {
        this.audit.push(e);
        if (e.decision === 'allow') this.count(e.host, 'allowed', 1, 0);
      }
      if (this.blocked.length > MAX_BLOCKED) this.blocked.splice(0, this.blocked.length - MAX_BLOCKED);
      if (this.audit.length > MAX_AUDIT) this.audit.splice(0, this.audit.length - MAX_AUDIT);
      this.emit('network');
    }
    if (b.dropped) {
      this.dropped = b.dropped;
      this.emit('dropped');
    }
  }

  private session(c: MonitorSessionChange): void {
    const s = c.session;
    const server = s.server ?? '';
    const k = sessionKey(server, s.sessionId);
    if (c.kind !== 'expired') {
      this.sessions.set(k, s);
      return;
    }
    this.sessions.delete(k);
    // Its processes' output is gone with it.
    this.processes.update((r) => {
      if (!r.retained || r.server !== server || r.sessionId !== s.sessionId) return false;
      r.retained = false;
      return true;
    });
  }

  private count(host: string, _what: 'allowed' | 'blocked', allowed: number, blocked: number): void {
    let c = this.hosts.get(host);
    if (!c) {
      c = { host, allowed: 0, blocked: 0 };
      this.hosts.set(host, c);
    }
    c.allowed += allowed;
    c.blocked += blocked;
  }

  /** The process a network event belongs to (if its session is known). */
  processFor(server: string, processId: string, sessionId: string | null): Row | undefined {
    return sessionId ? this.processes.get(rowKey(server, sessionId, processId)) : undefined;
  }
}
