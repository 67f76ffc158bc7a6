/**
 * The audit worker thread: owns the database (store.ts) and the OTLP exporter (otlp.ts), so that no write, query,
 * retention pass or export ever blocks the server's event loop. The main thread (trail.ts) posts batches of records;
 * each batch is committed in one transaction as it arrives. Requests (query, process, info, flush, close) are
 * answered in order with the writes: a flush answered means every record posted before it is committed.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { nameThisThread } from '../platform/threadName.js';
import type { AuditInfoResult, AuditQuery } from '../protocol/audit.js';
import { moveAside } from './dbFile.js';
import type { AuditRecord } from './events.js';
import { isCorruption, openAuditStore } from './openStore.js';
import { type OtlpExporter, startOtlpExporter } from './otlp.js';
import type { RetentionOptions } from './retention.js';
import { SqliteUnavailableError } from './sqliteDriver.js';
import type { AuditStore } from './store.js';

export interface WorkerConfig {
  /** This thread's name, for the kernel too (trail.ts AUDIT_THREAD_NAME). */
  threadName: string;
  dbPath: string | null;
  ownDirectory: boolean;
  retention: RetentionOptions;
  /** Run retention this often (ms), after this many records, and after this many bytes of stored output. */
  retentionIntervalMs: number;
  retentionEveryRecords: number;
  retentionEveryBytes: number;
  outputBytes: number;
  otlp: { endpoint: string; serviceVersion: string; scheduledDelayMillis?: number } | null;
}

export type WorkerRequest =
  | { type: 'records'; records: AuditRecord[] }
  | { type: 'query'; id: number; query: AuditQuery }
  | { type: 'process'; id: number; sessionId: string; processId: string }
  | { type: 'replay'; id: number; sessionId: string; processId: string }
  | { type: 'info'; id: number }
  | { type: 'flush'; id: number }
  | { type: 'retention'; id: number; now?: number }
  | { type: 'close'; id: number };

export type WorkerMessage =
  | { type: 'ready'; schemaVersion: number | null; notices: string[]; unavailable: string | null }
  | { type: 'failed'; message: string }
  | { type: 'notice'; text: string }
  /** Writes to the database started failing (they are retried every second) or work again. */
  | { type: 'writing'; failing: boolean }
  | { type: 'reply'; id: number; result?: unknown; error?: string };

/** Records kept for a retry while the database is busy or failing; past it the oldest are dropped (and said so). */
const MAX_PENDING = 200_000;

const port = parentPort!;
const config = workerData as WorkerConfig;
nameThisThread(config.threadName);
const notices: string[] = [];
const notice = (text: string) => {
  notices.push(text);
  if (notices.length > 50) notices.shift();
  port.postMessage({ type: 'notice', text } satisfies WorkerMessage);
};

let store: AuditStore | null = null;
/** Why there is no database although one was asked for: better-sqlite3 does not load (sqliteDriver.ts). */
let unavailable: string | null = null;
let otlp: OtlpExporter | null = null;
let pending: AuditRecord[] = [];
let retryTimer: NodeJS.Timeout | null = null;
let sinceRetention = 0;
let bytesSinceRetention = 0;
let retentionRunning: Promise<void> | null = null;

function open(): void {
  if (!config.dbPath) return;
  try {
    store = openAuditStore(config.dbPath, { ownDirectory: config.ownDirectory, notice, sign: true });
  } catch (e) {
    if (!(e instanceof SqliteUnavailableError)) throw e;
    unavailable = e.message;
  }
}

function write(records: AuditRecord[]): void {
  if (!store) return;
  if (pending.length > 0 || retryTimer) {
    pending = pending.concat(records);
    if (pending.length > MAX_PENDING) {
      const dropped = pending.length - MAX_PENDING;
      pending.splice(0, dropped);
      notice(`audit: dropped the ${dropped} oldest unwritten events (the database has been failing)`);
    }
    return;
  }
  try {
    store.write(records);
  } catch (e) {
    if (isCorruption(e)) {
      recoverCorruption(e as Error);
      try {
        store?.write(records);
        return;
      } catch {
        // fall through to the retry path
      }
    }
    notice(`audit: writing to ${config.dbPath} failed (${(e as Error).message}); retrying every second`);
    pending = records;
    scheduleRetry();
    return;
  }
  sinceRetention += records.length;
  // Output is what makes a database big: a flood of chatty processes must not outgrow the size limit for long.
  for (const r of records) {
    if (r.kind === 'processClose')
      bytesSinceRetention += (r.head?.byteLength ?? 0) + (r.tail?.byteLength ?? 0);
  }
  if (sinceRetention >= config.retentionEveryRecords || bytesSinceRetention >= config.retentionEveryBytes)
    scheduleRetention();
}

let writesFailing = false;
/** Tells the trail when writes start failing or work again (its readiness check). */
function reportWriting(): void {
  const failing = pending.length > 0 || retryTimer !== null || (!!config.dbPath && !store && !unavailable);
  if (failing === writesFailing) return;
  writesFailing = failing;
  port.postMessage({ type: 'writing', failing } satisfies WorkerMessage);
}

function scheduleRetry(): void {
  // Real timers in this worker thread: the server's Clock does not cross threads (tests drive retention by `now`).
  retryTimer = setTimeout(() => {
    retryTimer = null;
    const batch = pending;
    pending = [];
    write(batch);
    reportWriting();
  }, 1000);
  reportWriting();
}

/** The file went bad under us: keep it aside for inspection and carry on in a fresh one. */
function recoverCorruption(e: Error): void {
  const path = config.dbPath!;
  try {
    store?.close();
  } catch {
    // closing a broken database may fail too
  }
  store = null;
  try {
    const aside = moveAside(path);
    notice(`audit database ${path} is corrupt (${e.message}): moved it to ${aside}, started a fresh one`);
    open();
  } catch (err) {
    notice(`audit: cannot recover ${path} (${(err as Error).message}); events are no longer stored`);
  }
  reportWriting();
}

/**
 * Retention in steps, yielding between them so batches keep being committed. A pass asked for while one runs starts
 * after it (`chain`), or is skipped (the periodic ones).
 */
function scheduleRetention(now?: number, chain = false): Promise<void> {
  if (!store) return Promise.resolve();
  if (retentionRunning)
    return chain ? retentionRunning.then(() => scheduleRetention(now, true)) : retentionRunning;
  sinceRetention = 0;
  bytesSinceRetention = 0;
  const pass = new Promise<void>((resolve) => {
    const step = () => {
      let more = false;
      try {
        more = store ? store.retentionStep(config.retention, now) : false;
      } catch (e) {
        if (isCorruption(e)) recoverCorruption(e as Error);
        else notice(`audit: retention failed: ${(e as Error).message}`);
      }
      if (more) setImmediate(step);
      else resolve();
    };
    setImmediate(step);
  }).finally(() => {
    retentionRunning = null;
  });
  retentionRunning = pass;
  return pass;
}

function info(): AuditInfoResult {
  const s = store;
  const empty = { session: 0, process: 0, network: 0, approval: 0, fs: 0 };
  return {
    enabled: s !== null,
    path: config.dbPath,
    schemaVersion: s ? s.schemaVersion : null,
    retentionDays: config.retention.maxAgeMs / 86_400_000,
    maxBytes: config.retention.maxBytes,
    sizeBytes: s ? s.fileBytes() : 0,
    outputBytes: config.outputBytes,
    ...(s ? s.span() : { oldest: null, newest: null }),
    counts: s ? s.counts() : empty,
    otlpEndpoint: config.otlp?.endpoint ?? null,
    notices: [...notices],
    unavailable,
  };
}

function reply(id: number, work: () => unknown): void {
  try {
    const result = work();
    if (result instanceof Promise) {
      result.then(
        (r) => port.postMessage({ type: 'reply', id, result: r } satisfies WorkerMessage),
        (e: Error) => port.postMessage({ type: 'reply', id, error: e.message } satisfies WorkerMessage),
      );
    } else port.postMessage({ type: 'reply', id, result } satisfies WorkerMessage);
  } catch (e) {
    if (isCorruption(e)) recoverCorruption(e as Error);
    port.postMessage({ type: 'reply', id, error: (e as Error).message } satisfies WorkerMessage);
  }
}

function requireStore(): AuditStore {
  if (!store)
    throw new Error(unavailable ?? 'the audit trail is off (--no-audit) or its database could not be opened');
  return store;
}

port.on('message', (m: WorkerRequest) => {
  switch (m.type) {
    case 'records':
      write(m.records);
      try {
        otlp?.emit(m.records);
      } catch (e) {
        notice(`audit: OTLP export failed: ${(e as Error).message}`);
      }
      return;
    case 'query':
      reply(m.id, () => requireStore().query(m.query));
      return;
    case 'process':
      reply(m.id, () => requireStore().process(m.sessionId, m.processId));
      return;
    case 'replay':
      reply(m.id, () => requireStore().replay(m.sessionId, m.processId));
      return;
    case 'info':
      reply(m.id, info);
      return;
    case 'flush':
      reply(m.id, async () => {
        if (retryTimer && pending.length > 0)
          throw new Error('the audit database is failing; events are pending');
        await otlp?.flush();
        return {};
      });
      return;
    case 'retention':
      reply(m.id, () => scheduleRetention(m.now, true).then(() => ({})));
      return;
    case 'close':
      reply(m.id, async () => {
        if (retryTimer) clearTimeout(retryTimer);
        if (pending.length > 0) {
          try {
            store?.write(pending);
          } catch {
            // nothing more can be done at shutdown
          }
        }
        await otlp?.shutdown().catch(() => {});
        try {
          store?.checkpoint();
        } catch (e) {
          notice(`audit: the closing checkpoint failed: ${(e as Error).message}`);
        }
        store?.close();
        store = null;
        return {};
      });
      return;
  }
});

try {
  open();
  if (config.otlp) otlp = await startOtlpExporter(config.otlp);
  const opened = store as AuditStore | null;
  port.postMessage({
    type: 'ready',
    schemaVersion: opened?.schemaVersion ?? null,
    notices: [...notices],
    unavailable,
  } satisfies WorkerMessage);
  if (opened) {
    void scheduleRetention();
    // Real, as every timer of this thread: a test runs a pass at the time it wants with the `retention` request.
    setInterval(() => void scheduleRetention(), config.retentionIntervalMs).unref();
  }
} catch (e) {
  port.postMessage({ type: 'failed', message: (e as Error).message } satisfies WorkerMessage);
}
