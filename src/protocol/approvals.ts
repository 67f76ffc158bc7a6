/**
 * Wire shapes of interactive network approvals (GitHub issue 7), for panel connections only (the app window, or a
 * WebSocket client holding the panel token). A managed proxy whose config asks for approvals holds a request to a
 * host that is neither allowed nor denied and asks the subscribed clients:
 *
 * - `approvals/subscribe` → `{pending, decisions, audit, timeoutMs}`, then live notifications
 *   `approvals/requested {prompt}`, `approvals/resolved {id, outcome, …}`, `approvals/decisions {decisions}` and
 *   `approvals/audit {event}`; `approvals/unsubscribe` → `{}`.
 * - `approvals/decide {id, decision}` → `{released}`; `approvals/list` → `{pending, decisions, audit}`;
 *   `approvals/revoke {id}` → `{revoked}`; `approvals/export {sessionId?}` → `{domains, json, toml}`;
 *   `approvals/rules {workspace?}` → `{rules, decisions, store, problem}` (project rules, stored across restarts),
 *   and `approvals/rulesChanged {rules}` to subscribers.
 *
 * Pure: no Node imports, so the renderer imports these too.
 */
import { z } from 'zod';

/**
 * A person's answer to a prompt. `allowOnce` / `denyOnce` answer the held requests only; `allowProcess` /
 * `denyProcess` are remembered for the process, `allowSession` and `deny` for the session, `allowProject` /
 * `denyProject` as a project rule (the process's workspace: its cwd, or the git top-level above it), stored and kept
 * across restarts. A stored rule matches exactly the prompt's protocol, host and port, and for plain HTTP its method:
 * never a wildcard, never a global allow.
 */
export const ApprovalDecision = z.enum([
  'allowOnce',
  'allowProcess',
  'allowSession',
  'deny',
  'allowProject',
  'denyOnce',
  'denyProcess',
  'denyProject',
]);
export type ApprovalDecision = z.infer<typeof ApprovalDecision>;

/** How a prompt ended: a decision, its timeout, or the process exiting. */
export const ApprovalOutcome = z.enum([...ApprovalDecision.options, 'timeout', 'cancelled']);
export type ApprovalOutcome = z.infer<typeof ApprovalOutcome>;

/**
 * How a request came: plain HTTP (`http`), a CONNECT tunnel (`https_connect`), SOCKS5, or `https`: a request inside a
 * TLS tunnel the proxy intercepts (`mitm`), whose method and path are visible as on plain HTTP.
 */
export const ApprovalProtocol = z.enum(['http', 'https_connect', 'socks5_tcp', 'socks5_udp', 'https']);
export type ApprovalProtocol = z.infer<typeof ApprovalProtocol>;

/** On a fleet host: the server a prompt, decision or audit event belongs to (absent: the host itself). */
const ServerTag = z.string().optional();

/** One pending prompt: every held request of one (session, process, protocol, host, port) shares it. */
export const ApprovalPrompt = z.object({
  server: ServerTag,
  id: z.string(),
  sessionId: z.string(),
  processId: z.string(),
  clientName: z.string(),
  /** The process's argv (what the agent ran). */
  command: z.array(z.string()),
  cwd: z.string().nullable(),
  /**
   * The project a `allowProject` / `denyProject` answer stores its rule for: the real path of the process's cwd, or of
   * the git top-level above it (a directory holding `.git`). Null: none (no cwd; project answers are refused).
   */
  workspace: z.string().nullish(),
  host: z.string(),
  port: z.number(),
  protocol: ApprovalProtocol,
  /** The first held request's method (`GET`, `CONNECT`, …); null for SOCKS. */
  method: z.string().nullable(),
  /**
   * Plain HTTP and `https`: the first held request's path, normalised (`normalizeRequestPath`: no query, `.`/`..`
   * resolved, percent-decoded); null where the path is not visible (CONNECT, SOCKS) or could not be read safely (an encoded
   * slash, a `..` above the root, a control character, …: then no project answer is offered).
   */
  path: z.string().nullish(),
  /**
   * Set once a person chose "wait until the process exits" (`approvals/waitForExit`): no countdown (`expiresAt` no
   * longer applies), the requests wait; the process's exit denies them; nothing is stored.
   */
  waitingForExit: z.boolean().nullish(),
  /** How many requests are held on this prompt right now. */
  waiting: z.number(),
  /** Epoch ms. */
  requestedAt: z.number(),
  /** Epoch ms: the prompt fails closed (the normal blocked response) at this time. */
  expiresAt: z.number(),
  /** How long the prompt waits (ms): the config's `approval_timeout_ms`, the server's default, or its maximum. */
  timeoutMs: z.number(),
  /** Set when the config asked for longer than the server allows (`--max-approval-timeout-ms`): what it asked. */
  requestedTimeoutMs: z.number().nullable(),
  /**
   * Set while a person is reading the card (`approvals/hold`): the countdown is paused with this much left (ms), and
   * `expiresAt` is the latest a held prompt may wait (a bound no hold extends).
   */
  pausedLeftMs: z.number().nullish(),
});
export type ApprovalPrompt = z.infer<typeof ApprovalPrompt>;

/** A remembered decision: later matching requests follow it without a prompt. Deny entries always win. */
export const RememberedDecision = z.object({
  server: ServerTag,
  id: z.string(),
  decision: z.enum(['allow', 'deny']),
  /** `process`: this process only; `session`: every process of the session. */
  scope: z.enum(['process', 'session']),
  sessionId: z.string(),
  /** Set for `process` scope. */
  processId: z.string().nullable(),
  host: z.string(),
  port: z.number(),
  protocol: ApprovalProtocol,
  /** Epoch ms. */
  decidedAt: z.number(),
  /** The prompt it came from. */
  promptId: z.string(),
});
export type RememberedDecision = z.infer<typeof RememberedDecision>;

/** An audit record of the approval flow (also written to the server log). */
/** Who answered a prompt: the panel (app window or panel token), or the client whose process it is. */
export const ApprovalDecidedBy = z.object({
  kind: z.enum(['panel', 'client']),
  /**
   * The credential's name (never its secret): `panel-token`, `ipc`, `remote:<environment>`, `jwt:<iss>/<sub>` (each
   * part percent-encoded, so `jwt:a%2Fb/c` is issuer `a/b`, subject `c`) …
   */
  credential: z.string().max(4096),
  /** The client's `clientName`. */
  clientName: z.string().max(4096).nullable(),
});
export type ApprovalDecidedBy = z.infer<typeof ApprovalDecidedBy>;

export const ApprovalAuditEvent = z.object({
  server: ServerTag,
  seq: z.number(),
  /** Epoch ms. */
  timestamp: z.number(),
  /** `refused`: a prompt was not shown (a cap on pending prompts; see `note`), the request failed closed at once. */
  kind: z.enum(['requested', 'decided', 'timeout', 'cancelled', 'revoked', 'refused']),
  promptId: z.string().nullable(),
  decisionId: z.string().nullable(),
  /** For `decided`: the button pressed. */
  decision: ApprovalDecision.nullable(),
  sessionId: z.string(),
  processId: z.string().nullable(),
  command: z.array(z.string()).nullable(),
  host: z.string(),
  port: z.number(),
  protocol: ApprovalProtocol,
  method: z.string().nullable(),
  /** Requests released (allowed or blocked) by this event. */
  released: z.number(),
  /** Why, when the server changed or refused what was asked (a clamped timeout, a cap on pending prompts). */
  note: z.string().nullable(),
  /** For `decided`: who answered first (the panel, or the process's own client through `network/policyRequest`). */
  decidedBy: ApprovalDecidedBy.nullable(),
});
export type ApprovalAuditEvent = z.infer<typeof ApprovalAuditEvent>;

export const ApprovalsState = z.object({
  pending: z.array(ApprovalPrompt),
  decisions: z.array(RememberedDecision),
  audit: z.array(ApprovalAuditEvent),
});
export type ApprovalsState = z.infer<typeof ApprovalsState>;

export const ApprovalsSubscribeResult = ApprovalsState.extend({
  /** The server's default prompt timeout (ms); a config may set its own. */
  timeoutMs: z.number(),
});
export type ApprovalsSubscribeResult = z.infer<typeof ApprovalsSubscribeResult>;

/** `server`: on a fleet host, the server whose prompt or decision it is (the host forwards the call there). */
const ServerRef = z.string().nullish();

/** The longest path prefix a rule, a proposal or a repository entry may name. */
export const MAX_PATH_PREFIX = 1024;
const PathPrefixParam = z.string().min(1).max(MAX_PATH_PREFIX);

export const DecideParams = z.object({
  server: ServerRef,
  id: z.string().min(1),
  decision: ApprovalDecision,
  /**
   * For `allowProject` / `denyProject` on a plain-HTTP or `https` prompt: the path prefix the rule matches (on segment
   * boundaries), which must contain the prompt's path; absent: the path's first segment (`/api` for `/api/v1/x`).
   */
  pathPrefix: PathPrefixParam.nullish(),
});
export type DecideParams = z.infer<typeof DecideParams>;
export const DecideResult = z.object({
  /** Held requests this decision released (on every prompt it applied to). */
  released: z.number(),
});
export type DecideResult = z.infer<typeof DecideResult>;

/**
 * `holding: true` pauses a prompt's countdown while a person is reading its card (hover, focus); `false` resumes it
 * with the time it had left. A prompt never waits longer than `MAX_HELD_PROMPT_MS` after it was requested, held or
 * not: a holder that goes away without resuming keeps it paused at most until then. The one exception is a person's
 * choice: "wait until the process exits" (`approvals/waitForExit`), bounded by the process's life (and its session's).
 */
export const HoldParams = z.object({
  server: ServerRef,
  id: z.string().min(1).max(200),
  holding: z.boolean(),
});
export const HoldResult = z.object({
  /** Epoch ms: when the prompt fails closed (while held: the bound). */
  expiresAt: z.number(),
  pausedLeftMs: z.number().nullable(),
});
export type HoldResult = z.infer<typeof HoldResult>;
/** The longest a prompt waits after it was requested, however long it is held. */
export const MAX_HELD_PROMPT_MS = 10 * 60_000;

/** `id`: a remembered decision's or a project rule's. */
export const RevokeParams = z.object({ server: ServerRef, id: z.string().min(1) });
export const RevokeResult = z.object({ revoked: z.boolean() });
export type RevokeResult = z.infer<typeof RevokeResult>;

export const ExportParams = z.object({ server: ServerRef, sessionId: z.string().nullish() }).nullish();
export const ExportResult = z.object({
  /** The `domains` entries to paste into a policy (network-proxy.md §2.1): host → allow|deny. Deny wins. */
  domains: z.record(z.string(), z.enum(['allow', 'deny'])),
  /** `{"network":{"domains":{…}}}`, pretty-printed. */
  json: z.string(),
  /** The same as a Codex TOML table (`[permissions.<profile>.network.domains]`). */
  toml: z.string(),
});
export type ExportResult = z.infer<typeof ExportResult>;

/** Who made a project rule: the panel (app window, panel token), or `corral approvals` (the CLI, a panel credential). */
export const ApprovalRuleOrigin = z.enum(['panel', 'cli']);
export type ApprovalRuleOrigin = z.infer<typeof ApprovalRuleOrigin>;

/** The `clientName` `corral approvals` initializes with: its decisions' rules say `origin: cli`. */
export const APPROVALS_CLI_CLIENT_NAME = 'corral-approvals';

/** Project rules kept, server-wide: past it a new rule is refused (said in the error), never an old one dropped. */
export const MAX_PROJECT_RULES = 10_000;
/** The longest note a project rule carries (`approvals/ruleUpdate`). */
export const MAX_RULE_NOTE = 1000;

/**
 * A project rule: stored (beside the audit database), kept across restarts, applied to every later process whose
 * workspace is `workspace`. It matches exactly `protocol`, `host`, `port` and, when set, `method` (plain HTTP). A deny
 * rule wins over an allow rule and over a remembered allow.
 */
export const ApprovalRule = z.object({
  server: ServerTag,
  id: z.string().max(200),
  workspace: z.string().max(4096),
  decision: z.enum(['allow', 'deny']),
  protocol: ApprovalProtocol,
  host: z.string().max(255),
  port: z.number(),
  /** Set for plain HTTP (`GET`, `POST`, …): the rule matches that method only. */
  method: z.string().max(32).nullable(),
  /**
   * Set for plain HTTP and `https`: the rule matches only a request whose normalised path is this prefix or below it, on segment
   * boundaries (`/api` matches `/api` and `/api/x`, never `/apix`); an allow never matches a path that cannot be read
   * safely, a deny always does.
   */
  pathPrefix: z.string().max(MAX_PATH_PREFIX).nullish(),
  origin: ApprovalRuleOrigin,
  /** Who answered the prompt it came from. */
  createdBy: ApprovalDecidedBy,
  /** Epoch ms. */
  createdAt: z.number(),
  /** The prompt it came from. */
  promptId: z.string().max(200).nullable(),
  /** A disabled rule is kept but matches nothing. */
  enabled: z.boolean(),
  note: z.string().max(MAX_RULE_NOTE).nullable(),
  /** Requests it answered. */
  hits: z.number(),
  /** Epoch ms of the last request it answered. */
  lastHitAt: z.number().nullable(),
  /**
   * Set when a configured policy contradicts the rule: an allow whose host the managed network of a process of that
   * workspace denies (its deny list wins: the rule never applies there). Seen live, not stored.
   */
  contradiction: z.string().max(4096).nullish(),
});
export type ApprovalRule = z.infer<typeof ApprovalRule>;

export const RulesParams = z
  .object({
    server: ServerRef,
    /** Only the rules of this workspace (a real path). */
    workspace: z.string().max(4096).nullish(),
  })
  .nullish();
export type RulesParams = z.infer<typeof RulesParams>;
export const RulesResult = z.object({
  /** Project rules, oldest first (at most `MAX_PROJECT_RULES`). */
  rules: z.array(ApprovalRule).max(MAX_PROJECT_RULES),
  /** The remembered decisions of live processes and sessions (gone with them). */
  decisions: z.array(RememberedDecision),
  /** Where project rules are stored; null with `problem` when they cannot be (no audit directory, no SQLite). */
  store: z.string().max(8192).nullable(),
  problem: z.string().max(8192).nullable(),
});
export type RulesResult = z.infer<typeof RulesResult>;

/** Turns a project rule off or on, or sets its note (null clears it); what is absent stays. */
export const RuleUpdateParams = z.object({
  server: ServerRef,
  id: z.string().min(1).max(200),
  enabled: z.boolean().optional(),
  note: z.string().max(MAX_RULE_NOTE).nullable().optional(),
});
export const RuleUpdateResult = z.object({ rule: ApprovalRule });
export type RuleUpdateResult = z.infer<typeof RuleUpdateResult>;

// ---- learning mode (issue 36, item 5) ------------------------------------------------------------------------------

/** One endpoint learning mode saw: exactly what was asked (plain HTTP's method too), and how often. */
export const LearnedEndpoint = z.object({
  protocol: ApprovalProtocol,
  host: z.string().max(255),
  port: z.number().int().min(0).max(65535),
  method: z.string().max(32).nullable(),
  /**
   * Plain HTTP and `https`: the first segment of the normalised path (`/api`), or `/`; absent where the path is not
   * visible.
   */
  pathPrefix: z.string().max(MAX_PATH_PREFIX).nullish(),
});
export type LearnedEndpoint = z.infer<typeof LearnedEndpoint>;

/** The longest a learning session may last, and the most requests it may allow. */
export const MAX_LEARNING_MS = 60 * 60_000;
export const MAX_LEARNING_REQUESTS = 10_000;
/** Distinct endpoints a learning session keeps (past it, a new endpoint is prompted as usual). */
export const MAX_LEARNED_ENDPOINTS = 256;

export const LearningState = z.object({
  workspace: z.string().max(4096),
  /** Epoch ms. */
  startedAt: z.number(),
  /** Epoch ms: learning stops allowing then. */
  endsAt: z.number(),
  maxRequests: z.number(),
  /** Requests allowed and recorded so far. */
  requests: z.number(),
  /** Still allowing (before endsAt, under maxRequests). */
  active: z.boolean(),
  /** The proposal: each endpoint seen, with its hits. */
  proposal: z.array(LearnedEndpoint.extend({ hits: z.number() })).max(MAX_LEARNED_ENDPOINTS),
});
export type LearningState = z.infer<typeof LearningState>;

const WorkspaceParam = z.string().min(1).max(4096);
/**
 * Starts learning for a workspace: its processes' allowlist misses are allowed and recorded (never a host the
 * config denies: those never reach the approvals) until `durationMs` or `maxRequests`, then prompted again.
 */
export const LearnParams = z.object({
  server: ServerRef,
  workspace: WorkspaceParam,
  durationMs: z
    .number()
    .int()
    .min(1000)
    .max(MAX_LEARNING_MS)
    .default(10 * 60_000),
  maxRequests: z.number().int().min(1).max(MAX_LEARNING_REQUESTS).default(1000),
});
export const LearnResult = z.object({ learning: LearningState });
export const LearningParams = z.object({ server: ServerRef, workspace: WorkspaceParam.nullish() }).nullish();
export const LearningResult = z.object({ learning: z.array(LearningState) });
export type LearningResult = z.infer<typeof LearningResult>;
/**
 * Ends a learning session: `accept` (possibly edited down) become allow rules of the workspace, each exactly an
 * endpoint of the proposal (anything it did not see is refused); absent or empty: discarded.
 */
export const LearnEndParams = z.object({
  server: ServerRef,
  workspace: WorkspaceParam,
  accept: z.array(LearnedEndpoint).max(MAX_LEARNED_ENDPOINTS).nullish(),
});
export const LearnEndResult = z.object({ rules: z.array(ApprovalRule).max(MAX_LEARNED_ENDPOINTS) });
/** The learning sessions after a change (one started, ended, or a new endpoint seen, or its bound reached). */
export const LearningChangedNotification = z.object({ server: ServerTag, learning: z.array(LearningState) });
export type LearningChangedNotification = z.infer<typeof LearningChangedNotification>;

/** "Wait until the process exits": the prompt's countdown stops; the process's exit denies what is held. */
export const WaitForExitParams = z.object({ server: ServerRef, id: z.string().min(1).max(200) });
export const WaitForExitResult = z.object({ waiting: z.number() });

/** A workspace's `.corral/network.json` as the server read it: it can only narrow (see repoPolicy.ts). */
export const RepoPolicyState = z.object({
  file: z.string().max(8192).nullable(),
  /** `read`: its endpoints narrow; `invalid`: unreadable (a link, too big, not JSON), narrowing nothing. */
  status: z.enum(['absent', 'read', 'invalid']),
  sha256: z.string().max(64).nullable(),
  /** Endpoints declared (exact ones only). */
  endpoints: z.number(),
  /** What was ignored, and why (each an entry or key that would widen, or could not be read). */
  ignored: z.array(z.string().max(4096)).max(1024),
  problem: z.string().max(8192).nullable(),
  /**
   * Against what the user last accepted (`approvals/repoAccept`, by sha256): `new` (never accepted), `changed` (its
   * hash is not the accepted one), `accepted`. Null without a file. Whatever it says, the file only narrows.
   */
  acceptance: z.enum(['new', 'changed', 'accepted']).nullish(),
  /** The sha256 last accepted for this workspace, when, and by whom (the credential's name). */
  acceptedSha256: z.string().max(64).nullish(),
  acceptedAt: z.number().nullish(),
  acceptedBy: z.string().max(1024).nullish(),
});
export type RepoPolicyState = z.infer<typeof RepoPolicyState>;
export const RepoPolicyParams = z.object({ server: ServerRef, workspace: z.string().min(1).max(4096) });
/** Accepts a workspace's file as it is now: `sha256` must be the hash the person saw (a changed file is refused). */
export const RepoAcceptParams = z.object({
  server: ServerRef,
  workspace: z.string().min(1).max(4096),
  sha256: z.string().regex(/^[0-9a-f]{64}$/, 'expected a lower-case hex sha256'),
});
/** A workspace's acceptance of its file, as stored beside the project rules. */
export const RepoAcceptance = z.object({
  workspace: z.string(),
  sha256: z.string(),
  acceptedAt: z.number(),
  acceptedBy: z.string(),
});
export type RepoAcceptance = z.infer<typeof RepoAcceptance>;

/** The whole list of project rules (of `server`, on a fleet host), after any change. */
export const ApprovalRulesNotification = z.object({
  server: ServerTag,
  rules: z.array(ApprovalRule).max(MAX_PROJECT_RULES),
});
export type ApprovalRulesNotification = z.infer<typeof ApprovalRulesNotification>;

/** No params (null, absent or `{}`). */
export const EmptyParams = z.object({}).nullish();

// ---- notifications (server → subscribed privileged client) -------------------------------------------------------

export const ApprovalRequestedNotification = z.object({ prompt: ApprovalPrompt });
export type ApprovalRequestedNotification = z.infer<typeof ApprovalRequestedNotification>;
export const ApprovalResolvedNotification = z.object({
  server: ServerTag,
  id: z.string(),
  outcome: ApprovalOutcome,
  released: z.number(),
  /** Epoch ms. */
  resolvedAt: z.number(),
});
export type ApprovalResolvedNotification = z.infer<typeof ApprovalResolvedNotification>;
/** The whole list of remembered decisions (of `server`, on a fleet host). */
export const ApprovalDecisionsNotification = z.object({
  server: ServerTag,
  decisions: z.array(RememberedDecision),
});
export type ApprovalDecisionsNotification = z.infer<typeof ApprovalDecisionsNotification>;
export const ApprovalAuditNotification = z.object({ event: ApprovalAuditEvent });
export type ApprovalAuditNotification = z.infer<typeof ApprovalAuditNotification>;

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

// ---- the client as decider: `network/policyRequest` (server → client) ---------------------------------------------

/**
 * The server → client request that asks a client to decide a prompt of one of ITS OWN processes. The method name and
 * the `{processId, request:{protocol, host, port}}` / `{decision:{type}}` shapes follow openai/codex PR #31458
 * ("exec-server: route remote network policy decisions"); the other members are Corral's, additive. Sent only to a
 * client that declared `initialize {capabilities: {networkApprovals: true}}`, and only for processes of the session
 * attached to that connection. The panel is asked at the same time; the first answer wins; no answer before
 * `expiresAt` fails closed.
 */
export const NETWORK_POLICY_REQUEST_METHOD = 'network/policyRequest';

export const NetworkPolicyRequestParams = z.object({
  processId: z.string(),
  request: z.object({
    protocol: ApprovalProtocol,
    host: z.string(),
    port: z.number().int(),
    method: z.string().nullable(),
  }),
  /** Ours: the prompt (the panel shows the same id). */
  promptId: z.string(),
  command: z.array(z.string()),
  /** Epoch ms: the prompt fails closed then. */
  expiresAt: z.number(),
  timeoutMs: z.number(),
});
export type NetworkPolicyRequestParams = z.infer<typeof NetworkPolicyRequestParams>;

/**
 * The client's answer. `allow` may say how long (Corral's `scope`, default `once`): `once` releases the held
 * requests, `process` and `session` are remembered (revocable from the panel). `deny` is remembered for the session.
 * `ask` means the client leaves the decision to the panel (the prompt stays pending until the panel answers or it
 * times out, failing closed).
 */
export const NetworkPolicyDecision = z.discriminatedUnion('type', [
  z.object({ type: z.literal('allow'), scope: z.enum(['once', 'process', 'session']).default('once') }),
  z.object({ type: z.literal('deny'), reason: z.string().max(1024).optional() }),
  z.object({ type: z.literal('ask'), reason: z.string().max(1024).optional() }),
]);
export const NetworkPolicyRequestResult = z.object({ decision: NetworkPolicyDecision });
export type NetworkPolicyRequestResult = z.infer<typeof NetworkPolicyRequestResult>;

/** The decision a client's answer stands for (null: `ask`, the client abstains). */
export function decisionOfClientAnswer(r: NetworkPolicyRequestResult): ApprovalDecision | null {
  const d = r.decision;
  if (d.type === 'deny') return 'deny';
  if (d.type === 'ask') return null;
  return d.scope === 'process' ? 'allowProcess' : d.scope === 'session' ? 'allowSession' : 'allowOnce';
}
