/**
 * Interactive network approvals (GitHub issue 7): the way Little Snitch or OpenSnitch let a person decide on a
 * connection as it happens. A managed proxy whose config asks for approvals (`hard_deny_allowlist_misses: false`,
 * src/network/config.ts `parseApprovalSettings`) gets this broker's decider, which the policy consults only for
 * `not_allowed` (network-proxy.md §3.3, §3.6): denied hosts and local/private blocks never reach it.
 *
 * - A held request waits while a prompt goes to every subscribed privileged client; concurrent requests of one
 *   (session, process, protocol, host, port) share one prompt.
 * - `allowOnce` releases the requests held on the prompt, and the next request prompts again; `allowProcess` and
 *   `allowSession` are remembered for the process or for every process of the session; `deny` is remembered for the
 *   session. Remembered denies always win over remembered allows. All of them are revocable.
 * - No answer within the timeout (config `approval_timeout_ms`, else the server's, else 30 s), or no subscriber at
 *   all, fails closed with the normal blocked response (`not_allowed`, decision `ask`, source `decider`); a user's
 *   deny gives `not_allowed` with decision `deny`. Never an implicit allow.
 * - The process exiting cancels its prompts (fail closed); its remembered decisions go when it closes, the
 *   session's when the session expires.
 * - Every request, decision, timeout, cancellation and revocation is an audit event (a bounded ring, the
 *   `approvals/audit` notification, and a `CORRAL_NETWORK_APPROVAL {…}` log line).
 */
import { randomUUID } from 'node:crypto';
import type { Decider, DeciderRequest, DeciderResult } from '../network/policy.js';
import type { ManagedProxy } from '../network/proxy.js';
import type { ManagedProcess } from '../process/managedProcess.js';
import {
  type ApprovalAuditEvent,
  type ApprovalDecision,
  type ApprovalOutcome,
  type ApprovalPrompt,
  type ApprovalProtocol,
  type ApprovalsState,
  type ApprovalsSubscribeResult,
  DecideParams,
  type DecideResult,
  EmptyParams,
  ExportParams,
  type ExportResult,
  exportDomains,
  type RememberedDecision,
  RevokeParams,
  type RevokeResult,
} from '../protocol/approvals.js';
import { invalidRequest } from '../protocol/errors.js';
import type { RpcConnection } from '../rpc/connection.js';
import type { ExecServer } from './execServer.js';
import { parseParams } from './params.js';
import type { Session } from './session.js';

export const DEFAULT_APPROVAL_TIMEOUT_MS = 30_000;
/** Prompts pending at once, server-wide; past it a new miss fails closed at once. */
export const MAX_PENDING_PROMPTS = 256;
/** Requests held on one prompt; past it a further request fails closed at once. */
export const MAX_WAITERS_PER_PROMPT = 1024;
/** Remembered decisions kept, server-wide (the oldest allow goes first). */
export const MAX_REMEMBERED = 4096;
export const APPROVAL_AUDIT_RING = 500;

export const APPROVALS_NOT_PRIVILEGED =
  'approval methods need a privileged connection: the desktop app itself, or a WebSocket client that presented ' +
  'the server token';

/** The reason in the blocked response when a prompt is denied, times out or is cancelled (§4.7 `not_allowed`). */
export const APPROVAL_BLOCK_REASON = 'not_allowed';

export interface ApprovalOptions {
  /** Default prompt timeout (ms) when the config sets none. */
  timeoutMs?: number;
}

interface Waiter {
  resolve: (r: DeciderResult) => void;
}

interface Pending {
  prompt: ApprovalPrompt;
  key: string;
  waiters: Waiter[];
  timer: NodeJS.Timeout;
}

const ALLOW: DeciderResult = { type: 'allow' };
const DENIED: DeciderResult = { type: 'deny', reason: APPROVAL_BLOCK_REASON };
const UNANSWERED: DeciderResult = { type: 'ask', reason: APPROVAL_BLOCK_REASON };

const target = (protocol: string, host: string, port: number) => `${protocol} ${host} ${port}`;
const procKey = (sessionId: string, processId: string) => `${sessionId}/${processId}`;

export class ApprovalBroker {
  readonly timeoutMs: number;
  private readonly pending = new Map<string, Pending>();
  private readonly pendingById = new Map<string, Pending>();
  private readonly decisions = new Map<string, RememberedDecision>();
  private readonly audit: ApprovalAuditEvent[] = [];
  private auditSeq = 1;
  private readonly subscribers = new Set<RpcConnection>();
  /** Processes whose proxy asks for approvals (by `session/process`), with their proxy's timeout. */
  private readonly asking = new Map<string, number>();

  constructor(
    private readonly server: ExecServer,
    opts: ApprovalOptions = {},
  ) {
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_APPROVAL_TIMEOUT_MS;
    server.events.on('process', (kind, proc) => this.onProcess(kind, proc));
    server.events.on('session', (kind, session) => {
      if (kind === 'expired') this.forgetSession(session);
    });
    this.register();
  }

  // ---- the proxy side ------------------------------------------------------------------------------------------

  /** The live proxy of a process, whichever launcher started it (the server's own or the host's preparer). */
  private proxyOf(sessionId: string, processId: string): ManagedProxy | undefined {
    const k = procKey(sessionId, processId);
    const prep = this.server.preparer as { proxies?: unknown };
    const fromPreparer =
      prep.proxies instanceof Map ? (prep.proxies.get(k) as ManagedProxy | undefined) : undefined;
    return fromPreparer ?? this.server.launcher.proxies.get(k);
  }

  /**
   * Installs the decider on a process's proxy when its config asks for approvals. Runs on the synchronous
   * `started` event, before the event loop can deliver any of the child's connections to the proxy.
   */
  private onProcess(kind: 'started' | 'exited' | 'closed', proc: ManagedProcess): void {
    const { sessionId, processId } = proc.info;
    const k = procKey(sessionId, processId);
    if (kind === 'started') {
      const proxy = this.proxyOf(sessionId, processId);
      const approvals = proxy?.spec.approvals;
      if (!proxy || !approvals) return;
      this.asking.set(k, approvals.timeoutMs ?? this.timeoutMs);
      proxy.setDecider(this.deciderFor(sessionId, processId));
      return;
    }
    if (kind === 'exited') {
      for (const p of [...this.pending.values()]) {
        if (p.prompt.sessionId === sessionId && p.prompt.processId === processId) this.finish(p, 'cancelled');
      }
      return;
    }
    // closed: the process's remembered decisions go with it.
    this.asking.delete(k);
    let changed = false;
    for (const [id, d] of this.decisions) {
      if (d.scope === 'process' && d.sessionId === sessionId && d.processId === processId) {
        this.decisions.delete(id);
        changed = true;
      }
    }
    if (changed) this.broadcastDecisions();
  }

  private forgetSession(session: Session): void {
    let changed = false;
    for (const [id, d] of this.decisions) {
      if (d.sessionId === session.id) {
        this.decisions.delete(id);
        changed = true;
      }
    }
    for (const p of [...this.pending.values()])
      if (p.prompt.sessionId === session.id) this.finish(p, 'cancelled');
    if (changed) this.broadcastDecisions();
  }

  /** The decider of one process (also usable as the Launcher's `decider` option). */
  deciderFor(sessionId: string, processId: string): Decider {
    return (req) => this.decide(sessionId, processId, req);
  }

  /** The remembered decision that applies, deny first. */
  private remembered(
    sessionId: string,
    processId: string,
    protocol: string,
    host: string,
    port: number,
  ): RememberedDecision | undefined {
    let allow: RememberedDecision | undefined;
    for (const d of this.decisions.values()) {
      if (d.sessionId !== sessionId || d.protocol !== protocol || d.host !== host || d.port !== port)
        continue;
      if (d.scope === 'process' && d.processId !== processId) continue;
      if (d.decision === 'deny') return d;
      allow ??= d;
    }
    return allow;
  }

  private decide(sessionId: string, processId: string, req: DeciderRequest): Promise<DeciderResult> {
    const protocol = req.protocol as ApprovalProtocol;
    const known = this.remembered(sessionId, processId, protocol, req.host, req.port);
    if (known) return Promise.resolve(known.decision === 'allow' ? ALLOW : DENIED);
    const k = procKey(sessionId, processId);
    const proc = this.server.sessions.get(sessionId)?.get(processId);
    // Not (or no longer) a live asking process: fail closed.
    if (!this.asking.has(k) || !proc || proc.exitCode !== null) return Promise.resolve(UNANSWERED);
    const key = `${k}\u0000${target(protocol, req.host, req.port)}`;
    let p = this.pending.get(key);
    if (p && p.waiters.length >= MAX_WAITERS_PER_PROMPT) return Promise.resolve(UNANSWERED);
    if (!p) {
      if (this.pending.size >= MAX_PENDING_PROMPTS) return Promise.resolve(UNANSWERED);
      const timeoutMs = this.asking.get(k) ?? this.timeoutMs;
      const now = Date.now();
      const prompt: ApprovalPrompt = {
        id: randomUUID(),
        sessionId,
        processId,
        clientName: proc.info.clientName,
        command: [...proc.info.argv],
        cwd: proc.info.cwd ?? null,
        host: req.host,
        port: req.port,
        protocol,
        method: req.method,
        waiting: 0,
        requestedAt: now,
        expiresAt: now + timeoutMs,
      };
      const created: Pending = {
        prompt,
        key,
        waiters: [],
        timer: setTimeout(() => this.finish(created, 'timeout'), timeoutMs),
      };
      created.timer.unref?.();
      p = created;
      this.pending.set(key, p);
      this.pendingById.set(prompt.id, p);
    }
    const pending = p;
    return new Promise<DeciderResult>((resolve) => {
      pending.waiters.push({ resolve });
      pending.prompt.waiting = pending.waiters.length;
      if (pending.waiters.length === 1) {
        this.record('requested', pending.prompt, { released: 0 });
        this.broadcast('approvals/requested', { prompt: pending.prompt });
      }
    });
  }

  /** Ends a prompt: releases its held requests with the outcome's answer and tells the subscribers. */
  private finish(p: Pending, outcome: ApprovalOutcome, decisionId: string | null = null): number {
    if (this.pendingById.get(p.prompt.id) !== p) return 0;
    clearTimeout(p.timer);
    this.pending.delete(p.key);
    this.pendingById.delete(p.prompt.id);
    const answer =
      outcome === 'deny' ? DENIED : outcome === 'timeout' || outcome === 'cancelled' ? UNANSWERED : ALLOW;
    const released = p.waiters.length;
    for (const w of p.waiters) w.resolve(answer);
    p.waiters.length = 0;
    p.prompt.waiting = 0;
    if (outcome === 'timeout' || outcome === 'cancelled') this.record(outcome, p.prompt, { released });
    else this.record('decided', p.prompt, { released, decision: outcome, decisionId });
    this.broadcast('approvals/resolved', { id: p.prompt.id, outcome, released, resolvedAt: Date.now() });
    return released;
  }

  // ---- the panel side ------------------------------------------------------------------------------------------

  /** Applies a decision to a pending prompt (and, when remembered, to every other prompt it covers). */
  applyDecision(id: string, decision: ApprovalDecision): DecideResult {
    const p = this.pendingById.get(id);
    if (!p) throw invalidRequest(`unknown or already resolved approval id ${id}`);
    const { sessionId, processId, protocol, host, port } = p.prompt;
    if (decision === 'allowOnce') return { released: this.finish(p, 'allowOnce') };
    const scope = decision === 'allowProcess' ? 'process' : 'session';
    const remembered: RememberedDecision = {
      id: randomUUID(),
      decision: decision === 'deny' ? 'deny' : 'allow',
      scope,
      sessionId,
      processId: scope === 'process' ? processId : null,
      host,
      port,
      protocol,
      decidedAt: Date.now(),
      promptId: id,
    };
    this.remember(remembered);
    let released = this.finish(p, decision, remembered.id);
    // Other prompts the remembered decision now covers follow it at once (a deny also wins over their allows).
    for (const other of [...this.pending.values()]) {
      const o = other.prompt;
      if (o.sessionId !== sessionId || o.protocol !== protocol || o.host !== host || o.port !== port)
        continue;
      if (scope === 'process' && o.processId !== processId) continue;
      released += this.finish(other, decision, remembered.id);
    }
    this.broadcastDecisions();
    return { released };
  }

  private remember(d: RememberedDecision): void {
    // One entry per (scope, session, process, target, decision): a repeat replaces the older one.
    for (const [id, x] of this.decisions) {
      if (
        x.scope === d.scope &&
        x.sessionId === d.sessionId &&
        x.processId === d.processId &&
        x.protocol === d.protocol &&
        x.host === d.host &&
        x.port === d.port &&
        x.decision === d.decision
      )
        this.decisions.delete(id);
    }
    this.decisions.set(d.id, d);
    while (this.decisions.size > MAX_REMEMBERED) {
      const oldestAllow = [...this.decisions.values()].find((x) => x.decision === 'allow');
      const victim = oldestAllow ?? this.decisions.values().next().value!;
      this.decisions.delete(victim.id);
    }
  }

  revoke(id: string): RevokeResult {
    const d = this.decisions.get(id);
    if (!d) return { revoked: false };
    this.decisions.delete(id);
    this.record(
      'revoked',
      {
        sessionId: d.sessionId,
        processId: d.processId,
        command: null,
        host: d.host,
        port: d.port,
        protocol: d.protocol,
        method: null,
        id: d.promptId,
      },
      { released: 0, decisionId: d.id },
    );
    this.broadcastDecisions();
    return { revoked: true };
  }

  exportSnippet(sessionId?: string | null): ExportResult {
    const list = [...this.decisions.values()].filter((d) => !sessionId || d.sessionId === sessionId);
    return exportDomains(list);
  }

  state(): ApprovalsState {
    return {
      pending: [...this.pendingById.values()].map((p) => ({ ...p.prompt })),
      decisions: [...this.decisions.values()],
      audit: [...this.audit],
    };
  }

  get pendingCount(): number {
    return this.pendingById.size;
  }

  get subscriberCount(): number {
    return this.subscribers.size;
  }

  private record(
    kind: ApprovalAuditEvent['kind'],
    prompt: Pick<ApprovalPrompt, 'id' | 'sessionId' | 'host' | 'port' | 'protocol' | 'method'> & {
      processId: string | null;
      command: string[] | null;
    },
    extra: { released: number; decision?: ApprovalDecision; decisionId?: string | null },
  ): void {
    const event: ApprovalAuditEvent = {
      seq: this.auditSeq++,
      timestamp: Date.now(),
      kind,
      promptId: prompt.id,
      decisionId: extra.decisionId ?? null,
      decision: extra.decision ?? null,
      sessionId: prompt.sessionId,
      processId: prompt.processId,
      command: prompt.command,
      host: prompt.host,
      port: prompt.port,
      protocol: prompt.protocol,
      method: prompt.method,
      released: extra.released,
    };
    this.audit.push(event);
    if (this.audit.length > APPROVAL_AUDIT_RING) this.audit.shift();
    this.server.log.info(`CORRAL_NETWORK_APPROVAL ${JSON.stringify(event)}`);
    this.broadcast('approvals/audit', { event });
  }

  private broadcastDecisions(): void {
    this.broadcast('approvals/decisions', { decisions: [...this.decisions.values()] });
  }

  private broadcast(method: string, params: unknown): void {
    for (const conn of this.subscribers) {
      if (conn.closed) {
        this.subscribers.delete(conn);
        continue;
      }
      conn.notify(method, params);
    }
  }

  private register(): void {
    const priv =
      <T>(f: (p: unknown, conn: RpcConnection) => T) =>
      (p: unknown, conn: RpcConnection) => {
        if (!conn.privileged) throw invalidRequest(APPROVALS_NOT_PRIVILEGED);
        return f(p, conn);
      };
    const s = this.server;
    s.registerMethod(
      'approvals/subscribe',
      'exec',
      priv((p, conn): ApprovalsSubscribeResult => {
        parseParams(EmptyParams, p, 'ApprovalsSubscribeParams');
        this.subscribers.add(conn);
        return { ...this.state(), timeoutMs: this.timeoutMs };
      }),
    );
    s.registerMethod(
      'approvals/unsubscribe',
      'exec',
      priv((_p, conn) => {
        this.subscribers.delete(conn);
        return {};
      }),
    );
    s.registerMethod(
      'approvals/list',
      'exec',
      priv((p) => {
        parseParams(EmptyParams, p, 'ApprovalsListParams');
        return this.state();
      }),
    );
    s.registerMethod(
      'approvals/decide',
      'exec',
      priv((p) => {
        const d = parseParams(DecideParams, p, 'ApprovalDecideParams');
        return this.applyDecision(d.id, d.decision);
      }),
    );
    s.registerMethod(
      'approvals/revoke',
      'exec',
      priv((p) => this.revoke(parseParams(RevokeParams, p, 'ApprovalRevokeParams').id)),
    );
    s.registerMethod(
      'approvals/export',
      'exec',
      priv((p) => this.exportSnippet(parseParams(ExportParams, p, 'ApprovalExportParams')?.sessionId)),
    );
  }
}
