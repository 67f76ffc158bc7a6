/**
 * Retention of the audit database: by age, and by size (oldest first across event types), in small steps so that
 * the worker keeps committing incoming batches between them; freed pages go back to the file system.
 */
import type { Row } from './rowItems.js';
import { EVENT_TABLES } from './schema.js';
import type { SqliteDatabase } from './sqliteDriver.js';

export interface RetentionOptions {
  maxAgeMs: number;
  maxBytes: number;
  /** Rows deleted per transaction (between them, the worker writes incoming batches). */
  chunkRows?: number;
}

/** Bytes the database's pages use (the file may be larger until freed pages are given back). */
export function usedBytes(db: SqliteDatabase): number {
  const pageSize = db.pragma('page_size', { simple: true }) as number;
  const pages = db.pragma('page_count', { simple: true }) as number;
  const free = db.pragma('freelist_count', { simple: true }) as number;
  return (pages - free) * pageSize;
}

/** Pages one retention step gives back to the file system at most (16 MiB of 4 KiB pages). */
export const VACUUM_PAGES_PER_STEP = 4096;

/**
 * One step of retention: deletes up to `chunkRows` of the oldest events that are past the age limit or, while the
 * database is above the size limit, the oldest events of all. Returns true when there is more to delete (call
 * again after letting writes through). Frees the pages at the end. `now` defaults to the real time: this runs on the
 * audit worker thread, which the server's clock (main thread) does not reach.
 */
export function retentionStep(
  db: SqliteDatabase,
  opts: RetentionOptions,
  now = Date.now(),
  /** Told, in the step's transaction, which rows of a table it deleted (the hash chain records it: chain.ts). */
  onDeleted: (table: string, ids: number[]) => void = () => {},
): boolean {
  const chunk = opts.chunkRows ?? 2000;
  const cutoff = now - opts.maxAgeMs;
  let deleted = 0;
  db.transaction(() => {
    for (const t of EVENT_TABLES) {
      deleted += deleteOlder(db, t.table, t.time, cutoff, chunk, onDeleted);
    }
    if (deleted === 0 && usedBytes(db) > opts.maxBytes) {
      // Over the size limit: the oldest events go, whatever their type. The cutoff is the earliest of the tables'
      // `chunk`-th oldest times, so no table loses more than `chunk` rows and nothing newer than it goes first.
      let sizeCutoff = Number.POSITIVE_INFINITY;
      for (const t of EVENT_TABLES) {
        // A table with fewer rows offers its newest time (all of it is older than the others' candidates then).
        const r = (db
          .prepare(`SELECT ${t.time} AS t FROM ${t.table} ORDER BY ${t.time} LIMIT 1 OFFSET ?`)
          .get(chunk - 1) ?? db.prepare(`SELECT max(${t.time}) AS t FROM ${t.table}`).get()) as Row;
        if (typeof r.t === 'number') sizeCutoff = Math.min(sizeCutoff, r.t);
      }
      if (sizeCutoff === Number.POSITIVE_INFINITY) return;
      for (const t of EVENT_TABLES)
        deleted += deleteOlder(db, t.table, t.time, sizeCutoff + 1, chunk, onDeleted);
    }
  })();
  // Freed pages go back to the file system a bounded number at a time (each call is a write transaction that other
  // Corral servers on the same file wait for); what is left is given back by the next steps.
  const free = db.pragma('freelist_count', { simple: true }) as number;
  let left = free;
  if (free > 0) {
    db.pragma(`incremental_vacuum(${VACUUM_PAGES_PER_STEP})`);
    // The file shrinks when the WAL is checkpointed into it (PASSIVE: never waits for a reader of another Corral).
    db.pragma('wal_checkpoint(PASSIVE)');
    left = db.pragma('freelist_count', { simple: true }) as number;
  }
  // More to give back only while vacuuming gives (a file made without auto_vacuum = INCREMENTAL never does).
  const moreToFree = left > 0 && left < free;
  return deleted >= chunk || (deleted > 0 && usedBytes(db) > opts.maxBytes) || moreToFree;
}

function deleteOlder(
  db: SqliteDatabase,
  table: string,
  timeCol: string,
  cutoff: number,
  limit: number,
  onDeleted: (table: string, ids: number[]) => void,
): number {
  const ids = (
    db
      .prepare(`SELECT id FROM ${table} WHERE ${timeCol} < ? ORDER BY ${timeCol} LIMIT ?`)
      .all(cutoff, limit) as Row[]
  ).map((r) => r.id as number);
  if (ids.length === 0) return 0;
  const list = ids.join(',');
  if (table === 'processes') {
    db.exec(`DELETE FROM process_output WHERE process IN (${list})`);
    db.exec(`DELETE FROM process_details WHERE process IN (${list})`);
    db.exec(`DELETE FROM process_chunks WHERE process IN (${list})`);
  }
  db.exec(`DELETE FROM ${table} WHERE id IN (${list})`);
  onDeleted(table, ids);
  return ids.length;
}
