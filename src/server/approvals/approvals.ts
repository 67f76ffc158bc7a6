/**
 * Interactive network approvals (GitHub issue 7): the way Little Snitch or OpenSnitch let a person decide on a
 * connection as it happens. A managed proxy whose config asks for approvals (`hard_deny_allowlist_misses: false`,
 * src/network/managedNetwork.ts `parseApprovalSettings`) gets this broker's decider, which the policy consults only for
 * `not_allowed` (network-proxy.md §3.3, §3.6): denied hosts and local/private blocks never reach it.
 *
 * - A held request waits while a prompt goes to every subscribed privileged client; concurrent requests of one
 *   (session, process, protocol, host, port) share one prompt.
 * - Pending prompts are capped per process, per session and server-wide, so one process cannot crowd out another
 *   session's prompt: past its own caps a miss fails closed at once (audited as `refused`), and when the server-wide
 *   cap is reached a session holding fewer prompts than the largest holder takes the oldest prompt of that holder.
 *   A config's `approval_timeout_ms` is clamped to the server's maximum (said in the prompt and its audit event).
 * - `allowOnce` / `denyOnce` answer the requests held on the prompt, and the next request prompts again;
 *   `allowProcess` / `denyProcess` are remembered for the process, `allowSession` / `deny` for every process of the
 *   session; `allowProject` / `denyProject` store a project rule (projectRules.ts) for the process's workspace, kept
 *   across restarts and applied to later sessions of that workspace only. Denies always win over allows, whatever
 *   their scope. All of them are revocable. The process's own client can never store a project rule.
 * - No answer within the timeout (config `approval_timeout_ms`, else the server's, else 30 s), or no subscriber at
 *   all, fails closed with the normal blocked response (`not_allowed`, decision `ask`, source `decider`); a user's
 *   deny gives `not_allowed` with decision `deny`. Never an implicit allow.
 * - The process exiting cancels its prompts (fail closed); its remembered decisions go when it closes, the
 *   session's when the session expires.
 * - Every request, decision, timeout, cancellation and revocation is an audit event (a bounded ring, the
 *   `approvals/audit` notification, and a `CORRAL_NETWORK_APPROVAL {…}` log line); a decision says who made it.
 * - The process's own client decides too, when it declared `initialize {capabilities: {networkApprovals: true}}`: it
 *   gets a server → client `network/policyRequest` for the prompts of ITS session's processes only (on the
 *   connection attached to that session; a resumed session's new connection is asked again), alongside the panel.
 *   The first answer wins; `ask` leaves it to the panel; no answer fails closed at the prompt's timeout. A client can
 *   never see or decide another session's prompt: the request goes to no other connection, and an answer is matched
 *   by the id the server chose on that connection.
 */
import { randomUUID } from 'node:crypto';
import type { Clock, Timer } from '../../clock.js';
import { compilePatterns } from '../../network/patterns.js';
import type {
  Decider,
  DeciderRequest,
  DeciderResult,
  DecisionReceipt,
  RuleOrigin,
} from '../../network/policy.js';
import type { ManagedProxy } from '../../network/proxy.js';
import type { ManagedProcess } from '../../process/managedProcess.js';
import {
  APPROVALS_CLI_CLIENT_NAME,
  type ApprovalDecidedBy,
  type ApprovalDecision,
  type ApprovalOutcome,
  type ApprovalPrompt,
  type ApprovalProtocol,
  type ApprovalRule,
  type ApprovalsState,
  type ApprovalsSubscribeResult,
  type DecideResult,
  type ExportResult,
  exportDomains,
  type HoldResult,
  type LearnedEndpoint,
  type LearningState,
  MAX_HELD_PROMPT_MS,
  MAX_PATH_PREFIX,
  type RememberedDecision,
  type RepoPolicyState,
  type RevokeResult,
  type RulesResult,
} from '../../protocol/approvals.js';
import { invalidRequest } from '../../protocol/errors.js';
import type { RpcConnection } from '../../rpc/connection.js';
import type { ServerEvents } from '../core/events.js';
import type { Logger } from '../core/log.js';
import type { Session } from '../core/session.js';
import type { SessionTable } from '../core/sessions.js';
import { PromptCaps, type PromptLimits } from './approvalCaps.js';
import { askSessionClient } from './approvalClient.js';
import { RememberedDecisions } from './approvalDecisions.js';
import { ApprovalFeed } from './approvalFeed.js';
import { firstSegment, normalizePathPrefix, normalizeRequestPath, pathWithin } from './endpointPath.js';
import { LearningSessions } from './learning.js';
import {
  type ProjectRuleStore,
  ProjectRules,
  pathVisible,
  protocolCovers,
  type RuleTarget,
  ruleAnswers,
  ruleMethod,
  workspaceOf,
} from './projectRules.js';
import { type RepoPolicy, readRepoPolicy, repoAllows } from './repoPolicy.js';

export const DEFAULT_APPROVAL_TIMEOUT_MS = 30_000;
/** The longest a prompt may wait, whatever its config asks (`--max-approval-timeout-ms`). */
export const DEFAULT_MAX_APPROVAL_TIMEOUT_MS = 120_000;
/** Requests held on one prompt; past it a further request fails closed at once. */
export const MAX_WAITERS_PER_PROMPT = 1024;

/** The reason in the blocked response when a prompt is denied, times out or is cancelled (§4.7 `not_allowed`). */
export const APPROVAL_BLOCK_REASON = 'not_allowed';

export interface ApprovalOptions extends PromptLimits {
  /** Default prompt timeout (ms) when the config sets none. */
  timeoutMs?: number;
  /** Longest prompt timeout (ms): a config asking for more is clamped to it. */
  maxTimeoutMs?: number;
  /** Where project rules are stored (null or absent: project answers are refused, with `rulesProblem`). */
  rules?: ProjectRuleStore | null;
  /** Why there is no rule store, when there is none. */
  rulesProblem?: string | null;
}

/** A process whose proxy asks for approvals: its proxy's timeout and its workspace (projectRules.ts). */
interface Asking {
  timeoutMs: number;
  workspace: string | null;
  /** The workspace's `.corral/network.json` (repoPolicy.ts): it can only narrow. */
  repo: RepoPolicy | null;
}

interface Waiter {
  resolve: (r: DeciderResult) => void;
  /** The held request, and what rules see of it (its path and method may differ from the prompt's first). */
  req: DeciderRequest;
  t: RuleTarget;
}

interface Pending {
  prompt: ApprovalPrompt;
  key: string;
  waiters: Waiter[];
  timer: Timer;
  /** Client connections already asked (`network/policyRequest`). */
  askedClients: WeakSet<RpcConnection>;
  /** Panel connections reading the card (`approvals/hold`): while any, the countdown is paused. */
  holders: Set<RpcConnection>;
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

/** The broker's verdicts, each with its receipt (issue 37, item 2): what decided it, and the prompt it is tied to. */
const receiptOf = (ruleId: string, origin: RuleOrigin, correlationId?: string): DecisionReceipt =>
  correlationId === undefined ? { ruleId, origin } : { ruleId, origin, correlationId };
const allow = (receipt: DecisionReceipt): DeciderResult => ({ type: 'allow', receipt });
const denied = (receipt: DecisionReceipt): DeciderResult => ({
  type: 'deny',
  reason: APPROVAL_BLOCK_REASON,
  receipt,
});
const unanswered = (receipt: DecisionReceipt): DeciderResult => ({
  type: 'ask',
  reason: APPROVAL_BLOCK_REASON,
  receipt,
});
const REPOSITORY_REFUSAL = denied(receiptOf('.corral/network.json', 'repository'));
const LEARNED = allow(receiptOf('learning', 'learning'));
const NOT_ASKING = unanswered(receiptOf('not_asking', 'broker'));
const WAITERS_FULL = unanswered(receiptOf('waiters_full', 'broker'));
const NO_ROOM = unanswered(receiptOf('no_room', 'broker'));
const TUNNEL_ADMITTED = allow(receiptOf('tunnel_admitted', 'broker'));
/** A remembered decision's verdict: its id, tied to the prompt it came from. */
const rememberedVerdict = (d: RememberedDecision): DeciderResult => {
  const r = receiptOf(d.id, 'session', d.promptId);
  return d.decision === 'deny' ? denied(r) : allow(r);
};

const target = (protocol: string, host: string, port: number) => `${protocol} ${host} ${port}`;
const procKey = (sessionId: string, processId: string) => `${sessionId}/${processId}`;

export class ApprovalBroker {
  readonly timeoutMs: number;
  readonly maxTimeoutMs: number;
  private readonly caps: PromptCaps;
  private readonly pending = new Map<string, Pending>();
  private readonly pendingById = new Map<string, Pending>();
  private readonly decisions = new RememberedDecisions();
  private readonly feed: ApprovalFeed;
  /** Processes whose proxy asks for approvals (by `session/process`). */
  private readonly asking = new Map<string, Asking>();
  private readonly rules: ProjectRules;
  private readonly learning = new LearningSessions();

  private readonly clock: Clock;

  constructor(
    private readonly server: ApprovalHost,
    opts: ApprovalOptions = {},
  ) {
    this.clock = server.clock;
    this.feed = new ApprovalFeed(server);
    this.maxTimeoutMs = opts.maxTimeoutMs ?? DEFAULT_MAX_APPROVAL_TIMEOUT_MS;
    this.timeoutMs = Math.min(opts.timeoutMs ?? DEFAULT_APPROVAL_TIMEOUT_MS, this.maxTimeoutMs);
    this.caps = new PromptCaps(opts);
    this.rules = new ProjectRules(opts.rules ?? null, opts.rulesProblem ?? null);
    server.events.on('process', (kind, proc) => this.onProcess(kind, proc));
    server.events.on('session', (kind, session) => {
      if (kind === 'expired') this.forgetSession(session);
      // A resumed session's new connection is asked about the prompts still pending.
      if (kind === 'attached')
        for (const p of this.pending.values()) if (p.prompt.sessionId === session.id) this.askClient(p);
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
      // A few stats up from the cwd, only for a process whose proxy asks.
      const workspace = workspaceOf(proc.info.cwd);
      // The repository's own file, read (not run) for a process whose proxy asks: it can only narrow.
      const repo = workspace ? readRepoPolicy(workspace) : null;
      this.asking.set(k, { timeoutMs: approvals.timeoutMs ?? this.timeoutMs, workspace, repo });
      const denied = proxy.spec.settings.denied_domains;
      if (workspace && denied.length > 0 && this.rules.size > 0)
        this.flagContradictions(workspace, denied, proc);
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
    const changed = this.decisions.forget(
      (d) => d.scope === 'process' && d.sessionId === sessionId && d.processId === processId,
    );
    if (changed) this.broadcastDecisions();
  }

  /** Flags the workspace's allow rules that this process's deny list overrides (they never apply to it). */
  private flagContradictions(workspace: string, denied: readonly string[], proc: ManagedProcess): void {
    let patterns: ReturnType<typeof compilePatterns>;
    try {
      patterns = compilePatterns(denied);
    } catch {
      return; // the proxy refused this config already
    }
    const { processId, sessionId } = proc.info;
    const changed = this.rules.flagContradictions(
      workspace,
      (host) => patterns.test(host),
      (host) =>
        `the managed network of process ${processId} (session ${sessionId.slice(0, 8)}) denies ${host}: its deny list wins, this allow does not apply there`,
    );
    if (changed) this.broadcastRules();
  }

  private forgetSession(session: Session): void {
    const changed = this.decisions.forget((d) => d.sessionId === session.id);
    for (const p of [...this.pending.values()])
      if (p.prompt.sessionId === session.id) this.finish(p, 'cancelled');
    if (changed) this.broadcastDecisions();
  }

  /** The decider of one process (also usable as the Launcher's `decider` option). */
  deciderFor(sessionId: string, processId: string): Decider {
    return (req) => this.decide(sessionId, processId, req);
  }

  private decide(sessionId: string, processId: string, req: DeciderRequest): Promise<DeciderResult> {
    const protocol = req.protocol as ApprovalProtocol;
    const k = procKey(sessionId, processId);
    const asking = this.asking.get(k);
    const known = this.decisions.find(sessionId, processId, protocol, req.host, req.port);
    if (known?.decision === 'deny') return Promise.resolve(rememberedVerdict(known));
    // What rules, the repository's file and learning see: the path (plain HTTP, https inside TLS) normalised once.
    const t: RuleTarget = { protocol, host: req.host, port: req.port, method: req.method };
    if (pathVisible(protocol)) t.path = normalizeRequestPath(req.path);
    // Not among the endpoints the repository declares: blocked before any rule, learning or prompt.
    if (asking?.repo && !repoAllows(asking.repo, t)) return Promise.resolve(REPOSITORY_REFUSAL);
    const rule = asking?.workspace ? this.rules.find(asking.workspace, t) : undefined;
    if (rule) {
      this.rules.hit(rule, this.clock.now());
      const r = receiptOf(rule.id, 'project');
      return Promise.resolve(rule.decision === 'allow' ? allow(r) : denied(r));
    }
    if (known) return Promise.resolve(rememberedVerdict(known));
    // Inside a tunnel the decider already let through (intercepted after its CONNECT was answered): no deny applies.
    if (req.tunnel === 'admitted') return Promise.resolve(TUNNEL_ADMITTED);
    const proc = this.server.sessions.get(sessionId)?.get(processId);
    // Not (or no longer) a live asking process: fail closed.
    if (!asking || !proc || proc.exitCode !== null) return Promise.resolve(NOT_ASKING);
    // Learning mode for this workspace: allowed and recorded, while it has time and room.
    if (asking.workspace && this.learning.size > 0) {
      const recorded = this.learning.record(asking.workspace, t, this.clock.now());
      if (recorded === 'changed') this.broadcastLearning();
      if (recorded !== 'no') return Promise.resolve(LEARNED);
    }
    const key = `${k}\u0000${target(protocol, req.host, req.port)}`;
    let p = this.pending.get(key);
    if (p && p.waiters.length >= MAX_WAITERS_PER_PROMPT) return Promise.resolve(WAITERS_FULL);
    if (!p) {
      const room = this.caps.room(sessionId, k);
      if (room.kind === 'refused') {
        // Fails closed at once; audited once per process until it has room again.
        if (this.caps.firstRefusal(k)) {
          const { host, port, method } = req;
          const command = [...proc.info.argv];
          const subject = { id: null, sessionId, processId, command, host, port, protocol, method };
          this.feed.record('refused', subject, { released: 1, note: room.reason });
        }
        return Promise.resolve(NO_ROOM);
      }
      if (room.kind === 'evict') {
        const victim = [...this.pendingById.values()].find((x) => x.prompt.sessionId === room.sessionId)!;
        this.finish(
          victim,
          'cancelled',
          null,
          'cancelled to make room for another session (the server-wide cap)',
        );
      }
      const asked = asking.timeoutMs;
      const timeoutMs = Math.min(asked, this.maxTimeoutMs);
      const now = this.clock.now();
      const prompt: ApprovalPrompt = {
        id: randomUUID(),
        sessionId,
        processId,
        clientName: proc.info.clientName,
        command: [...proc.info.argv],
        cwd: proc.info.cwd ?? null,
        workspace: asking.workspace,
        host: req.host,
        port: req.port,
        protocol,
        method: req.method,
        ...(pathVisible(protocol) ? { path: t.path ?? null } : {}),
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
        askedClients: new WeakSet(),
        holders: new Set(),
      };
      p = created;
      this.pending.set(key, p);
      this.pendingById.set(prompt.id, p);
      this.caps.count(sessionId, k, +1);
    }
    const pending = p;
    return new Promise<DeciderResult>((resolve) => {
      pending.waiters.push({ resolve, req, t });
      pending.prompt.waiting = pending.waiters.length;
      if (pending.waiters.length === 1) {
        const asked = pending.prompt.requestedTimeoutMs;
        this.feed.record('requested', pending.prompt, {
          released: 0,
          note:
            asked === null
              ? null
              : `approval_timeout_ms ${asked} clamped to the server's maximum ${this.maxTimeoutMs} (--max-approval-timeout-ms)`,
        });
        this.feed.broadcast('approvals/requested', { prompt: pending.prompt });
        this.askClient(pending);
      }
    });
  }

  /** Asks the prompt's own session's client, if it answers approvals (approvalClient.ts); its answer may decide. */
  private askClient(p: Pending): void {
    askSessionClient(this.server, p.prompt, p.askedClients, (decision, by) => {
      // First answer wins: a prompt the panel (or a timeout) already resolved is not touched.
      if (this.pendingById.get(p.prompt.id) === p) this.applyDecision(p.prompt.id, decision, by);
    });
  }

  /** Ends a prompt: releases its held requests with the outcome's answer and tells the subscribers. */
  private finish(
    p: Pending,
    outcome: ApprovalOutcome,
    decisionId: string | null = null,
    note: string | null = null,
    decidedBy: ApprovalDecidedBy | null = null,
  ): number {
    if (this.pendingById.get(p.prompt.id) !== p) return 0;
    this.clock.clearTimeout(p.timer);
    this.pending.delete(p.key);
    this.pendingById.delete(p.prompt.id);
    this.caps.count(p.prompt.sessionId, procKey(p.prompt.sessionId, p.prompt.processId), -1);
    // Who answered: the panel or the session's own client (its harness), else the timeout or the process' end.
    const origin: RuleOrigin =
      outcome === 'timeout'
        ? 'timeout'
        : outcome === 'cancelled'
          ? 'broker'
          : decidedBy?.kind === 'client'
            ? 'harness'
            : 'panel';
    const receipt = receiptOf(decisionId ?? outcome, origin, p.prompt.id);
    // A prompt told to wait until its process exits is denied by that exit (or anything else that cancels it).
    const waitedOut = outcome === 'cancelled' && p.prompt.waitingForExit === true;
    const answer =
      outcome.startsWith('deny') || waitedOut
        ? denied(waitedOut ? receiptOf('wait_for_exit', 'broker', p.prompt.id) : receipt)
        : outcome === 'timeout' || outcome === 'cancelled'
          ? unanswered(receipt)
          : allow(receipt);
    const released = p.waiters.length;
    for (const w of p.waiters) w.resolve(answer);
    p.waiters.length = 0;
    p.prompt.waiting = 0;
    if (outcome === 'timeout' || outcome === 'cancelled')
      this.feed.record(outcome, p.prompt, { released, note });
    else this.feed.record('decided', p.prompt, { released, decision: outcome, decisionId, decidedBy });
    this.feed.broadcast('approvals/resolved', {
      id: p.prompt.id,
      outcome,
      released,
      resolvedAt: this.clock.now(),
    });
    return released;
  }

  // ---- the panel side ------------------------------------------------------------------------------------------

  /**
   * Pauses (a first holder) or resumes (the last one gone) a prompt's countdown. Paused, the prompt still fails
   * closed at its bound (MAX_HELD_PROMPT_MS after it was requested); resumed, it has the time it had left.
   */
  hold(id: string, holding: boolean, conn: RpcConnection): HoldResult {
    const p = this.pendingById.get(id);
    if (!p) throw invalidRequest(`unknown or already resolved approval id ${id}`);
    // Waiting for its process's exit: there is no countdown to pause.
    if (p.prompt.waitingForExit) return { expiresAt: p.prompt.expiresAt, pausedLeftMs: null };
    for (const c of p.holders) if (c.closed) p.holders.delete(c);
    const was = p.holders.size > 0;
    if (holding) p.holders.add(conn);
    else p.holders.delete(conn);
    const now = this.clock.now();
    const bound = p.prompt.requestedAt + Math.max(MAX_HELD_PROMPT_MS, p.prompt.timeoutMs);
    const rearm = (at: number) => {
      this.clock.clearTimeout(p.timer);
      p.timer = this.clock.setTimeout(() => this.finish(p, 'timeout'), Math.max(0, at - now)).unref();
      p.prompt.expiresAt = at;
    };
    if (!was && p.holders.size > 0) {
      p.prompt.pausedLeftMs = Math.max(0, p.prompt.expiresAt - now);
      rearm(bound);
    } else if (was && p.holders.size === 0) {
      const left = p.prompt.pausedLeftMs ?? 0;
      p.prompt.pausedLeftMs = null;
      rearm(Math.min(bound, now + left));
    } else return { expiresAt: p.prompt.expiresAt, pausedLeftMs: p.prompt.pausedLeftMs ?? null };
    this.feed.broadcast('approvals/requested', { prompt: { ...p.prompt } });
    return { expiresAt: p.prompt.expiresAt, pausedLeftMs: p.prompt.pausedLeftMs ?? null };
  }

  /**
   * "Wait until the process exits": the prompt's countdown stops (no timer, no hold bound), its requests (and later
   * ones of the same target) wait; the process's exit denies them. Nothing is stored; it can still be answered.
   */
  waitForExit(id: string): { waiting: number } {
    const p = this.pendingById.get(id);
    if (!p) throw invalidRequest(`unknown or already resolved approval id ${id}`);
    if (!p.prompt.waitingForExit) {
      this.clock.clearTimeout(p.timer);
      p.holders.clear();
      p.prompt.waitingForExit = true;
      p.prompt.pausedLeftMs = null;
      this.feed.broadcast('approvals/requested', { prompt: { ...p.prompt } });
    }
    return { waiting: p.waiters.length };
  }

  /** Applies a decision to a pending prompt (and, when remembered, to every other prompt it covers). */
  applyDecision(
    id: string,
    decision: ApprovalDecision,
    decidedBy: ApprovalDecidedBy | null = null,
    pathPrefix: string | null = null,
  ): DecideResult {
    const p = this.pendingById.get(id);
    if (!p) throw invalidRequest(`unknown or already resolved approval id ${id}`);
    if (pathPrefix !== null && decision !== 'allowProject' && decision !== 'denyProject')
      throw invalidRequest(`pathPrefix: only a project answer (allowProject, denyProject) stores one`);
    if (decision === 'allowOnce' || decision === 'denyOnce')
      return { released: this.finish(p, decision, null, null, decidedBy) };
    if (decision === 'allowProject' || decision === 'denyProject')
      return this.storeProjectRule(p, decision, decidedBy, pathPrefix);
    const { sessionId, processId, protocol, host, port } = p.prompt;
    const scope = decision === 'allowProcess' || decision === 'denyProcess' ? 'process' : 'session';
    const remembered: RememberedDecision = {
      id: randomUUID(),
      decision: decision.startsWith('deny') ? 'deny' : 'allow',
      scope,
      sessionId,
      processId: scope === 'process' ? processId : null,
      host,
      port,
      protocol,
      decidedAt: this.clock.now(),
      promptId: id,
    };
    this.decisions.add(remembered);
    let released = this.finish(p, decision, remembered.id, null, decidedBy);
    // Other prompts the remembered decision now covers follow it at once (a deny also wins over their allows).
    for (const other of [...this.pending.values()]) {
      const o = other.prompt;
      if (
        o.sessionId !== sessionId ||
        !protocolCovers(protocol, o.protocol) ||
        o.host !== host ||
        o.port !== port
      )
        continue;
      if (scope === 'process' && o.processId !== processId) continue;
      released += this.finish(other, decision, remembered.id, null, decidedBy);
    }
    this.broadcastDecisions();
    return { released };
  }

  /**
   * A project rule from a prompt: exactly its protocol, host, port (and plain HTTP's or https's method), for its workspace. Only
   * a panel principal (the panel, `corral approvals`) gets here: a process's own client cannot answer `project`.
   */
  private storeProjectRule(
    p: Pending,
    decision: 'allowProject' | 'denyProject',
    decidedBy: ApprovalDecidedBy | null,
    givenPrefix: string | null,
  ): DecideResult {
    const { workspace, protocol, host, port } = p.prompt;
    if (!workspace)
      throw invalidRequest(
        `approval ${p.prompt.id}: its process has no workspace (no cwd that resolves): a project rule needs one`,
      );
    const pathPrefix = this.rulePathPrefix(p.prompt, givenPrefix);
    const why = this.rules.refusal();
    if (why) throw invalidRequest(`approval ${p.prompt.id}: ${why}`);
    const by = decidedBy ?? { kind: 'panel' as const, credential: 'unknown', clientName: null };
    const rule: ApprovalRule = {
      id: randomUUID(),
      workspace,
      decision: decision === 'allowProject' ? 'allow' : 'deny',
      protocol,
      host,
      port,
      method: ruleMethod(protocol, p.prompt.method),
      ...(pathPrefix === null ? {} : { pathPrefix }),
      origin: by.clientName === APPROVALS_CLI_CLIENT_NAME ? 'cli' : 'panel',
      createdBy: by,
      createdAt: this.clock.now(),
      promptId: p.prompt.id,
      enabled: true,
      note: null,
      hits: 0,
      lastHitAt: null,
    };
    try {
      this.rules.add(rule);
    } catch (e) {
      throw invalidRequest(
        `approval ${p.prompt.id}: the project rule was not stored: ${(e as Error).message}`,
      );
    }
    let released = this.finishByRule(p, rule, decision, decidedBy);
    // Other prompts of processes in that workspace the rule now answers follow it.
    for (const other of [...this.pending.values()]) {
      const o = other.prompt;
      if (
        o.workspace !== workspace ||
        !protocolCovers(protocol, o.protocol) ||
        o.host !== host ||
        o.port !== port
      )
        continue;
      if (!other.waiters.some((w) => ruleAnswers(rule, w.t))) continue;
      released += this.finishByRule(other, rule, decision, decidedBy);
    }
    this.broadcastRules();
    return { released };
  }

  /**
   * Ends `p` with a project rule's answer. Its held requests the rule answers get it; the others (another path or
   * method held on the same prompt: a `/admin` request behind a card for `/api/x` answered for `/api`) are decided
   * again as new requests, so a rule never releases what it does not match.
   */
  private finishByRule(
    p: Pending,
    rule: ApprovalRule,
    decision: 'allowProject' | 'denyProject',
    decidedBy: ApprovalDecidedBy | null,
  ): number {
    const outside = p.waiters.filter((w) => !ruleAnswers(rule, w.t));
    if (outside.length > 0) {
      const left = p.waiters.filter((w) => ruleAnswers(rule, w.t));
      p.waiters.length = 0;
      p.waiters.push(...left);
    }
    const released = this.finish(p, decision, rule.id, null, decidedBy);
    const { sessionId, processId } = p.prompt;
    for (const w of outside) void this.decide(sessionId, processId, w.req).then(w.resolve);
    return released;
  }

  /**
   * The path prefix of a project rule made from a prompt: none where the path is not visible; for plain HTTP and https the
   * one given (normalised, and it must hold the prompt's path: a rule never covers less than what was asked about
   * while naming something else), else the path's first segment. An unreadable path gets no project rule.
   */
  private rulePathPrefix(prompt: ApprovalPrompt, given: string | null): string | null {
    if (!pathVisible(prompt.protocol)) {
      if (given !== null)
        throw invalidRequest(`pathPrefix: the path of a ${prompt.protocol} request is not visible`);
      return null;
    }
    const path = prompt.path ?? null;
    if (path === null)
      throw invalidRequest(
        `approval ${prompt.id}: its request's path could not be read safely (an encoded slash, '..' above the root, …): answer once, for the process or for the session`,
      );
    if (given === null) {
      const first = firstSegment(path);
      if (first.length > MAX_PATH_PREFIX)
        throw invalidRequest(
          `approval ${prompt.id}: the first segment of its path is longer than ${MAX_PATH_PREFIX} characters: give pathPrefix, or answer once, for the process or for the session`,
        );
      return first;
    }
    const prefix = normalizePathPrefix(given);
    if (prefix === null)
      throw invalidRequest(
        `pathPrefix: ${JSON.stringify(given.slice(0, 200))} is not a plain path (it must start with '/', no query, no encoded slash, no '..' above the root)`,
      );
    if (!pathWithin(path, prefix))
      throw invalidRequest(
        `pathPrefix: ${JSON.stringify(prefix.slice(0, 200))} does not hold the request's path ${JSON.stringify(path.slice(0, 200))}`,
      );
    return prefix;
  }

  revoke(id: string): RevokeResult {
    const rule = this.rules.get(id);
    if (rule) {
      try {
        this.rules.remove(id);
      } catch (e) {
        throw invalidRequest(`rule ${id} was not revoked: ${(e as Error).message}`);
      }
      this.feed.record(
        'revoked',
        {
          sessionId: '',
          processId: null,
          command: null,
          host: rule.host,
          port: rule.port,
          protocol: rule.protocol,
          method: rule.method,
          id: rule.promptId,
        },
        { released: 0, decisionId: rule.id, note: `project rule of ${rule.workspace}` },
      );
      this.broadcastRules();
      return { revoked: true };
    }
    const d = this.decisions.remove(id);
    if (!d) return { revoked: false };
    this.feed.record(
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
    const list = this.decisions.list().filter((d) => !sessionId || d.sessionId === sessionId);
    return exportDomains(list);
  }

  state(): ApprovalsState {
    return {
      pending: [...this.pendingById.values()].map((p) => ({ ...p.prompt })),
      decisions: this.decisions.list(),
      audit: this.feed.events(),
    };
  }

  // ---- learning mode (learning.ts) ---------------------------------------------------------------------------

  private workspaceParam(given: string): string {
    const w = given.startsWith('/') ? workspaceOf(given) : null;
    if (!w)
      throw invalidRequest(
        `workspace: ${JSON.stringify(given.slice(0, 200))} is not an existing absolute directory`,
      );
    return w;
  }

  learn(workspace: string, durationMs: number, maxRequests: number): { learning: LearningState } {
    const learning = this.learning.start(
      this.workspaceParam(workspace),
      this.clock.now(),
      durationMs,
      maxRequests,
    );
    this.broadcastLearning();
    return { learning };
  }

  /**
   * What `process/start`'s result says about approvals for this process (its `warnings`): learning mode on for its
   * workspace. One map read for a process that does not ask for approvals.
   */
  startWarnings(sessionId: string, processId: string): string[] {
    if (this.learning.size === 0) return [];
    const workspace = this.asking.get(procKey(sessionId, processId))?.workspace;
    const s = workspace ? this.learning.activeFor(workspace, this.clock.now()) : null;
    if (!s) return [];
    return [
      `learning mode is on for ${s.workspace} until ${new Date(s.endsAt).toISOString()} or ${s.maxRequests - s.requests} more requests: this command's allowlist misses are allowed and recorded, not asked`,
    ];
  }

  learningState(workspace?: string | null): { learning: LearningState[] } {
    return {
      learning: this.learning.list(this.clock.now(), workspace ? this.workspaceParam(workspace) : null),
    };
  }

  /** Ends a learning session; the accepted endpoints it saw become allow rules of its workspace. */
  learnEnd(
    given: string,
    accept: readonly LearnedEndpoint[],
    decidedBy: ApprovalDecidedBy | null,
  ): { rules: ApprovalRule[] } {
    const workspace = this.workspaceParam(given);
    if (accept.length > 0) {
      const why = this.rules.refusal();
      if (why) throw invalidRequest(why);
    }
    let seen: ReturnType<LearningSessions['end']>;
    try {
      seen = this.learning.end(workspace, accept);
    } catch (e) {
      throw invalidRequest(`accept: ${(e as Error).message}`);
    }
    if (!seen) throw invalidRequest(`workspace ${workspace} is not learning`);
    this.broadcastLearning();
    const by = decidedBy ?? { kind: 'panel' as const, credential: 'unknown', clientName: null };
    const made: ApprovalRule[] = [];
    for (const e of seen) {
      const rule: ApprovalRule = {
        id: randomUUID(),
        workspace,
        decision: 'allow',
        protocol: e.protocol,
        host: e.host,
        port: e.port,
        method: e.method,
        ...(e.pathPrefix == null ? {} : { pathPrefix: e.pathPrefix }),
        origin: by.clientName === APPROVALS_CLI_CLIENT_NAME ? 'cli' : 'panel',
        createdBy: by,
        createdAt: this.clock.now(),
        promptId: null,
        enabled: true,
        note: `learned (${e.hits} request${e.hits === 1 ? '' : 's'})`,
        hits: 0,
        lastHitAt: null,
      };
      try {
        this.rules.add(rule);
      } catch (err) {
        throw invalidRequest(`the learned rules were stored up to ${made.length}: ${(err as Error).message}`);
      }
      made.push({ ...rule });
    }
    if (made.length > 0) this.broadcastRules();
    return { rules: made };
  }

  /** A workspace's `.corral/network.json` as the server reads it, and against what the user last accepted. */
  repoPolicy(given: string): RepoPolicyState {
    const workspace = this.workspaceParam(given);
    return this.withAcceptance(workspace, readRepoPolicy(workspace).state);
  }

  private withAcceptance(workspace: string, state: RepoPolicyState): RepoPolicyState {
    const a = this.rules.repoAcceptance(workspace);
    const acceptance =
      state.sha256 === null ? null : !a ? 'new' : a.sha256 === state.sha256 ? 'accepted' : 'changed';
    return {
      ...state,
      acceptance,
      acceptedSha256: a?.sha256 ?? null,
      acceptedAt: a?.acceptedAt ?? null,
      acceptedBy: a?.acceptedBy ?? null,
    };
  }

  /** Accepts the workspace's file as it is now, if its hash is `sha256` (what the person saw). */
  acceptRepoPolicy(given: string, sha256: string, by: ApprovalDecidedBy): RepoPolicyState {
    const workspace = this.workspaceParam(given);
    const state = readRepoPolicy(workspace).state;
    if (state.sha256 === null)
      throw invalidRequest(`workspace ${workspace} has no readable .corral/network.json to accept`);
    if (state.sha256 !== sha256)
      throw invalidRequest(
        `sha256: ${sha256} is not the file's hash now (${state.sha256}): it changed; read it again (approvals/repoPolicy)`,
      );
    try {
      this.rules.acceptRepo({
        workspace,
        sha256,
        acceptedAt: this.clock.now(),
        acceptedBy: `${by.credential}${by.clientName ? ` (${by.clientName})` : ''}`,
      });
    } catch (e) {
      throw invalidRequest(`the acceptance was not stored: ${(e as Error).message}`);
    }
    return this.withAcceptance(workspace, state);
  }

  /** Turns a project rule off or on, or sets its note. */
  updateRule(id: string, change: { enabled?: boolean; note?: string | null }): { rule: ApprovalRule } {
    const clean: { enabled?: boolean; note?: string | null } = {};
    if (change.enabled !== undefined) clean.enabled = change.enabled;
    if (change.note !== undefined) clean.note = change.note;
    let rule: ApprovalRule | undefined;
    try {
      rule = this.rules.update(id, clean);
    } catch (e) {
      throw invalidRequest(`rule ${id} was not changed: ${(e as Error).message}`);
    }
    if (!rule) throw invalidRequest(`unknown rule ${id}`);
    this.broadcastRules();
    return { rule: { ...rule } };
  }

  /** The project rules (of `workspace`), the remembered decisions, and where rules are stored. */
  rulesState(workspace?: string | null): RulesResult {
    return {
      rules: this.rules.list(workspace).map((r) => ({ ...r })),
      decisions: this.decisions.list(),
      store: this.rules.location,
      problem: this.rules.location ? null : this.rules.refusal(),
    };
  }

  get pendingCount(): number {
    return this.pendingById.size;
  }

  get subscriberCount(): number {
    return this.feed.subscriberCount;
  }

  private broadcastRules(): void {
    this.feed.broadcast('approvals/rulesChanged', { rules: this.rules.list() });
  }

  private broadcastLearning(): void {
    this.feed.broadcast('approvals/learningChanged', { learning: this.learning.list(this.clock.now()) });
  }

  private broadcastDecisions(): void {
    this.feed.broadcast('approvals/decisions', { decisions: this.decisions.list() });
  }

  /** Starts sending `approvals/*` notifications to `conn`; the current state and the default timeout. */
  subscribe(conn: RpcConnection): ApprovalsSubscribeResult {
    this.feed.subscribe(conn);
    return { ...this.state(), timeoutMs: this.timeoutMs };
  }

  unsubscribe(conn: RpcConnection): void {
    this.feed.unsubscribe(conn);
  }
}
