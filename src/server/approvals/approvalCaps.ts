/**
 * How many approval prompts may be pending at once: per process, per session and server-wide, so one process cannot
 * crowd out another session's prompt. Past its own caps a miss fails closed at once; at the server-wide cap a session
 * holding fewer prompts than the largest holder takes the room of that holder's oldest prompt.
 */

/** Prompts pending at once, server-wide. */
export const MAX_PENDING_PROMPTS = 1024;
/** Prompts pending at once for one process; past it a new miss of that process fails closed at once. */
export const MAX_PENDING_PER_PROCESS = 16;
/** Prompts pending at once for one session. */
export const MAX_PENDING_PER_SESSION = 64;

export interface PromptLimits {
  maxPending?: number;
  maxPendingPerProcess?: number;
  maxPendingPerSession?: number;
}

/** Room for one more prompt; `refused`: why there is none; `evict`: there is once that session lost its oldest. */
export type Room =
  | { kind: 'free' }
  | { kind: 'refused'; reason: string }
  | { kind: 'evict'; sessionId: string };

export class PromptCaps {
  private readonly total: number;
  private readonly perProcessCap: number;
  private readonly perSessionCap: number;
  /** Pending prompts by `session/process` key, by session, and in all. */
  private readonly perProcess = new Map<string, number>();
  private readonly perSession = new Map<string, number>();
  private pending = 0;
  /** Processes whose refusals have been audited since they last had room (one `refused` event per episode). */
  private readonly refusedNoted = new Set<string>();

  constructor(limits: PromptLimits = {}) {
    this.total = limits.maxPending ?? MAX_PENDING_PROMPTS;
    this.perProcessCap = limits.maxPendingPerProcess ?? MAX_PENDING_PER_PROCESS;
    this.perSessionCap = limits.maxPendingPerSession ?? MAX_PENDING_PER_SESSION;
  }

  /** Room for one more prompt of process `key` in `sessionId`. */
  room(sessionId: string, key: string): Room {
    if ((this.perProcess.get(key) ?? 0) >= this.perProcessCap)
      return {
        kind: 'refused',
        reason: `this process already has ${this.perProcessCap} approval prompts pending (the per-process cap)`,
      };
    const mine = this.perSession.get(sessionId) ?? 0;
    if (mine >= this.perSessionCap)
      return {
        kind: 'refused',
        reason: `this session already has ${this.perSessionCap} approval prompts pending (the per-session cap)`,
      };
    if (this.pending < this.total) return { kind: 'free' };
    let top: string | null = null;
    let most = 0;
    for (const [s, n] of this.perSession) {
      if (n > most) {
        most = n;
        top = s;
      }
    }
    if (top === null || most <= mine + 1)
      return {
        kind: 'refused',
        reason: `the server has ${this.total} approval prompts pending (the server-wide cap)`,
      };
    return { kind: 'evict', sessionId: top };
  }

  /** A prompt of process `key` in `sessionId` began (+1) or ended (-1). */
  count(sessionId: string, key: string, delta: 1 | -1): void {
    const bump = (m: Map<string, number>, k: string) => {
      const n = (m.get(k) ?? 0) + delta;
      if (n <= 0) m.delete(k);
      else m.set(k, n);
    };
    bump(this.perProcess, key);
    bump(this.perSession, sessionId);
    this.pending += delta;
    if (delta < 0) this.refusedNoted.delete(key);
  }

  /** True the first time process `key` is refused since it last had room. */
  firstRefusal(key: string): boolean {
    if (this.refusedNoted.has(key)) return false;
    this.refusedNoted.add(key);
    return true;
  }
}
