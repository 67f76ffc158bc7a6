/**
 * Opening the audit database: a corrupt or unreadable file is moved aside and a fresh one started, a file of a newer
 * schema is refused untouched, the schema is migrated, and WAL mode set. Durability: WAL with synchronous=NORMAL. A
 * committed batch survives the server being killed (SIGKILL, a crash): it is in the WAL file in the kernel's page
 * cache. A power cut may lose the last commits (never the file itself).
 */
import { ChainWriter } from './chain.js';
import { type ChainSigner, loadOrCreateSigner } from './chainKey.js';
import { inspectHeader, moveAside, prepareDirectory, prepareFile, unsafePlace } from './dbFile.js';
import { CHAIN_FROM_VERSION, MIGRATIONS, READABLE_FROM_VERSION, SCHEMA_VERSION } from './schema.js';
import { type SqliteDatabase, sqlite } from './sqliteDriver.js';
import { AuditStore } from './store.js';

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
  /**
   * Sign the hash chain's checkpoints with the key next to the database (chainKey.ts; made when absent): the server's
   * store. A key that cannot be had is said through `notice`; the chain is then kept unsigned.
   */
  sign?: boolean;
}

function signerFor(path: string, opts: StoreOptions): ChainSigner | null {
  if (!opts.sign || opts.readonly) return null;
  try {
    return loadOrCreateSigner(path);
  } catch (e) {
    opts.notice?.(`audit: no signing key for ${path} (${(e as Error).message}); the chain is kept unsigned`);
    return null;
  }
}

/** SQLite's codes for a file that is not (or no longer) a usable database. */
export function isCorruption(e: unknown): boolean {
  const code = (e as { code?: unknown }).code;
  return code === 'SQLITE_CORRUPT' || code === 'SQLITE_NOTADB' || code === 'SQLITE_CORRUPT_VTAB';
}

function newerError(path: string, version: number): AuditDbError {
  return new AuditDbError(
    `audit database ${path} has schema version ${version}, written by a newer Corral (this one knows up to ` +
      `${SCHEMA_VERSION}): refusing to use or change it. Point --audit-db at another file, or run with --no-audit`,
    path,
  );
}

function configure(db: SqliteDatabase, opts: StoreOptions): void {
  db.pragma(`busy_timeout = ${opts.busyTimeoutMs ?? 5000}`);
  if (opts.readonly) return;
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
}

/**
 * Brings the schema up to date in one IMMEDIATE transaction (several Corral servers may open a new file at once: the
 * second waits for the first and then finds nothing to do). A database already current is only read: opening it
 * never waits for the write lock, which another Corral may hold for a while (a retention step, a large batch).
 */
function migrate(db: SqliteDatabase, path: string): number {
  if ((db.pragma('user_version', { simple: true }) as number) === SCHEMA_VERSION) return SCHEMA_VERSION;
  db.transaction(() => {
    const version = db.pragma('user_version', { simple: true }) as number;
    if (version > SCHEMA_VERSION) throw newerError(path, version);
    for (let v = version; v < SCHEMA_VERSION; v++) db.exec(MIGRATIONS[v]!);
    // Rows stored before the chain existed are chained as they are now (the chain vouches for them from here on).
    if (version < CHAIN_FROM_VERSION) new ChainWriter(db, null).adoptExisting();
    if (version !== SCHEMA_VERSION) db.pragma(`user_version = ${SCHEMA_VERSION}`);
  }).immediate();
  return SCHEMA_VERSION;
}

type SchemaObject = { type: string; name: string; sql: string | null };
const schemaKey = (o: SchemaObject) => `${o.type} ${o.name}: ${o.sql}`;

function schemaOf(db: SqliteDatabase): SchemaObject[] {
  return db
    .prepare("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")
    .all() as SchemaObject[];
}

let expectedSchema: Set<string> | null = null;

/**
 * The objects of the schema (tables, indexes, triggers, views) that are not the ones the migrations create, by what
 * they are and their name; empty for a database Corral made. A planted file of the right version could otherwise
 * carry a trigger that deletes every recorded process, or a table with other constraints.
 */
function foreignObjects(db: SqliteDatabase, Database: ReturnType<typeof sqlite>): string[] {
  if (!expectedSchema) {
    const fresh = new Database(':memory:');
    for (const m of MIGRATIONS) fresh.exec(m);
    expectedSchema = new Set(schemaOf(fresh).map(schemaKey));
    fresh.close();
  }
  const found = schemaOf(db);
  const foreign = found.filter((o) => !expectedSchema!.has(schemaKey(o))).map((o) => `${o.type} ${o.name}`);
  if (found.length < expectedSchema.size) foreign.push('missing objects');
  return foreign;
}

/** The file holds a schema Corral did not make: it goes aside like a corrupt one. */
class ForeignSchemaError extends Error {}

function checkSchema(db: SqliteDatabase, Database: ReturnType<typeof sqlite>): void {
  const foreign = foreignObjects(db, Database);
  if (foreign.length > 0)
    throw new ForeignSchemaError(`objects Corral did not create: ${foreign.join(', ')}`);
}

/**
 * Opens (creating it if needed) the audit database at `path`. An unreadable or corrupt file is moved aside (and
 * reported through `notice`, with both names) and a fresh database started; a file of a newer schema version is
 * refused with an AuditDbError and left exactly as it was. Throws SqliteUnavailableError when better-sqlite3 cannot
 * be loaded.
 */
export function openAuditStore(path: string, opts: StoreOptions = {}): AuditStore {
  // Before anything of the file system is touched: without a driver nothing is created.
  const Database = sqlite();
  let header: ReturnType<typeof inspectHeader>;
  try {
    if (!opts.readonly) {
      prepareDirectory(path, opts.ownDirectory ?? false);
      const unsafe = unsafePlace(path);
      if (unsafe) throw new AuditDbError(`audit database ${path}: ${unsafe}`, path);
    }
    header = inspectHeader(path);
    if (!opts.readonly) prepareFile(path, header.state !== 'absent', opts.notice);
  } catch (e) {
    if (e instanceof AuditDbError) throw e;
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
  let db: SqliteDatabase | null = null;
  try {
    db = new Database(path, { readonly: opts.readonly ?? false, fileMustExist: opts.readonly ?? false });
    // Only a new database takes it, before anything is written (WAL mode included): then retention can give freed
    // pages back to the file system.
    if (!opts.readonly && header.state !== 'sqlite') db.pragma('auto_vacuum = INCREMENTAL');
    // A file that claims the current version is checked before anything is changed (WAL mode included).
    const claimed = db.pragma('user_version', { simple: true }) as number;
    if (!opts.readonly && claimed === SCHEMA_VERSION) checkSchema(db, Database);
    configure(db, opts);
    const version = opts.readonly
      ? (db.pragma('user_version', { simple: true }) as number)
      : migrate(db, path);
    if (version > SCHEMA_VERSION) throw newerError(path, version);
    if (opts.readonly && version < READABLE_FROM_VERSION)
      throw new AuditDbError(
        `${path} has schema version ${version}; open it with the server once to migrate`,
        path,
      );
    if (!opts.readonly && claimed < SCHEMA_VERSION) checkSchema(db, Database);
    const store = new AuditStore(db, path, signerFor(path, opts));
    store.probe();
    return store;
  } catch (e) {
    db?.close();
    if (e instanceof AuditDbError) throw e;
    if (e instanceof ForeignSchemaError) {
      const aside = moveAside(path);
      opts.notice?.(
        `audit database ${path} is not one Corral made (${e.message}): moved it to ${aside}, started a fresh one`,
      );
      return openAuditStore(path, opts);
    }
    if (!isCorruption(e) || opts.readonly)
      throw new AuditDbError(`cannot open audit database ${path}: ${(e as Error).message}`, path);
    const aside = moveAside(path);
    opts.notice?.(
      `audit database ${path} is corrupt (${(e as Error).message}): moved it to ${aside}, started a fresh one`,
    );
    return openAuditStore(path, opts);
  }
}
