/**
 * The audit database's writes: each record kind (events.ts) into its table, a batch in one transaction, through
 * statements prepared once.
 */
import { capText, MAX_LIST_BYTES, type Truncation, truncations } from './caps.js';

/** A rule id or correlation id is kept within this many bytes (a hostile host name or pattern cannot grow a row). */
const MAX_RECEIPT_BYTES = 1024;

import type {
  AuditRecord,
  NetworkRecord,
  ProcessCloseRecord,
  ProcessExitRecord,
  ProcessStartRecord,
} from './events.js';
import { type ReplayChunks, TRUNCATED_STREAM } from './replayRecorder.js';
import { type Row, storedProtocol } from './rowItems.js';
import type { SqliteDatabase } from './sqliteDriver.js';

/** A JSON column's text (null for null or undefined). */
const json = (v: unknown) => (v === null || v === undefined ? null : JSON.stringify(v));

/**
 * A JSON column of text a client chose (policy summary, metadata): its text, or null when that is above
 * MAX_LIST_BYTES, the cut marked in `cut` (JSON cannot be cut and stay JSON).
 */
function cappedJson(v: unknown, field: string, cut: Record<string, Truncation>): string | null {
  return cappedText(json(v), field, cut);
}

/** cappedJson of a value given as its JSON text. */
function cappedText(text: string | null, field: string, cut: Record<string, Truncation>): string | null {
  if (text === null || text.length * 3 <= MAX_LIST_BYTES) return text;
  const n = Buffer.byteLength(text);
  if (n <= MAX_LIST_BYTES) return text;
  cut[field] = { originalBytes: n };
  return null;
}

export class RecordWriter {
  private readonly insertSession;
  private readonly insertProcess;
  private readonly insertDetails;
  private readonly updateExit;
  private readonly updateClose;
  private readonly insertOutput;
  private readonly insertChunk;
  private readonly insertNetwork;
  private readonly insertApproval;
  private readonly insertFs;
  private readonly writeBatch: (records: readonly AuditRecord[]) => void;

  constructor(db: SqliteDatabase) {
    this.insertSession = db.prepare(
      'INSERT INTO sessions (time, session_id, client_name, event, truncated) VALUES (?, ?, ?, ?, ?)',
    );
    this.insertProcess = db.prepare(
      `INSERT OR IGNORE INTO processes (session_id, process_id, client_name, command, cwd, tty, pid, sandbox_type,
         started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.insertDetails = db.prepare(
      `INSERT OR REPLACE INTO process_details (process, argv, env_names, policy, network, metadata, truncated)
         VALUES (?, ?, ?, ?, ?, ?, ?)`,
    );
    this.updateExit = db.prepare(
      `UPDATE processes SET exited_at = ?, exit_code = ?, signal = ?, sandbox_denied = ?, limit_hit = ?, usage = ?
         WHERE session_id = ? AND process_id = ?`,
    );
    this.updateClose = db.prepare(
      'UPDATE processes SET closed_at = ?, output_bytes = ? WHERE session_id = ? AND process_id = ? RETURNING id',
    );
    this.insertOutput = db.prepare(
      'INSERT OR REPLACE INTO process_output (process, head, tail, omitted) VALUES (?, ?, ?, ?)',
    );
    this.insertChunk = db.prepare(
      'INSERT OR REPLACE INTO process_chunks (process, seq, at, stream, data) VALUES (?, ?, ?, ?, ?)',
    );
    this.insertNetwork = db.prepare(
      `INSERT INTO network (time, session_id, process_id, host, port, protocol, method, decision, reason, source,
         scope, override, client_address, metadata, rule_id, rule_origin, correlation_id, truncated)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.insertApproval = db.prepare(
      `INSERT INTO approvals (time, kind, prompt_id, decision, scope, decided_by, session_id, process_id, command,
         host, port, protocol, method, released, correlation_id, truncated)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.insertFs = db.prepare(
      `INSERT INTO fs_events (time, session_id, client_name, op, path, destination, bytes, outcome, error, truncated)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.writeBatch = db.transaction((records: readonly AuditRecord[]) => {
      for (const r of records) this.writeOne(r);
    });
  }

  /** Writes a batch in one transaction. */
  write(records: readonly AuditRecord[]): void {
    if (records.length > 0) this.writeBatch(records);
  }

  private writeOne(r: AuditRecord): void {
    switch (r.kind) {
      case 'session':
        this.insertSession.run(r.time, r.sessionId, r.clientName, r.event, json(r.truncated));
        return;
      case 'processStart':
        this.writeStart(r);
        return;
      case 'processExit':
        this.writeExit(r);
        return;
      case 'processClose':
        this.writeClose(r);
        return;
      case 'network':
        this.writeNetwork(r);
        return;
      case 'approval':
        this.insertApproval.run(
          r.time,
          r.event,
          r.promptId,
          r.decision,
          r.scope,
          r.decidedBy,
          r.sessionId,
          r.processId,
          json(r.command),
          r.host,
          r.port,
          r.protocol,
          r.method,
          r.released,
          // The prompt's id is the correlation id its network decisions carry.
          r.promptId,
          json(r.truncated),
        );
        return;
      case 'fs':
        this.insertFs.run(
          r.time,
          r.sessionId,
          r.clientName,
          r.op,
          r.path,
          r.destination,
          r.bytes,
          r.outcome,
          r.error,
          json(r.truncated),
        );
        return;
    }
  }

  private writeStart(r: ProcessStartRecord): void {
    const info = this.insertProcess.run(
      r.sessionId,
      r.processId,
      r.clientName,
      r.argv.join(' '),
      r.cwd,
      r.tty ? 1 : 0,
      r.pid,
      r.sandboxType,
      r.time,
    );
    if (info.changes === 0) return;
    const cut: Record<string, Truncation> = { ...r.truncated };
    this.insertDetails.run(
      info.lastInsertRowid,
      JSON.stringify(r.argv),
      JSON.stringify(r.envNames),
      typeof r.policy === 'string'
        ? cappedText(r.policy, 'policy', cut)
        : cappedJson(r.policy, 'policy', cut),
      json(r.network),
      cappedJson(r.metadata, 'metadata', cut),
      json(truncations(cut)),
    );
  }

  private writeNetwork(r: NetworkRecord): void {
    const cut: Record<string, Truncation> = {};
    const metadata = cappedJson(r.metadata, 'metadata', cut);
    const ruleId = r.ruleId == null ? null : capText(r.ruleId, 'ruleId', cut, MAX_RECEIPT_BYTES);
    const correlationId =
      r.correlationId == null ? null : capText(r.correlationId, 'correlationId', cut, MAX_RECEIPT_BYTES);
    this.insertNetwork.run(
      r.time,
      r.sessionId,
      r.processId,
      r.host,
      r.port,
      storedProtocol(r.protocol, r.transport),
      r.method,
      r.decision,
      r.reason,
      r.source,
      r.scope,
      r.override ? 1 : 0,
      r.clientAddress,
      metadata,
      ruleId,
      r.ruleOrigin ?? null,
      correlationId,
      json(truncations(cut)),
    );
  }

  private writeExit(r: ProcessExitRecord): void {
    this.updateExit.run(
      r.time,
      r.exitCode,
      r.signal,
      r.sandboxDenied ? 1 : 0,
      r.limitHit,
      json(r.usage),
      r.sessionId,
      r.processId,
    );
  }

  private writeClose(r: ProcessCloseRecord): void {
    const row = this.updateClose.get(r.time, r.outputBytes, r.sessionId, r.processId) as Row | undefined;
    if (!row) return;
    if (r.chunks) this.writeChunks(row.id as number, r.chunks, r.time);
    if (!r.head && !r.tail) return;
    this.insertOutput.run(
      row.id,
      r.head ? Buffer.from(r.head) : null,
      r.tail ? Buffer.from(r.tail) : null,
      r.omittedBytes,
    );
  }

  /** The timed output (replayRecorder.ts), a row per part, then the `truncated` mark when some was dropped. */
  private writeChunks(process: number, c: ReplayChunks, closedAt: number): void {
    const data = Buffer.from(c.data.buffer, c.data.byteOffset, c.data.byteLength);
    let off = 0;
    let seq = 0;
    for (const p of c.parts) {
      this.insertChunk.run(process, seq++, p.at, p.stream, data.subarray(off, off + p.bytes));
      off += p.bytes;
    }
    if (c.droppedBytes > 0)
      this.insertChunk.run(process, seq, closedAt, TRUNCATED_STREAM, Buffer.from(String(c.droppedBytes)));
  }
}
