/**
 * The audit database's schema, as migrations: MIGRATIONS[i] takes a database from version i to i + 1 (SQLite's
 * `PRAGMA user_version`). A database whose version is above SCHEMA_VERSION was written by a newer Corral and is
 * refused, never touched.
 *
 * Processes are split in three tables so that the list and its text search scan only narrow rows: `processes`
 * (what a list shows and filters on, `command` = argv joined by spaces, for the search), `process_details` (argv,
 * env names, policy, network, metadata as JSON) and `process_output` (the first and last bytes of output).
 *
 * Version 2 adds `truncated` (JSON, null when nothing was cut) where a row holds text a client chose that is capped
 * (caps.ts): each field cut, with its original size. A version 1 database is still read as it is (export: no column,
 * nothing was marked) and migrated when the server opens it for writing.
 *
 * Version 3 (issue 37) adds the hash chain (`chain`, `chain_checkpoints`, `chain_anchor`: chain.ts), each process's
 * usage (JSON), the network decisions' rule id, origin and correlation id (and the approvals' correlation id), and
 * `process_chunks`: output chunks with their times, for replay. Rows of an older database are chained as they are
 * when it is migrated.
 */
export const MIGRATIONS: readonly string[] = [
  // 0 → 1
  `
  CREATE TABLE sessions (
    id INTEGER PRIMARY KEY,
    time INTEGER NOT NULL,
    session_id TEXT NOT NULL,
    client_name TEXT NOT NULL,
    event TEXT NOT NULL
  );
  CREATE INDEX sessions_time ON sessions(time);
  CREATE INDEX sessions_session ON sessions(session_id, time);

  CREATE TABLE processes (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    process_id TEXT NOT NULL,
    client_name TEXT NOT NULL,
    command TEXT NOT NULL,
    cwd TEXT NOT NULL,
    tty INTEGER NOT NULL,
    pid INTEGER,
    sandbox_type TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    exited_at INTEGER,
    closed_at INTEGER,
    exit_code INTEGER,
    signal TEXT,
    limit_hit TEXT,
    sandbox_denied INTEGER NOT NULL DEFAULT 0,
    output_bytes INTEGER NOT NULL DEFAULT 0
  );
  CREATE UNIQUE INDEX processes_key ON processes(session_id, process_id);
  CREATE INDEX processes_time ON processes(started_at);
  CREATE INDEX processes_client ON processes(client_name, started_at);

  CREATE TABLE process_details (
    process INTEGER PRIMARY KEY,
    argv TEXT NOT NULL,
    env_names TEXT NOT NULL,
    policy TEXT,
    network TEXT,
    metadata TEXT
  );

  CREATE TABLE process_output (
    process INTEGER PRIMARY KEY,
    head BLOB,
    tail BLOB,
    omitted INTEGER NOT NULL DEFAULT 0
  );

  CREATE TABLE network (
    id INTEGER PRIMARY KEY,
    time INTEGER NOT NULL,
    session_id TEXT,
    process_id TEXT,
    host TEXT NOT NULL,
    port INTEGER NOT NULL,
    protocol TEXT NOT NULL,
    method TEXT,
    decision TEXT NOT NULL,
    reason TEXT NOT NULL,
    source TEXT NOT NULL,
    scope TEXT,
    override INTEGER NOT NULL DEFAULT 0,
    client_address TEXT,
    metadata TEXT
  );
  CREATE INDEX network_time ON network(time);
  CREATE INDEX network_process ON network(session_id, process_id, time);

  CREATE TABLE approvals (
    id INTEGER PRIMARY KEY,
    time INTEGER NOT NULL,
    kind TEXT NOT NULL,
    prompt_id TEXT,
    decision TEXT,
    scope TEXT,
    decided_by TEXT,
    session_id TEXT NOT NULL,
    process_id TEXT,
    command TEXT,
    host TEXT NOT NULL,
    port INTEGER NOT NULL,
    protocol TEXT NOT NULL,
    method TEXT,
    released INTEGER NOT NULL DEFAULT 0
  );
  CREATE INDEX approvals_time ON approvals(time);
  CREATE INDEX approvals_process ON approvals(session_id, process_id, time);

  CREATE TABLE fs_events (
    id INTEGER PRIMARY KEY,
    time INTEGER NOT NULL,
    session_id TEXT,
    client_name TEXT,
    op TEXT NOT NULL,
    path TEXT NOT NULL,
    destination TEXT,
    bytes INTEGER,
    outcome TEXT NOT NULL,
    error TEXT
  );
  CREATE INDEX fs_events_time ON fs_events(time);
  CREATE INDEX fs_events_session ON fs_events(session_id, time);
  `,
  // 1 → 2
  `
  ALTER TABLE sessions ADD COLUMN truncated TEXT;
  ALTER TABLE process_details ADD COLUMN truncated TEXT;
  ALTER TABLE network ADD COLUMN truncated TEXT;
  ALTER TABLE approvals ADD COLUMN truncated TEXT;
  ALTER TABLE fs_events ADD COLUMN truncated TEXT;
  `,
  // 2 → 3
  `
  ALTER TABLE processes ADD COLUMN usage TEXT;
  ALTER TABLE network ADD COLUMN rule_id TEXT;
  ALTER TABLE network ADD COLUMN rule_origin TEXT;
  ALTER TABLE network ADD COLUMN correlation_id TEXT;
  ALTER TABLE approvals ADD COLUMN correlation_id TEXT;

  CREATE TABLE process_chunks (
    process INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    at INTEGER NOT NULL,
    stream TEXT NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (process, seq)
  ) WITHOUT ROWID;

  CREATE TABLE chain (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    tbl TEXT NOT NULL,
    row INTEGER,
    digest TEXT NOT NULL,
    hash TEXT NOT NULL,
    pruned TEXT
  );
  CREATE INDEX chain_row ON chain(tbl, row);

  CREATE TABLE chain_checkpoints (
    id INTEGER PRIMARY KEY,
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL,
    time INTEGER NOT NULL,
    reason TEXT NOT NULL,
    public_key TEXT NOT NULL,
    signature TEXT NOT NULL
  );

  CREATE TABLE chain_anchor (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL,
    time INTEGER NOT NULL,
    public_key TEXT NOT NULL,
    signature TEXT NOT NULL
  );
  `,
];

/** From this version on every stored event is an entry of the hash chain (chain.ts); older rows are adopted. */
export const CHAIN_FROM_VERSION = 3;

/** The oldest version a read-only reader (the export) still understands: every column it needs is there. */
export const READABLE_FROM_VERSION = 1;

export const SCHEMA_VERSION = MIGRATIONS.length;

/** The tables that hold one kind of event each, with their time column (retention goes by it, oldest first). */
export const EVENT_TABLES = [
  { type: 'session', table: 'sessions', time: 'time' },
  { type: 'process', table: 'processes', time: 'started_at' },
  { type: 'network', table: 'network', time: 'time' },
  { type: 'approval', table: 'approvals', time: 'time' },
  { type: 'fs', table: 'fs_events', time: 'time' },
] as const;
