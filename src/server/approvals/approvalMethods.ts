/** The panel's `approvals/*` methods (src/protocol/approvals.ts) on the server's ApprovalBroker (approvals.ts). */
import { invalidRequest } from '../../protocol/errors.js';
import type { ConnState, MethodRegistry } from '../core/dispatch.js';
import type { ApprovalBroker } from './approvals.js';

/** The panel's `approvals/*` methods on `broker`. */
export function registerApprovalMethods(registry: MethodRegistry, broker: ApprovalBroker): void {
  // `server` names a server a fleet host watches (src/fleet serves those calls before these): never this one's.
  const own = (server: string | null | undefined) => {
    if (server) throw invalidRequest(`unknown server ${server}`);
  };
  registry.handle('approvals/subscribe', (_p, { conn }) => broker.subscribe(conn));
  registry.handle('approvals/unsubscribe', (_p, { conn }) => {
    broker.unsubscribe(conn);
    return {};
  });
  registry.handle('approvals/list', () => broker.state());
  registry.handle('approvals/decide', (p, { state }) => {
    own(p.server);
    return broker.applyDecision(p.id, p.decision, panelAnswerer(state), p.pathPrefix ?? null);
  });
  registry.handle('approvals/waitForExit', (p) => {
    own(p.server);
    return broker.waitForExit(p.id);
  });
  registry.handle('approvals/repoAccept', (p, { state }) => {
    own(p.server);
    return broker.acceptRepoPolicy(p.workspace, p.sha256, panelAnswerer(state));
  });
  registry.handle('approvals/revoke', (p) => {
    own(p.server);
    return broker.revoke(p.id);
  });
  registry.handle('approvals/hold', (p, { conn }) => {
    own(p.server);
    return broker.hold(p.id, p.holding, conn);
  });
  registry.handle('approvals/ruleUpdate', (p) => {
    own(p.server);
    return broker.updateRule(p.id, { enabled: p.enabled, note: p.note });
  });
  registry.handle('approvals/learn', (p) => {
    own(p.server);
    return broker.learn(p.workspace, p.durationMs, p.maxRequests);
  });
  registry.handle('approvals/learning', (p) => {
    own(p?.server);
    return broker.learningState(p?.workspace);
  });
  registry.handle('approvals/learnEnd', (p, { state }) => {
    own(p.server);
    return broker.learnEnd(p.workspace, p.accept ?? [], panelAnswerer(state));
  });
  registry.handle('approvals/repoPolicy', (p) => {
    own(p.server);
    return broker.repoPolicy(p.workspace);
  });
  registry.handle('approvals/rules', (p) => {
    own(p?.server);
    return broker.rulesState(p?.workspace);
  });
  registry.handle('approvals/export', (p) => {
    own(p?.server);
    return broker.exportSnippet(p?.sessionId);
  });
}

/** Who answers through a panel method: the connection's credential and client name. */
function panelAnswerer(state: Pick<ConnState, 'principal' | 'clientName'>) {
  return {
    kind: 'panel' as const,
    credential: state.principal.credential,
    clientName: state.clientName || null,
  };
}
