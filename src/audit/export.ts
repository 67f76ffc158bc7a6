/**
 * `corral audit export`: every stored event as JSON Lines, oldest first, one object per line. Every object has
 * `type` (session | process | network | approval | fs) and `time` (ISO 8601); process objects carry argv, cwd,
 * exitCode, sandboxType, … and their stored output as base64; network objects host, port, decision, reason, ….
 * An object whose text was cut when stored (caps.ts) has `truncated`: per field, its original size.
 * Reads the database read-only (a running server may keep writing it meanwhile); a version 1 database as it is.
 *
 * The lines go to a terminal as often as to a file: written with `terminalJson`, no control, bidirectional or
 * line-separator character is raw in them (each is `\uXXXX`: the same value once parsed).
 */
import type { AuditEventType } from '../protocol/audit.js';
import { terminalJson } from '../protocol/terminalText.js';
import { parseJson, type Row, toItem } from './rowItems.js';
import { EVENT_TABLES } from './schema.js';
import type { SqliteDatabase } from './sqliteDriver.js';

export interface ExportFilter {
  /** ms since the epoch. */
  since?: number | null;
  sessionId?: string | null;
}

const iso = (ms: unknown) => (typeof ms === 'number' ? new Date(ms).toISOString() : null);
const b64 = (v: unknown) => (v instanceof Uint8Array ? Buffer.from(v).toString('base64') : '');

/** One stored row as its export object. */
export function exportObject(type: AuditEventType, row: Row): Record<string, unknown> {
  const item = toItem(type, row) as Record<string, unknown>;
  const { id: _id, time, ...rest } = item;
  const out: Record<string, unknown> = { type, time: iso(time), ...rest };
  if (type === 'process') {
    for (const k of ['startedAt', 'exitedAt', 'closedAt']) out[k] = iso(out[k]);
    out.envNames = parseJson(row.env_names, []);
    out.policy = parseJson(row.policy, null);
    out.network = parseJson(row.network, null);
    out.metadata = parseJson(row.metadata, null);
    out.outputHeadBase64 = b64(row.head);
    out.outputTailBase64 = b64(row.tail);
    out.outputOmittedBytes = typeof row.omitted === 'number' ? row.omitted : out.outputBytes;
  }
  if (type === 'network') out.metadata = parseJson(row.metadata, null);
  const truncated = parseJson(row.truncated, null);
  if (truncated !== null) out.truncated = truncated;
  return out;
}

const TYPES: AuditEventType[] = ['session', 'process', 'network', 'approval', 'fs'];

/**
 * Every stored event of one type in time order (for `corral audit export`), process details and output joined.
 * Read in pages (several types are read side by side on one connection; an open iterator would block it).
 */
function* storedRows(
  db: SqliteDatabase,
  type: AuditEventType,
  filter: ExportFilter,
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
      ? `SELECT p.*, d.*, o.head, o.tail, o.omitted
           FROM processes p LEFT JOIN process_details d ON d.process = p.id
           LEFT JOIN process_output o ON o.process = p.id`
      : `SELECT e.* FROM ${t.table} e`;
  const stmt = db.prepare(
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

/** Every event matching the filter, merged across types in time order. */
export function* exportObjects(
  db: SqliteDatabase,
  filter: ExportFilter,
  /** A member to add to each object, from its row (the chain's reference: exportChain.ts). */
  extra?: (type: AuditEventType, row: Row) => Record<string, unknown>,
): Generator<Record<string, unknown>> {
  const sources = TYPES.map((type) => ({ type, it: storedRows(db, type, filter) }));
  const heads = sources.map((s) => s.it.next());
  for (;;) {
    let best = -1;
    for (let i = 0; i < heads.length; i++) {
      const h = heads[i]!;
      if (h.done) continue;
      if (best < 0 || h.value.time < (heads[best]!.value as { time: number }).time) best = i;
    }
    if (best < 0) return;
    const { row } = heads[best]!.value as { time: number; row: Row };
    const type = sources[best]!.type;
    yield extra ? { ...exportObject(type, row), ...extra(type, row) } : exportObject(type, row);
    heads[best] = sources[best]!.it.next();
  }
}

/** Writes the JSONL export; resolves with the number of lines. Waits for the stream to drain as it goes. */
export async function writeJsonl(
  db: SqliteDatabase,
  filter: ExportFilter,
  out: NodeJS.WritableStream,
  chain?: {
    ref: (type: AuditEventType, row: Row) => Record<string, unknown>;
    lines: () => Iterable<Record<string, unknown>>;
  },
): Promise<number> {
  let n = 0;
  const write = async (obj: Record<string, unknown>) => {
    if (!out.write(`${terminalJson(obj)}\n`)) await new Promise<void>((r) => out.once('drain', () => r()));
  };
  for (const obj of exportObjects(db, filter, chain?.ref)) {
    n++;
    await write(obj);
  }
  if (chain) for (const obj of chain.lines()) await write(obj);
  return n;
}
