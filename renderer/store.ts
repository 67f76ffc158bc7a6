// The panel's state, fed by the monitor snapshot and live `monitor/*` notifications.

// host/info: one definition, in src/protocol.
import type { HostInfo } from '../src/protocol/host.js';
import type {
  DroppedCounts,
  HostCount,
  MonitorAudit,
  MonitorBlocked,
  MonitorOutputNotification,
  MonitorProcess,
  MonitorSession,
  MonitorSnapshot,
} from '../src/protocol/monitor.js';

export type { HostInfo };

export type Change =
  | 'processes'
  | 'sessions'
  | 'network'
  | 'dropped'
  | 'info'
  | 'connection'
  | 'output-bytes'
  | 'snapshot';

export const procKey = (p: { sessionId: string; processId: string }) => `${p.sessionId}/${p.processId}`;

const MAX_BLOCKED = 500;
const MAX_AUDIT = 1000;

export class Store {
  readonly processes = new Map<string, MonitorProcess>();
  readonly sessions = new Map<string, MonitorSession>();
  blocked: MonitorBlocked[] = [];
  audit: MonitorAudit[] = [];
  readonly hosts = new Map<string, HostCount>();
  dropped: DroppedCounts = { output: 0, network: 0, evicted: 0, forgottenProcesses: 0 };
  networkWired = false;
  previewWired = false;
  info: HostInfo | null = null;
  selfSession: string | null = null;
  /** Clock offset: server time − local time at snapshot. */
  skew = 0;
  private readonly listeners = new Set<(c: Change) => void>();
  private readonly outputListeners = new Set<(n: MonitorOutputNotification) => void>();

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

  loadSnapshot(s: MonitorSnapshot): void {
    this.processes.clear();
    for (const p of s.processes) this.processes.set(procKey(p), p);
    this.sessions.clear();
    for (const x of s.sessions) {
      this.sessions.set(x.sessionId, x);
      if (x.self) this.selfSession = x.sessionId;
    }
    this.blocked = s.blocked.slice(-MAX_BLOCKED);
    this.audit = s.audit.slice(-MAX_AUDIT);
    this.hosts.clear();
    for (const c of s.hosts) this.hosts.set(c.host, { ...c });
    this.dropped = s.dropped;
    this.networkWired = s.networkWired;
    this.previewWired = s.previewWired;
    this.skew = s.serverTime - Date.now();
    this.emit('snapshot');
    this.emit('processes');
    this.emit('sessions');
    this.emit('network');
    this.emit('dropped');
  }

  notification(method: string, params: unknown): void {
    const p = params as Record<string, unknown>;
    switch (method) {
      case 'monitor/process': {
        const proc = p.process as MonitorProcess;
        this.processes.set(procKey(proc), proc);
        this.emit('processes');
        break;
      }
      case 'monitor/output': {
        const n = p as unknown as MonitorOutputNotification;
        const proc = this.processes.get(procKey(n));
        if (proc && n.seq > proc.lastSeq) {
          const pad = n.chunk.endsWith('==') ? 2 : n.chunk.endsWith('=') ? 1 : 0;
          proc.bytesOut += (n.chunk.length / 4) * 3 - pad;
          proc.lastSeq = n.seq;
          this.emit('output-bytes');
        }
        for (const f of [...this.outputListeners]) f(n);
        break;
      }
      case 'monitor/session': {
        const s = p.session as MonitorSession;
        if (p.kind === 'expired') {
          this.sessions.delete(s.sessionId);
          for (const [k, proc] of this.processes) {
            if (proc.sessionId === s.sessionId && proc.retained)
              this.processes.set(k, { ...proc, retained: false });
          }
          this.emit('processes');
        } else this.sessions.set(s.sessionId, s);
        this.emit('sessions');
        break;
      }
      case 'monitor/blocked': {
        const e = p.event as MonitorBlocked;
        this.blocked.push(e);
        if (this.blocked.length > MAX_BLOCKED) this.blocked.shift();
        this.count(e.host, 'blocked');
        this.emit('network');
        break;
      }
      case 'monitor/audit': {
        const e = p.event as MonitorAudit;
        this.audit.push(e);
        if (this.audit.length > MAX_AUDIT) this.audit.shift();
        if (e.decision === 'allow') this.count(e.host, 'allowed');
        this.emit('network');
        break;
      }
      case 'monitor/dropped':
        this.dropped = p.dropped as DroppedCounts;
        this.emit('dropped');
        break;
    }
  }

  private count(host: string, what: 'allowed' | 'blocked'): void {
    let c = this.hosts.get(host);
    if (!c) {
      c = { host, allowed: 0, blocked: 0 };
      this.hosts.set(host, c);
    }
    c[what]++;
  }

  /** The process a network event belongs to (sessionId may be unknown). */
  processFor(processId: string, sessionId: string | null): MonitorProcess | undefined {
    if (sessionId) return this.processes.get(`${sessionId}/${processId}`);
    let found: MonitorProcess | undefined;
    for (const p of this.processes.values()) if (p.processId === processId) found = p;
    return found;
  }
}
