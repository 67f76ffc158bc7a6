/**
 * The audit trail's JSON-RPC methods (`audit/query`, `audit/process`, `audit/replay`, `audit/info`), panel methods of the method
 * table. Without a database they answer `audit/info` with `enabled: false` (and `unavailable` saying why, when its
 * driver does not load) and the others with -32600 saying the trail is off, or why it is unavailable.
 */

import { type AuditInfoResult, AuditQueryParams } from '../protocol/audit.js';
import { internalError, invalidRequest } from '../protocol/errors.js';
import { Deferred } from '../rpc/connection.js';
import type { MethodRegistry } from '../server/core/dispatch.js';
import type { AuditTrail } from './trail.js';

const OFF = 'the audit trail is off on this server (--no-audit)';

const OFF_INFO: AuditInfoResult = {
  enabled: false,
  path: null,
  schemaVersion: null,
  retentionDays: 0,
  maxBytes: 0,
  sizeBytes: 0,
  outputBytes: 0,
  oldest: null,
  newest: null,
  counts: { session: 0, process: 0, network: 0, approval: 0, fs: 0 },
  otlpEndpoint: null,
  notices: [],
  unavailable: null,
};

/**
 * `unavailable`: why the trail has no database although one was asked for (sqliteDriver.ts), or null. With no trail
 * at all (off, or unavailable without a collector) `trail` is null.
 */
export function registerAuditMethods(
  registry: MethodRegistry,
  trail: AuditTrail | null,
  unavailable: string | null,
): void {
  // Queries run on the worker: park the answer without holding up the connection's later requests.
  const ask = <T>(work: (t: AuditTrail) => Promise<T>) => {
    if (unavailable) throw invalidRequest(`the audit trail is unavailable on this server: ${unavailable}`);
    if (!trail?.options.dbPath) throw invalidRequest(OFF);
    return new Deferred(
      work(trail).catch((e: Error) => {
        throw internalError(`audit: ${e.message}`);
      }),
    );
  };
  registry.handle('audit/query', (p) => {
    const q = p ?? AuditQueryParams.parse({});
    return ask((t) => t.query(q));
  });
  registry.handle('audit/process', (p) => ask((t) => t.process(p.sessionId, p.processId)));
  registry.handle('audit/replay', (p) => ask((t) => t.replay(p.sessionId, p.processId)));
  registry.handle('audit/info', () => (trail ? new Deferred(trail.info()) : { ...OFF_INFO, unavailable }));
}
