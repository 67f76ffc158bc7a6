/**
 * The method table of the protocol: every request a client may send, with the schema of its params, the schema of its
 * result and who may call it, and every notification with its params. The server registers its handlers against it
 * (src/server/core/dispatch.ts parses each request's params with the schema here before a handler sees them), the panel
 * types its requests with it (renderer/client.ts), and docs/protocol.md and docs/schema/ are generated from it
 * (`npm run docs`).
 *
 * Who may call (`caller`):
 * - `handshake`: any connection, once, before anything else (`initialize`).
 * - `agent`: any initialised connection, on the sessions it created (an agent token is enough).
 * - `panel`: initialised connections that proved the panel credential (the app's own window, the panel token).
 *
 * Pure: no Node, no DOM.
 */
import { z } from 'zod';
import * as approvals from './approvals.js';
import * as audit from './audit.js';
import { DoctorReport } from './doctor.js';
import * as exec from './exec.js';
import * as fleet from './fleet.js';
import * as fs from './fs.js';
import { HostInfo } from './host.js';
import * as monitor from './monitor.js';
import { MonitorSelftestResult } from './selftest.js';

/** The largest message either side sends or accepts, in bytes (a WebSocket frame or an IPC message). */
export const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

export type Caller = 'handshake' | 'agent' | 'panel';

export interface MethodSpec<P extends z.ZodType = z.ZodType, R extends z.ZodType = z.ZodType> {
  readonly caller: Caller;
  readonly params: P;
  /** The struct name that -32602 messages name (serde's dialect: `invalid type: null, expected struct ExecParams`). */
  readonly paramsName: string;
  readonly result: R;
  /** One line for the protocol reference. */
  readonly summary: string;
  /** The -32602 text for a bad top-level member, by its name (shapes picked by key answer their own parser's text). */
  readonly fieldErrors?: FieldErrorMap;
  /** The params of the common shape read without the schema, with its output; undefined: the schema decides. */
  readonly fastParams?: (params: unknown) => z.output<P> | undefined;
}

/** Per top-level param member: the -32602 text for its (bad) value. */
export type FieldErrorMap = Readonly<Record<string, (value: unknown) => string>>;

/** The params of a method that reads none: anything (or nothing) is accepted and ignored. */
export const IgnoredParams = z.unknown();
/** The result of a method that answers nothing but success. */
export const EmptyResult = z.object({});

function method<P extends z.ZodType, R extends z.ZodType>(
  caller: Caller,
  params: P,
  paramsName: string,
  result: R,
  summary: string,
  fieldErrors?: FieldErrorMap,
  fastParams?: (params: unknown) => z.output<P> | undefined,
): MethodSpec<P, R> {
  const spec: MethodSpec<P, R> = fieldErrors
    ? { caller, params, paramsName, result, summary, fieldErrors }
    : { caller, params, paramsName, result, summary };
  return fastParams ? { ...spec, fastParams } : spec;
}

export const METHODS = {
  initialize: method(
    'handshake',
    exec.InitializeParams,
    'InitializeParams',
    exec.InitializeResult,
    'Opens a session (or resumes a detached one by `resumeSessionId`); the client then sends `initialized`.',
  ),
  'process/start': method(
    'agent',
    exec.ExecParams,
    'ExecParams',
    exec.StartResult,
    'Starts a process (sandboxed and behind a managed proxy as asked); its events follow as notifications.',
    exec.EXEC_PARAMS_FIELD_ERRORS,
    exec.execParamsFast,
  ),
  'process/read': method(
    'agent',
    exec.ReadParams,
    'ReadParams',
    exec.ReadResult,
    'Retained output after `afterSeq`, waiting up to `waitMs` for some when there is none yet.',
  ),
  'process/write': method(
    'agent',
    exec.WriteParams,
    'WriteParams',
    exec.WriteResult,
    "Writes base64 bytes to the process's stdin (a PTY, or a pipe started with `pipeStdin`).",
  ),
  'process/terminate': method(
    'agent',
    exec.TerminateParams,
    'TerminateParams',
    exec.TerminateResult,
    'SIGKILLs the process and its process group (and its sandbox).',
  ),
  'process/signal': method(
    'agent',
    exec.SignalParams,
    'SignalParams',
    EmptyResult,
    'Sends SIGINT, SIGTERM or SIGKILL to a running process (0.140+).',
  ),
  'fs/readFile': method(
    'agent',
    fs.ReadFileParams,
    'FsReadFileParams',
    fs.ReadFileResult,
    'Reads a regular file (base64), within the sandbox context the request carries.',
  ),
  'fs/writeFile': method(
    'agent',
    fs.WriteFileParams,
    'FsWriteFileParams',
    EmptyResult,
    'Writes a regular file (base64), within the sandbox context the request carries.',
  ),
  'fs/createDirectory': method(
    'agent',
    fs.CreateDirectoryParams,
    'FsCreateDirectoryParams',
    EmptyResult,
    'Creates a directory (and its parents with `recursive`).',
  ),
  'fs/getMetadata': method(
    'agent',
    fs.GetMetadataParams,
    'FsGetMetadataParams',
    fs.Metadata,
    'Kind, size and times of a path.',
  ),
  'fs/readDirectory': method(
    'agent',
    fs.ReadDirectoryParams,
    'FsReadDirectoryParams',
    fs.ReadDirectoryResult,
    'The entries of a directory.',
  ),
  'fs/remove': method(
    'agent',
    fs.RemoveParams,
    'FsRemoveParams',
    EmptyResult,
    'Removes a file or (with `recursive`) a directory tree.',
  ),
  'fs/copy': method(
    'agent',
    fs.CopyParams,
    'FsCopyParams',
    EmptyResult,
    'Copies a file or (with `recursive`) a directory tree; links are copied as links.',
  ),
  'fs/canonicalize': method(
    'agent',
    fs.CanonicalizeParams,
    'FsCanonicalizeParams',
    fs.CanonicalizeResult,
    'The path with every symlink resolved.',
  ),
  'monitor/subscribe': method(
    'panel',
    monitor.SubscribeParams,
    'SubscribeParams',
    monitor.MonitorSnapshot,
    'A snapshot of every session, process and proxy event (the newest 2000 processes; pages of the rest follow), then live `monitor/batch` notifications.',
  ),
  'monitor/unsubscribe': method(
    'panel',
    IgnoredParams,
    'MonitorUnsubscribeParams',
    EmptyResult,
    'Stops the live `monitor/*` notifications of this connection.',
  ),
  'monitor/follow': method(
    'panel',
    monitor.FollowParams,
    'FollowParams',
    monitor.FollowResult,
    "Streams (or stops streaming) one process's output to a subscriber that asked for `followed` output only; answers its retained tail.",
  ),
  'monitor/read': method(
    'panel',
    monitor.MonitorReadParams,
    'MonitorReadParams',
    monitor.MonitorReadResult,
    "The retained output of any session's process (after `afterSeq`, or the newest before `beforeSeq`).",
  ),
  'monitor/terminate': method(
    'panel',
    monitor.ProcessRef,
    'ProcessRef',
    exec.TerminateResult,
    "SIGKILLs any session's process, as `process/terminate` does.",
  ),
  'monitor/write': method(
    'panel',
    monitor.MonitorWriteParams,
    'MonitorWriteParams',
    exec.WriteResult,
    "Writes to any session's process stdin, as `process/write` does.",
  ),
  'monitor/killSession': method(
    'panel',
    monitor.SessionRef,
    'SessionRef',
    monitor.KillSessionResult,
    'Kills every process of a session now (a detached session need not wait for its grace period).',
  ),
  'monitor/selftest': method(
    'panel',
    IgnoredParams,
    'MonitorSelftestParams',
    MonitorSelftestResult,
    "The last `corral selftest` result kept on the host's machine (its time, and held / broken / not applicable per case), or null when none was kept there.",
  ),
  'policy/preview': method(
    'panel',
    monitor.PolicyPreviewParams,
    'PolicyPreviewParams',
    monitor.PolicyPreviewResult,
    'Validates a sandbox (and managed network) config as `process/start` would, and shows the launch it makes.',
  ),
  'policy/checkUrl': method(
    'panel',
    monitor.CheckUrlParams,
    'CheckUrlParams',
    monitor.CheckUrlResult,
    'The decision a managed proxy with this config would make for this target, with its reason.',
  ),
  'approvals/subscribe': method(
    'panel',
    approvals.EmptyParams,
    'ApprovalsSubscribeParams',
    approvals.ApprovalsSubscribeResult,
    'Pending prompts, remembered decisions and the audit so far, then live `approvals/*` notifications.',
  ),
  'approvals/unsubscribe': method(
    'panel',
    IgnoredParams,
    'ApprovalsUnsubscribeParams',
    EmptyResult,
    'Stops the live `approvals/*` notifications of this connection.',
  ),
  'approvals/list': method(
    'panel',
    approvals.EmptyParams,
    'ApprovalsListParams',
    approvals.ApprovalsState,
    'Pending prompts, remembered decisions and the audit.',
  ),
  'approvals/decide': method(
    'panel',
    approvals.DecideParams,
    'ApprovalDecideParams',
    approvals.DecideResult,
    'Answers a pending prompt: allow or deny once, for the process, for the session (`deny` is for the session), or for the project (a stored rule).',
  ),
  'approvals/revoke': method(
    'panel',
    approvals.RevokeParams,
    'ApprovalRevokeParams',
    approvals.RevokeResult,
    'Forgets a remembered decision or a project rule.',
  ),
  'approvals/hold': method(
    'panel',
    approvals.HoldParams,
    'ApprovalHoldParams',
    approvals.HoldResult,
    "Pauses (holding) or resumes a prompt's countdown while a person reads its card; bounded by MAX_HELD_PROMPT_MS.",
  ),
  'approvals/ruleUpdate': method(
    'panel',
    approvals.RuleUpdateParams,
    'ApprovalRuleUpdateParams',
    approvals.RuleUpdateResult,
    'Turns a project rule off or on (a disabled rule matches nothing), or sets its note.',
  ),
  'approvals/learn': method(
    'panel',
    approvals.LearnParams,
    'ApprovalLearnParams',
    approvals.LearnResult,
    "Learning mode for a workspace: its processes' allowlist misses are allowed and recorded for a bounded time or number of requests.",
  ),
  'approvals/learning': method(
    'panel',
    approvals.LearningParams,
    'ApprovalLearningParams',
    approvals.LearningResult,
    'The learning sessions (of a workspace): active or not, and the proposal each saw (endpoint, hits).',
  ),
  'approvals/learnEnd': method(
    'panel',
    approvals.LearnEndParams,
    'ApprovalLearnEndParams',
    approvals.LearnEndResult,
    'Ends a learning session: the accepted endpoints (only ones it saw) become allow rules of the workspace; the rest is discarded.',
  ),
  'approvals/repoPolicy': method(
    'panel',
    approvals.RepoPolicyParams,
    'ApprovalRepoPolicyParams',
    approvals.RepoPolicyState,
    "A workspace's `.corral/network.json` as read: what it declares (it can only narrow) and what was ignored as widening.",
  ),
  'approvals/waitForExit': method(
    'panel',
    approvals.WaitForExitParams,
    'ApprovalWaitForExitParams',
    approvals.WaitForExitResult,
    "Wait until the process exits: the prompt's countdown stops, its requests wait; the process's exit denies them (nothing stored).",
  ),
  'approvals/repoAccept': method(
    'panel',
    approvals.RepoAcceptParams,
    'ApprovalRepoAcceptParams',
    approvals.RepoPolicyState,
    "Accepts a workspace's `.corral/network.json` as it is now (by its sha256): stored beside the project rules; a later change shows as `changed`.",
  ),
  'approvals/rules': method(
    'panel',
    approvals.RulesParams,
    'ApprovalRulesParams',
    approvals.RulesResult,
    'The project rules (stored, kept across restarts) and the remembered decisions, with where the rules are stored.',
  ),
  'approvals/export': method(
    'panel',
    approvals.ExportParams,
    'ApprovalExportParams',
    approvals.ExportResult,
    'The remembered decisions as a `domains` snippet to paste into a policy.',
  ),
  'audit/query': method(
    'panel',
    audit.AuditQueryRequest,
    'AuditQueryParams',
    audit.AuditQueryResult,
    'One kind of stored audit event, newest first, filtered and paginated by an opaque cursor.',
  ),
  'audit/process': method(
    'panel',
    audit.AuditProcessParams,
    'AuditProcessParams',
    audit.AuditProcessResult,
    'One stored process with its stored output, its network decisions and the fs/* changes of its session.',
  ),
  'audit/replay': method(
    'panel',
    audit.AuditProcessParams,
    'AuditReplayParams',
    audit.AuditReplayResult,
    "One stored process's output as it arrived, each chunk with its time, for replay.",
  ),
  'audit/info': method(
    'panel',
    approvals.EmptyParams,
    'AuditInfoParams',
    audit.AuditInfoResult,
    'Where the audit database is, what it keeps and how much it holds.',
  ),
  'fleet/join': method(
    'panel',
    fleet.JoinParams,
    'FleetJoinParams',
    fleet.JoinResult,
    "Joins another Corral server by URL and its panel credential: its processes, sessions, network events and approvals join this host's feed, tagged with its `server`. A server joined already (the same URL, credential aside, and the same upgrade headers) is refused (-32600), naming the `server` it is.",
  ),
  'fleet/leave': method(
    'panel',
    fleet.LeaveParams,
    'FleetLeaveParams',
    fleet.LeaveResult,
    'Stops watching a joined server (its rows stay, marked stale).',
  ),
  'fleet/list': method(
    'panel',
    IgnoredParams,
    'FleetListParams',
    fleet.ListResult,
    'The joined servers and their link state.',
  ),
  'host/info': method(
    'panel',
    IgnoredParams,
    'HostInfoParams',
    HostInfo,
    'The URLs, mode and version of the Corral host serving this connection.',
  ),
  'host/doctor': method(
    'panel',
    IgnoredParams,
    'HostDoctorParams',
    DoctorReport,
    'What this machine can sandbox (`corral doctor`, with this server’s sandbox options): made once, on the first call (a few sandboxed starts of /bin/true), then the same report.',
  ),
} as const satisfies Record<string, MethodSpec>;

export type Methods = typeof METHODS;
export type MethodName = keyof Methods;
/** What a client sends as the params of `M`. */
export type MethodParams<M extends MethodName> = z.input<Methods[M]['params']>;
/** The params of `M` as a handler gets them, parsed (defaults filled in, paths decoded). */
export type ParsedParams<M extends MethodName> = z.output<Methods[M]['params']>;
export type MethodResult<M extends MethodName> = z.output<Methods[M]['result']>;

export function isMethodName(name: string): name is MethodName {
  return Object.hasOwn(METHODS, name);
}

/** Who receives a notification: `agent`, the connection attached to the process's session; `panel`, subscribers. */
export type Audience = 'agent' | 'panel';

export interface NotificationSpec<P extends z.ZodType = z.ZodType> {
  readonly to: Audience;
  readonly params: P;
  readonly summary: string;
}

function notification<P extends z.ZodType>(to: Audience, params: P, summary: string): NotificationSpec<P> {
  return { to, params, summary };
}

/** Server → client notifications. */
export const NOTIFICATIONS = {
  'process/output': notification(
    'agent',
    exec.OutputNotification,
    'A chunk of output (base64, at most 8 KiB decoded), in seq order with the other events of the process.',
  ),
  'process/exited': notification(
    'agent',
    exec.ExitedNotification,
    'The process exited (128+signal when killed); output may still follow until `process/closed`.',
  ),
  'process/closed': notification(
    'agent',
    exec.ClosedNotification,
    "The process's last event: exited and every stream drained.",
  ),
  'monitor/batch': notification(
    'panel',
    monitor.MonitorBatch,
    'What changed since the last batch (processes, sessions, network events, servers, drops), at most one per `limits.batchMs`; pages of the snapshot carry `snapshotRemaining`.',
  ),
  'monitor/resync': notification(
    'panel',
    monitor.MonitorSnapshot,
    'The subscriber fell so far behind that what was queued for it was dropped: a fresh snapshot (pages follow).',
  ),
  'monitor/output': notification(
    'panel',
    monitor.MonitorOutputNotification,
    "Output of a followed process (or any, with `output: 'all'`), consecutive chunks joined per batch; `skipped` bytes were not sent.",
  ),
  'approvals/requested': notification(
    'panel',
    approvals.ApprovalRequestedNotification,
    'A request to a host neither allowed nor denied is held: decide with `approvals/decide`.',
  ),
  'approvals/resolved': notification(
    'panel',
    approvals.ApprovalResolvedNotification,
    'A prompt ended: decided, timed out or cancelled.',
  ),
  'approvals/decisions': notification(
    'panel',
    approvals.ApprovalDecisionsNotification,
    'The remembered decisions changed.',
  ),
  'approvals/audit': notification('panel', approvals.ApprovalAuditNotification, 'An approval audit event.'),
  'approvals/rulesChanged': notification(
    'panel',
    approvals.ApprovalRulesNotification,
    'The project rules changed (one made or revoked).',
  ),
  'approvals/learningChanged': notification(
    'panel',
    approvals.LearningChangedNotification,
    'The learning sessions changed (one started or ended, a new endpoint seen, or its bound reached).',
  ),
} as const satisfies Record<string, NotificationSpec>;

export type Notifications = typeof NOTIFICATIONS;
export type NotificationName = keyof Notifications;
export type NotificationParams<N extends NotificationName> = z.output<Notifications[N]['params']>;

export interface ServerRequestSpec<P extends z.ZodType = z.ZodType, R extends z.ZodType = z.ZodType> {
  /** Always the connection attached to the process's session, and only if it declared the capability. */
  readonly to: 'agent';
  /** The `initialize` capability a client declares to be sent this request. */
  readonly capability: keyof z.input<typeof exec.ClientCapabilities>;
  readonly params: P;
  readonly result: R;
  readonly summary: string;
}

/** Server → client requests: the client answers them (a client that did not declare the capability is never asked). */
export const SERVER_REQUESTS = {
  [approvals.NETWORK_POLICY_REQUEST_METHOD]: {
    to: 'agent',
    capability: 'networkApprovals',
    params: approvals.NetworkPolicyRequestParams,
    result: approvals.NetworkPolicyRequestResult,
    summary:
      'Decide a network prompt of one of your own processes (the panel is asked at the same time; the first answer wins; `ask` leaves it to the panel; no answer before `expiresAt` fails closed). An answer to anything else closes the connection (1002).',
  },
} as const satisfies Record<string, ServerRequestSpec>;

/** Client → server notifications: `initialized` ends the handshake (its params may be `{}`, null or absent). */
export const CLIENT_NOTIFICATIONS = {
  initialized: {
    params: IgnoredParams,
    summary: 'The client has read the `initialize` result: the session is ready.',
  },
} as const;
