/**
 * A fleet host: one Corral host (the desktop app or `corral serve`) that watches other Corral servers. Each is joined
 * by URL and its own panel credential (`corral serve --join URL`, or `fleet/join` from the panel); the host keeps a
 * link to it (link.ts), subscribes to its monitor feed and approvals with the same protocol the panel uses, and
 * relays its rows into the host's own feed tagged with the server's id (mirror.ts). An action on such a row
 * (terminate, stdin, kill a session, read output, decide an approval, wait for its process's exit, learning mode and
 * the repository file of one of its workspaces, list, toggle, note or revoke its project rules) is forwarded to that
 * server only, with that
 * server's credential: one server's credential never acts on another, and nothing a server sends reaches the
 * host's own methods.
 */

import type { ZodType } from 'zod';
import type { Clock } from '../clock.js';
import {
  ApprovalAuditNotification,
  ApprovalDecisionsNotification,
  ApprovalRequestedNotification,
  ApprovalResolvedNotification,
  type ApprovalRule,
  ApprovalRulesNotification,
  ApprovalsSubscribeResult,
  DecideResult,
  ExportResult,
  LearnEndResult,
  LearningChangedNotification,
  LearningResult,
  LearnResult,
  RepoPolicyState,
  RevokeResult,
  RulesResult,
  RuleUpdateResult,
  WaitForExitResult,
} from '../protocol/approvals.js';
import { JsonBoundError } from '../protocol/boundedJson.js';
import { invalidRequest, RpcError } from '../protocol/errors.js';
import { TerminateResult, WriteResult } from '../protocol/exec.js';
import type { JoinParams } from '../protocol/fleet.js';
import type { MethodName, MethodResult } from '../protocol/methods.js';
import {
  FollowResult,
  KillSessionResult,
  type MonitorAudit,
  MonitorBatch,
  type MonitorBlocked,
  MonitorOutputNotification,
  type MonitorProcess,
  MonitorReadResult,
  type MonitorServer,
  type MonitorSession,
  MonitorSnapshot,
} from '../protocol/monitor.js';
import type { RpcConnection } from '../rpc/connection.js';
import { FLEET_NOT_PRIVILEGED, type Handler, type MethodRegistry } from '../server/core/dispatch.js';
import type { Logger } from '../server/core/log.js';
import type { JoinedServers } from '../server/monitor/joinedServers.js';
import type { Monitor } from '../server/monitor/monitor.js';
import { type LinkTarget, RemoteError, RemoteLink } from './link.js';
import { DEFAULT_LIMITS, type MirrorLimits, ServerMirror } from './mirror.js';

export { FLEET_NOT_PRIVILEGED };

/** The notifications a joined server may send, and their shapes. */
const NOTIFICATIONS = {
  'monitor/batch': MonitorBatch,
  'monitor/resync': MonitorSnapshot,
  'monitor/output': MonitorOutputNotification,
  'approvals/requested': ApprovalRequestedNotification,
  'approvals/resolved': ApprovalResolvedNotification,
  'approvals/decisions': ApprovalDecisionsNotification,
  'approvals/audit': ApprovalAuditNotification,
  'approvals/learningChanged': LearningChangedNotification,
  'approvals/rulesChanged': ApprovalRulesNotification,
} as const;

/** Learning sessions a joined server's notification or answer may list, and its size as relayed to the panels. */
export const MAX_RELAYED_LEARNING = 64;
export const MAX_RELAYED_LEARNING_BYTES = 1024 * 1024;
/**
 * The size of a joined server's project rules as relayed to the panels (their number is held to MAX_PROJECT_RULES by
 * the schema, each string to its own bound): MAX_PROJECT_RULES rules of ~800 bytes (an ordinary one is ~470 with a
 * note); past it the list is refused.
 */
export const MAX_RELAYED_RULES_BYTES = 8 * 1024 * 1024;

/** What the monitor methods a fleet forwards must answer. */
const FORWARDED = {
  'monitor/read': MonitorReadResult,
  'monitor/terminate': TerminateResult,
  'monitor/write': WriteResult,
  'monitor/killSession': KillSessionResult,
} as const;

/** What a fleet needs of its host: its methods (to serve fleet/* and extend approvals/*) and its secrets. */
export interface FleetHost extends MethodRegistry {
  handlerOf<M extends MethodName>(method: M): Handler<M> | undefined;
  /** The server's time: the links' timeouts, backoffs and pings run on it. */
  readonly clock: Clock;
  /** Values no child process may see (the joined servers' credentials). */
  protectSecrets(values: Iterable<string>): void;
}

export interface FleetOptions {
  log: Logger;
  limits?: Partial<MirrorLimits>;
  backoffMs?: [number, number];
  maxPayload?: number;
}

interface Joined {
  id: string;
  name: string;
  /** The URL as shown: no credential. */
  url: string;
  /** Which server it is (joinKey): a second join of the same one is refused. */
  key: string;
  link: RemoteLink;
  mirror: ServerMirror;
  rejected: number;
  lastRejected: string | null;
}

/** A join as given: URL (credential in `?token=` or `token`), headers, name. Throws with the field at fault. */
export function joinTarget(p: JoinParams): { target: LinkTarget; shownUrl: string; name: string } {
  let url: URL;
  try {
    url = new URL(p.url);
  } catch {
    throw invalidRequest(`fleet/join: url is not a URL: ${p.url.slice(0, 200)}`);
  }
  if (url.protocol === 'http:') url.protocol = 'ws:';
  else if (url.protocol === 'https:') url.protocol = 'wss:';
  if (url.protocol !== 'ws:' && url.protocol !== 'wss:')
    throw invalidRequest(`fleet/join: url must be ws://, wss://, http:// or https://, not ${url.protocol}`);
  if (url.username || url.password) throw invalidRequest('fleet/join: url must not hold a user or password');
  const inUrl = url.searchParams.get('token');
  url.searchParams.delete('token');
  url.hash = '';
  const token = p.token ?? inUrl;
  if (!token)
    throw invalidRequest("fleet/join: the server's panel credential is missing (token, or ?token= in url)");
  const headers = { ...(p.headers ?? {}) };
  const sandbox = Object.entries(headers).find(([k]) => k.toLowerCase() === 'x-sandbox-id')?.[1];
  return {
    target: { url: url.toString(), token, headers },
    shownUrl: url.toString(),
    name: p.name ?? sandbox ?? url.host,
  };
}

/**
 * Which server a join reaches: its URL without the credential, and the upgrade headers that pick a server behind one
 * URL (the agent-sandbox router's X-Sandbox-ID), names in lowercase. Two joins with one key would mirror the same
 * processes twice.
 */
export function joinKey(t: { shownUrl: string; target: { headers: Record<string, string> } }): string {
  const headers = Object.entries(t.target.headers)
    .map(([k, v]) => [k.toLowerCase(), v] as const)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return JSON.stringify([t.shownUrl, headers]);
}

export class Fleet implements JoinedServers {
  private readonly joined = new Map<string, Joined>();
  private nextId = 1;
  /** Output follows by `server\0session\0process`: how many of the host's subscribers follow it. */
  private readonly follows = new Map<string, number>();
  private readonly approvalSubscribers = new Set<RpcConnection>();
  private readonly limits: MirrorLimits;

  constructor(
    private readonly server: FleetHost,
    private readonly monitor: Monitor,
    private readonly opts: FleetOptions,
  ) {
    this.limits = { ...DEFAULT_LIMITS, ...opts.limits };
    monitor.attachJoined(this);
    this.register();
  }

  // ---- joining -------------------------------------------------------------------------------------------------

  join(params: JoinParams): MonitorServer {
    const t = joinTarget(params);
    const { target, shownUrl, name } = t;
    const key = joinKey(t);
    for (const other of this.joined.values())
      if (other.key === key)
        throw invalidRequest(`fleet/join: ${shownUrl} is joined already, as ${other.id} (${other.name})`);
    // The credential is a secret of this host from now on: no child of it may see it.
    this.server.protectSecrets([target.token]);
    const id = `s${this.nextId++}`;
    const j: Joined = {
      id,
      name,
      url: shownUrl,
      key,
      link: null as unknown as RemoteLink,
      mirror: null as unknown as ServerMirror,
      rejected: 0,
      lastRejected: null,
    };
    j.mirror = new ServerMirror(id, this.monitor, this.limits, (why) => this.rejected(j, why));
    j.link = new RemoteLink(
      target,
      {
        changed: () => this.changed(j),
        ready: () => this.subscribeTo(j),
        notification: (m, p) => this.notification(j, m, p),
        rejected: (why) => this.rejected(j, why),
      },
      {
        log: this.opts.log,
        clock: this.server.clock,
        ...(this.opts.backoffMs ? { backoffMs: this.opts.backoffMs } : {}),
        ...(this.opts.maxPayload ? { maxPayload: this.opts.maxPayload } : {}),
      },
    );
    this.joined.set(id, j);
    this.opts.log.info(`fleet: joined ${name} at ${shownUrl} as ${id}`);
    j.link.start();
    return this.record(j);
  }

  leave(id: string): boolean {
    const j = this.joined.get(id);
    if (!j) return false;
    j.link.stop();
    this.joined.delete(id);
    for (const p of j.mirror.disconnected())
      this.toApprovalSubscribers('approvals/resolved', this.cancelled(j, p.id));
    this.toApprovalSubscribers('approvals/rulesChanged', { server: j.id, rules: [] });
    this.monitor.relayServer({
      ...this.record(j),
      state: 'disconnected',
      lastError: 'removed from the fleet',
    });
    return true;
  }

  close(): void {
    for (const j of this.joined.values()) j.link.stop();
    this.joined.clear();
  }

  private record(j: Joined): MonitorServer {
    const l = j.link;
    return {
      id: j.id,
      name: j.name,
      url: j.url,
      state: l.state,
      since: l.since,
      lastError: l.lastError ?? j.lastRejected,
      retryAt: l.retryAt,
      ready: l.ready,
      processes: j.mirror.processes.size,
      rejected: j.rejected,
      dropped: l.dropped,
      keptBytes: j.mirror.kept,
      budgetBytes: this.limits.keptBytes,
      overBudget: j.mirror.overBudget,
    };
  }

  private changed(j: Joined): void {
    if (!this.joined.has(j.id)) return;
    if (j.link.state === 'disconnected') {
      for (const p of j.mirror.disconnected())
        this.toApprovalSubscribers('approvals/resolved', this.cancelled(j, p.id));
    }
    this.monitor.relayServer(this.record(j));
  }

  private rejected(j: Joined, why: string): void {
    j.rejected++;
    j.lastRejected = `refused from the server: ${why}`;
    if (j.rejected === 1 || j.rejected % 100 === 0)
      this.opts.log.warn(`fleet: ${j.name} (${j.id}): refused ${why} (${j.rejected} so far)`);
    this.monitor.relayServer(this.record(j));
  }

  /** After each (re)connection: the monitor feed, the approvals, and the output the host's panels follow. */
  private async subscribeTo(j: Joined): Promise<void> {
    const snap = await j.link.request('monitor/subscribe', { output: 'followed' }, MonitorSnapshot);
    if (!this.bounded(j, 'monitor/subscribe', () => j.mirror.snapshot(snap))) return;
    const approvals = await j.link.request('approvals/subscribe', {}, ApprovalsSubscribeResult);
    if (!this.bounded(j, 'approvals/subscribe', () => j.mirror.approvalsState(approvals))) return;
    for (const p of j.mirror.prompts.values())
      this.toApprovalSubscribers('approvals/requested', { prompt: p });
    this.toApprovalSubscribers('approvals/decisions', { server: j.id, decisions: j.mirror.decisions });
    void this.relayRules(j);
    const prefix = `${j.id}\u0000`;
    for (const k of this.follows.keys()) {
      if (!k.startsWith(prefix)) continue;
      const [, sessionId, processId] = k.split('\u0000') as [string, string, string];
      void j.link
        .request('monitor/follow', { sessionId, processId, follow: true }, FollowResult)
        .catch(() => {});
    }
  }

  /**
   * After each (re)connection: the server's project rules to the host's panels (as an `approvals/rulesChanged` of
   * that server), so a panel that subscribed before the server was ready lists them too. A server before project
   * rules (an error answer) has none; an answer over the bounds is counted as refused.
   */
  private async relayRules(j: Joined): Promise<void> {
    let r: RulesResult;
    try {
      r = await j.link.request('approvals/rules', {}, RulesResult);
    } catch {
      return; // not connected, no such method, or refused (the link counted it)
    }
    const rules = this.rulesOf(j, r.rules);
    if (rules && this.joined.get(j.id) === j)
      this.toApprovalSubscribers('approvals/rulesChanged', { server: j.id, rules });
  }

  /**
   * A joined server's project rules, each tagged with its id (whatever server it named), if within the relay's
   * bounds; else counted as refused, and null.
   */
  private rulesOf(j: Joined, rules: ApprovalRule[]): ApprovalRule[] | null {
    const tagged = rules.map((r) => ({ ...r, server: j.id }));
    if (JSON.stringify(tagged).length > MAX_RELAYED_RULES_BYTES) {
      this.rejected(j, `project rules over ${MAX_RELAYED_RULES_BYTES} bytes`);
      return null;
    }
    return tagged;
  }

  /** `params` if it has the shape of `method`'s notification; otherwise counted as refused. */
  private valid<T>(j: Joined, schema: ZodType<T>, method: string, params: unknown): T | null {
    const r = schema.safeParse(params);
    if (r.success) return r.data;
    this.rejected(j, `a ${method} of the wrong shape`);
    return null;
  }

  /** Runs `f` on what server `j` sent in `what`; if that breaks a bound, drops its link (shown in the Servers view). */
  private bounded(j: Joined, what: string, f: () => void): boolean {
    try {
      f();
      return true;
    } catch (e) {
      if (!(e instanceof JsonBoundError)) throw e;
      j.link.drop(`${what.slice(0, 64)}: ${e.message}`);
      return false;
    }
  }

  private notification(j: Joined, method: string, params: unknown): void {
    this.bounded(j, method, () => this.notified(j, method, params));
  }

  private notified(j: Joined, method: string, params: unknown): void {
    const m = j.mirror;
    const schema = NOTIFICATIONS[method as keyof typeof NOTIFICATIONS];
    if (!schema) {
      this.rejected(j, `a notification ${method.slice(0, 64)}`);
      return;
    }
    const v = this.valid<unknown>(j, schema, method, params);
    if (v === null) return;
    switch (method) {
      case 'monitor/batch':
        m.batch(v as MonitorBatch);
        break;
      case 'monitor/resync':
        m.snapshot(v as MonitorSnapshot);
        break;
      case 'monitor/output': {
        const n = v as MonitorOutputNotification;
        if (!this.follows.has(`${j.id}\u0000${n.sessionId}\u0000${n.processId}`)) {
          this.rejected(j, 'output of a process the host does not follow');
          return;
        }
        m.output(n.sessionId, n.processId, n.seq, n.stream, Buffer.from(n.chunk, 'base64'));
        break;
      }
      case 'approvals/requested': {
        const prompt = m.prompt((v as ApprovalRequestedNotification).prompt);
        if (prompt) this.toApprovalSubscribers('approvals/requested', { prompt });
        break;
      }
      case 'approvals/resolved': {
        const r = v as ApprovalResolvedNotification;
        m.resolved(r.id);
        this.toApprovalSubscribers('approvals/resolved', { ...r, server: j.id });
        break;
      }
      case 'approvals/decisions':
        this.toApprovalSubscribers('approvals/decisions', {
          server: j.id,
          decisions: m.setDecisions((v as ApprovalDecisionsNotification).decisions),
        });
        break;
      case 'approvals/audit': {
        const event = m.approvalEvent((v as ApprovalAuditNotification).event);
        if (event) this.toApprovalSubscribers('approvals/audit', { event });
        break;
      }
      case 'approvals/learningChanged': {
        const learning = this.learningOf(j, (v as LearningChangedNotification).learning);
        // Tagged with the server it came from, whatever `server` it named.
        if (learning) this.toApprovalSubscribers('approvals/learningChanged', { server: j.id, learning });
        break;
      }
      case 'approvals/rulesChanged': {
        const rules = this.rulesOf(j, (v as ApprovalRulesNotification).rules);
        if (rules) this.toApprovalSubscribers('approvals/rulesChanged', { server: j.id, rules });
        break;
      }
    }
  }

  /** A joined server's learning sessions, if within the relay's bounds (else counted as refused, and null). */
  private learningOf<T>(j: Joined, learning: T[]): T[] | null {
    if (learning.length > MAX_RELAYED_LEARNING) {
      this.rejected(j, `learning sessions past ${MAX_RELAYED_LEARNING}`);
      return null;
    }
    if (JSON.stringify(learning).length > MAX_RELAYED_LEARNING_BYTES) {
      this.rejected(j, `learning sessions over ${MAX_RELAYED_LEARNING_BYTES} bytes`);
      return null;
    }
    return learning;
  }

  private cancelled(j: Joined, id: string) {
    return { server: j.id, id, outcome: 'cancelled', released: 0, resolvedAt: this.server.clock.now() };
  }

  // ---- JoinedServers (the monitor's view) ------------------------------------------------------------------------

  servers(): MonitorServer[] {
    return [...this.joined.values()].map((j) => this.record(j));
  }

  *processes(): Iterable<MonitorProcess> {
    for (const j of this.joined.values()) yield* j.mirror.processes.values();
  }

  *sessions(): Iterable<MonitorSession> {
    for (const j of this.joined.values()) yield* j.mirror.sessions.values();
  }

  *blocked(): Iterable<MonitorBlocked> {
    for (const j of this.joined.values()) yield* j.mirror.blocked;
  }

  *audit(): Iterable<MonitorAudit> {
    for (const j of this.joined.values()) yield* j.mirror.audit;
  }

  private get(id: string): Joined {
    const j = this.joined.get(id);
    if (!j) throw invalidRequest(`unknown server ${id}`);
    return j;
  }

  /** A call on a joined server, its error answered as ours (-32600/-32602 kept, the server named). */
  private async call<T>(j: Joined, method: string, params: unknown, schema: ZodType<T>): Promise<T> {
    try {
      return await j.link.request(method, params, schema);
    } catch (e) {
      if (e instanceof RemoteError) {
        const code = e.code === -32600 || e.code === -32602 ? e.code : -32603;
        throw new RpcError(code, `${j.name}: ${e.message}`);
      }
      throw e;
    }
  }

  async forward(id: string, method: string, params: Record<string, unknown>): Promise<unknown> {
    const schema: ZodType | undefined = FORWARDED[method as keyof typeof FORWARDED];
    if (!schema) throw invalidRequest(`${method} is not forwarded to joined servers`);
    return this.call(this.get(id), method, params, schema);
  }

  async follow(
    id: string,
    ref: { sessionId: string; processId: string },
    on: boolean,
  ): Promise<FollowResult> {
    const j = this.get(id);
    const k = `${id}\u0000${ref.sessionId}\u0000${ref.processId}`;
    const n = (this.follows.get(k) ?? 0) + (on ? 1 : -1);
    if (n > 0) this.follows.set(k, n);
    else this.follows.delete(k);
    if (!on && n > 0) return { following: false };
    return this.call(j, 'monitor/follow', { ...ref, follow: on }, FollowResult);
  }

  // ---- methods -------------------------------------------------------------------------------------------------

  /** fleet/* (panel callers only: the method table gates them). */
  private register(): void {
    const s = this.server;
    s.handle('fleet/join', (p) => ({ server: this.join(p) }));
    s.handle('fleet/leave', (p) => ({ left: this.leave(p.server) }));
    s.handle('fleet/list', () => ({ servers: this.servers() }));
    this.extendApprovals();
  }

  private toApprovalSubscribers(method: string, params: unknown): void {
    for (const conn of this.approvalSubscribers) {
      if (conn.closed) this.approvalSubscribers.delete(conn);
      else conn.notify(method, params);
    }
  }

  /** approvals/* of the host, extended: the joined servers' prompts, and `server` to decide on one of theirs. */
  private extendApprovals(): void {
    const s = this.server;
    const extend = <M extends MethodName>(name: M, f: (orig: Handler<M>) => Handler<M>) => {
      const orig = s.handlerOf(name);
      if (orig) s.handle(name, f(orig));
    };
    const withRemote = <T extends { pending: unknown[]; decisions: unknown[]; audit: unknown[] }>(
      l: T,
    ): T => {
      const r = { pending: [...l.pending], decisions: [...l.decisions], audit: [...l.audit] };
      for (const j of this.joined.values()) {
        r.pending.push(...j.mirror.prompts.values());
        r.decisions.push(...j.mirror.decisions);
        r.audit.push(...j.mirror.approvalAudit);
      }
      return { ...l, ...r };
    };
    extend('approvals/subscribe', (orig) => async (p, call) => {
      const local = await orig(p, call);
      this.approvalSubscribers.add(call.conn);
      return withRemote(local as MethodResult<'approvals/subscribe'>);
    });
    extend('approvals/unsubscribe', (orig) => (p, call) => {
      this.approvalSubscribers.delete(call.conn);
      return orig(p, call);
    });
    extend(
      'approvals/list',
      (orig) => async (p, call) => withRemote((await orig(p, call)) as MethodResult<'approvals/list'>),
    );
    extend('approvals/decide', (orig) => (p, call) => {
      if (!p.server) return orig(p, call);
      return this.call(
        this.get(p.server),
        'approvals/decide',
        { id: p.id, decision: p.decision, ...(p.pathPrefix != null ? { pathPrefix: p.pathPrefix } : {}) },
        DecideResult,
      );
    });
    // Approvals v2 on a joined server's cards and workspaces (issue 36): forwarded to that server alone, with the
    // params as the host's table parsed them (less `server`), its answer held to the method's result shape.
    // `shape` checks the answer further (throwing) and gives what the caller gets (its rows tagged with the server).
    const relay = <M extends MethodName>(
      name: M,
      schema: ZodType,
      shape: (r: never, j: Joined) => unknown = (r) => r,
    ) =>
      extend(name, (orig) => async (p, call) => {
        const server = (p as { server?: string | null } | null | undefined)?.server;
        if (!server) return orig(p, call);
        const j = this.get(server);
        const { server: _, ...rest } = p as Record<string, unknown>;
        return shape((await this.call(j, name, rest, schema)) as never, j) as MethodResult<M>;
      });
    relay('approvals/waitForExit', WaitForExitResult);
    relay('approvals/repoPolicy', RepoPolicyState);
    relay('approvals/repoAccept', RepoPolicyState);
    relay('approvals/learn', LearnResult);
    relay('approvals/learnEnd', LearnEndResult);
    relay('approvals/learning', LearningResult, (r: LearningResult, j) => {
      if (this.learningOf(j, r.learning) === null)
        throw new RpcError(-32603, `${j.name}: its learning sessions are over the fleet's bounds`);
      return r;
    });
    // Its project rules: listed (each tagged with the server), toggled or noted; revoked below.
    relay('approvals/rules', RulesResult, (r: RulesResult, j) => {
      const rules = this.rulesOf(j, r.rules);
      if (rules === null)
        throw new RpcError(-32603, `${j.name}: its project rules are over the fleet's bounds`);
      const decisions = r.decisions.slice(0, this.limits.prompts).map((d) => ({ ...d, server: j.id }));
      if (JSON.stringify(decisions).length > MAX_RELAYED_RULES_BYTES) {
        this.rejected(j, `remembered decisions over ${MAX_RELAYED_RULES_BYTES} bytes`);
        throw new RpcError(-32603, `${j.name}: its remembered decisions are over the fleet's bounds`);
      }
      return { ...r, rules, decisions };
    });
    relay('approvals/ruleUpdate', RuleUpdateResult, (r: RuleUpdateResult, j) => ({
      rule: { ...r.rule, server: j.id },
    }));
    extend('approvals/revoke', (orig) => (p, call) => {
      if (!p.server) return orig(p, call);
      return this.call(this.get(p.server), 'approvals/revoke', { id: p.id }, RevokeResult);
    });
    extend('approvals/export', (orig) => (p, call) => {
      if (!p?.server) return orig(p, call);
      return this.call(
        this.get(p.server),
        'approvals/export',
        { sessionId: p.sessionId ?? null },
        ExportResult,
      );
    });
  }
}
