/**
 * What the monitor keeps of the managed proxies' events: the blocked requests and the audit decisions in fixed rings
 * (the oldest evicted, and counted), and allowed/blocked counts per host (at most MAX_HOSTS hosts).
 */
import type { HostCount, MonitorAudit, MonitorBlocked } from '../../protocol/monitor.js';
import { redact } from '../../protocol/monitor.js';
import { auditMetadataOf, type BlockedEvent, type NetworkAuditEvent } from '../../protocol/network.js';

export const BLOCKED_RING = 500;
export const AUDIT_RING = 1000;
const MAX_HOSTS = 2000;

export class NetworkLog {
  readonly blocked: MonitorBlocked[] = [];
  readonly audit: MonitorAudit[] = [];
  private readonly hosts = new Map<string, HostCount>();
  /** Events pushed out of a ring. */
  evicted = 0;
  private nextEventId = 1;

  hostCounts(): HostCount[] {
    return [...this.hosts.values()];
  }

  /** Records a blocked request; returns it as the panel sees it. */
  addBlocked(e: BlockedEvent): MonitorBlocked {
    const r = e.record;
    const rec: MonitorBlocked = {
      id: this.nextEventId++,
      processId: e.processId,
      sessionId: e.sessionId ?? null,
      host: r.host,
      port: r.port ?? null,
      reason: r.reason,
      method: r.method,
      protocol: r.protocol,
      mode: r.mode,
      decision: r.decision ?? null,
      source: r.source ?? null,
      client: r.client,
      timestamp: r.timestamp,
      blockedTotal: e.blocked_total,
    };
    this.push(this.blocked, rec, BLOCKED_RING);
    this.countHost(rec.host, 'blocked');
    return rec;
  }

  /** Records a policy decision; returns it as the panel sees it (metadata redacted). */
  addAudit(e: NetworkAuditEvent): MonitorAudit {
    const rec: MonitorAudit = {
      id: this.nextEventId++,
      processId: e.processId,
      sessionId: e.sessionId ?? null,
      host: e['server.address'],
      port: e['server.port'],
      decision: e['network.policy.decision'],
      reason: e['network.policy.reason'],
      source: e['network.policy.source'],
      protocol: e['network.transport.protocol'],
      method: e['http.request.method'],
      scope: e['network.policy.scope'],
      override: e['network.policy.override'],
      timestamp: e['event.timestamp'],
      metadata: redact(auditMetadataOf(e)) as Record<string, unknown>,
      ...(e['url.path'] !== undefined ? { path: e['url.path'] } : {}),
      ...(e['network.intercepted'] ? { intercepted: true as const } : {}),
      ...(e['network.credential.injected'] !== undefined
        ? { credential: e['network.credential.injected'] }
        : {}),
      ...(e['network.transport.transparent'] ? { transport: 'transparent' as const } : {}),
    };
    this.push(this.audit, rec, AUDIT_RING);
    if (rec.decision === 'allow') this.countHost(rec.host, 'allowed');
    return rec;
  }

  private push<T>(ring: T[], rec: T, max: number): void {
    ring.push(rec);
    if (ring.length > max) {
      ring.shift();
      this.evicted++;
    }
  }

  private countHost(host: string, what: 'allowed' | 'blocked'): void {
    let c = this.hosts.get(host);
    if (!c) {
      c = { host, allowed: 0, blocked: 0 };
      this.hosts.set(host, c);
      if (this.hosts.size > MAX_HOSTS) this.hosts.delete(this.hosts.keys().next().value as string);
    }
    c[what]++;
  }
}
