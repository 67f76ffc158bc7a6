/**
 * `corral audit verify`: checks the hash chain (chain.ts) of an audit database, or of an export (exportChain.ts), and
 * names the first event that was edited, deleted, inserted or reordered.
 *
 *   - edited: an entry's row no longer has the digest the entry recorded (or the entry itself was changed: its hash
 *     does not follow from the one before);
 *   - deleted: an entry's row is gone and no prune entry (retention) names it, or entries are missing (a gap in seq);
 *   - inserted: a row that no entry names;
 *   - reordered: a row now holds what another entry recorded (rows swapped, ids renumbered);
 *   - a checkpoint or the anchor whose signature does not hold, or whose hash the chain no longer reaches (the chain
 *     was recomputed after an edit: only a key holder can sign that again).
 */
import type { KeyObject } from 'node:crypto';
import {
  CHAINED_TABLES,
  type ChainEntry,
  type ChainKind,
  COVERS,
  entryHash,
  GENESIS,
  hasChain,
  type RowReader,
  rowDigest,
  rowReader,
  setIn,
  signedText,
} from './chain.js';
import { parsePublicKey, verifySignature } from './chainKey.js';
import type { SqliteDatabase } from './sqliteDriver.js';

export type ProblemKind = 'edited' | 'deleted' | 'inserted' | 'reordered' | 'signature';

export interface ChainProblem {
  kind: ProblemKind;
  /** The entry it was found at (inserted rows: none). */
  seq: number | null;
  table: string | null;
  row: number | null;
  message: string;
}

export interface VerifyResult {
  ok: boolean;
  /** Entries checked, and the seq range. */
  entries: number;
  firstSeq: number | null;
  lastSeq: number | null;
  /** The highest seq a valid signature covers (0: none). */
  signedThrough: number;
  checkpoints: number;
  /** Which key the signatures were checked with: given, the local key file, or the one the data names. */
  keySource: 'given' | 'local' | 'embedded' | 'none';
  problems: ChainProblem[];
}

/** What verify reads: the database's tables, or an export's lines. */
export interface ChainSource {
  anchor: { seq: number; hash: string; publicKey: string; signature: string } | null;
  entries(): Iterable<ChainEntry & { hash: string }>;
  checkpoints: { seq: number; hash: string; publicKey: string; signature: string; time: number }[];
  /** A row's covered values now (null: gone). */
  read: RowReader;
  /** Every row id of each chained table. */
  rowIds(table: string): Iterable<number>;
}

export function databaseSource(db: SqliteDatabase): ChainSource {
  if (!hasChain(db))
    throw new Error('this database has no hash chain (schema before 3: open it with the server once)');
  const a = db.prepare('SELECT seq, hash, public_key, signature FROM chain_anchor').get() as
    | { seq: number; hash: string; public_key: string; signature: string }
    | undefined;
  return {
    anchor: a ? { seq: a.seq, hash: a.hash, publicKey: a.public_key, signature: a.signature } : null,
    entries: () =>
      db
        .prepare('SELECT seq, kind, tbl, row, digest, hash, pruned FROM chain ORDER BY seq')
        .iterate() as Iterable<ChainEntry & { hash: string }>,
    checkpoints: (
      db
        .prepare('SELECT seq, hash, public_key, signature, time FROM chain_checkpoints ORDER BY seq')
        .all() as {
        seq: number;
        hash: string;
        public_key: string;
        signature: string;
        time: number;
      }[]
    ).map((c) => ({
      seq: c.seq,
      hash: c.hash,
      publicKey: c.public_key,
      signature: c.signature,
      time: c.time,
    })),
    read: rowReader(db),
    rowIds: (table) =>
      db.prepare(`SELECT id FROM ${table} ORDER BY id`).pluck(true).iterate() as Iterable<number>,
  };
}

const where = (kind: ChainKind, table: string, row: number | null) =>
  `${kind} event (${table} row ${row ?? '-'})`;

/**
 * Checks a chain. `publicKey`: the key to trust (given, or the local key file); without one, the key the data names
 * is used and the result says so (anyone can sign with a key of their own).
 */
export function verifyChain(
  src: ChainSource,
  opts: { publicKey?: KeyObject | null; keySource?: 'given' | 'local' } = {},
): VerifyResult {
  const problems: ChainProblem[] = [];
  const embedded = src.checkpoints[0]?.publicKey ?? src.anchor?.publicKey ?? null;
  let key: KeyObject | null = opts.publicKey ?? null;
  let keySource: VerifyResult['keySource'] = key ? (opts.keySource ?? 'given') : 'none';
  if (!key && embedded) {
    try {
      key = parsePublicKey(embedded);
      keySource = 'embedded';
    } catch {
      problems.push({
        kind: 'signature',
        seq: null,
        table: null,
        row: null,
        message: 'the public key it names is not one',
      });
    }
  }
  const signed = (what: 'checkpoint' | 'anchor', seq: number, hash: string, _pub: string, sig: string) => {
    // The signature must hold under the trusted key, whatever key the row itself names (`_pub`).
    if (!key) return false;
    return verifySignature(key, signedText(what, seq, hash), sig);
  };

  let prev = GENESIS;
  let expect = 1;
  let signedThrough = 0;
  if (src.anchor) {
    prev = src.anchor.hash;
    expect = src.anchor.seq + 1;
    if (!signed('anchor', src.anchor.seq, src.anchor.hash, src.anchor.publicKey, src.anchor.signature))
      problems.push({
        kind: 'signature',
        seq: src.anchor.seq,
        table: null,
        row: null,
        message: `the anchor at event ${src.anchor.seq} (where retention cut the chain) is not signed by the key`,
      });
    else signedThrough = src.anchor.seq;
  }

  const hashAt = new Map<number, string>();
  const cpSeqs = new Set(src.checkpoints.map((c) => c.seq));
  const referenced = new Map<string, Set<number>>();
  const prunedRows = new Map<string, Set<number>>();
  /** Recorded digest → the entries that recorded it (to tell a reorder from an edit). */
  const byDigest = new Map<string, { seq: number; table: string; row: number | null }[]>();
  const mismatched: { e: ChainEntry; actual: string }[] = [];
  const missing: ChainEntry[] = [];
  let entries = 0;
  let firstSeq: number | null = null;
  let lastSeq: number | null = null;

  for (const e of src.entries()) {
    entries++;
    firstSeq ??= e.seq;
    lastSeq = e.seq;
    if (e.seq > expect)
      problems.push({
        kind: 'deleted',
        seq: expect,
        table: null,
        row: null,
        message:
          e.seq - expect === 1
            ? `event ${expect} was deleted (the chain goes from ${expect - 1} to ${e.seq})`
            : `events ${expect}..${e.seq - 1} were deleted (the chain goes from ${expect - 1} to ${e.seq})`,
      });
    const recomputed = entryHash(prev, e);
    if (recomputed !== e.hash)
      problems.push({
        kind: 'edited',
        seq: e.seq,
        table: e.tbl,
        row: e.row,
        message: `event ${e.seq}, the ${where(e.kind, e.tbl, e.row)}: its chain entry was edited (its hash does not follow from event ${e.seq - 1})`,
      });
    prev = e.hash;
    expect = e.seq + 1;
    if (cpSeqs.has(e.seq)) hashAt.set(e.seq, e.hash);
    if (e.kind === 'prune') {
      const set = setIn(prunedRows, e.tbl);
      try {
        for (const id of JSON.parse(e.pruned ?? '[]') as number[]) set.add(id);
      } catch {
        problems.push({
          kind: 'edited',
          seq: e.seq,
          table: e.tbl,
          row: null,
          message: `event ${e.seq}: its prune list is not JSON`,
        });
      }
      continue;
    }
    if (!(e.kind in COVERS)) {
      problems.push({
        kind: 'edited',
        seq: e.seq,
        table: e.tbl,
        row: e.row,
        message: `event ${e.seq}: unknown kind ${e.kind}`,
      });
      continue;
    }
    if (e.row !== null) setIn(referenced, e.tbl).add(e.row);
    const list = byDigest.get(e.digest) ?? [];
    list.push({ seq: e.seq, table: e.tbl, row: e.row });
    byDigest.set(e.digest, list);
    const values = e.row === null ? null : src.read(e.kind as keyof typeof COVERS, e.row);
    if (!values) missing.push(e);
    else {
      const actual = rowDigest(e.kind, values);
      if (actual !== e.digest) mismatched.push({ e, actual });
    }
  }

  for (const e of missing) {
    if (prunedRows.get(e.tbl)?.has(e.row!)) continue;
    problems.push({
      kind: 'deleted',
      seq: e.seq,
      table: e.tbl,
      row: e.row,
      message: `event ${e.seq}, the ${where(e.kind, e.tbl, e.row)}: its row was deleted`,
    });
  }
  for (const { e, actual } of mismatched) {
    const other = byDigest.get(actual)?.find((o) => o.seq !== e.seq && o.table === e.tbl);
    problems.push(
      other
        ? {
            kind: 'reordered',
            seq: Math.min(e.seq, other.seq),
            table: e.tbl,
            row: e.row,
            message: `event ${e.seq}, the ${where(e.kind, e.tbl, e.row)}: its row now holds what event ${other.seq} recorded (${other.table} row ${other.row}): rows were reordered`,
          }
        : {
            kind: 'edited',
            seq: e.seq,
            table: e.tbl,
            row: e.row,
            message: `event ${e.seq}, the ${where(e.kind, e.tbl, e.row)}: its row was edited`,
          },
    );
  }
  for (const table of CHAINED_TABLES) {
    const known = referenced.get(table);
    for (const id of src.rowIds(table)) {
      if (known?.has(id)) continue;
      problems.push({
        kind: 'inserted',
        seq: null,
        table,
        row: id,
        message: `${table} row ${id} was inserted: no event of the chain names it`,
      });
    }
  }
  for (const c of src.checkpoints) {
    if (src.anchor && c.seq <= src.anchor.seq) continue;
    const at = hashAt.get(c.seq);
    if (!signed('checkpoint', c.seq, c.hash, c.publicKey, c.signature))
      problems.push({
        kind: 'signature',
        seq: c.seq,
        table: null,
        row: null,
        message: `the checkpoint at event ${c.seq} is not signed by the key`,
      });
    else if (at !== c.hash)
      problems.push({
        kind: at === undefined ? 'deleted' : 'edited',
        seq: at === undefined ? (lastSeq ?? 0) + 1 : c.seq,
        table: null,
        row: null,
        message:
          at === undefined
            ? `events ${(lastSeq ?? 0) + 1}..${c.seq} were deleted: the chain ends at event ${lastSeq ?? 0}, the checkpoint of ${new Date(c.time).toISOString()} signed event ${c.seq}`
            : `the chain up to event ${c.seq} was rewritten: its hash is not the one signed at the checkpoint of ${new Date(c.time).toISOString()}`,
      });
    else signedThrough = Math.max(signedThrough, c.seq);
  }
  problems.sort((a, b) => (a.seq ?? Number.MAX_SAFE_INTEGER) - (b.seq ?? Number.MAX_SAFE_INTEGER));
  return {
    ok: problems.length === 0,
    entries,
    firstSeq,
    lastSeq,
    signedThrough,
    checkpoints: src.checkpoints.length,
    keySource,
    problems,
  };
}

/** The report's lines for a person (the first problem first). */
export function verifyReport(r: VerifyResult, what: string): string[] {
  const lines: string[] = [];
  if (r.ok)
    lines.push(
      `${what}: the chain holds (${r.entries} events${r.firstSeq !== null ? `, ${r.firstSeq}..${r.lastSeq}` : ''})`,
    );
  else {
    lines.push(`${what}: BROKEN: ${r.problems[0]!.message}`);
    for (const p of r.problems.slice(1, 50)) lines.push(`  also: ${p.message}`);
    if (r.problems.length > 50) lines.push(`  … and ${r.problems.length - 50} more`);
  }
  const key =
    r.keySource === 'embedded'
      ? ' (checked with the key the data names: pass --public-key to trust only yours)'
      : r.keySource === 'none'
        ? ' (no key: signatures not checked)'
        : '';
  lines.push(
    `signed through event ${r.signedThrough}${r.lastSeq !== null && r.lastSeq > r.signedThrough ? `; events ${r.signedThrough + 1}..${r.lastSeq} are chained but not yet signed` : ''}${key}`,
  );
  return lines;
}
