/**
 * What the approval broker tells: the audit of the approval flow (a bounded ring, a `CORRAL_NETWORK_APPROVAL {…}`
 * log line, the server's `approval` event for the audit trail) and the live `approvals/*` notifications of the
 * subscribed panel connections.
 */
import type { Clock } from '../../clock.js';
import type {
  ApprovalAuditEvent,
  ApprovalDecidedBy,
  ApprovalDecision,
  ApprovalPrompt,
} from '../../protocol/approvals.js';
import type { NotificationName, NotificationParams } from '../../protocol/methods.js';
import type { RpcConnection } from '../../rpc/connection.js';
import type { ServerEvents } from '../core/events.js';
import type { Logger } from '../core/log.js';

export const APPROVAL_AUDIT_RING = 500;

/** What an audit record is about: a prompt, or (revoked, refused) what a prompt would have been. */
export type AuditSubject = Pick<ApprovalPrompt, 'sessionId' | 'host' | 'port' | 'protocol' | 'method'> & {
  id: string | null;
  processId: string | null;
  command: string[] | null;
};

export class ApprovalFeed {
  private readonly audit: ApprovalAuditEvent[] = [];
  private seq = 1;
  private readonly subscribers = new Set<RpcConnection>();

  constructor(
    private readonly host: { readonly events: ServerEvents; readonly log: Logger; readonly clock: Clock },
  ) {}

  get subscriberCount(): number {
    return this.subscribers.size;
  }

  /** The audit ring, oldest first. */
  events(): ApprovalAuditEvent[] {
    return [...this.audit];
  }

  subscribe(conn: RpcConnection): void {
    this.subscribers.add(conn);
  }

  unsubscribe(conn: RpcConnection): void {
    this.subscribers.delete(conn);
  }

  record(
    kind: ApprovalAuditEvent['kind'],
    subject: AuditSubject,
    extra: {
      released: number;
      decision?: ApprovalDecision;
      decisionId?: string | null;
      note?: string | null;
      decidedBy?: ApprovalDecidedBy | null;
    },
  ): void {
    const event: ApprovalAuditEvent = {
      seq: this.seq++,
      timestamp: this.host.clock.now(),
      kind,
      promptId: subject.id,
      decisionId: extra.decisionId ?? null,
      decision: extra.decision ?? null,
      sessionId: subject.sessionId,
      processId: subject.processId,
      command: subject.command,
      host: subject.host,
      port: subject.port,
      protocol: subject.protocol,
      method: subject.method,
      released: extra.released,
      note: extra.note ?? null,
      decidedBy: extra.decidedBy ?? null,
    };
    this.audit.push(event);
    if (this.audit.length > APPROVAL_AUDIT_RING) this.audit.shift();
    this.host.log.info(`CORRAL_NETWORK_APPROVAL ${JSON.stringify(event)}`);
    this.host.events.emit('approval', event);
    this.broadcast('approvals/audit', { event });
  }

  broadcast<N extends NotificationName>(method: N, params: NotificationParams<N>): void {
    for (const conn of this.subscribers) {
      if (conn.closed) {
        this.subscribers.delete(conn);
        continue;
      }
      conn.notify(method, params);
    }
  }
}
