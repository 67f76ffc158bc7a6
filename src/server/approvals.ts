/**
 * Interactive network approvals (GitHub issue 7): the way Little Snitch or OpenSnitch let a person decide on a
 * connection as it happens. A managed proxy whose config asks for approvals (`hard_deny_allowlist_misses: false`,
 * src/network/config.ts `parseApprovalSettings`) gets this broker's decider, which the policy consults only for
 * `not_allowed` (network-proxy.md §3.3, §3.6): denied hosts and local/private blocks never reach it.
 *
 * - A held request waits while a prompt goes to every subscribed privileged client; concurrent requests of one
 *   (session, process, protocol, host, port) share one prompt.
 * - Pending prompts are capped per process, per session and server-wide, so one process cannot crowd out another
 *   session's prompt: past its own caps a miss fails closed at once (audited as `refused`), and when the server-wide
 *   cap is reached a session holding fewer prompts than the largest holder takes the oldest prompt of that holder.
 *   A config's `approval_timeout_ms` is clamped to the server's maximum (said in the prompt and its audit event).
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
import type { Clock, Timer } from '../clock.js';
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
  type DecideResult,
  type ExportResult,
  exportDomains,
  type RememberedDecision,
  type RevokeResult,
} from '../protocol/approvals.js';
import { invalidRequest } from '../protocol/errors.js';
import type { RpcConnection } from '../rpc/connection.js';
import type { MethodRegistry } from './dispatch.js';
import type { ServerEvents } from './events.js';
import type { Logger } from './log.js';
import type { Session } from './session.js';
import type { SessionTable } from './sessions.js';

export const DEFAULT_APPROVAL_TIMEOUT_MS = 30_000;
/** The longest a prompt may wait, whatever its config asks (`--max-approval-timeout-ms`). */
export const DEFAULT_MAX_APPROVAL_TIMEOUT_MS = 120_000;
/** Prompts pending at once, server-wide. */
export const MAX_PENDING_PROMPTS = 1024;
/** Prompts pending at once for one process; past it a new miss of that process fails closed at once. */
export const MAX_PENDING_PER_PROCESS = 16;
/** Prompts pending at once for one session. */
export const MAX_PENDING_PER_SESSION = 64;
/** Requests held on one prompt; past it a further request fails closed at once. */
export const MAX_WAITERS_PER_PROMPT = 1024;
/** Remembered decisions kept, server-wide (the oldest allow goes first). */
export const MAX_REMEMBERED = 4096;
export const APPROVAL_AUDIT_RING = 500;

/** The reason in the blocked response when a prompt is denied, times out or is cancelled (§4.7 `not_allowed`). */
export const APPROVAL_BLOCK_REASON = 'not_allowed';

export interface ApprovalOptions {
  /** Default prompt timeout (ms) when the config sets none. */
  timeoutMs?: number;
  /** Longest prompt timeout (ms): a config asking for more is clamped to it. */
  maxTimeoutMs?: number;
  maxPending?: number;
  maxPendingPerProcess?: number;
  maxPendingPerSession?: number;
}

interface Waiter {
  resolve: (r: DeciderResult) => void;
}

interface Pending {
  prompt: ApprovalPrompt;
  key: string;
  waiters: Waiter[];
  timer: Timer;
}

/** What the broker needs of the server: its events, its sessions, the proxies of its processes, a log, the time. */
export interface ApprovalHost {
  readonly events: ServerEvents;
  readonly sessions: Pick<SessionTable, 'get'>;
  /** The live managed proxy of a process, if it has one. */
  proxyOf(sessionId: string, processId: string): ManagedProxy | undefined;
  readonly log: Logger;
  readonly clock: Clock;
}

const ALLOW: DeciderResult = { type: 'allow' };
const DENIED: DeciderResult = { type: 'deny', reason: APPROVAL_BLOCK_REASON };
const UNANSWERED: DeciderResult = { type: 'ask', reason: APPROVAL_BLOCK_REASON };

const target = (protocol: string, host: string, port: number) => `${protocol} ${host} ${port}`;
const procKey = (sessionId: string, processId: string) => `${sessionId}/${processId}`;

export class ApprovalBroker {
  readonly timeoutMs: number;
  readonly maxTimeoutMs: number;
  private readonly maxPending: number;
  private readonly maxPerProcess: number;
  private readonly maxPerSession: number;
  private readonly pending = new Map<string, Pending>();
  /** Pending prompts per `session/process` and per session. */
  private readonly perProcess = new Map<string, number>();
  private readonly perSession = new Map<string, number>();
  /** Processes whose refusals have been audited since they last had room (one `refused` event per episode). */
  private readonly refusedNoted = new Set<string>();
  private readonly pendingById = new Map<string, Pending>();
  private readonly decisions = new Map<string, RememberedDecision>();
  private readonly audit: ApprovalAuditEvent[] = [];
  private auditSeq = 1;
  private readonly subscribers = new Set<RpcConnection>();
  /** Processes whose proxy asks for approvals (by `session/process`), with their proxy's timeout. */
  private readonly asking = new Map<string, number>();

  private readonly clock: Clock;

  constructor(
    private readonly server: ApprovalHost,
    opts: ApprovalOptions = {},
  ) {
    this.clock = server.clock;
    this.maxTimeoutMs = opts.maxTimeoutMs ?? DEFAULT_MAX_APPROVAL_TIMEOUT_MS;
    this.timeoutMs = Math.min(opts.timeoutMs ?? DEFAULT_APPROVAL_TIMEOUT_MS, this.maxTimeoutMs);
    this.maxPending = opts.maxPending ?? MAX_PENDING_PROMPTS;
    this.maxPerProcess = opts.maxPendingPerProcess ?? MAX_PENDING_PER_PROCESS;
    this.maxPerSession = opts.maxPendingPerSession ?? MAX_PENDING_PER_SESSION;
    server.events.on('process', (kind, proc) => this.onProcess(kind, proc));
    server.events.on('session', (kind, session) => {
      if (kind === 'expired') this.forgetSession(session);
    });
  }

  // ---- the proxy side ------------------------------------------------------------------------------------------

  /**
   * Installs the decider on a process's proxy when its config asks for approvals. Runs on the synchronous
   * `started` event, before the event loop can deliver any of the child's connections to the proxy.
   */
  private onProcess(kind: 'started' | 'exited' | 'closed', proc: ManagedProcess): void {
    const { sessionId, processId } = proc.info;
    const k = procKey(sessionId, processId);
    if (kind === 'started') {
      const proxy = this.server.proxyOf(sessionId, processId);
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
      const refusal = this.makeRoom(sessionId, k);
      if (refusal) {
        this.refuse(k, refusal, { sessionId, processId, argv: proc.info.argv, protocol, req });
        return Promise.resolve(UNANSWERED);
      }
      const asked = this.asking.get(k) ?? this.timeoutMs;
      const timeoutMs = Math.min(asked, this.maxTimeoutMs);
      const now = this.clock.now();
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
        timeoutMs,
        requestedTimeoutMs: asked > timeoutMs ? asked : null,
      };
      const created: Pending = {
        prompt,
        key,
        waiters: [],
        timer: this.clock.setTimeout(() => this.finish(created, 'timeout'), timeoutMs).unref(),
      };
      p = created;
      this.pending.set(key, p);
      this.pendingById.set(prompt.id, p);
      this.count(prompt, +1);
    }
    const pending = p;
    return new Promise<DeciderResult>((resolve) => {
      pending.waiters.push({ resolve });
      pending.prompt.waiting = pending.waiters.length;
      if (pending.waiters.length === 1) {
        const asked = pending.prompt.requestedTimeoutMs;
        this.record('requested', pending.prompt, {
          released: 0,
          note:
            asked === null
              ? null
              : `approval_timeout_ms ${asked} clamped to the server's maximum ${this.maxTimeoutMs} (--max-approval-timeout-ms)`,
        });
        this.broadcast('approvals/requested', { prompt: pending.prompt });
      }
    });
  }

  /**
   * Room for one more prompt of this process, or why there is none. When the server-wide cap is reached, the oldest
   * prompt of the session holding the most is cancelled if that session holds more than this one.
   */
  private makeRoom(sessionId: string, k: string): string | null {
    if ((this.perProcess.get(k) ?? 0) >= this.maxPerProcess)
      return `this process already has ${this.maxPerProcess} approval prompts pending (the per-process cap)`;
    const mine = this.perSession.get(sessionId) ?? 0;
    if (mine >= this.maxPerSession)
      return `this session already has ${this.maxPerSession} approval prompts pending (the per-session cap)`;
    if (this.pendingById.size < this.maxPending) return null;
    let top: string | null = null;
    let most = 0;
    for (const [s, n] of this.perSession) {
      if (n > most) {
        most = n;
        top = s;
      }
    }
    if (top === null || most <= mine + 1)
      return `the server has ${this.maxPending} approval prompts pending (the server-wide cap)`;
    for (const victim of this.pendingById.values()) {
      if (victim.prompt.sessionId !== top) continue;
      this.finish(
        victim,
        'cancelled',
        null,
        'cancelled to make room for another session (the server-wide cap)',
      );
      break;
    }
    return null;
  }

  /** A miss that gets no prompt: fails closed at once; audited once per process until it has room again. */
  private refuse(
    k: string,
    note: string,
    o: {
      sessionId: string;
      processId: string;
      argv: string[];
      protocol: ApprovalProtocol;
      req: DeciderRequest;
    },
  ): void {
    if (this.refusedNoted.has(k)) return;
    this.refusedNoted.add(k);
    const { host, port, method } = o.req;
    this.record(
      'refused',
      {
        id: null,
        sessionId: o.sessionId,
        processId: o.processId,
        command: [...o.argv],
        host,
        port,
        protocol: o.protocol,
        method,
      },
      { released: 1, note },
    );
  }

  private count(prompt: ApprovalPrompt, delta: 1 | -1): void {
    const k = procKey(prompt.sessionId, prompt.processId);
    const bump = (m: Map<string, number>, key: string) => {
      const n = (m.get(key) ?? 0) + delta;
      if (n <= 0) m.delete(key);
      else m.set(key, n);
    };
    bump(this.perProcess, k);
    bump(this.perSession, prompt.sessionId);
    if (delta < 0) this.refusedNoted.delete(k);
  }

  /** Ends a prompt: releases its held requests with the outcome's answer and tells the subscribers. */
  private finish(
    p: Pending,
    outcome: ApprovalOutcome,
    decisionId: string | null = null,
    note: string | null = null,
  ): number {
    if (this.pendingById.get(p.prompt.id) !== p) return 0;
    this.clock.clearTimeout(p.timer);
    this.pending.delete(p.key);
    this.pendingById.delete(p.prompt.id);
    this.count(p.prompt, -1);
    const answer =
      outcome === 'deny' ? DENIED : outcome === 'timeout' || outcome === 'cancelled' ? UNANSWERED : ALLOW;
    const released = p.waiters.length;
    for (const w of p.waiters) w.resolve(answer);
    p.waiters.length = 0;
    p.prompt.waiting = 0;
    if (outcome === 'timeout' || outcome === 'cancelled') this.record(outcome, p.prompt, { released, note });
    else this.record('decided', p.prompt, { released, decision: outcome, decisionId });
    this.broadcast('approvals/resolved', {
      id: p.prompt.id,
      outcome,
      released,
      resolvedAt: this.clock.now(),
    });
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
      decidedAt: this.clock.now(),
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
    prompt: Pick<ApprovalPrompt, 'sessionId' | 'host' | 'port' | 'protocol' | 'method'> & {
      id: string | null;
      processId: string | null;
      command: string[] | null;
    },
    extra: {
      released: number;
      decision?: ApprovalDecision;
      decisionId?: string | null;
      note?: string | null;
    },
  ): void {
    const event: ApprovalAuditEvent = {
      seq: this.auditSeq++,
      timestamp: this.clock.now(),
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
      note: extra.note ?? null,
    };
    this.audit.push(event);
    if (this.audit.length > APPROVAL_AUDIT_RING) this.audit.shift();
    this.server.log.info(`CORRAL_NETWORK_APPROVAL ${JSON.stringify(event)}`);
    this.server.events.emit('approval', event);
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

  /** Starts sending `approvals/*` notifications to `conn`; the current state and the default timeout. */
  subscribe(conn: RpcConnection): ApprovalsSubscribeResult {
    this.subscribers.add(conn);
    return { ...this.state(), timeoutMs: this.timeoutMs };
  }

  unsubscribe(conn: RpcConnection): void {
    this.subscribers.delete(conn);
  }
}

/** The panel's `approvals/*` methods on `broker`. */
export function registerApprovalMethods(registry: MethodRegistry, broker: ApprovalBroker): void {
  registry.handle('approvals/subscribe', (_p, { conn }) => broker.subscribe(conn));
  registry.handle('approvals/unsubscribe', (_p, { conn }) => {
    broker.unsubscribe(conn);
    return {};
  });
  registry.handle('approvals/list', () => broker.state());
  registry.handle('approvals/decide', (p) => broker.applyDecision(p.id, p.decision));
  registry.handle('approvals/revoke', (p) => broker.revoke(p.id));
  registry.handle('approvals/export', (p) => broker.exportSnippet(p?.sessionId));
}
