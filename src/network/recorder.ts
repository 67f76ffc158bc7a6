/** Per-proxy bookkeeping of decisions: the blocked ring, the audit events, the event bus and the violation log. */
import type { AuditMetadata, BlockedRequest, NetworkAuditEvent } from '../protocol/network.js';
import type { Admission, AdmissionRequest, RequestProtocol } from './admission.js';
import { BlockedRing, blockedRecord, type NetworkEvents, violationLine } from './events.js';
import type { DecisionReceipt, PolicySource } from './policy.js';

const RECORD_PROTOCOL: Record<RequestProtocol, BlockedRequest['protocol']> = {
  http: 'http',
  https: 'https',
  https_connect: 'http-connect',
  socks5_tcp: 'socks5',
  socks5_udp: 'socks5-udp',
};

export interface DecisionInfo {
  scope: 'domain' | 'non_domain';
  protocol: RequestProtocol;
  host: string;
  port: number;
  method: string | null;
  client: string | null;
  decision: 'allow' | 'deny' | 'ask';
  source: PolicySource;
  reason: string;
  override?: boolean;
  /** What decided it (the rule's id and origin) and the prompt it is tied to (issue 37, item 2). */
  receipt?: DecisionReceipt | undefined;
  /** Inside an intercepted tunnel: the request's path (no query), and the credential injected into it, by name. */
  intercepted?: { path: string; credential?: string | undefined };
  /** The command's plain TCP connect, asked for by the connect supervisor (transparent TCP). */
  transparent?: true;
}

export class Recorder {
  readonly ring = new BlockedRing();

  constructor(
    private readonly opts: {
      processId: string;
      sessionId?: string | undefined;
      auditMetadata: AuditMetadata;
      events?: NetworkEvents | undefined;
      log: (line: string) => void;
      mode: 'full' | 'limited';
    },
  ) {}

  /**
   * Records one admission: an allowed request's audit event; a block in the ring with its audit event, preceded by
   * the host policy's allow when it was the mode guard that refused.
   */
  record(r: AdmissionRequest, a: Admission, intercepted?: DecisionInfo['intercepted']): void {
    const base = {
      protocol: r.protocol,
      host: a.host,
      port: r.port,
      method: r.method,
      client: r.client,
      ...(intercepted ? { intercepted } : {}),
      ...(r.transparent ? { transparent: true as const } : {}),
    };
    if (a.allowed) {
      this.allowed(base, a);
      return;
    }
    if (a.hostAllowed) this.allowed(base, a.hostAllowed);
    this.blocked({
      ...base,
      scope: a.scope,
      reason: a.reason,
      source: a.source,
      decision: a.decision,
      receipt: a.receipt,
    });
  }

  /** The audit event of a request the host policy allowed (reason `allow`). */
  allowed(
    base: Pick<
      DecisionInfo,
      'protocol' | 'host' | 'port' | 'method' | 'client' | 'intercepted' | 'transparent'
    >,
    d: { source: PolicySource; override?: boolean | undefined; receipt?: DecisionReceipt | undefined },
  ): void {
    const events = this.opts.events;
    if (!events || events.listenerCount('audit') === 0) return;
    this.audit({
      ...base,
      scope: 'domain',
      decision: 'allow',
      source: d.source,
      reason: 'allow',
      override: d.override,
      receipt: d.receipt,
    });
  }

  /** §4.9: one audit event for every decision, allowed ones included. */
  audit(d: DecisionInfo): void {
    const events = this.opts.events;
    if (!events || events.listenerCount('audit') === 0) return;
    const m = this.opts.auditMetadata;
    const e: NetworkAuditEvent = {
      processId: this.opts.processId,
      ...(this.opts.sessionId !== undefined ? { sessionId: this.opts.sessionId } : {}),
      'event.name': 'codex.network_proxy.policy_decision',
      'event.timestamp': new Date().toISOString(),
      ...(m.conversation_id != null ? { 'conversation.id': m.conversation_id } : {}),
      ...(m.app_version != null ? { 'app.version': m.app_version } : {}),
      ...(m.user_account_id != null ? { 'user.account_id': m.user_account_id } : {}),
      ...(m.user_email != null ? { 'user.email': m.user_email } : {}),
      ...(m.auth_mode != null ? { auth_mode: m.auth_mode } : {}),
      ...(m.originator != null ? { originator: m.originator } : {}),
      ...(m.terminal_type != null ? { 'terminal.type': m.terminal_type } : {}),
      ...(m.model != null ? { model: m.model } : {}),
      ...(m.slug != null ? { slug: m.slug } : {}),
      'network.policy.scope': d.scope,
      'network.policy.decision': d.decision,
      'network.policy.source': d.source,
      'network.policy.reason': d.reason,
      'network.transport.protocol': d.protocol,
      'server.address': d.host,
      'server.port': d.port,
      'http.request.method': d.method ?? 'none',
      'client.address': d.client ?? 'unknown',
      'network.policy.override': d.override ?? false,
      ...(d.receipt
        ? {
            'network.policy.rule_id': d.receipt.ruleId,
            'network.policy.rule_origin': d.receipt.origin,
            ...(d.receipt.correlationId !== undefined ? { 'correlation.id': d.receipt.correlationId } : {}),
          }
        : {}),
      ...(d.intercepted
        ? {
            'url.path': d.intercepted.path,
            'network.intercepted': true,
            ...(d.intercepted.credential !== undefined
              ? { 'network.credential.injected': d.intercepted.credential }
              : {}),
          }
        : {}),
      ...(d.transparent ? { 'network.transport.transparent': true as const } : {}),
    };
    events.emit('audit', e);
  }

  /** Records a block in the ring, publishes it, logs the violation line, and emits its audit event. */
  blocked(d: Omit<DecisionInfo, 'decision'> & { decision: 'deny' | 'ask' }): BlockedRequest {
    const withMode = d.reason === 'method_not_allowed' || d.reason === 'mitm_required';
    const record = blockedRecord({
      host: d.host,
      reason: d.reason,
      client: d.client,
      method: d.method,
      mode: withMode ? this.opts.mode : null,
      protocol: RECORD_PROTOCOL[d.protocol],
      decision: d.decision,
      source: d.source,
      port: d.port,
    });
    const total = this.ring.push(record);
    this.opts.log(violationLine(record));
    this.opts.events?.emit('blocked', {
      processId: this.opts.processId,
      ...(this.opts.sessionId !== undefined ? { sessionId: this.opts.sessionId } : {}),
      record,
      blocked_total: total,
    });
    this.audit(d);
    return record;
  }
}
