/**
 * The audit database: one SQLite file (better-sqlite3, WAL mode) that outlives the server. Everything SQLite-specific
 * lives here: opening (with the checks for an unreadable, corrupt or newer file), migrations, batched writes,
 * queries, retention and the rows of an export. Synchronous by nature: the server runs it on a worker thread
 * (worker.ts); `corral audit export` uses it directly.
 *
 * Durability: WAL with synchronous=NORMAL. A committed batch survives the server being killed (SIGKILL, a crash):
 * it is in the WAL file in the kernel's page cache. A power cut may lose the last commits (never the file itself).
 */
import {
  chmodSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readSync,
  renameSync,
  statSync,
} from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import type {
  AuditApprovalItem,
  AuditEventType,
  AuditFsItem,
  AuditItem,
  AuditNetworkItem,
  AuditProcessDetail,
  AuditProcessItem,
  AuditProcessResult,
  AuditQuery,
  AuditQueryResult,
  AuditSessionItem,
} from '../protocol/audit.js';
import type { AuditRecord, ProcessCloseRecord, ProcessExitRecord, ProcessStartRecord } from './events.js';
import { EVENT_TABLES, MIGRATIONS, SCHEMA_VERSION } from './schema.js';

type Db = Database.Database;
type Row = Record<string, unknown>;

/** The database cannot be used and must not be touched (a newer schema), or could not be created at all. */
export class AuditDbError extends Error {
  constructor(
    message: string,
    readonly path: string,
  ) {
    super(message);
    this.name = 'AuditDbError';
  }
}

export interface StoreOptions {
  /** Make the directory 0700 even if it exists (the default directory is ours). */
  ownDirectory?: boolean;
  /** Called with what a person should know (a file moved aside, permissions tightened). */
  notice?: (text: string) => void;
  /** busy_timeout (ms): another Corral may be writing the same file. */
  busyTimeoutMs?: number;
  readonly?: boolean;
}

const SQLITE_MAGIC = Buffer.from('SQLite format 3\0', 'latin1');

/** SQLite's codes for a file that is not (or no longer) a usable database. */
export function isCorruption(e: unknown): boolean {
  const code = (e as { code?: unknown }).code;
  return code === 'SQLITE_CORRUPT' || code === 'SQLITE_NOTADB' || code === 'SQLITE_CORRUPT_VTAB';
}

/** What the first 100 bytes say: missing/empty, a SQLite file of some user_version, or not a database. */
function inspectHeader(path: string): { state: 'absent' | 'empty' | 'sqlite' | 'garbage'; version: number } {
  if (!existsSync(path)) return { state: 'absent', version: 0 };
  const fd = openSync(path, 'r');
  try {
    const head = Buffer.alloc(100);
    let n = readSync(fd, head, 0, 100, 0);
    // Another Corral may be creating the file this instant: give a short header a moment before calling it bad.
    for (let i = 0; i < 4 && n > 0 && n < 100; i++) {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
      n = readSync(fd, head, 0, 100, 0);
    }
    if (n === 0) return { state: 'empty', version: 0 };
    if (n < 100 || !head.subarray(0, 16).equals(SQLITE_MAGIC)) return { state: 'garbage', version: 0 };
    return { state: 'sqlite', version: head.readUInt32BE(60) };
  } finally {
    closeSync(fd);
  }
}

/** Renames the file (and its -wal/-shm) to `<path>.corrupt-<time>`; returns the new name. */
export function moveAside(path: string): string {
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const to = `${path}.corrupt-${stamp}`;
  renameSync(path, to);
  for (const ext of ['-wal', '-shm']) {
    if (existsSync(path + ext)) renameSync(path + ext, to + ext);
  }
  return to;
}

function newerError(path: string, version: number): AuditDbError {
  return new AuditDbError(
    `audit database ${path} has schema version ${version}, written by a newer Corral (this one knows up to ` +
      `${SCHEMA_VERSION}): refusing to use or change it. Point --audit-db at another file, or run with --no-audit`,
    path,
  );
}

/** Creates the directory (0700, and the file 0600) if missing. */
function prepareDirectory(path: string, opts: StoreOptions): void {
  const dir = dirname(path);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (opts.ownDirectory) chmodSync(dir, 0o700);
}

/** Creates the file 0600, or tightens an existing one to 0600 (throws EPERM when it is someone else's). */
function prepareFile(path: string, exists: boolean, opts: StoreOptions): void {
  if (!exists) {
    closeSync(openSync(path, 'wx', 0o600));
    return;
  }
  const mode = statSync(path).mode & 0o777;
  if (mode !== 0o600) {
    chmodSync(path, 0o600);
    opts.notice?.(`audit database ${path} had mode ${mode.toString(8)}: set to 600`);
  }
}

function configure(db: Db, opts: StoreOptions): void {
  db.pragma(`busy_timeout = ${opts.busyTimeoutMs ?? 5000}`);
  if (opts.readonly) return;
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
}

/**
 * Brings the schema up to date in one IMMEDIATE transaction (several Corral servers may open a new file at once: the
 * second waits for the first and then finds nothing to do).
 */
function migrate(db: Db, path: string): number {
  db.transaction(() => {
    const version = db.pragma('user_version', { simple: true }) as number;
    if (version > SCHEMA_VERSION) throw newerError(path, version);
    for (let v = version; v < SCHEMA_VERSION; v++) db.exec(MIGRATIONS[v]!);
    if (version !== SCHEMA_VERSION) db.pragma(`user_version = ${SCHEMA_VERSION}`);
  }).immediate();
  return SCHEMA_VERSION;
}

/**
 * Opens (creating it if needed) the audit database at `path`. An unreadable or corrupt file is moved aside (and
 * reported through `notice`, with both names) and a fresh database started; a file of a newer schema version is
 * refused with an AuditDbError and left exactly as it was.
 */
export function openAuditStore(path: string, opts: StoreOptions = {}): AuditStore {
  let header: ReturnType<typeof inspectHeader>;
  try {
    if (!opts.readonly) prepareDirectory(path, opts);
    header = inspectHeader(path);
    if (!opts.readonly) prepareFile(path, header.state !== 'absent', opts);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (opts.readonly || (code !== 'EACCES' && code !== 'EPERM' && code !== 'EISDIR'))
      throw new AuditDbError(`cannot open audit database ${path}: ${(e as Error).message}`, path);
    const aside = moveAside(path);
    opts.notice?.(
      `audit database ${path} is unreadable (${(e as Error).message}): moved it to ${aside}, started a fresh one`,
    );
    return openAuditStore(path, opts);
  }
  if (header.state === 'sqlite' && header.version > SCHEMA_VERSION) throw newerError(path, header.version);
  if (header.state === 'garbage') {
    if (opts.readonly) throw new AuditDbError(`${path} is not an audit database (not a SQLite file)`, path);
    const aside = moveAside(path);
    opts.notice?.(
      `audit database ${path} is corrupt (not a SQLite file): moved it to ${aside}, started a fresh one`,
    );
    return openAuditStore(path, opts);
  }
  let db: Db | null = null;
  try {
    db = new Database(path, { readonly: opts.readonly ?? false, fileMustExist: opts.readonly ?? false });
    // Only a new database takes it, before anything is written (WAL mode included): then retention can give freed
    // pages back to the file system.
    if (!opts.readonly && header.state !== 'sqlite') db.pragma('auto_vacuum = INCREMENTAL');
    configure(db, opts);
    const version = opts.readonly
      ? (db.pragma('user_version', { simple: true }) as number)
      : migrate(db, path);
    if (version > SCHEMA_VERSION) throw newerError(path, version);
    if (opts.readonly && version < SCHEMA_VERSION)
      throw new AuditDbError(
        `${path} has schema version ${version}; open it with the server once to migrate`,
        path,
      );
    const store = new AuditStore(db, path);
    store.probe();
    return store;
  } catch (e) {
    db?.close();
    if (e instanceof AuditDbError) throw e;
    if (!isCorruption(e) || opts.readonly)
      throw new AuditDbError(`cannot open audit database ${path}: ${(e as Error).message}`, path);
    const aside = moveAside(path);
    opts.notice?.(
      `audit database ${path} is corrupt (${(e as Error).message}): moved it to ${aside}, started a fresh one`,
    );
    return openAuditStore(path, opts);
  }
}

const json = (v: unknown) => (v === null || v === undefined ? null : JSON.stringify(v));
const parse = <T>(v: unknown, fallback: T): T => (typeof v === 'string' ? (JSON.parse(v) as T) : fallback);
const likePattern = (text: string) => `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

/**
 * The keyset cursor: the id of the last item of a page. Lists go newest first by id, that is in the order events
 * were recorded (their time order, give or take one batch when several servers share the file): a search then scans
 * the table in its own order, ~3x faster than through the time index (a text search over 100k processes: ~45 ms vs
 * ~130 ms on the 2-core machine).
 */
function decodeCursor(cursor: string): number | null {
  return /^\d+$/.test(cursor) ? Number(cursor) : null;
}

export interface RetentionOptions {
  maxAgeMs: number;
  maxBytes: number;
  /** Rows deleted per transaction (between them, the worker writes incoming batches). */
  chunkRows?: number;
}

export class AuditStore {
  private readonly insertSession;
  private readonly insertProcess;
  private readonly insertDetails;
  private readonly updateExit;
  private readonly updateClose;
  private readonly insertOutput;
  private readonly insertNetwork;
  private readonly insertApproval;
  private readonly insertFs;
  private readonly writeBatch: (records: readonly AuditRecord[]) => void;

  constructor(
    readonly db: Db,
    readonly path: string,
  ) {
    this.insertSession = db.prepare(
      'INSERT INTO sessions (time, session_id, client_name, event) VALUES (?, ?, ?, ?)',
    );
    this.insertProcess = db.prepare(
      `INSERT OR IGNORE INTO processes (session_id, process_id, client_name, command, cwd, tty, pid, sandbox_type,
         started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.insertDetails = db.prepare(
      'INSERT OR REPLACE INTO process_details (process, argv, env_names, policy, network, metadata) VALUES (?, ?, ?, ?, ?, ?)',
    );
    this.updateExit = db.prepare(
      `UPDATE processes SET exited_at = ?, exit_code = ?, signal = ?, sandbox_denied = ?, limit_hit = ?
         WHERE session_id = ? AND process_id = ?`,
    );
    this.updateClose = db.prepare(
      'UPDATE processes SET closed_at = ?, output_bytes = ? WHERE session_id = ? AND process_id = ? RETURNING id',
    );
    this.insertOutput = db.prepare(
      'INSERT OR REPLACE INTO process_output (process, head, tail, omitted) VALUES (?, ?, ?, ?)',
    );
    this.insertNetwork = db.prepare(
      `INSERT INTO network (time, session_id, process_id, host, port, protocol, method, decision, reason, source,
         scope, override, client_address, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.insertApproval = db.prepare(
      `INSERT INTO approvals (time, kind, prompt_id, decision, scope, decided_by, session_id, process_id, command,
         host, port, protocol, method, released) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.insertFs = db.prepare(
      `INSERT INTO fs_events (time, session_id, client_name, op, path, destination, bytes, outcome, error)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.writeBatch = db.transaction((records: readonly AuditRecord[]) => {
      for (const r of records) this.writeOne(r);
    });
  }

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
    if (records.length > 0) this.writeBatch(records);
  }

  private writeOne(r: AuditRecord): void {
    switch (r.kind) {
      case 'session':
        this.insertSession.run(r.time, r.sessionId, r.clientName, r.event);
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
        this.insertNetwork.run(
          r.time,
          r.sessionId,
          r.processId,
          r.host,
          r.port,
          r.protocol,
          r.method,
          r.decision,
          r.reason,
          r.source,
          r.scope,
          r.override ? 1 : 0,
          r.clientAddress,
          json(r.metadata),
        );
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
    this.insertDetails.run(
      info.lastInsertRowid,
      JSON.stringify(r.argv),
      JSON.stringify(r.envNames),
      json(r.policy),
      json(r.network),
      json(r.metadata),
    );
  }

  private writeExit(r: ProcessExitRecord): void {
    this.updateExit.run(
      r.time,
      r.exitCode,
      r.signal,
      r.sandboxDenied ? 1 : 0,
      r.limitHit,
      r.sessionId,
      r.processId,
    );
  }

  private writeClose(r: ProcessCloseRecord): void {
    const row = this.updateClose.get(r.time, r.outputBytes, r.sessionId, r.processId) as Row | undefined;
    if (!row || (!r.head && !r.tail)) return;
    this.insertOutput.run(
      row.id,
      r.head ? Buffer.from(r.head) : null,
      r.tail ? Buffer.from(r.tail) : null,
      r.omittedBytes,
    );
  }

  // ---- queries ---------------------------------------------------------------------------------------------------

  query(q: AuditQuery): AuditQueryResult {
    const t = EVENT_TABLES.find((x) => x.type === q.type)!;
    const where: string[] = [];
    const args: unknown[] = [];
    const time = q.type === 'process' ? 'p.started_at' : 'e.time';
    if (q.since !== null && q.since !== undefined) {
      where.push(`${time} >= ?`);
      args.push(q.since);
    }
    if (q.until !== null && q.until !== undefined) {
      where.push(`${time} <= ?`);
      args.push(q.until);
    }
    const col = (name: string) => (q.type === 'process' ? `p.${name}` : `e.${name}`);
    if (q.sessionId) {
      where.push(`${col('session_id')} = ?`);
      args.push(q.sessionId);
    }
    if (q.processId && q.type !== 'session') {
      where.push(`${col('process_id')} = ?`);
      args.push(q.processId);
    }
    if (q.clientName) {
      if (q.type === 'process' || q.type === 'session' || q.type === 'fs') {
        where.push(`${col('client_name')} = ?`);
        args.push(q.clientName);
      } else {
        // network and approval events carry no client: match through the session's processes.
        where.push('e.session_id IN (SELECT DISTINCT session_id FROM processes WHERE client_name = ?)');
        args.push(q.clientName);
      }
    }
    if (q.text) {
      const like = likePattern(q.text);
      const fields =
        q.type === 'process'
          ? ['p.command', 'p.cwd']
          : q.type === 'network'
            ? ['e.host']
            : q.type === 'approval'
              ? ['e.host', 'e.command']
              : q.type === 'fs'
                ? ['e.path', 'e.destination']
                : ['e.client_name', 'e.session_id'];
      where.push(`(${fields.map((f) => `${f} LIKE ? ESCAPE '\\'`).join(' OR ')})`);
      for (const _ of fields) args.push(like);
    }
    if (q.type === 'process' && q.exitStatus) {
      where.push(
        {
          success: 'p.exit_code = 0',
          failure: 'p.exit_code <> 0 AND p.signal IS NULL',
          signal: 'p.signal IS NOT NULL',
          running: 'p.exited_at IS NULL',
          denied: 'p.sandbox_denied = 1',
        }[q.exitStatus],
      );
    }
    if (q.decision) {
      const c = { network: 'e.decision', approval: 'COALESCE(e.decision, e.kind)', fs: 'e.outcome' }[
        q.type as 'network' | 'approval' | 'fs'
      ];
      if (c) {
        where.push(`${c} = ?`);
        args.push(q.decision);
      }
    }
    if (q.cursor) {
      const before = decodeCursor(q.cursor);
      if (before !== null) {
        where.push(`${col('id')} < ?`);
        args.push(before);
      }
    }
    const from =
      q.type === 'process' ? 'processes p LEFT JOIN process_details d ON d.process = p.id' : `${t.table} e`;
    const select = q.type === 'process' ? 'p.*, d.argv AS argv' : 'e.*';
    const sql =
      `SELECT ${select} FROM ${from}${where.length > 0 ? ` WHERE ${where.join(' AND ')}` : ''} ` +
      `ORDER BY ${col('id')} DESC LIMIT ?`;
    const rows = this.db.prepare(sql).all(...args, q.limit + 1) as Row[];
    const more = rows.length > q.limit;
    const items = rows.slice(0, q.limit).map((r) => toItem(q.type, r));
    const last = items[items.length - 1];
    return { items, nextCursor: more && last ? String(last.id) : null };
  }

  /** One process with its stored output, its network decisions and its session's fs changes while it ran. */
  process(sessionId: string, processId: string): AuditProcessResult {
    const row = this.db
      .prepare(
        `SELECT p.*, d.argv, d.env_names, d.policy, d.network, d.metadata FROM processes p
           LEFT JOIN process_details d ON d.process = p.id WHERE p.session_id = ? AND p.process_id = ?`,
      )
      .get(sessionId, processId) as Row | undefined;
    if (!row) return { process: null, output: null, network: [], files: [] };
    const base = toItem('process', row) as AuditProcessItem;
    const detail: AuditProcessDetail = {
      ...base,
      envNames: parse(row.env_names, []),
      policy: parse(row.policy, null),
      network: parse(row.network, null),
      metadata: parse(row.metadata, null),
    };
    const out = this.db
      .prepare('SELECT head, tail, omitted FROM process_output WHERE process = ?')
      .get(row.id) as Row | undefined;
    const network = (
      this.db
        .prepare('SELECT * FROM network WHERE session_id = ? AND process_id = ? ORDER BY time, id LIMIT 1000')
        .all(sessionId, processId) as Row[]
    ).map((r) => toItem('network', r) as AuditNetworkItem);
    const end = (row.closed_at as number | null) ?? (row.exited_at as number | null) ?? Date.now();
    const files = (
      this.db
        .prepare(
          'SELECT * FROM fs_events WHERE session_id = ? AND time >= ? AND time <= ? ORDER BY time, id LIMIT 1000',
        )
        .all(sessionId, row.started_at, end) as Row[]
    ).map((r) => toItem('fs', r) as AuditFsItem);
    return {
      process: detail,
      output: out
        ? {
            head: out.head ? (out.head as Buffer).toString('base64') : '',
            tail: out.tail ? (out.tail as Buffer).toString('base64') : '',
            omittedBytes: out.omitted as number,
          }
        : null,
      network,
      files,
    };
  }

  counts(): Record<AuditEventType, number> {
    const out = {} as Record<AuditEventType, number>;
    for (const t of EVENT_TABLES) {
      // max(id) - min(id) + 1 would be O(1) but wrong after deletes in the middle; count(*) over an index is fast.
      out[t.type] = (this.db.prepare(`SELECT count(*) AS n FROM ${t.table}`).get() as Row).n as number;
    }
    return out;
  }

  /** The oldest and newest event time over every table. */
  span(): { oldest: number | null; newest: number | null } {
    let oldest: number | null = null;
    let newest: number | null = null;
    for (const t of EVENT_TABLES) {
      const r = this.db
        .prepare(`SELECT min(${t.time}) AS lo, max(${t.time}) AS hi FROM ${t.table}`)
        .get() as Row;
      if (typeof r.lo === 'number') oldest = oldest === null ? r.lo : Math.min(oldest, r.lo);
      if (typeof r.hi === 'number') newest = newest === null ? r.hi : Math.max(newest, r.hi);
    }
    return { oldest, newest };
  }

  /** Bytes the database's pages use (the file may be larger until freed pages are given back). */
  usedBytes(): number {
    const pageSize = this.db.pragma('page_size', { simple: true }) as number;
    const pages = this.db.pragma('page_count', { simple: true }) as number;
    const free = this.db.pragma('freelist_count', { simple: true }) as number;
    return (pages - free) * pageSize;
  }

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

  // ---- retention -------------------------------------------------------------------------------------------------

  /**
   * One step of retention: deletes up to `chunkRows` of the oldest events that are past the age limit or, while the
   * database is above the size limit, the oldest events of all. Returns true when there is more to delete (call
   * again after letting writes through). Frees the pages at the end.
   */
  retentionStep(opts: RetentionOptions, now = Date.now()): boolean {
    const chunk = opts.chunkRows ?? 2000;
    const cutoff = now - opts.maxAgeMs;
    let deleted = 0;
    this.db.transaction(() => {
      for (const t of EVENT_TABLES) {
        deleted += this.deleteOlder(t.table, t.time, cutoff, chunk);
      }
      if (deleted === 0 && this.usedBytes() > opts.maxBytes) {
        // Over the size limit: the oldest events go, whatever their type. The cutoff is the earliest of the tables'
        // `chunk`-th oldest times, so no table loses more than `chunk` rows and nothing newer than it goes first.
        let sizeCutoff = Number.POSITIVE_INFINITY;
        for (const t of EVENT_TABLES) {
          // A table with fewer rows offers its newest time (all of it is older than the others' candidates then).
          const r = (this.db
            .prepare(`SELECT ${t.time} AS t FROM ${t.table} ORDER BY ${t.time} LIMIT 1 OFFSET ?`)
            .get(chunk - 1) ?? this.db.prepare(`SELECT max(${t.time}) AS t FROM ${t.table}`).get()) as Row;
          if (typeof r.t === 'number') sizeCutoff = Math.min(sizeCutoff, r.t);
        }
        if (sizeCutoff === Number.POSITIVE_INFINITY) return;
        for (const t of EVENT_TABLES) deleted += this.deleteOlder(t.table, t.time, sizeCutoff + 1, chunk);
      }
    })();
    if (deleted > 0) {
      this.db.pragma('incremental_vacuum');
      // The file shrinks when the WAL is checkpointed into it (PASSIVE: never waits for a reader of another Corral).
      this.db.pragma('wal_checkpoint(PASSIVE)');
    }
    return deleted >= chunk || (deleted > 0 && this.usedBytes() > opts.maxBytes);
  }

  private deleteOlder(table: string, timeCol: string, cutoff: number, limit: number): number {
    if (table === 'processes') {
      const ids = (
        this.db
          .prepare(`SELECT id FROM processes WHERE started_at < ? ORDER BY started_at LIMIT ?`)
          .all(cutoff, limit) as Row[]
      ).map((r) => r.id as number);
      if (ids.length === 0) return 0;
      const list = ids.join(',');
      this.db.exec(`DELETE FROM process_output WHERE process IN (${list})`);
      this.db.exec(`DELETE FROM process_details WHERE process IN (${list})`);
      this.db.exec(`DELETE FROM processes WHERE id IN (${list})`);
      return ids.length;
    }
    return this.db
      .prepare(
        `DELETE FROM ${table} WHERE id IN (SELECT id FROM ${table} WHERE ${timeCol} < ? ORDER BY ${timeCol} LIMIT ?)`,
      )
      .run(cutoff, limit).changes;
  }

  // ---- export ----------------------------------------------------------------------------------------------------

  /**
   * Every stored event of one type in time order (for `corral audit export`), process details and output joined.
   * Read in pages (several types are read side by side on one connection; an open iterator would block it).
   */
  *rows(
    type: AuditEventType,
    filter: { since?: number | null; sessionId?: string | null },
    pageRows = 500,
  ): Generator<{ time: number; row: Row }> {
    const t = EVENT_TABLES.find((x) => x.type === type)!;
    const a = type === 'process' ? 'p' : 'e';
    const timeCol = `${a}.${t.time}`;
    const where: string[] = [`(${timeCol} > ? OR (${timeCol} = ? AND ${a}.id > ?))`];
    const args: unknown[] = [];
    if (filter.since !== null && filter.since !== undefined) {
      where.push(`${timeCol} >= ?`);
      args.push(filter.since);
    }
    if (filter.sessionId) {
      where.push(`${a}.session_id = ?`);
      args.push(filter.sessionId);
    }
    const from =
      type === 'process'
        ? `SELECT p.*, d.argv, d.env_names, d.policy, d.network, d.metadata, o.head, o.tail, o.omitted
             FROM processes p LEFT JOIN process_details d ON d.process = p.id
             LEFT JOIN process_output o ON o.process = p.id`
        : `SELECT e.* FROM ${t.table} e`;
    const stmt = this.db.prepare(
      `${from} WHERE ${where.join(' AND ')} ORDER BY ${timeCol}, ${a}.id LIMIT ${pageRows}`,
    );
    let lastTime = Number.MIN_SAFE_INTEGER;
    let lastId = 0;
    for (;;) {
      const page = stmt.all(lastTime, lastTime, lastId, ...args) as Row[];
      for (const row of page) {
        const time = row[t.time] as number;
        yield { time, row };
        lastTime = time;
        lastId = row.id as number;
      }
      if (page.length < pageRows) return;
    }
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}

const bool = (v: unknown) => v === 1 || v === true;
const str = (v: unknown) => (typeof v === 'string' ? v : null);
const num = (v: unknown) => (typeof v === 'number' ? v : null);

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
        argv: parse(r.argv, [] as string[]),
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
        protocol: r.protocol as string,
        method: str(r.method),
        decision: r.decision as AuditNetworkItem['decision'],
        reason: r.reason as string,
        source: r.source as string,
        scope: str(r.scope),
        override: bool(r.override),
        clientAddress: str(r.client_address),
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
        command: parse(r.command, null),
        host: r.host as string,
        port: r.port as number,
        protocol: r.protocol as string,
        method: str(r.method),
        released: (r.released as number) ?? 0,
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
