/**
 * An open audit database (openStore.ts opens it): what the worker (worker.ts) and `corral audit export` hold. Its
 * parts are files of their own: the writes (recordWriter.ts), the panel's reads (queries.ts), retention
 * (retention.ts); the export reads `db` (export.ts). Synchronous by nature: the server runs it on a worker thread.
 */
import { statSync } from 'node:fs';
import type {
  AuditEventType,
  AuditProcessResult,
  AuditQuery,
  AuditQueryResult,
  AuditReplayResult,
} from '../protocol/audit.js';
import { ChainWriter } from './chain.js';
import type { ChainSigner } from './chainKey.js';
import type { AuditRecord } from './events.js';
import { eventCounts, eventSpan, processDetail, queryEvents } from './queries.js';
import { RecordWriter } from './recordWriter.js';
import { replayResult } from './replay.js';
import { type RetentionOptions, retentionStep, usedBytes } from './retention.js';
import { EVENT_TABLES } from './schema.js';
import type { SqliteDatabase } from './sqliteDriver.js';

export class AuditStore {
  /** Prepared on the first write: a read-only store (the export) may hold an older schema the writes do not fit. */
  private writer: RecordWriter | null = null;
  /** The hash chain's appender (chain.ts), made with the writer. */
  private chain: ChainWriter | null = null;

  constructor(
    readonly db: SqliteDatabase,
    readonly path: string,
    /** Signs the chain's checkpoints and anchors (chainKey.ts); null: chained, not signed (read-only stores). */
    private readonly signer: ChainSigner | null = null,
  ) {}

  get schemaVersion(): number {
    return this.db.pragma('user_version', { simple: true }) as number;
  }

  /** Reads a little of every table (a damaged file usually fails here, at startup, rather than later). */
  probe(): void {
    for (const t of EVENT_TABLES) this.db.prepare(`SELECT * FROM ${t.table} ORDER BY id DESC LIMIT 1`).all();
    this.db.prepare('SELECT process FROM process_output ORDER BY process DESC LIMIT 1').all();
  }

  /** Writes a batch in one transaction. */
  write(records: readonly AuditRecord[]): void {
    if (records.length === 0) return;
    if (!this.writer) this.writer = new RecordWriter(this.db);
    const writer = this.writer;
    const chain = this.chainWriter();
    // One transaction: the rows and their chain entries are committed together or not at all.
    this.db.transaction(() => {
      writer.write(records);
      chain.extend(records);
    })();
  }

  private chainWriter(): ChainWriter {
    if (!this.chain) this.chain = new ChainWriter(this.db, this.signer);
    return this.chain;
  }

  /** Signs the chain's head (at close: the events of this run are then all under a signature). */
  checkpoint(): void {
    if (!this.signer || this.db.readonly) return;
    const chain = this.chainWriter();
    this.db.transaction(() => chain.checkpoint('close')).immediate();
  }

  query(q: AuditQuery): AuditQueryResult {
    return queryEvents(this.db, q);
  }

  /** One process with its stored output, its network decisions and its session's fs changes while it ran. */
  process(sessionId: string, processId: string): AuditProcessResult {
    return processDetail(this.db, sessionId, processId);
  }

  /** One process's output as it arrived, with its times (replay.ts). */
  replay(sessionId: string, processId: string): AuditReplayResult {
    return replayResult(this.db, sessionId, processId);
  }

  counts(): Record<AuditEventType, number> {
    return eventCounts(this.db);
  }

  /** The oldest and newest event time over every table. */
  span(): { oldest: number | null; newest: number | null } {
    return eventSpan(this.db);
  }

  /** Bytes the database's pages use (the file may be larger until freed pages are given back). */
  usedBytes(): number {
    return usedBytes(this.db);
  }

  /** The file's size with its WAL. */
  fileBytes(): number {
    let n = 0;
    for (const ext of ['', '-wal']) {
      try {
        n += statSync(this.path + ext).size;
      } catch {
        // no WAL right now
      }
    }
    return n;
  }

  /** One step of retention (retention.ts); true when there is more to delete. */
  // Real time by default (a worker thread: the server's clock is on the main one); the `retention` request passes `now`.
  retentionStep(opts: RetentionOptions, now = Date.now()): boolean {
    const chain = this.chainWriter();
    const more = retentionStep(this.db, opts, now, (table, ids) => chain.pruned(table, ids));
    // The pass is over: the chain's head whose rows are all gone is cut at a signed anchor.
    if (!more) this.db.transaction(() => chain.cutPrefix(now)).immediate();
    return more;
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}
