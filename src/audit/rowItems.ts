/**
 * A stored row of the audit database as its wire item (protocol/audit.ts): the one place that knows which column
 * holds which field. Used by the queries (queries.ts) and the export (export.ts).
 */
import type {
  AuditApprovalItem,
  AuditEventType,
  AuditFsItem,
  AuditItem,
  AuditNetworkItem,
  AuditProcessItem,
  AuditSessionItem,
} from '../protocol/audit.js';

/** A row as better-sqlite3 returns it. */
export type Row = Record<string, unknown>;

/** A JSON column's value (null when the column is). */
export const parseJson = <T>(v: unknown, fallback: T): T =>
  typeof v === 'string' ? (JSON.parse(v) as T) : fallback;
const bool = (v: unknown) => v === 1 || v === true;
const str = (v: unknown) => (typeof v === 'string' ? v : null);
const num = (v: unknown) => (typeof v === 'number' ? v : null);

/**
 * A network decision's transport is stored in its `protocol` column (covered by the hash chain, no schema change):
 * `socks5_tcp+transparent` for a command's plain TCP connect that the connect supervisor asked for (issue 35).
 */
const TRANSPARENT_SUFFIX = '+transparent';
export const storedProtocol = (protocol: string, transport?: 'transparent' | null): string =>
  transport === 'transparent' ? `${protocol}${TRANSPARENT_SUFFIX}` : protocol;
function storedTransport(column: string): Pick<AuditNetworkItem, 'protocol' | 'transport'> {
  return column.endsWith(TRANSPARENT_SUFFIX)
    ? { protocol: column.slice(0, -TRANSPARENT_SUFFIX.length), transport: 'transparent' }
    : { protocol: column };
}

/** A stored row as its wire item (protocol/audit.ts). */
export function toItem(type: AuditEventType, r: Row): AuditItem {
  switch (type) {
    case 'session':
      return {
        type,
        id: r.id as number,
        time: r.time as number,
        sessionId: r.session_id as string,
        clientName: r.client_name as string,
        event: r.event as AuditSessionItem['event'],
      };
    case 'process':
      return {
        type,
        id: r.id as number,
        time: r.started_at as number,
        sessionId: r.session_id as string,
        processId: r.process_id as string,
        clientName: r.client_name as string,
        argv: parseJson(r.argv, [] as string[]),
        cwd: r.cwd as string,
        tty: bool(r.tty),
        pid: num(r.pid),
        sandboxType: r.sandbox_type as AuditProcessItem['sandboxType'],
        startedAt: r.started_at as number,
        exitedAt: num(r.exited_at),
        closedAt: num(r.closed_at),
        exitCode: num(r.exit_code),
        signal: str(r.signal),
        limitHit: str(r.limit_hit),
        sandboxDenied: bool(r.sandbox_denied),
        outputBytes: (r.output_bytes as number) ?? 0,
        usage: parseJson(r.usage, null),
      };
    case 'network':
      return {
        type,
        id: r.id as number,
        time: r.time as number,
        sessionId: str(r.session_id),
        processId: str(r.process_id),
        host: r.host as string,
        port: r.port as number,
        ...storedTransport(r.protocol as string),
        method: str(r.method),
        decision: r.decision as AuditNetworkItem['decision'],
        reason: r.reason as string,
        source: r.source as string,
        scope: str(r.scope),
        override: bool(r.override),
        clientAddress: str(r.client_address),
        ruleId: str(r.rule_id),
        ruleOrigin: str(r.rule_origin),
        correlationId: str(r.correlation_id),
      };
    case 'approval':
      return {
        type,
        id: r.id as number,
        time: r.time as number,
        kind: r.kind as string,
        promptId: str(r.prompt_id),
        decision: str(r.decision),
        scope: str(r.scope),
        decidedBy: str(r.decided_by),
        sessionId: r.session_id as string,
        processId: str(r.process_id),
        command: parseJson(r.command, null),
        host: r.host as string,
        port: r.port as number,
        protocol: r.protocol as string,
        method: str(r.method),
        released: (r.released as number) ?? 0,
        correlationId: str(r.correlation_id),
      } satisfies AuditApprovalItem;
    case 'fs':
      return {
        type,
        id: r.id as number,
        time: r.time as number,
        sessionId: str(r.session_id),
        clientName: str(r.client_name),
        op: r.op as AuditFsItem['op'],
        path: r.path as string,
        destination: str(r.destination),
        bytes: num(r.bytes),
        outcome: r.outcome as AuditFsItem['outcome'],
        error: str(r.error),
      };
  }
}
