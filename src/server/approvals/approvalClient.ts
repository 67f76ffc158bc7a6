/**
 * The agent's own say on its network approvals (approvals.ts): a client that declared
 * `initialize {capabilities: {networkApprovals: true}}` gets a server → client `network/policyRequest` for the prompts
 * of ITS session's processes, on the connection attached to that session, once per connection. Errors, invalid
 * answers, `ask` and silence leave the prompt to the panel and its timeout.
 */
import type { Clock } from '../../clock.js';
import {
  type ApprovalDecidedBy,
  type ApprovalDecision,
  type ApprovalPrompt,
  decisionOfClientAnswer,
  NETWORK_POLICY_REQUEST_METHOD,
  type NetworkPolicyRequestParams,
  NetworkPolicyRequestResult,
} from '../../protocol/approvals.js';
import type { RpcConnection } from '../../rpc/connection.js';
import { clientOf } from '../core/dispatch.js';
import type { Logger } from '../core/log.js';
import type { SessionTable } from '../core/sessions.js';

/** What asking needs of the server. */
export interface ClientAskHost {
  readonly sessions: Pick<SessionTable, 'get'>;
  readonly log: Logger;
  readonly clock: Clock;
}

/**
 * Asks the client of `prompt`'s session (unless `asked` holds its connection already) and calls `decide` with its
 * answer when that is a decision; the caller checks that the prompt is still pending.
 */
export function askSessionClient(
  host: ClientAskHost,
  prompt: ApprovalPrompt,
  asked: WeakSet<RpcConnection>,
  decide: (decision: ApprovalDecision, by: ApprovalDecidedBy) => void,
): void {
  const conn = host.sessions.get(prompt.sessionId)?.conn;
  if (!conn || conn.closed || asked.has(conn)) return;
  const client = clientOf(conn);
  if (!client?.answersNetworkApprovals) return;
  asked.add(conn);
  const params: NetworkPolicyRequestParams = {
    processId: prompt.processId,
    // Codex's clients know four protocols: a request inside an intercepted tunnel is asked as its tunnel (the method
    // says which request; an answer covers the host, as it would have for the CONNECT).
    request: {
      protocol: prompt.protocol === 'https' ? 'https_connect' : prompt.protocol,
      host: prompt.host,
      port: prompt.port,
      method: prompt.method,
    },
    promptId: prompt.id,
    command: prompt.command,
    expiresAt: prompt.expiresAt,
    timeoutMs: prompt.timeoutMs,
  };
  const by: ApprovalDecidedBy = {
    kind: 'client',
    credential: client.principal.credential,
    clientName: client.clientName,
  };
  const wait = Math.max(1, prompt.expiresAt - host.clock.now());
  conn.request(NETWORK_POLICY_REQUEST_METHOD, params, wait).then(
    (result) => {
      const answer = NetworkPolicyRequestResult.safeParse(result);
      if (!answer.success) {
        host.log.warn(
          `approval ${prompt.id}: the client's ${NETWORK_POLICY_REQUEST_METHOD} answer is invalid (${answer.error.issues[0]?.message}); left to the panel`,
        );
        return;
      }
      const decision = decisionOfClientAnswer(answer.data);
      if (decision !== null) decide(decision, by);
    },
    () => {},
  );
}
