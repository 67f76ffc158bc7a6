/**
 * The server side of the audit trail: an AuditSink that observers feed records into (observe.ts), and the way to the
 * worker thread that stores and exports them (worker.ts). `record()` only appends to an in-memory queue; the queue
 * goes to the worker at the end of the event loop's turn, at most once per POST_INTERVAL_MS (every record since the
 * last post in one message), or at once past FLUSH_RECORDS; the worker commits each batch in one transaction. Queries
 * go to the worker too. So the event loop never waits on the disk.
 *
 * The durability point (issue 32): a record is safe once the worker has committed its batch (WAL, synchronous =
 * NORMAL: a commit survives the server's crash, not the machine's). process/closed goes to the client without
 * waiting for that commit, so what a crash of the server can lose is what was recorded since the last post (at most
 * POST_INTERVAL_MS) and the batches the worker had not committed yet. Measured (`npm run bench -- hotpath`, "audit
 * durability": SIGKILL the moment the client has the last of 100 sequential and 3×64 concurrent `true`, load ~15 on
 * 2 cores), with one post per turn: 0-64 close rows lost per kill, median 22 (the tail of the last batch of 64, in
 * flight to the worker); with the old FLUSH_MS = 100 ms timer, 64 on every kill (everything of the last 100 ms).
 * Not promised: that a close the client saw is stored (that would hold process/closed until the commit).
 */
import { existsSync, realpathSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import type {
  AuditInfoResult,
  AuditProcessResult,
  AuditQuery,
  AuditQueryResult,
  AuditReplayResult,
} from '../protocol/audit.js';
import type { AuditRecord } from './events.js';
import { DEFAULT_REPLAY_BYTES, MAX_REPLAY_BYTES } from './replayRecorder.js';
import type { WorkerConfig, WorkerMessage, WorkerRequest } from './worker.js';

/** Records go to the worker at the end of the event loop's turn, or at once when this many are queued. */
export const FLUSH_RECORDS = 1000;
/**
 * At most one batch per this many ms (the first of a quiet spell goes at the end of its turn). Each postMessage wakes
 * the worker thread, and on a busy machine the woken thread takes the event loop's core: ~40-100 µs of the loop's
 * wall time per post at load 8-10 on 2 cores, against ~15 µs when the worker is not woken (issue 32). One post per
 * 5 ms instead of two per start adds at most those 5 ms of records to what a crash can lose.
 */
export const POST_INTERVAL_MS = 5;
export const DEFAULT_OUTPUT_BYTES = 64 * 1024;
/** The largest --audit-output-bytes: a process's retained output ring (outputBuffer.ts) holds 1 MiB. */
export const MAX_OUTPUT_BYTES = 1024 * 1024;
export const DEFAULT_RETENTION_DAYS = 30;
export const DEFAULT_MAX_BYTES = 1024 * 1024 * 1024;
const RETENTION_INTERVAL_MS = 10 * 60 * 1000;

/** What observers of the server hand their records to. */
export interface AuditSink {
  /** First and last bytes of each process's output to keep (0: none). */
  readonly outputBytes: number;
  /** Timed output to keep per process for replay (replayRecorder.ts; 0 or absent: none). */
  readonly replayBytes?: number;
  record(r: AuditRecord): void;
}

export interface AuditOptions {
  /** The database file. null: store nothing (only export to OTLP, when an endpoint is given). */
  dbPath: string | null;
  outputBytes?: number;
  /** Timed output kept per process for replay (DEFAULT_REPLAY_BYTES; 0: none). Only with a database. */
  replayBytes?: number;
  retentionDays?: number;
  maxBytes?: number;
  otlpEndpoint?: string | null;
  serviceVersion?: string;
  /**
   * The option that named the database (`--audit-db`), or null. When better-sqlite3 cannot be loaded, opening then
   * fails naming it (the operator asked for that file) instead of running without a database.
   */
  requiredBy?: string | null;
  /** Tests: how often the OTLP batch goes out (ms). */
  otlpDelayMs?: number;
}

/** `$XDG_STATE_HOME/corral/audit.db`, else `~/.local/state/corral/audit.db`. */
export function defaultAuditPath(env: NodeJS.ProcessEnv = process.env): string {
  const xdg = env.XDG_STATE_HOME;
  const base = xdg?.startsWith('/') ? xdg : join(env.HOME || homedir(), '.local', 'state');
  return join(base, 'corral', 'audit.db');
}

/**
 * The worker's script: next to this module (tsx, sources), dist/audit/worker.js next to the bundle (dist/cli.js,
 * dist/main/main.js), or, for a copy of the bundle elsewhere in the package, the package's own dist/.
 */
function workerScript(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  const candidates = [
    join(here, 'worker.ts'),
    join(here, 'worker.js'),
    join(here, 'audit', 'worker.js'),
    join(here, '..', 'audit', 'worker.js'),
  ];
  for (let dir = here; dirname(dir) !== dir; dir = dirname(dir)) {
    if (existsSync(join(dir, 'package.json'))) {
      candidates.push(join(dir, 'dist', 'audit', 'worker.js'));
      break;
    }
  }
  const found = candidates.find((c) => existsSync(c));
  if (!found) throw new Error('the audit worker is not built: run `npm run build` first');
  return found;
}

/** The worker thread's name: Node's for the Worker, the kernel's for the thread (`top -H`, the hot-path bench). */
export const AUDIT_THREAD_NAME = 'corral-audit';

/**
 * Starts the worker thread. From sources (tests, benches under tsx) the .ts script is loaded through tsx's loader,
 * which a worker does not inherit from the main thread. The loader is resolved here, from this module's own place:
 * the worker's eval code would resolve `tsx` from the process's working directory, wherever the CLI was started.
 */
function startWorker(script: string, workerData: WorkerConfig): Worker {
  const name = workerData.threadName;
  if (!script.endsWith('.ts')) return new Worker(script, { workerData, name });
  const tsxApi = import.meta.resolve('tsx/esm/api');
  const boot =
    `import(${JSON.stringify(tsxApi)}).then((m) => { m.register(); ` +
    `return import(${JSON.stringify(pathToFileURL(script).href)}); }).catch((e) => { throw e; });`;
  return new Worker(boot, { eval: true, workerData, name });
}

/** The directory that holds the database, as the sandboxes must hide it (canonical, even before it exists). */
export function auditDirectory(dbPath: string): string {
  let dir = resolve(dirname(dbPath));
  const missing: string[] = [];
  while (!existsSync(dir) && dirname(dir) !== dir) {
    missing.unshift(dir.slice(dirname(dir).length).replace(/^\//, ''));
    dir = dirname(dir);
  }
  return join(realpathSync(dir), ...missing);
}

export class AuditTrail implements AuditSink {
  readonly outputBytes: number;
  readonly replayBytes: number;
  /** The database's directory (hidden from every sandbox), or null without a database. */
  readonly directory: string | null;
  /** Why there is no database although one was asked for (better-sqlite3 does not load), with the fix; else null. */
  readonly unavailable: string | null;
  private queue: AuditRecord[] = [];
  private transfer: ArrayBuffer[] = [];
  /** The next post is scheduled. */
  private posting = false;
  /** When the last batch went to the worker (performance.now()). */
  private postedAt = Number.NEGATIVE_INFINITY;
  private nextId = 1;
  private readonly replies = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private closed = false;
  private exited: Error | null = null;
  /** What the worker had to say while opening the database (a file moved aside, …). */
  readonly startupNotices: string[];
  /** Notices of the worker (a file moved aside, a failing disk, …): the server logs them. */
  onNotice: (text: string) => void = () => {};

  private constructor(
    private readonly worker: Worker,
    readonly options: Required<Omit<AuditOptions, 'otlpDelayMs'>>,
    ready: Extract<WorkerMessage, { type: 'ready' }>,
  ) {
    this.startupNotices = ready.notices;
    this.unavailable = ready.unavailable;
    this.outputBytes = options.outputBytes;
    this.replayBytes = options.dbPath && options.outputBytes > 0 ? options.replayBytes : 0;
    this.directory = options.dbPath ? auditDirectory(options.dbPath) : null;
    worker.on('message', (m: WorkerMessage) => this.onMessage(m));
    worker.on('error', (e) => this.fail(e));
    worker.on('exit', (code) => this.fail(new Error(`the audit worker exited (${code})`)));
  }

  /**
   * Starts the worker and opens the database. Rejects with a message naming the path when the database cannot be
   * used (a newer schema, an unwritable directory); a corrupt or unreadable file is moved aside instead, and said so
   * in `startupNotices`. When better-sqlite3 cannot be loaded the trail opens without a database (`unavailable` says
   * why), unless `requiredBy` named the database: then it rejects naming that option.
   */
  static async open(opts: AuditOptions): Promise<AuditTrail> {
    const options: Required<Omit<AuditOptions, 'otlpDelayMs'>> = {
      dbPath: opts.dbPath === null ? null : resolve(opts.dbPath),
      outputBytes: opts.outputBytes ?? DEFAULT_OUTPUT_BYTES,
      replayBytes: opts.replayBytes ?? DEFAULT_REPLAY_BYTES,
      retentionDays: opts.retentionDays ?? DEFAULT_RETENTION_DAYS,
      maxBytes: opts.maxBytes ?? DEFAULT_MAX_BYTES,
      otlpEndpoint: opts.otlpEndpoint ?? null,
      serviceVersion: opts.serviceVersion ?? '0.1.0',
      requiredBy: opts.requiredBy ?? null,
    };
    if (
      !Number.isInteger(options.outputBytes) ||
      options.outputBytes < 0 ||
      options.outputBytes > MAX_OUTPUT_BYTES
    )
      throw new Error(`audit output bytes must be a whole number 0..${MAX_OUTPUT_BYTES}`);
    if (
      !Number.isInteger(options.replayBytes) ||
      options.replayBytes < 0 ||
      options.replayBytes > MAX_REPLAY_BYTES
    )
      throw new Error(`audit replay bytes must be a whole number 0..${MAX_REPLAY_BYTES}`);
    if (options.dbPath) {
      const dir = auditDirectory(options.dbPath);
      if (dir === '/' || dir === auditDirectory(join(homedir(), 'x')))
        throw new Error(
          `audit database ${options.dbPath}: give it a directory of its own (its directory is hidden from every sandbox)`,
        );
    }
    const config: WorkerConfig = {
      threadName: AUDIT_THREAD_NAME,
      dbPath: options.dbPath,
      ownDirectory: options.dbPath !== null && options.dbPath === defaultAuditPath(),
      retention: { maxAgeMs: options.retentionDays * 86_400_000, maxBytes: options.maxBytes },
      retentionIntervalMs: RETENTION_INTERVAL_MS,
      retentionEveryRecords: 20_000,
      // A tenth of the size limit: the file stays within about 1.1 times it, whatever a process prints.
      retentionEveryBytes: Math.max(64 * 1024, Math.floor(options.maxBytes / 10)),
      outputBytes: options.outputBytes,
      otlp: options.otlpEndpoint
        ? {
            endpoint: options.otlpEndpoint,
            serviceVersion: options.serviceVersion,
            ...(opts.otlpDelayMs !== undefined ? { scheduledDelayMillis: opts.otlpDelayMs } : {}),
          }
        : null,
    };
    const worker = startWorker(workerScript(), config);
    const ready = await new Promise<Extract<WorkerMessage, { type: 'ready' }>>((resolveReady, reject) => {
      const onMessage = (m: WorkerMessage) => {
        if (m.type === 'ready') {
          cleanup();
          resolveReady(m);
        } else if (m.type === 'failed') {
          cleanup();
          void worker.terminate();
          reject(new Error(m.message));
        }
      };
      const onError = (e: Error) => {
        cleanup();
        reject(e);
      };
      const onExit = (code: number) => {
        cleanup();
        reject(new Error(`the audit worker exited (${code}) before it was ready`));
      };
      const cleanup = () => {
        worker.off('message', onMessage);
        worker.off('error', onError);
        worker.off('exit', onExit);
      };
      worker.on('message', onMessage);
      worker.on('error', onError);
      worker.on('exit', onExit);
    });
    if (ready.unavailable && options.requiredBy) {
      await worker.terminate();
      throw new Error(
        `${options.requiredBy} ${options.dbPath}: the audit trail is unavailable: ${ready.unavailable}`,
      );
    }
    worker.unref();
    return new AuditTrail(worker, options, ready);
  }

  // ---- AuditSink -------------------------------------------------------------------------------------------------

  record(r: AuditRecord): void {
    if (this.closed) return;
    this.queue.push(r);
    if (r.kind === 'processClose') {
      if (r.head) this.transfer.push(r.head.buffer as ArrayBuffer);
      if (r.tail) this.transfer.push(r.tail.buffer as ArrayBuffer);
      if (r.chunks) this.transfer.push(r.chunks.data.buffer as ArrayBuffer);
    }
    if (this.queue.length >= FLUSH_RECORDS) this.post();
    else if (!this.posting) {
      this.posting = true;
      // Real time (no policy in it, see the durability point above): the end of this turn of the loop, or
      // POST_INTERVAL_MS after the last post when that is later.
      const wait = this.postedAt + POST_INTERVAL_MS - performance.now();
      if (wait <= 0) setImmediate(this.postQueued);
      else setTimeout(this.postQueued, wait);
    }
  }

  private readonly postQueued = () => {
    this.posting = false;
    this.post();
  };

  /** Hands the queued records to the worker. */
  private post(): void {
    if (this.queue.length === 0 || this.exited) return;
    const records = this.queue;
    const transfer = this.transfer;
    this.queue = [];
    this.transfer = [];
    this.postedAt = performance.now();
    this.worker.postMessage({ type: 'records', records } satisfies WorkerRequest, transfer);
  }

  // ---- requests --------------------------------------------------------------------------------------------------

  private request<T>(m: WorkerRequest & { id: number }): Promise<T> {
    if (this.exited) return Promise.reject(this.exited);
    this.post();
    return new Promise<T>((resolve, reject) => {
      this.replies.set(m.id, { resolve: resolve as (v: unknown) => void, reject });
      this.worker.ref();
      this.worker.postMessage(m);
    });
  }

  query(query: AuditQuery): Promise<AuditQueryResult> {
    return this.request({ type: 'query', id: this.nextId++, query });
  }

  process(sessionId: string, processId: string): Promise<AuditProcessResult> {
    return this.request({ type: 'process', id: this.nextId++, sessionId, processId });
  }

  replay(sessionId: string, processId: string): Promise<AuditReplayResult> {
    return this.request({ type: 'replay', id: this.nextId++, sessionId, processId });
  }

  info(): Promise<AuditInfoResult> {
    return this.request({ type: 'info', id: this.nextId++ });
  }

  /** Resolves once every record so far is committed (and sent to the OTLP collector, if any). */
  async flush(): Promise<void> {
    await this.request({ type: 'flush', id: this.nextId++ });
  }

  /** Runs a retention pass now (tests; normally every 10 minutes and every 20 000 records). */
  async retention(now?: number): Promise<void> {
    await this.request({ type: 'retention', id: this.nextId++, ...(now !== undefined ? { now } : {}) });
  }

  /** Commits what is queued, closes the database and ends the worker. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.post();
    this.closed = true;
    if (this.exited) return;
    try {
      await this.request({ type: 'close', id: this.nextId++ });
    } finally {
      await this.worker.terminate();
    }
  }

  private onMessage(m: WorkerMessage): void {
    if (m.type === 'notice') {
      this.onNotice(m.text);
      return;
    }
    if (m.type === 'writing') {
      this.writesFailing = m.failing;
      return;
    }
    if (m.type !== 'reply') return;
    const r = this.replies.get(m.id);
    if (!r) return;
    this.replies.delete(m.id);
    if (this.replies.size === 0) this.worker.unref();
    if (m.error !== undefined) r.reject(new Error(m.error));
    else r.resolve(m.result);
  }

  private writesFailing = false;

  /**
   * False while writes to the database fail (a full or failing disk: retried every second), once the worker failed
   * or exited, and after close(): events are not being stored.
   */
  get storing(): boolean {
    return this.exited === null && !this.closed && !this.writesFailing;
  }

  private fail(e: Error): void {
    if (this.exited) return;
    this.exited = e;
    if (!this.closed) this.onNotice(`audit: ${e.message}; events are no longer stored`);
    for (const r of this.replies.values()) r.reject(e);
    this.replies.clear();
  }
}
