/**
 * Every session of the server, and their lifecycle (protocol.md §8): `initialize` opens one (or resumes a detached
 * one by its resume key, for the credential that created it only); a connection that closes detaches its session,
 * whose processes are kept for the resume grace period and then killed, and the session forgotten.
 */
import { randomUUID } from 'node:crypto';
import { type Clock, realClock, type Timer } from '../../clock.js';
import type { ManagedProcess } from '../../process/managedProcess.js';
import { invalidRequest } from '../../protocol/errors.js';
import type { RpcConnection } from '../../rpc/connection.js';
import type { Principal } from './auth.js';
import type { ServerEvents } from './events.js';
import type { RetentionLedger } from './retention.js';
import { Session } from './session.js';

export const DEFAULT_MAX_SESSIONS = 256;
export const DEFAULT_RESUME_GRACE_MS = 10_000;

export interface SessionTableOptions {
  events: ServerEvents;
  retention: RetentionLedger;
  /** How long a detached session survives for `initialize {resumeSessionId}` (ms). 0 kills at once. */
  resumeGraceMs?: number;
  /** Sessions of agents allowed at once, attached or detached; panel sessions are not counted. */
  maxSessions?: number;
  clock?: Clock;
}

export class SessionTable {
  readonly resumeGraceMs: number;
  private readonly maxSessions: number;
  private readonly byId = new Map<string, Session>();
  /** Sessions by their resume key (the `sessionId` a client was given; the panel never sees it). */
  private readonly byResumeKey = new Map<string, Session>();
  private readonly graceTimers = new Map<Session, Timer>();
  private agentSessions = 0;
  private readonly events: ServerEvents;
  private readonly retention: RetentionLedger;
  private readonly clock: Clock;

  constructor(opts: SessionTableOptions) {
    this.events = opts.events;
    this.retention = opts.retention;
    this.resumeGraceMs = opts.resumeGraceMs ?? DEFAULT_RESUME_GRACE_MS;
    this.maxSessions = opts.maxSessions ?? DEFAULT_MAX_SESSIONS;
    this.clock = opts.clock ?? realClock;
  }

  get size(): number {
    return this.byId.size;
  }

  /** A session by its public id (the panel's, the logs', the audit events'). */
  get(id: string): Session | undefined {
    return this.byId.get(id);
  }

  values(): IterableIterator<Session> {
    return this.byId.values();
  }

  /** The session a client's `sessionId` (its resume key) names. */
  byKey(key: string): Session | undefined {
    return this.byResumeKey.get(key);
  }

  /** True while `session` is one of the table's (not expired). */
  holds(session: Session): boolean {
    return this.byId.get(session.id) === session;
  }

  /** Every process of every session. */
  *processes(): Generator<ManagedProcess> {
    for (const s of this.byId.values()) yield* s.processes;
  }

  /** Live processes (and starts in progress) of every session. */
  liveProcessCount(): number {
    let n = 0;
    for (const s of this.byId.values()) n += s.liveProcessCount();
    return n;
  }

  /**
   * The session `initialize` asks for, attached to `conn`: the detached one `resumeKey` names (if `principal` created
   * it), or a new one.
   */
  open(conn: RpcConnection, clientName: string, principal: Principal, resumeKey?: string | null): Session {
    let session: Session;
    if (resumeKey) {
      // The resume key is a secret only its creator was given, and the session is bound to the creator's credential:
      // another agent (even one holding the same token) cannot take over a detached session.
      const existing = this.byResumeKey.get(resumeKey);
      if (!existing || !sameCredential(existing.owner, principal))
        throw invalidRequest(`unknown session id ${resumeKey}`);
      if (existing.conn)
        throw invalidRequest(`session ${resumeKey} is already attached to another connection`);
      this.clock.clearTimeout(this.graceTimers.get(existing));
      this.graceTimers.delete(existing);
      session = existing;
    } else {
      const panel = principal.role === 'panel';
      if (!panel && this.agentSessions >= this.maxSessions) {
        throw invalidRequest(
          `too many sessions on this server (limit ${this.maxSessions}, --max-sessions): close or let detached sessions expire first`,
        );
      }
      session = new Session(randomUUID(), clientName, this.events, {
        resumeKey: randomUUID(),
        owner: principal,
        retention: this.retention.share(() => session.processes),
      });
      this.byId.set(session.id, session);
      this.byResumeKey.set(session.resumeKey, session);
      if (!panel) this.agentSessions++;
      this.events.emitSession('created', session);
    }
    session.attach(conn);
    this.events.emitSession('attached', session);
    return session;
  }

  /** `conn` closed: its session (if it still holds it) is detached, and expires after the grace period. */
  detach(session: Session, conn: RpcConnection, expireNow: boolean): void {
    if (session.conn !== conn) return;
    session.detach(this.clock.now());
    this.events.emitSession('detached', session);
    if (this.resumeGraceMs <= 0 || expireNow) {
      this.expire(session);
      return;
    }
    this.graceTimers.set(
      session,
      this.clock.setTimeout(() => this.expire(session), this.resumeGraceMs).unref(),
    );
  }

  private expire(session: Session): void {
    this.graceTimers.delete(session);
    if (session.conn) return;
    session.killAll();
    if (this.byId.delete(session.id) && session.owner.role !== 'panel') this.agentSessions--;
    this.byResumeKey.delete(session.resumeKey);
    this.retention.forget(session.retention);
    this.events.emitSession('expired', session);
  }

  /** Kills every process of every session (shutdown); detached sessions no longer wait for their grace period. */
  killAll(): void {
    for (const timer of this.graceTimers.values()) this.clock.clearTimeout(timer);
    this.graceTimers.clear();
    for (const s of this.byId.values()) s.killAll();
  }
}

function sameCredential(a: Principal, b: Principal): boolean {
  return a.role === b.role && a.credential === b.credential;
}
