/**
 * The audit database's hash chain (issue 37, item 3): every stored event is an entry of the `chain` table, in the
 * order it was written, that carries the SHA-256 of the entry before it. An entry names its row (table, id) and holds
 * the digest of what the row says, over a canonical encoding of the columns its event wrote (COVERS: the one
 * definition, used when the entry is made and when it is verified). A process is three events: its start (the
 * `processes` row's start columns and its `process_details`), its exit (the exit columns and usage) and its close
 * (the close columns and its `process_output`).
 *
 *   digest = SHA-256("corral-audit-event\0" kind \0 value₁ \0 value₂ …)   (the row's id is not in it: see reordering)
 *   hash   = SHA-256(prev hash ‖ seq ‖ kind ‖ table ‖ row ‖ digest ‖ pruned)
 *
 * Signed checkpoints (Ed25519, chainKey.ts) every CHECKPOINT_EVERY entries and at close fix the chain's hash at a
 * seq: rewriting history before one needs the key. Retention deletes rows; each deletion is itself an entry (`prune`,
 * the ids it deleted), and the prefix of the chain whose rows are all gone is cut, leaving a signed anchor (its last
 * hash) that the rest chains on from. verify.ts checks all of it.
 */
import * as crypto from 'node:crypto';
import type { ChainSigner } from './chainKey.js';
import type { AuditRecord } from './events.js';
import type { SqliteDatabase } from './sqliteDriver.js';

/**
 * SHA-256 of `data` as hex, in one call: crypto.hash (Node 20.12+) where there is one, ~0.6 µs against ~1.4 µs for a
 * Hash object (createHash, update, digest) on a chain entry's ~200 bytes; a stored process is six of them (issue 32).
 */
const sha256Hex: (data: string | Buffer) => string =
  typeof crypto.hash === 'function'
    ? (data) => crypto.hash('sha256', data, 'hex')
    : (data) => crypto.createHash('sha256').update(data).digest('hex');

/** The kinds of entries: an event of one table, or a prune. */
export type ChainKind =
  | 'session'
  | 'network'
  | 'approval'
  | 'fs'
  | 'process-start'
  | 'process-exit'
  | 'process-close'
  | 'prune';

export const CHECKPOINT_EVERY = 1000;
/** At most this many processes' row ids kept between their start and close (ChainWriter.knownProcesses). */
const MAX_KNOWN_PROCESSES = 65_536;

/**
 * What an entry of each kind covers: its table and the columns its event wrote (named as the export's rows name
 * them: rowItems.ts), read from row `?`; `rows`: rows of another table that belong to it, every value after the row's.
 */
interface Cover {
  table: string;
  columns: readonly string[];
  from: string;
  rows?: { columns: readonly string[]; from: string };
}

const cover = (table: string, columns: string[], from = `${table} WHERE id = ?`): Cover => ({
  table,
  columns,
  from,
});

export const COVERS: Record<Exclude<ChainKind, 'prune'>, Cover> = {
  session: cover('sessions', ['time', 'session_id', 'client_name', 'event', 'truncated']),
  network: cover('network', [
    'time',
    'session_id',
    'process_id',
    'host',
    'port',
    'protocol',
    'method',
    'decision',
    'reason',
    'source',
    'scope',
    'override',
    'client_address',
    'metadata',
    'truncated',
    'rule_id',
    'rule_origin',
    'correlation_id',
  ]),
  approval: cover('approvals', [
    'time',
    'kind',
    'prompt_id',
    'decision',
    'scope',
    'decided_by',
    'session_id',
    'process_id',
    'command',
    'host',
    'port',
    'protocol',
    'method',
    'released',
    'truncated',
    'correlation_id',
  ]),
  fs: cover('fs_events', [
    'time',
    'session_id',
    'client_name',
    'op',
    'path',
    'destination',
    'bytes',
    'outcome',
    'error',
    'truncated',
  ]),
  'process-start': cover(
    'processes',
    [
      'p.session_id',
      'p.process_id',
      'p.client_name',
      'p.command',
      'p.cwd',
      'p.tty',
      'p.pid',
      'p.sandbox_type',
      'p.started_at',
      'd.argv',
      'd.env_names',
      'd.policy',
      'd.network',
      'd.metadata',
      'd.truncated',
    ],
    'processes p LEFT JOIN process_details d ON d.process = p.id WHERE p.id = ?',
  ),
  'process-exit': cover('processes', [
    'exited_at',
    'exit_code',
    'signal',
    'sandbox_denied',
    'limit_hit',
    'usage',
  ]),
  'process-close': {
    ...cover(
      'processes',
      ['p.closed_at', 'p.output_bytes', 'o.head', 'o.tail', 'o.omitted'],
      'processes p LEFT JOIN process_output o ON o.process = p.id WHERE p.id = ?',
    ),
    // The timed output chunks (replay) are the close's too.
    rows: { columns: ['seq', 'at', 'stream', 'data'], from: 'process_chunks WHERE process = ? ORDER BY seq' },
  },
};

/** A covered column's name in a row (without its table alias). */
export const columnName = (c: string) => c.slice(c.indexOf('.') + 1);

/** The tables whose every row some entry must name (a row no entry names was inserted behind the chain's back). */
export const CHAINED_TABLES = ['sessions', 'processes', 'network', 'approvals', 'fs_events'] as const;

export const GENESIS = '0'.repeat(64);

/** The set under `key` of a map of sets, made when absent. */
export function setIn<K, V>(map: Map<K, Set<V>>, key: K): Set<V> {
  let s = map.get(key);
  if (!s) {
    s = new Set();
    map.set(key, s);
  }
  return s;
}

/**
 * The digest of a row's covered values (as the `raw()` statement of COVERS returns them). Each value in the canonical
 * encoding: its type and its bytes, unambiguous (lengths, not separators): `n;` (null), `i<n>;` (a number), `s<bytes>:`
 * and its UTF-8 (a string), `b<bytes>:` and the bytes (a blob), `?<json>;` (anything else). The text between blobs goes
 * to the hash in one update (issue 32: an update per piece was most of the audit worker's hashing): the same bytes,
 * as UTF-8 encodes a string piece by piece as it encodes it whole (every string is between ASCII pieces, so no
 * surrogate of one piece pairs with one of the next). A row without blobs (most: a start, an exit, a close without
 * output) is one text, hashed in one call.
 */
export function rowDigest(kind: ChainKind, values: readonly unknown[]): string {
  const h = values.some((v) => v instanceof Uint8Array) ? crypto.createHash('sha256') : null;
  let text = `corral-audit-event\0${kind}\0`;
  for (const v of values) {
    if (v === null || v === undefined) text += 'n;';
    else if (typeof v === 'number' || typeof v === 'bigint') text += `i${String(v)};`;
    else if (typeof v === 'string') text += `s${Buffer.byteLength(v, 'utf8')}:${v}`;
    else if (v instanceof Uint8Array) {
      h!.update(`${text}b${v.byteLength}:`);
      h!.update(v);
      text = '';
    } else text += `?${JSON.stringify(v)};`;
  }
  if (!h) return sha256Hex(text);
  h.update(text);
  return h.digest('hex');
}

export interface ChainEntry {
  seq: number;
  kind: ChainKind;
  tbl: string;
  row: number | null;
  digest: string;
  /** prune entries: the ids deleted, as JSON. */
  pruned: string | null;
}

export function entryHash(prev: string, e: ChainEntry): string {
  const head = `corral-audit-chain\0${prev}\0${e.seq}\0${e.kind}\0${e.tbl}\0${e.row ?? ''}\0${e.digest}\0`;
  return sha256Hex(e.pruned === null ? head : head + e.pruned);
}

/** The text a checkpoint or an anchor signs. */
export function signedText(what: 'checkpoint' | 'anchor', seq: number, hash: string): Buffer {
  return Buffer.from(`corral-audit-${what}\0${seq}\0${hash}`);
}

/** Reads a row's covered values with the kind's statement; null when the row is gone. */
export type RowReader = (kind: Exclude<ChainKind, 'prune'>, row: number) => unknown[] | null;

export function rowReader(db: SqliteDatabase): RowReader {
  const stmts = new Map<string, ReturnType<SqliteDatabase['prepare']>>();
  const stmt = (key: string, sql: string) => {
    let s = stmts.get(key);
    if (!s) {
      s = db.prepare(sql).raw(true);
      stmts.set(key, s);
    }
    return s;
  };
  return (kind, row) => {
    const c = COVERS[kind];
    const values = stmt(kind, `SELECT ${c.columns.join(', ')} FROM ${c.from}`).get(row) as
      | unknown[]
      | undefined;
    if (!values) return null;
    if (c.rows)
      for (const r of stmt(`${kind}+`, `SELECT ${c.rows.columns.join(', ')} FROM ${c.rows.from}`).all(
        row,
      ) as unknown[][])
        values.push(...r);
    return values;
  };
}

/** Whether the database has a chain (schema 3 and later). */
export function hasChain(db: SqliteDatabase): boolean {
  const n = db
    .prepare("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'chain'")
    .pluck(true)
    .get() as number;
  return n > 0;
}

/** The kind of entry a record makes, and the table its row is in. */
function kindOf(r: AuditRecord): Exclude<ChainKind, 'prune'> {
  switch (r.kind) {
    case 'processStart':
      return 'process-start';
    case 'processExit':
      return 'process-exit';
    case 'processClose':
      return 'process-close';
    default:
      return r.kind;
  }
}

/**
 * Appends entries for what a batch wrote (called in the batch's transaction, after the writes): rows are found after
 * the fact (inserted rows by id above the last chained one of their table, processes by key), so the writes
 * themselves (recordWriter.ts) need not know the chain.
 */
export class ChainWriter {
  private seq: number;
  private prev: string;
  private sinceCheckpoint = 0;
  /** The highest row id chained per insert-only table. */
  private readonly chained = new Map<string, number>();
  private readonly read: RowReader;
  private readonly insert;
  private readonly idsAfter = new Map<string, ReturnType<SqliteDatabase['prepare']>>();
  private readonly processByKey;
  /**
   * The row id of each process this writer chained the start of and not yet the close: its exit and close need no
   * lookup (two statements less per process). Ids of rows retention deleted are dropped with it (pruned()); past
   * MAX_KNOWN_PROCESSES (processes that never close) it is emptied, and the statement answers.
   */
  private readonly knownProcesses = new Map<string, number>();

  constructor(
    private readonly db: SqliteDatabase,
    private readonly signer: ChainSigner | null,
  ) {
    this.read = rowReader(db);
    this.insert = db.prepare(
      'INSERT INTO chain (seq, kind, tbl, row, digest, hash, pruned) VALUES (?, ?, ?, ?, ?, ?, ?)',
    );
    this.processByKey = db
      .prepare('SELECT id FROM processes WHERE session_id = ? AND process_id = ?')
      .pluck(true);
    this.lastEntry = db.prepare('SELECT seq, hash FROM chain ORDER BY seq DESC LIMIT 1');
    this.anchorHead = db.prepare('SELECT seq, hash FROM chain_anchor');
    this.lastCheckpoint = db.prepare('SELECT max(seq) FROM chain_checkpoints').pluck(true);
    // Prune entries have no row (NULL, which max ignores): so no filter on kind, and the index answers at once.
    this.highestRow = db.prepare('SELECT max(row) FROM chain WHERE tbl = ?').pluck(true);
    for (const t of CHAINED_TABLES)
      this.idsAfter.set(t, db.prepare(`SELECT id FROM ${t} WHERE id > ? ORDER BY id`).pluck(true));
    this.seq = 0;
    this.prev = GENESIS;
    this.refresh();
  }

  private readonly lastEntry;
  private readonly anchorHead;
  private readonly lastCheckpoint;
  private readonly highestRow;

  /**
   * The chain's head and each table's highest chained row, read again (inside the write transaction): another Corral
   * server may write the same file, and its entries come before ours.
   */
  private refresh(): void {
    type Head = { seq: number; hash: string } | undefined;
    const last = this.lastEntry.get() as Head;
    const anchor = last ? undefined : (this.anchorHead.get() as Head);
    this.seq = last?.seq ?? anchor?.seq ?? 0;
    this.prev = last?.hash ?? anchor?.hash ?? GENESIS;
    this.sinceCheckpoint = this.seq - ((this.lastCheckpoint.get() as number | null) ?? 0);
    for (const t of CHAINED_TABLES) this.chained.set(t, (this.highestRow.get(t) as number | null) ?? 0);
  }

  /** The last entry's seq and hash. */
  get head(): { seq: number; hash: string } {
    return { seq: this.seq, hash: this.prev };
  }

  private append(
    kind: ChainKind,
    tbl: string,
    row: number | null,
    digest: string,
    pruned: string | null,
  ): void {
    const e: ChainEntry = { seq: this.seq + 1, kind, tbl, row, digest, pruned };
    const hash = entryHash(this.prev, e);
    this.insert.run(e.seq, kind, tbl, row, digest, hash, pruned);
    this.seq = e.seq;
    this.prev = hash;
    this.sinceCheckpoint++;
  }

  /** Chains one stored row (its covered values as they are now). */
  private chainRow(kind: Exclude<ChainKind, 'prune'>, row: number): void {
    const values = this.read(kind, row);
    if (!values) return;
    this.append(kind, COVERS[kind].table, row, rowDigest(kind, values), null);
  }

  /** Entries for what `records` wrote, in their order. Call inside the batch's transaction. */
  extend(records: readonly AuditRecord[]): void {
    this.refresh();
    const fresh = new Map<string, number[]>();
    const next = (table: string): number | undefined => {
      let ids = fresh.get(table);
      if (!ids) {
        ids = this.idsAfter.get(table)!.all(this.chained.get(table)!) as number[];
        fresh.set(table, ids);
      }
      return ids.shift();
    };
    for (const r of records) {
      const kind = kindOf(r);
      const table = COVERS[kind].table;
      if (r.kind === 'processStart' || r.kind === 'processExit' || r.kind === 'processClose') {
        const key = `${r.sessionId}\0${r.processId}`;
        const id =
          (r.kind === 'processStart' ? undefined : this.knownProcesses.get(key)) ??
          (this.processByKey.get(r.sessionId, r.processId) as number | undefined);
        if (id === undefined) continue;
        if (r.kind === 'processStart') {
          // A start for a process already stored (INSERT OR IGNORE) wrote nothing.
          if (id <= this.chained.get(table)!) continue;
          this.chained.set(table, id);
          if (this.knownProcesses.size >= MAX_KNOWN_PROCESSES) this.knownProcesses.clear();
          this.knownProcesses.set(key, id);
        } else if (r.kind === 'processClose') this.knownProcesses.delete(key);
        this.chainRow(kind, id);
        continue;
      }
      const id = next(table);
      if (id === undefined) continue;
      this.chained.set(table, id);
      this.chainRow(kind, id);
    }
    // Rows of these tables no record accounts for (none expected) are chained too, rather than left looking inserted.
    for (const [table, ids] of fresh) {
      for (const id of ids) {
        const kind = (Object.keys(COVERS) as (keyof typeof COVERS)[]).find((k) => COVERS[k].table === table)!;
        this.chained.set(table, id);
        this.chainRow(kind, id);
      }
    }
    if (this.sinceCheckpoint >= CHECKPOINT_EVERY) this.checkpoint('every');
  }

  /** Every row of a database that had no chain (made before schema 3), chained as it is now. */
  adoptExisting(): void {
    for (const [kind, c] of Object.entries(COVERS) as [Exclude<ChainKind, 'prune'>, { table: string }][]) {
      const ids = this.db.prepare(`SELECT id FROM ${c.table} ORDER BY id`).pluck(true).all() as number[];
      for (const id of ids) {
        if (kind === 'process-exit' || kind === 'process-close') {
          const col = kind === 'process-exit' ? 'exited_at' : 'closed_at';
          const at = this.db.prepare(`SELECT ${col} FROM processes WHERE id = ?`).pluck(true).get(id);
          if (at === null) continue;
        }
        this.chainRow(kind, id);
        if (kind === 'process-start' || !COVERS[kind].table.startsWith('process'))
          this.chained.set(c.table, Math.max(this.chained.get(c.table) ?? 0, id));
      }
    }
  }

  /** Retention deleted these rows of `table`: an entry says so (verify then accepts them missing). */
  pruned(table: string, ids: readonly number[]): void {
    if (ids.length === 0) return;
    if (table === 'processes') {
      const gone = new Set(ids);
      for (const [key, id] of this.knownProcesses) if (gone.has(id)) this.knownProcesses.delete(key);
    }
    this.refresh();
    const list = JSON.stringify([...ids].sort((a, b) => a - b));
    this.append('prune', table, null, sha256Hex(list), list);
  }

  /** Signs the chain's head now (every CHECKPOINT_EVERY entries, and at close). No key: nothing to sign. */
  checkpoint(reason: 'every' | 'close' | 'prune', now = Date.now()): void {
    if (!this.signer) return;
    this.refresh();
    if (this.seq === 0) return;
    const last = this.db.prepare('SELECT max(seq) FROM chain_checkpoints').pluck(true).get() as number | null;
    if (last === this.seq) return;
    this.db
      .prepare(
        'INSERT INTO chain_checkpoints (seq, hash, time, reason, public_key, signature) VALUES (?, ?, ?, ?, ?, ?)',
      )
      .run(
        this.seq,
        this.prev,
        now,
        reason,
        this.signer.publicKey,
        this.signer.sign(signedText('checkpoint', this.seq, this.prev)),
      );
    this.sinceCheckpoint = 0;
  }

  /**
   * After retention: the entries at the head of the chain whose rows are all gone (and the prunes among them) are
   * cut, leaving a signed anchor (the last cut entry's seq and hash) the rest chains on from. Missing rows that only
   * a cut prune entry named are named again in a new prune entry. Without a key nothing is cut (an unsigned anchor
   * would prove nothing).
   */
  cutPrefix(now = Date.now()): number {
    if (!this.signer) return 0;
    this.refresh();
    let firstKept = Number.POSITIVE_INFINITY;
    for (const [kind, c] of Object.entries(COVERS)) {
      const s = this.db
        .prepare(`SELECT min(ch.seq) FROM chain ch JOIN ${c.table} t ON t.id = ch.row WHERE ch.kind = ?`)
        .pluck(true)
        .get(kind) as number | null;
      if (s !== null) firstKept = Math.min(firstKept, s);
    }
    let cut = (firstKept === Number.POSITIVE_INFINITY ? this.seq + 1 : firstKept) - 1;
    // Only rows retention deleted (a prune entry names them) may go with the cut: a row deleted any other way stays
    // an entry that verify reports.
    const prunedRows = new Set<string>();
    for (const p of this.db.prepare("SELECT tbl, pruned FROM chain WHERE kind = 'prune'").all() as {
      tbl: string;
      pruned: string;
    }[])
      for (const id of JSON.parse(p.pruned) as number[]) prunedRows.add(`${p.tbl}:${id}`);
    const unpruned = this.db
      .prepare("SELECT seq, tbl, row FROM chain WHERE kind != 'prune' AND seq <= ? ORDER BY seq")
      .all(cut) as { seq: number; tbl: string; row: number }[];
    const firstUnpruned = unpruned.find((e) => !prunedRows.has(`${e.tbl}:${e.row}`));
    if (firstUnpruned) cut = firstUnpruned.seq - 1;
    const anchor = this.db.prepare('SELECT seq FROM chain_anchor').pluck(true).get() as number | undefined;
    if (cut <= (anchor ?? 0) || cut < 1) return 0;
    // Prune entries being cut may name rows that kept entries still point at: name those again.
    const cutPrunes = this.db
      .prepare("SELECT tbl, pruned FROM chain WHERE kind = 'prune' AND seq <= ?")
      .all(cut) as { tbl: string; pruned: string }[];
    const carried = new Map<string, Set<number>>();
    if (cutPrunes.length > 0) {
      const keptRows = new Map<string, Set<number>>();
      for (const r of this.db
        .prepare("SELECT tbl, row FROM chain WHERE kind != 'prune' AND seq > ?")
        .all(cut) as { tbl: string; row: number }[]) {
        setIn(keptRows, r.tbl).add(r.row);
      }
      for (const p of cutPrunes) {
        for (const id of JSON.parse(p.pruned) as number[]) {
          if (!keptRows.get(p.tbl)?.has(id)) continue;
          setIn(carried, p.tbl).add(id);
        }
      }
    }
    const at = this.db.prepare('SELECT hash FROM chain WHERE seq = ?').pluck(true).get(cut) as
      | string
      | undefined;
    if (!at) return 0;
    this.db.prepare('DELETE FROM chain WHERE seq <= ?').run(cut);
    this.db.prepare('DELETE FROM chain_checkpoints WHERE seq <= ?').run(cut);
    this.db.prepare('DELETE FROM chain_anchor').run();
    this.db
      .prepare(
        'INSERT INTO chain_anchor (id, seq, hash, time, public_key, signature) VALUES (1, ?, ?, ?, ?, ?)',
      )
      .run(cut, at, now, this.signer.publicKey, this.signer.sign(signedText('anchor', cut, at)));
    for (const [table, ids] of carried) this.pruned(table, [...ids]);
    return cut;
  }
}
