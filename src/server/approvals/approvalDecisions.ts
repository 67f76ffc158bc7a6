/**
 * The decisions an approval remembers (`allowProcess`, `allowSession`, `deny`): later matching requests follow them
 * without a prompt. Deny entries always win over allows; one entry per (scope, session, process, target, decision);
 * at most MAX_REMEMBERED, the oldest allow going first. A process's entries go when it closes, a session's when it
 * expires.
 */
import type { ApprovalProtocol, RememberedDecision } from '../../protocol/approvals.js';
import { protocolCovers } from './projectRules.js';

/** Remembered decisions kept, server-wide (the oldest allow goes first). */
export const MAX_REMEMBERED = 4096;

export class RememberedDecisions {
  private readonly byId = new Map<string, RememberedDecision>();

  list(): RememberedDecision[] {
    return [...this.byId.values()];
  }

  /**
   * The decision that applies to a request of this process, deny first (a CONNECT's also to the requests inside its
   * tunnel when they are intercepted).
   */
  find(
    sessionId: string,
    processId: string,
    protocol: ApprovalProtocol,
    host: string,
    port: number,
  ): RememberedDecision | undefined {
    let allow: RememberedDecision | undefined;
    for (const d of this.byId.values()) {
      if (
        d.sessionId !== sessionId ||
        !protocolCovers(d.protocol, protocol) ||
        d.host !== host ||
        d.port !== port
      )
        continue;
      if (d.scope === 'process' && d.processId !== processId) continue;
      if (d.decision === 'deny') return d;
      allow ??= d;
    }
    return allow;
  }

  add(d: RememberedDecision): void {
    // A repeat replaces the older one.
    for (const [id, x] of this.byId) {
      if (
        x.scope === d.scope &&
        x.sessionId === d.sessionId &&
        x.processId === d.processId &&
        x.protocol === d.protocol &&
        x.host === d.host &&
        x.port === d.port &&
        x.decision === d.decision
      )
        this.byId.delete(id);
    }
    this.byId.set(d.id, d);
    while (this.byId.size > MAX_REMEMBERED) {
      const oldestAllow = [...this.byId.values()].find((x) => x.decision === 'allow');
      const victim = oldestAllow ?? this.byId.values().next().value!;
      this.byId.delete(victim.id);
    }
  }

  /** Forgets one decision; the one it was, if any. */
  remove(id: string): RememberedDecision | undefined {
    const d = this.byId.get(id);
    if (d) this.byId.delete(id);
    return d;
  }

  /** Forgets what `keep` says no to; whether anything went. */
  forget(gone: (d: RememberedDecision) => boolean): boolean {
    let changed = false;
    for (const [id, d] of this.byId) {
      if (!gone(d)) continue;
      this.byId.delete(id);
      changed = true;
    }
    return changed;
  }
}
