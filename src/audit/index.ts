/**
 * The audit trail (GitHub issue 15): every session, process, network decision, approval and fs/* change of every
 * client, stored in a local SQLite database that outlives the server, queried by the panel (`audit/*`), exported as
 * JSON Lines (`corral audit export`) and, optionally, sent live to an OpenTelemetry collector.
 *
 * Its parts: the records (events.ts), the sink the server side feeds (trail.ts, with the worker thread that owns
 * the database and the exporter: worker.ts, store.ts, otlp.ts), the observers on the server's seams (observe.ts),
 * the JSON-RPC methods (methods.ts) and the export (export.ts).
 */
import type { NetworkEvents } from '../network/events.js';
import type { MethodRegistry } from '../server/core/dispatch.js';
import type { Logger } from '../server/core/log.js';
import { registerAuditMethods } from './methods.js';
import { type AuditObserver, observeServer } from './observe.js';
import type { AuditSource } from './source.js';
import { type AuditOptions, AuditTrail } from './trail.js';

export type { AuditSource } from './source.js';
export { type AuditOptions, AuditTrail, defaultAuditPath } from './trail.js';

export interface Audit {
  /** null: the trail is off (no database and no collector), or unavailable without a collector. */
  readonly trail: AuditTrail | null;
  /** Why no database is kept although one was asked for: better-sqlite3 does not load here (with the fix); else null. */
  readonly unavailable: string | null;
  /** Directories every sandbox must hide (the database's). */
  readonly hiddenPaths: string[];
  /** Observes the server through its audit source and registers the audit/* methods on it. Once per server. */
  attach(server: AuditSource & MethodRegistry): void;
  /** Also records the decisions of another proxy event bus. */
  attachNetwork(bus: NetworkEvents): void;
  /**
   * The `audit` readiness check: false once a trail that was opened stops storing (its worker failed: a full or
   * failing disk). Off, or degraded at startup with a warning (the driver does not load), is ready.
   */
  ready(): boolean;
  /** Records the end of open sessions, commits what is queued and closes the database. */
  stop(): Promise<void>;
}

/**
 * Opens the trail (null options: off). Rejects with a message naming the database when it cannot be used; problems
 * it could handle (a corrupt or unreadable file moved aside) are logged as warnings with both paths. When the SQLite
 * driver does not load, the server runs without a database: one warning says why and how to fix it (unless
 * `requiredBy` named the database: then it rejects).
 */
export async function startAudit(opts: AuditOptions | null, log: Logger): Promise<Audit> {
  let trail = opts && (opts.dbPath !== null || opts.otlpEndpoint) ? await AuditTrail.open(opts) : null;
  const unavailable = trail?.unavailable ?? null;
  if (trail && unavailable) {
    log.warn(
      `audit trail unavailable, nothing is stored: ${unavailable} (or pass --no-audit to run without it on purpose)`,
    );
    if (!trail.options.otlpEndpoint) {
      await trail.close();
      trail = null;
    }
  }
  if (trail) {
    for (const n of trail.startupNotices) log.warn(n);
    trail.onNotice = (n) => log.warn(n);
    if (trail.options.dbPath && !unavailable) log.info(`audit trail: ${trail.options.dbPath}`);
    if (trail.options.otlpEndpoint)
      log.info(`audit trail: exporting to ${trail.options.otlpEndpoint} (OTLP/HTTP)`);
  }
  let observer: AuditObserver | null = null;
  const pendingBuses: NetworkEvents[] = [];
  return {
    trail,
    unavailable,
    hiddenPaths: trail?.directory && !unavailable ? [trail.directory] : [],
    attach(server) {
      registerAuditMethods(server, trail, unavailable);
      if (!trail) return;
      observer = observeServer(server, trail);
      for (const b of pendingBuses) observer.attachNetwork(b);
    },
    attachNetwork(bus) {
      if (observer) observer.attachNetwork(bus);
      else pendingBuses.push(bus);
    },
    ready: () => trail === null || trail.storing,
    async stop() {
      observer?.end();
      observer = null;
      await trail?.close();
    },
  };
}
