/**
 * The hash chain in an export (`corral audit export`), so that someone else can verify it with the public key alone
 * (`corral audit verify --export FILE`). After the event lines: one `chain` line (the public key, the anchor, the
 * checkpoints, whether the export was filtered), then one `chain-entry` line per entry with the covered values of its
 * row (blobs as `{"base64": …}`). Each event line carries `chain: {table, row}`: the row its entries name.
 *
 * Verifying an export checks the chain as verify.ts checks a database (values in place of rows) and then each event
 * line against the values its entries vouch for: the line must be what the export makes of them. An event line no
 * entry vouches for was inserted; in an unfiltered export, a row the chain has and no line shows was deleted.
 */
import type { KeyObject } from 'node:crypto';
import type { AuditEventType } from '../protocol/audit.js';
import { terminalJson } from '../protocol/terminalText.js';
import { type ChainEntry, type ChainKind, COVERS, columnName, rowReader } from './chain.js';

export { hasChain } from './chain.js';

import { exportObject } from './export.js';
import type { Row } from './rowItems.js';
import { EVENT_TABLES } from './schema.js';
import type { SqliteDatabase } from './sqliteDriver.js';
import { type ChainProblem, type ChainSource, type VerifyResult, verifyChain } from './verify.js';

const toJsonValue = (v: unknown) =>
  v instanceof Uint8Array
    ? { base64: Buffer.from(v).toString('base64') }
    : typeof v === 'bigint'
      ? Number(v)
      : v;
const fromJsonValue = (v: unknown) =>
  v !== null && typeof v === 'object' && typeof (v as { base64?: unknown }).base64 === 'string'
    ? Buffer.from((v as { base64: string }).base64, 'base64')
    : v;

/** The `chain` and `chain-entry` lines of an export. */
export function* chainLines(db: SqliteDatabase, filtered: boolean): Generator<Record<string, unknown>> {
  const anchor = db.prepare('SELECT seq, hash, time, public_key, signature FROM chain_anchor').get() as
    | Row
    | undefined;
  const checkpoints = db
    .prepare('SELECT seq, hash, time, reason, public_key, signature FROM chain_checkpoints ORDER BY seq')
    .all() as Row[];
  yield {
    type: 'chain',
    publicKey: (checkpoints[0]?.public_key ?? anchor?.public_key ?? null) as string | null,
    filtered,
    anchor: anchor
      ? {
          seq: anchor.seq,
          hash: anchor.hash,
          time: anchor.time,
          publicKey: anchor.public_key,
          signature: anchor.signature,
        }
      : null,
    checkpoints: checkpoints.map((c) => ({
      seq: c.seq,
      hash: c.hash,
      time: c.time,
      reason: c.reason,
      publicKey: c.public_key,
      signature: c.signature,
    })),
  };
  const read = rowReader(db);
  for (const e of db
    .prepare('SELECT seq, kind, tbl, row, digest, hash, pruned FROM chain ORDER BY seq')
    .iterate() as Iterable<ChainEntry & { hash: string }>) {
    const values = e.kind === 'prune' || e.row === null ? null : read(e.kind, e.row);
    yield {
      type: 'chain-entry',
      seq: e.seq,
      kind: e.kind,
      table: e.tbl,
      row: e.row,
      digest: e.digest,
      hash: e.hash,
      pruned: e.pruned,
      values: values ? values.map(toJsonValue) : null,
    };
  }
}

/** The row an event of the export is: its table and id, for its `chain` member. */
export function chainRef(type: AuditEventType, row: Row): Record<string, unknown> {
  return { chain: { table: EVENT_TABLES.find((t) => t.type === type)!.table, row: row.id as number } };
}

const problem = (
  kind: ChainProblem['kind'],
  message: string,
  table: string | null = null,
  row: number | null = null,
) => ({ kind, seq: null, table, row, message }) satisfies ChainProblem;

const KINDS = new Set<string>([...Object.keys(COVERS), 'prune']);

/** A `chain-entry` line as an entry, or null when a member has the wrong type. */
function entryOf(
  o: Record<string, unknown>,
): (ChainEntry & { hash: string; values: unknown[] | null }) | null {
  const { seq, kind, table, row, digest, hash, pruned, values } = o;
  if (!Number.isSafeInteger(seq) || typeof kind !== 'string' || !KINDS.has(kind) || typeof table !== 'string')
    return null;
  if (!(row === null || Number.isSafeInteger(row)) || typeof digest !== 'string' || typeof hash !== 'string')
    return null;
  if (!(pruned === null || typeof pruned === 'string') || !(values === null || Array.isArray(values)))
    return null;
  return {
    seq: seq as number,
    kind: kind as ChainKind,
    tbl: table,
    row: row as number | null,
    digest,
    hash,
    pruned: pruned as string | null,
    values: values as unknown[] | null,
  };
}

/** Checks an export's text: its chain, then its event lines against what the chain vouches for. */
export function verifyExport(text: string, publicKey: KeyObject | null): VerifyResult {
  const events: { line: number; obj: Record<string, unknown> }[] = [];
  let header: Record<string, unknown> | null = null;
  const entries: (ChainEntry & { hash: string; values: unknown[] | null })[] = [];
  const lines = text.split('\n');
  const early: ChainProblem[] = [];
  lines.forEach((l, i) => {
    if (l.trim() === '') return;
    let obj: Record<string, unknown>;
    try {
      obj = JSON.parse(l) as Record<string, unknown>;
    } catch {
      early.push(problem('edited', `export line ${i + 1} is not JSON`));
      return;
    }
    if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) {
      early.push(problem('edited', `export line ${i + 1} is not an object`));
      return;
    }
    if (obj.type === 'chain') header = obj;
    else if (obj.type === 'chain-entry') {
      const e = entryOf(obj);
      if (e) entries.push(e);
      else early.push(problem('edited', `export line ${i + 1} is a malformed chain entry`));
    } else events.push({ line: i + 1, obj });
  });
  if (!header)
    throw new Error('this export carries no hash chain (exported before schema 3, or not an export)');
  const h = header as {
    filtered?: boolean;
    anchor?: { seq: number; hash: string; publicKey: string; signature: string } | null;
    checkpoints?: { seq: number; hash: string; publicKey: string; signature: string; time: number }[];
  };
  const valuesOf = new Map<string, unknown[]>();
  for (const e of entries)
    if (Array.isArray(e.values)) valuesOf.set(`${e.kind}:${e.row}`, e.values.map(fromJsonValue));
  const rows = new Map<string, Set<number>>();
  for (const e of entries) {
    if (e.kind === 'prune' || e.row === null || !Array.isArray(e.values)) continue;
    const s = rows.get(e.tbl) ?? new Set<number>();
    s.add(e.row);
    rows.set(e.tbl, s);
  }
  const src: ChainSource = {
    anchor: h.anchor ?? null,
    entries: () => entries,
    checkpoints: h.checkpoints ?? [],
    // An entry exported without values (its row was gone): the chain's own check says whether it was pruned.
    read: (kind, row) => valuesOf.get(`${kind}:${row}`) ?? null,
    rowIds: () => [],
  };
  const result = verifyChain(src, publicKey ? { publicKey, keySource: 'given' } : {});
  const problems = [...early, ...result.problems];

  // Each event line against the values the chain vouches for.
  const shown = new Map<string, Set<number>>();
  for (const { line, obj } of events) {
    const ref = obj.chain as { table?: unknown; row?: unknown } | undefined;
    const type = obj.type as AuditEventType;
    const table = EVENT_TABLES.find((t) => t.type === type)?.table;
    if (!ref || typeof ref.row !== 'number' || ref.table !== table || !table) {
      problems.push(
        problem('inserted', `export line ${line} (a ${String(obj.type)} event) is not in the chain`),
      );
      continue;
    }
    const s = shown.get(table) ?? new Set<number>();
    s.add(ref.row);
    shown.set(table, s);
    const row: Row = { id: ref.row };
    let found = false;
    for (const [kind, c] of Object.entries(COVERS) as [
      Exclude<ChainKind, 'prune'>,
      (typeof COVERS)['session'],
    ][]) {
      if (c.table !== table) continue;
      const values = valuesOf.get(`${kind}:${ref.row}`);
      if (!values) continue;
      found = true;
      c.columns.forEach((col, i) => {
        row[columnName(col)] = values[i];
      });
    }
    if (!found) {
      problems.push(
        problem(
          'inserted',
          `export line ${line} (${table} row ${ref.row}) is not in the chain`,
          table,
          ref.row,
        ),
      );
      continue;
    }
    const { chain: _chain, ...rest } = obj;
    const expected = exportObject(type, row);
    if (terminalJson(expected) !== terminalJson(rest))
      problems.push(
        problem(
          'edited',
          `export line ${line} (${table} row ${ref.row}) is not what the chain vouches for`,
          table,
          ref.row,
        ),
      );
  }
  if (h.filtered === false) {
    for (const [table, ids] of rows)
      for (const id of ids)
        if (!shown.get(table)?.has(id))
          problems.push(
            problem('deleted', `${table} row ${id} is in the chain but no export line shows it`, table, id),
          );
  }
  return { ...result, ok: problems.length === 0, problems };
}
