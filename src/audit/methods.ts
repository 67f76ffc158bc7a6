/**
 * The audit trail's JSON-RPC methods (`audit/query`, `audit/process`, `audit/info`), for privileged connections
 * only, gated the way the monitor's methods are. Without a database they answer `audit/info` with `enabled: false`
 * and the others with -32600 saying the trail is off.
 */

import { EmptyParams } from '../protocol/approvals.js';
import { type AuditInfoResult, AuditProcessParams, AuditQueryParams } from '../protocol/audit.js';
import { internalError, invalidRequest } from '../protocol/errors.js';
import type { RpcConnection } from '../rpc/connection.js';
import { Deferred } from '../rpc/connection.js';
import type { ExecServer } from '../server/execServer.js';
import { NOT_PRIVILEGED } from '../server/monitor.js';
import { parseParams } from '../server/params.js';
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
};

export function registerAuditMethods(server: ExecServer, trail: AuditTrail | null): void {
  const priv =
    (f: (p: unknown) => unknown) =>
    (p: unknown, conn: RpcConnection): unknown => {
      if (!conn.privileged) throw invalidRequest(NOT_PRIVILEGED);
      return f(p);
    };
  // Queries run on the worker: park the answer without holding up the connection's later requests.
  const ask = <T>(work: (t: AuditTrail) => Promise<T>) => {
    if (!trail?.options.dbPath) throw invalidRequest(OFF);
    return new Deferred(
      work(trail).catch((e: Error) => {
        throw internalError(`audit: ${e.message}`);
      }),
    );
  };
  server.registerMethod(
    'audit/query',
    'exec',
    priv((p) => {
      const q = parseParams(AuditQueryParams, p ?? {}, 'AuditQueryParams');
      return ask((t) => t.query(q));
    }),
  );
  server.registerMethod(
    'audit/process',
    'exec',
    priv((p) => {
      const q = parseParams(AuditProcessParams, p, 'AuditProcessParams');
      return ask((t) => t.process(q.sessionId, q.processId));
    }),
  );
  server.registerMethod(
    'audit/info',
    'exec',
    priv((p) => {
      parseParams(EmptyParams, p, 'AuditInfoParams');
      if (!trail) return OFF_INFO;
      return new Deferred(trail.info());
    }),
  );
}
