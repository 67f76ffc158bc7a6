/**
 * Wire shapes of the audit trail (GitHub issue 15), for privileged connections only (the panel, or a WebSocket
 * client holding the server token):
 *
 * - `audit/query {type, since?, until?, sessionId?, processId?, clientName?, text?, exitStatus?, decision?, limit?,
 *   cursor?}` → `{items, nextCursor}`: one kind of stored event, newest first, paginated by an opaque cursor.
 * - `audit/process {sessionId, processId}` → `{process, output, network, files}`: one stored process with its
 *   stored output, its network decisions and the fs/* changes of its session while it ran.
 * - `audit/replay {sessionId, processId}` → `{process, tty, startedAt, chunks, droppedBytes}`: the process's output as
 *   it arrived, with the time of each chunk, for replay (a terminal session in xterm.js, pipes as text with times).
 * - `audit/info` → where the database is, what it keeps (retention) and how much it holds.
 *
 * Times are milliseconds since the epoch. Env values are never stored: processes carry the variable names only.
 * Pure: no Node imports, so the renderer imports these too.
 */
import { z } from 'zod';
import { OutputStream, ProcessUsage } from './exec.js';
import { MonitorAudit, MonitorProcess } from './monitor.js';

export const AuditEventType = z.enum(['session', 'process', 'network', 'approval', 'fs']);
export type AuditEventType = z.infer<typeof AuditEventType>;

/** A time filter: ms since the epoch, or an ISO 8601 string. */
const TimeParam = z.union([
  z.number().int().nonnegative(),
  z
    .string()
    .refine((s) => !Number.isNaN(Date.parse(s)), { message: 'expected an ISO 8601 time' })
    .transform((s) => Date.parse(s)),
]);

export const ExitStatusFilter = z.enum(['success', 'failure', 'signal', 'running', 'denied']);
export type ExitStatusFilter = z.infer<typeof ExitStatusFilter>;

export const MAX_QUERY_LIMIT = 500;

export const AuditQueryParams = z.object({
  type: AuditEventType.default('process'),
  since: TimeParam.nullish(),
  until: TimeParam.nullish(),
  sessionId: z.string().min(1).nullish(),
  processId: z.string().min(1).nullish(),
  clientName: z.string().min(1).nullish(),
  /** Substring, case-insensitive: argv/cwd (processes), host (network), host/command (approvals), path (fs). */
  text: z.string().max(1000).nullish(),
  /** Processes only. `denied`: sandboxDenied. */
  exitStatus: ExitStatusFilter.nullish(),
  /** network: allow | deny | ask; approval: the outcome (allowOnce, …, deny, timeout, cancelled); fs: allowed | refused | failed. */
  decision: z.string().min(1).max(64).nullish(),
  /**
   * network and approval only: the rows of one approval prompt (issue 37, item 2): the network decisions carrying it
   * as their correlation id, or the prompt's own approval rows (its id).
   */
  correlationId: z.string().min(1).max(1024).nullish(),
  limit: z.number().int().min(1).max(MAX_QUERY_LIMIT).default(100),
  /** `nextCursor` of the previous page. */
  cursor: z.string().max(200).nullish(),
});
export type AuditQueryParams = z.input<typeof AuditQueryParams>;
export type AuditQuery = z.output<typeof AuditQueryParams>;
/** `audit/query`'s params as sent: absent or null asks with every default. */
export const AuditQueryRequest = AuditQueryParams.nullish();

export const AuditSessionItem = z.object({
  type: z.literal('session'),
  id: z.number(),
  time: z.number(),
  sessionId: z.string(),
  clientName: z.string(),
  /** connect (a new session), resume (attached again), detach, end (expired or server stopped). */
  event: z.enum(['connect', 'resume', 'detach', 'end']),
});
export type AuditSessionItem = z.infer<typeof AuditSessionItem>;

export const AuditProcessItem = MonitorProcess.pick({
  sessionId: true,
  processId: true,
  clientName: true,
  argv: true,
  cwd: true,
  tty: true,
  sandboxType: true,
  exitedAt: true,
  closedAt: true,
  exitCode: true,
  sandboxDenied: true,
}).extend({
  type: z.literal('process'),
  id: z.number(),
  /** = startedAt. */
  time: z.number(),
  pid: z.number().nullable(),
  startedAt: z.number(),
  /** The signal that killed it (SIGKILL, …), when the spawner reported one. */
  signal: z.string().nullable(),
  /** Which resource limit ended it, when one did. */
  limitHit: z.string().nullable(),
  outputBytes: z.number(),
  /** What it used (ProcessUsage), as stored at its exit; null before schema 3 or when nothing could say. @corral */
  usage: ProcessUsage.nullable().optional(),
});
export type AuditProcessItem = z.infer<typeof AuditProcessItem>;

export const AuditNetworkItem = MonitorAudit.pick({
  host: true,
  port: true,
  decision: true,
  reason: true,
  source: true,
  protocol: true,
  override: true,
  transport: true,
}).extend({
  type: z.literal('network'),
  id: z.number(),
  time: z.number(),
  sessionId: z.string().nullable(),
  processId: z.string().nullable(),
  method: z.string().nullable(),
  scope: z.string().nullable(),
  clientAddress: z.string().nullable(),
  /** What decided it (issue 37, item 2): the rule's id in its origin (`allow:<pattern>`, a project rule's id, …). */
  ruleId: z.string().nullable().optional(),
  /** config, local_guard, limited_mode, default, repository, project, session, panel, harness, timeout, learning, broker. */
  ruleOrigin: z.string().nullable().optional(),
  /** The approval prompt's id when a prompt was involved: the prompt's approval rows carry the same id. */
  correlationId: z.string().nullable().optional(),
});
export type AuditNetworkItem = z.infer<typeof AuditNetworkItem>;

export const AuditApprovalItem = z.object({
  type: z.literal('approval'),
  id: z.number(),
  time: z.number(),
  /** requested, decided, timeout, cancelled (the process exited), revoked. */
  kind: z.string(),
  promptId: z.string().nullable(),
  /** allowOnce | allowProcess | allowSession | deny (decided), else null. */
  decision: z.string().nullable(),
  /** once | process | session, for decisions. */
  scope: z.string().nullable(),
  /** panel | timeout | process-exit, for outcomes. */
  decidedBy: z.string().nullable(),
  sessionId: z.string(),
  processId: z.string().nullable(),
  command: z.array(z.string()).nullable(),
  host: z.string(),
  port: z.number(),
  protocol: z.string(),
  method: z.string().nullable(),
  released: z.number(),
  /** The prompt's id, which the network decisions it answered carry as their correlation id. */
  correlationId: z.string().nullable().optional(),
});
export type AuditApprovalItem = z.infer<typeof AuditApprovalItem>;

export const FsOperation = z.enum([
  'writeFile',
  'createDirectory',
  'copy',
  'remove',
  'readFile',
  'getMetadata',
  'readDirectory',
  'canonicalize',
]);
export type FsOperation = z.infer<typeof FsOperation>;

export const AuditFsItem = z.object({
  type: z.literal('fs'),
  id: z.number(),
  time: z.number(),
  sessionId: z.string().nullable(),
  clientName: z.string().nullable(),
  op: FsOperation,
  path: z.string(),
  /** fs/copy: the destination. */
  destination: z.string().nullable(),
  /** fs/writeFile: bytes written (or that would have been). */
  bytes: z.number().nullable(),
  /** allowed (done), refused (the request's sandbox context refused it), failed (the OS refused it). */
  outcome: z.enum(['allowed', 'refused', 'failed']),
  error: z.string().nullable(),
});
export type AuditFsItem = z.infer<typeof AuditFsItem>;

export const AuditItem = z.discriminatedUnion('type', [
  AuditSessionItem,
  AuditProcessItem,
  AuditNetworkItem,
  AuditApprovalItem,
  AuditFsItem,
]);
export type AuditItem = z.infer<typeof AuditItem>;

export const AuditQueryResult = z.object({
  items: z.array(AuditItem),
  /** Pass as `cursor` for the next (older) page; null when this was the last. */
  nextCursor: z.string().nullable(),
});
export type AuditQueryResult = z.infer<typeof AuditQueryResult>;

export const AuditProcessParams = z.object({ sessionId: z.string().min(1), processId: z.string().min(1) });
export type AuditProcessParams = z.infer<typeof AuditProcessParams>;

export const AuditProcessDetail = AuditProcessItem.extend({
  /** Names of the child's environment variables (never their values). */
  envNames: z.array(z.string()),
  /** The effective sandbox policy summary (redacted like the monitor's). */
  policy: z.record(z.string(), z.unknown()).nullable(),
  /** The managed network proxy's policy: mode, allowed and denied domains, … (null: no managed network). */
  network: z.record(z.string(), z.unknown()).nullable(),
  metadata: z.record(z.string(), z.unknown()).nullable(),
});
export type AuditProcessDetail = z.infer<typeof AuditProcessDetail>;

export const AuditStoredOutput = z.object({
  /** The first bytes of output (stdout, stderr and pty interleaved as produced), base64. */
  head: z.string(),
  /** The last bytes, base64; empty when the head holds everything. */
  tail: z.string(),
  /** Bytes between head and tail that were not stored. */
  omittedBytes: z.number(),
});
export type AuditStoredOutput = z.infer<typeof AuditStoredOutput>;

export const AuditProcessResult = z.object({
  process: AuditProcessDetail.nullable(),
  output: AuditStoredOutput.nullable(),
  network: z.array(AuditNetworkItem),
  /** fs/* changes (and refusals) of the process's session between its start and its close. */
  files: z.array(AuditFsItem),
});
export type AuditProcessResult = z.infer<typeof AuditProcessResult>;

export const AuditInfoResult = z.object({
  enabled: z.boolean(),
  path: z.string().nullable(),
  schemaVersion: z.number().nullable(),
  /** Events older than this are deleted (days). */
  retentionDays: z.number(),
  /** Above this size the oldest events are deleted. */
  maxBytes: z.number(),
  sizeBytes: z.number(),
  /** Per process: the first and the last this many bytes of output are kept. */
  outputBytes: z.number(),
  oldest: z.number().nullable(),
  newest: z.number().nullable(),
  counts: z.record(AuditEventType, z.number()),
  otlpEndpoint: z.string().nullable(),
  /** Problems met at startup or since (a corrupt file moved aside, failed writes, …). */
  notices: z.array(z.string()),
  /**
   * Why nothing is stored although the trail is on: its SQLite driver (better-sqlite3) cannot be loaded in this
   * runtime, with how to fix it. null when it loads or the trail is off (`enabled` false, `path` null).
   */
  unavailable: z.string().nullable(),
});
export type AuditInfoResult = z.infer<typeof AuditInfoResult>;

export const AuditReplayChunk = z.object({
  /** When the chunk arrived (ms since the epoch). */
  at: z.number(),
  stream: OutputStream,
  /** The bytes as written, base64. */
  data: z.string(),
});
export type AuditReplayChunk = z.infer<typeof AuditReplayChunk>;

export const AuditReplayResult = z.object({
  /** null: no such stored process. */
  process: AuditProcessItem.nullable(),
  /** Ran with a PTY: the chunks are a terminal session (replay them into a terminal emulator). */
  tty: z.boolean(),
  startedAt: z.number().nullable(),
  /** Time-ordered; empty when no timed output was stored (an older database, or --audit-output-bytes 0). */
  chunks: z.array(AuditReplayChunk),
  /** Output written after the per-process replay bound was reached, not stored (0: the replay is whole). */
  droppedBytes: z.number(),
});
export type AuditReplayResult = z.infer<typeof AuditReplayResult>;
