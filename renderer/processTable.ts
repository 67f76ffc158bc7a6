// The panel's process list: every process it has seen (live and history, of every server), kept compact and
// indexed so that an update patches one row, counts and the filtered, sorted view in O(log n), and a filter change
// is one pass. No DOM here (unit-tested under Node).
import type { MonitorProcess } from '../src/protocol/monitor.js';
import { shellJoin } from './dom.js';

export type StateFilter = '' | 'running' | 'exited' | 'failed';

export interface Filter {
  /** A server id ('' is the host itself), or null for all. */
  server: string | null;
  client: string | null;
  state: StateFilter;
  /** Lower-case text searched in the command, cwd, process id, client and server name. */
  text: string;
}

/**
 * One process as the table keeps it: the MonitorProcess fields in one object of one shape (its argv as one string,
 * shared values interned), plus what the table derives. A hundred thousand of these are a few small objects each,
 * which keeps the page's heap and its garbage collections small.
 */
export class Row implements MonitorProcess {
  server: string;
  sessionId: string;
  processId: string;
  clientName: string;
  cwd: string;
  tty: boolean;
  pipeStdin: boolean;
  pid: number;
  state: MonitorProcess['state'];
  exitCode: number | null;
  sandboxDenied: boolean;
  /** The cgroup limit it ran into (undefined: none). */
  limitHit: MonitorProcess['limitHit'];
  /** What it used, once it has exited (undefined before, or when nothing could say). */
  usage: MonitorProcess['usage'];
  sandboxType: MonitorProcess['sandboxType'];
  badge: MonitorProcess['badge'];
  launcherFlags: MonitorProcess['launcherFlags'];
  /** The Landlock backend's guarantees (undefined under bubblewrap): fixed at the start. */
  sandboxGuarantees: MonitorProcess['sandboxGuarantees'];
  policy: Record<string, unknown> | null;
  metadata: Record<string, unknown> | null;
  envKeys: string[];
  startedAt: number;
  exitedAt: number | null;
  closedAt: number | null;
  bytesOut: number;
  lastSeq: number;
  retained: boolean;
  stale: boolean;
  /** The command line as shown (shell-quoted argv): use commandOf(row), built on first use. */
  command: string | null = null;
  /** Bumped on every change (the view re-renders a row when it differs). */
  version = 0;
  /** Lower-case text a search looks in (built on the first search). */
  hay: string | null = null;
  /** argv, NUL-joined. */
  private readonly args: string;

  constructor(
    readonly key: string,
    p: MonitorProcess,
    /** Insertion order: ties of startedAt keep their order. */
    readonly ord: number,
    intern: { str(s: string): string; value<T>(v: T): T },
  ) {
    this.server = intern.str(p.server ?? '');
    this.sessionId = intern.str(p.sessionId);
    this.processId = p.processId;
    this.clientName = intern.str(p.clientName);
    this.cwd = intern.str(p.cwd);
    this.tty = p.tty;
    this.pipeStdin = p.pipeStdin;
    this.pid = p.pid;
    this.state = p.state;
    this.exitCode = p.exitCode;
    this.sandboxDenied = p.sandboxDenied;
    this.limitHit = p.limitHit;
    this.usage = p.usage;
    this.sandboxType = p.sandboxType;
    this.badge = p.badge;
    this.launcherFlags = intern.value(p.launcherFlags);
    this.sandboxGuarantees = p.sandboxGuarantees && intern.value(p.sandboxGuarantees);
    this.policy = intern.value(p.policy);
    this.metadata = intern.value(p.metadata);
    this.envKeys = intern.value(p.envKeys);
    this.startedAt = p.startedAt;
    this.exitedAt = p.exitedAt;
    this.closedAt = p.closedAt;
    this.bytesOut = p.bytesOut;
    this.lastSeq = p.lastSeq;
    this.retained = p.retained;
    this.stale = p.stale === true;
    this.args = p.argv.join('\u0000');
  }

  get argv(): string[] {
    return this.args === '' ? [] : this.args.split('\u0000');
  }
}

export interface Counts {
  total: number;
  running: number;
  /** Finished with exit code 0. */
  ok: number;
  /** Finished with another exit code (or killed). */
  failed: number;
  stale: number;
}

export const rowKey = (server: string, sessionId: string, processId: string) =>
  `${server}\u0000${sessionId}\u0000${processId}`;
export const sessionKey = (server: string, sessionId: string) => `${server}\u0000${sessionId}`;

const isRunning = (p: { state: string }) => p.state === 'running' || p.state === 'starting';
const isFailed = (p: { state: string; exitCode: number | null }) =>
  !isRunning(p) && p.exitCode !== null && p.exitCode !== 0;

/** The states each state filter lets through include those of the filters it names ('failed' ⊂ 'exited' ⊂ ''). */
const STATE_WITHIN: Record<StateFilter, readonly StateFilter[]> = {
  '': [''],
  running: ['running', ''],
  exited: ['exited', ''],
  failed: ['failed', 'exited', ''],
};

/** Whether every row `next` lets through, `prev` lets through too (so `next` need only test what `prev` showed). */
function narrows(prev: Filter, next: Filter): boolean {
  return (
    (prev.server === null || prev.server === next.server) &&
    (prev.client === null || prev.client === next.client) &&
    STATE_WITHIN[next.state]?.includes(prev.state) === true &&
    next.text.includes(prev.text)
  );
}

const before = (a: Row, b: Row) => a.startedAt - b.startedAt || a.ord - b.ord;

/** Rows whose search text prepareSearch builds between two questions to its `stop` (each well under 0.1 ms). */
const PREPARE_STEP = 64;

/** The command line as shown (shell-quoted argv), built once per row. */
export function commandOf(r: Row): string {
  r.command ??= shellJoin(r.argv);
  return r.command;
}

/**
 * `a` and `b` (each sorted) as one sorted list: appended, or a few inserted where they go (new processes arrive at
 * or near the end), or one merge into a new list (a page of older processes).
 */
function merge(a: Row[], b: Row[]): Row[] {
  if (b.length === 0) return a;
  if (a.length === 0 || before(a[a.length - 1]!, b[0]!) < 0) {
    for (const r of b) a.push(r);
    return a;
  }
  if (b.length <= 256) {
    for (const r of b) {
      const i = lowerBound(a, r);
      if (i === a.length) a.push(r);
      else a.splice(i, 0, r);
    }
    return a;
  }
  const out: Row[] = new Array(a.length + b.length);
  let i = 0;
  let j = 0;
  let k = 0;
  while (i < a.length && j < b.length) out[k++] = before(a[i]!, b[j]!) <= 0 ? a[i++]! : b[j++]!;
  while (i < a.length) out[k++] = a[i++]!;
  while (j < b.length) out[k++] = b[j++]!;
  return out;
}

/** Index of the first element of `list` (sorted by `before`) not before `row`. */
function lowerBound(list: Row[], row: Row): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (before(list[mid]!, row) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Shares equal values (policies, env names, metadata) between rows: most processes of a session have the same. */
class Interner {
  private readonly map = new Map<string, unknown>();
  get<T>(value: T): T {
    if (value === null || typeof value !== 'object') return value;
    const k = JSON.stringify(value);
    const hit = this.map.get(k);
    if (hit !== undefined) return hit as T;
    if (this.map.size < 50_000) this.map.set(k, value);
    return value;
  }
  clear(): void {
    this.map.clear();
  }
}

export class ProcessTable {
  readonly rows = new Map<string, Row>();
  /** Every row, oldest first. */
  private sorted: Row[] = [];
  /** The rows that pass the filter, oldest first. */
  private view: Row[] = [];
  private filter: Filter = { server: null, client: null, state: '', text: '' };
  readonly counts: Counts = { total: 0, running: 0, ok: 0, failed: 0, stale: 0 };
  /** Rows and running rows per client name, and per server. */
  readonly byClient = new Map<string, { total: number; running: number }>();
  readonly byServer = new Map<string, { total: number; running: number }>();
  /** Running processes per session (`sessionKey`). */
  readonly runningBySession = new Map<string, number>();
  /** Keys changed since the last takeChanged(). */
  private changed = new Set<string>();
  private ord = 0;
  private readonly interner = new Interner();
  private readonly strings = new Map<string, string>();
  /**
   * Rows made since prepareSearch last finished, in order (it builds their search text from `preparedTo` on): a
   * list of new rows, not a walk over all of them, so that each batch of new rows costs its own rows only.
   */
  private unprepared: Row[] = [];
  private preparedTo = 0;
  /** Server names for the search (id → name). */
  serverName: (id: string) => string = (id) => id;

  get size(): number {
    return this.rows.size;
  }

  /** Rows that pass the filter. */
  get viewSize(): number {
    return this.view.length;
  }

  /** The i-th row of the view, newest first (or oldest first). */
  at(i: number, newestFirst = true): Row | undefined {
    return this.view[newestFirst ? this.view.length - 1 - i : i];
  }

  /** Where a row is in the view (newest first), or -1. */
  indexOf(row: Row, newestFirst = true): number {
    const i = lowerBound(this.view, row);
    if (this.view[i] !== row) return -1;
    return newestFirst ? this.view.length - 1 - i : i;
  }

  get(key: string): Row | undefined {
    return this.rows.get(key);
  }

  takeChanged(): Set<string> {
    const c = this.changed;
    this.changed = new Set();
    return c;
  }

  private readonly intern = {
    str: (s: string): string => {
      const hit = this.strings.get(s);
      if (hit !== undefined) return hit;
      if (this.strings.size < 50_000) this.strings.set(s, s);
      return s;
    },
    value: <T>(v: T): T => this.interner.get(v),
  };

  /** Adds a process or brings its row up to date. Returns its row. */
  upsert(p: MonitorProcess): Row {
    return this.upsertAll([p])[0]!;
  }

  /**
   * Adds or updates many processes (a batch, a snapshot page). New rows are sorted in once: a page of older
   * processes costs one merge, not a splice per row.
   */
  upsertAll(list: MonitorProcess[]): Row[] {
    const out: Row[] = [];
    const fresh: Row[] = [];
    for (const p of list) {
      const server = p.server ?? '';
      const key = rowKey(server, p.sessionId, p.processId);
      const row = this.rows.get(key);
      if (row) out.push(this.refresh(row, p));
      else {
        const r = this.create(key, p);
        fresh.push(r);
        out.push(r);
      }
    }
    if (fresh.length > 0) {
      fresh.sort(before);
      this.sorted = merge(this.sorted, fresh);
      this.view = merge(
        this.view,
        fresh.filter((r) => this.matches(r)),
      );
    }
    return out;
  }

  private refresh(row: Row, p: MonitorProcess): Row {
    const wasIn = this.matches(row);
    this.count(row, -1);
    row.pid = p.pid;
    row.state = p.state;
    row.exitCode = p.exitCode;
    row.sandboxDenied = p.sandboxDenied;
    row.limitHit = p.limitHit;
    row.usage = p.usage;
    row.exitedAt = p.exitedAt;
    row.closedAt = p.closedAt;
    row.bytesOut = p.bytesOut;
    row.lastSeq = p.lastSeq;
    row.retained = p.retained;
    row.stale = p.stale === true;
    row.version++;
    this.count(row, 1);
    this.refile(row, wasIn);
    this.changed.add(row.key);
    return row;
  }

  /** A new row (counted, keyed; the caller files it into the sorted lists). */
  private create(key: string, p: MonitorProcess): Row {
    const row = new Row(key, p, this.ord++, this.intern);
    this.rows.set(key, row);
    this.unprepared.push(row);
    this.count(row, 1);
    this.changed.add(key);
    return row;
  }

  /** Changes some rows in place (e.g. marks them stale); `f` returns true for a row it changed. */
  update(f: (row: Row) => boolean): void {
    for (const row of this.sorted) {
      const wasIn = this.matches(row);
      this.count(row, -1);
      const did = f(row);
      this.count(row, 1);
      if (!did) continue;
      row.version++;
      this.refile(row, wasIn);
      this.changed.add(row.key);
    }
  }

  clear(): void {
    this.rows.clear();
    this.sorted = [];
    this.view = [];
    Object.assign(this.counts, { total: 0, running: 0, ok: 0, failed: 0, stale: 0 });
    this.byClient.clear();
    this.byServer.clear();
    this.runningBySession.clear();
    this.interner.clear();
    this.strings.clear();
    this.changed = new Set();
    this.unprepared = [];
    this.preparedTo = 0;
  }

  getFilter(): Filter {
    return { ...this.filter };
  }

  /**
   * Applies a filter. A filter that only narrows the current one (a key that extends the search, a state or client
   * picked from "all") tests only the rows shown now; one that passes everything is a copy of the sorted list;
   * anything else is one pass over the rows.
   */
  setFilter(f: Partial<Filter>): void {
    const prev = this.filter;
    const next = { ...prev, ...f };
    next.text = next.text.trim().toLowerCase();
    if (
      next.server === prev.server &&
      next.client === prev.client &&
      next.state === prev.state &&
      next.text === prev.text
    )
      return;
    this.filter = next;
    if (next.server === null && next.client === null && next.state === '' && next.text === '')
      this.view = this.sorted.slice();
    else if (narrows(prev, next)) this.view = this.view.filter((r) => this.matches(r));
    else this.view = this.sorted.filter((r) => this.matches(r));
  }

  matches(r: Row): boolean {
    const f = this.filter;
    if (f.server !== null && r.server !== f.server) return false;
    if (f.client !== null && r.clientName !== f.client) return false;
    if (f.state === 'running' && !isRunning(r)) return false;
    if (f.state === 'exited' && isRunning(r)) return false;
    if (f.state === 'failed' && !isFailed(r)) return false;
    if (f.text !== '' && !this.hayOf(r).includes(f.text)) return false;
    return true;
  }

  private hayOf(r: Row): string {
    r.hay ??=
      `${commandOf(r)}\n${r.cwd}\n${r.processId}\n${r.clientName}\n${this.serverName(r.server)}`.toLowerCase();
    return r.hay;
  }

  /**
   * Builds the search text of rows that have none yet, until `stop()` says so (call it while the page is idle, so
   * that the first search over 100 000 rows is a scan, not 100 000 string builds). True once every row has one.
   */
  prepareSearch(stop: () => boolean): boolean {
    const list = this.unprepared;
    while (this.preparedTo < list.length) {
      if (stop()) return false;
      // `stop` (an IdleDeadline's timeRemaining) costs more than a row: asked once per PREPARE_STEP rows.
      const end = Math.min(list.length, this.preparedTo + PREPARE_STEP);
      for (let i = this.preparedTo; i < end; i++) this.hayOf(list[i]!);
      this.preparedTo = end;
    }
    this.unprepared = [];
    this.preparedTo = 0;
    return true;
  }

  private refile(row: Row, wasIn: boolean): void {
    const isIn = this.matches(row);
    if (isIn === wasIn) return;
    if (isIn) this.addToView(row);
    else {
      const i = lowerBound(this.view, row);
      if (this.view[i] === row) this.view.splice(i, 1);
    }
  }

  private addToView(row: Row): void {
    const i = lowerBound(this.view, row);
    if (i === this.view.length) this.view.push(row);
    else this.view.splice(i, 0, row);
  }

  private count(r: Row, d: 1 | -1): void {
    const c = this.counts;
    const running = isRunning(r);
    c.total += d;
    if (running) c.running += d;
    else if (isFailed(r)) c.failed += d;
    else if (r.exitCode === 0) c.ok += d;
    if (r.stale) c.stale += d;
    const bump = (m: Map<string, { total: number; running: number }>, k: string) => {
      let e = m.get(k);
      if (!e) {
        e = { total: 0, running: 0 };
        m.set(k, e);
      }
      e.total += d;
      if (running) e.running += d;
    };
    bump(this.byClient, r.clientName);
    bump(this.byServer, r.server);
    if (running) {
      const sk = sessionKey(r.server, r.sessionId);
      const n = (this.runningBySession.get(sk) ?? 0) + d;
      if (n > 0) this.runningBySession.set(sk, n);
      else this.runningBySession.delete(sk);
    }
  }
}
