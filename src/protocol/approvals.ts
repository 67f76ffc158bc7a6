/**
 * Wire shapes of interactive network approvals (GitHub issue 7), for panel connections only (the app window, or a
 * WebSocket client holding the panel token). A managed proxy whose config asks for approvals holds a request to a
 * host that is neither allowed nor denied and asks the subscribed clients:
 *
 * - `approvals/subscribe` → `{pending, decisions, audit, timeoutMs}`, then live notifications
 *   `approvals/requested {prompt}`, `approvals/resolved {id, outcome, …}`, `approvals/decisions {decisions}` and
 *   `approvals/audit {event}`; `approvals/unsubscribe` → `{}`.
 * - `approvals/decide {id, decision}` → `{released}`; `approvals/list` → `{pending, decisions, audit}`;
 *   `approvals/revoke {id}` → `{revoked}`; `approvals/export {sessionId?}` → `{domains, json, toml}`.
 *
 * Pure: no Node imports, so the renderer imports these too.
 */
import { z } from 'zod';

export const ApprovalDecision = z.enum(['allowOnce', 'allowProcess', 'allowSession', 'deny']);
export type ApprovalDecision = z.infer<typeof ApprovalDecision>;

/** How a prompt ended: a decision, its timeout, or the process exiting. */
export type ApprovalOutcome = ApprovalDecision | 'timeout' | 'cancelled';

export type ApprovalProtocol = 'http' | 'https_connect' | 'socks5_tcp' | 'socks5_udp';

/** One pending prompt: every held request of one (session, process, protocol, host, port) shares it. */
export interface ApprovalPrompt {
  id: string;
  sessionId: string;
  processId: string;
  clientName: string;
  /** The process's argv (what the agent ran). */
  command: string[];
  cwd: string | null;
  host: string;
  port: number;
  protocol: ApprovalProtocol;
  /** The first held request's method (`GET`, `CONNECT`, …); null for SOCKS. */
  method: string | null;
  /** How many requests are held on this prompt right now. */
  waiting: number;
  /** Epoch ms. */
  requestedAt: number;
  /** Epoch ms: the prompt fails closed (the normal blocked response) at this time. */
  expiresAt: number;
  /** How long the prompt waits (ms): the config's `approval_timeout_ms`, the server's default, or its maximum. */
  timeoutMs: number;
  /** Set when the config asked for longer than the server allows (`--max-approval-timeout-ms`): what it asked. */
  requestedTimeoutMs: number | null;
}

/** A remembered decision: later matching requests follow it without a prompt. Deny entries always win. */
export interface RememberedDecision {
  id: string;
  decision: 'allow' | 'deny';
  /** `process`: this process only; `session`: every process of the session. */
  scope: 'process' | 'session';
  sessionId: string;
  /** Set for `process` scope. */
  processId: string | null;
  host: string;
  port: number;
  protocol: ApprovalProtocol;
  /** Epoch ms. */
  decidedAt: number;
  /** The prompt it came from. */
  promptId: string;
}

/** An audit record of the approval flow (also written to the server log). */
export interface ApprovalAuditEvent {
  seq: number;
  /** Epoch ms. */
  timestamp: number;
  /** `refused`: a prompt was not shown (a cap on pending prompts; see `note`), the request failed closed at once. */
  kind: 'requested' | 'decided' | 'timeout' | 'cancelled' | 'revoked' | 'refused';
  promptId: string | null;
  decisionId: string | null;
  /** For `decided`: the button pressed. */
  decision: ApprovalDecision | null;
  sessionId: string;
  processId: string | null;
  command: string[] | null;
  host: string;
  port: number;
  protocol: ApprovalProtocol;
  method: string | null;
  /** Requests released (allowed or blocked) by this event. */
  released: number;
  /** Why, when the server changed or refused what was asked (a clamped timeout, a cap on pending prompts). */
  note: string | null;
}

export interface ApprovalsState {
  pending: ApprovalPrompt[];
  decisions: RememberedDecision[];
  audit: ApprovalAuditEvent[];
}

export interface ApprovalsSubscribeResult extends ApprovalsState {
  /** The server's default prompt timeout (ms); a config may set its own. */
  timeoutMs: number;
}

export const DecideParams = z.object({ id: z.string().min(1), decision: ApprovalDecision });
export type DecideParams = z.infer<typeof DecideParams>;
export interface DecideResult {
  /** Held requests this decision released (on every prompt it applied to). */
  released: number;
}

export const RevokeParams = z.object({ id: z.string().min(1) });
export interface RevokeResult {
  revoked: boolean;
}

export const ExportParams = z.object({ sessionId: z.string().nullish() }).nullish();
export interface ExportResult {
  /** The `domains` entries to paste into a policy (network-proxy.md §2.1): host → allow|deny. Deny wins. */
  domains: Record<string, 'allow' | 'deny'>;
  /** `{"network":{"domains":{…}}}`, pretty-printed. */
  json: string;
  /** The same as a Codex TOML table (`[permissions.<profile>.network.domains]`). */
  toml: string;
}

/** No params (null, absent or `{}`). */
export const EmptyParams = z.object({}).nullish();

// ---- notifications (server → subscribed privileged client) -------------------------------------------------------

export interface ApprovalRequestedNotification {
  prompt: ApprovalPrompt;
}
export interface ApprovalResolvedNotification {
  id: string;
  outcome: ApprovalOutcome;
  released: number;
  /** Epoch ms. */
  resolvedAt: number;
}
export interface ApprovalDecisionsNotification {
  decisions: RememberedDecision[];
}
export interface ApprovalAuditNotification {
  event: ApprovalAuditEvent;
}

/** Builds the paste-able config snippet for remembered decisions (deny wins over allow for the same host). */
export function exportDomains(
  decisions: readonly Pick<RememberedDecision, 'host' | 'decision'>[],
): ExportResult {
  const domains: Record<string, 'allow' | 'deny'> = {};
  for (const d of decisions) {
    if (d.decision === 'deny') domains[d.host] = 'deny';
    else if (domains[d.host] !== 'deny') domains[d.host] = 'allow';
  }
  const sorted: Record<string, 'allow' | 'deny'> = {};
  for (const k of Object.keys(domains).sort()) sorted[k] = domains[k]!;
  const json = JSON.stringify({ network: { domains: sorted } }, null, 2);
  const toml = [
    '[permissions.workspace.network.domains]',
    ...Object.entries(sorted).map(([k, v]) => `${JSON.stringify(k)} = ${JSON.stringify(v)}`),
  ].join('\n');
  return { domains: sorted, json, toml };
}
