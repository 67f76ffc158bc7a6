/**
 * The records the audit trail stores, as the server side hands them to the store (through the worker): plain data
 * that survives a structured clone. Times are ms since the epoch. Env values never appear here, only names.
 */
import type { FsOperation } from '../protocol/audit.js';
import type { ProcessUsage } from '../protocol/exec.js';
import type { Truncations } from './caps.js';
import type { ReplayChunks } from './replayRecorder.js';

export interface SessionRecord {
  kind: 'session';
  time: number;
  sessionId: string;
  clientName: string;
  event: 'connect' | 'resume' | 'detach' | 'end';
  /** What was cut to fit the caps (caps.ts): `clientName`. */
  truncated?: Truncations;
}

export interface ProcessStartRecord {
  kind: 'processStart';
  time: number;
  sessionId: string;
  processId: string;
  clientName: string;
  argv: string[];
  cwd: string;
  tty: boolean;
  envNames: string[];
  sandboxType: string;
  /**
   * The launch's policy summary, redacted: as its JSON text (what the trail's observer sends: made once per summary
   * and shared with the monitor, redactedJson) or as an object.
   */
  policy: Record<string, unknown> | string | null;
  network: Record<string, unknown> | null;
  metadata: Record<string, unknown> | null;
  pid: number;
  /** What was cut to fit the caps (caps.ts): `argv`, `envNames`, `clientName`. */
  truncated?: Truncations;
}

export interface ProcessExitRecord {
  kind: 'processExit';
  time: number;
  sessionId: string;
  processId: string;
  exitCode: number;
  signal: string | null;
  sandboxDenied: boolean;
  limitHit: string | null;
  /** What the command used (src/process/usage.ts), read at its exit; null when nothing could say. */
  usage?: ProcessUsage | null;
}

export interface ProcessCloseRecord {
  kind: 'processClose';
  time: number;
  sessionId: string;
  processId: string;
  outputBytes: number;
  /** The first bytes of output (own ArrayBuffer: it is transferred to the worker). */
  head: Uint8Array | null;
  tail: Uint8Array | null;
  omittedBytes: number;
  /** The output as it arrived, with its times, for replay (replayRecorder.ts); null or absent: none kept. */
  chunks?: ReplayChunks | null;
}

export interface NetworkRecord {
  kind: 'network';
  time: number;
  sessionId: string | null;
  processId: string | null;
  host: string;
  port: number;
  protocol: string;
  method: string | null;
  decision: 'allow' | 'deny' | 'ask';
  reason: string;
  source: string;
  scope: string | null;
  override: boolean;
  clientAddress: string | null;
  /** conversation.id, app.version, … as the proxy's auditMetadata carried them (secret-looking fields redacted). */
  metadata: Record<string, unknown> | null;
  /** What decided it: the rule's id and origin, and the approval prompt it is tied to (issue 37, item 2). */
  ruleId?: string | null;
  ruleOrigin?: string | null;
  correlationId?: string | null;
  /** `transparent`: a command's plain TCP connect, asked for by the connect supervisor (stored with the protocol). */
  transport?: 'transparent' | null;
}

export interface ApprovalRecord {
  kind: 'approval';
  time: number;
  event: string;
  promptId: string | null;
  decision: string | null;
  scope: string | null;
  decidedBy: string | null;
  sessionId: string;
  processId: string | null;
  command: string[] | null;
  host: string;
  port: number;
  protocol: string;
  method: string | null;
  released: number;
  /** What was cut to fit the caps (caps.ts): `command`. */
  truncated?: Truncations;
}

export interface FsRecord {
  kind: 'fs';
  time: number;
  sessionId: string | null;
  clientName: string | null;
  op: FsOperation;
  path: string;
  destination: string | null;
  bytes: number | null;
  outcome: 'allowed' | 'refused' | 'failed';
  error: string | null;
  /** What was cut to fit the caps (caps.ts): `clientName`, `path`, `destination`, `error`. */
  truncated?: Truncations;
}

export type AuditRecord =
  | SessionRecord
  | ProcessStartRecord
  | ProcessExitRecord
  | ProcessCloseRecord
  | NetworkRecord
  | ApprovalRecord
  | FsRecord;
