/** Shared helpers of the audit-trail tests: an in-process server with a real audit database, and raw db reads. */
import Database from 'better-sqlite3';
import { type Audit, type AuditOptions, startAudit } from '../../src/audit/index.js';
import { silentLogger } from '../../src/server/core/log.js';
import type { ExecServerOptions } from '../../src/server/execServer.js';
import type { RpcClient } from '../helpers/client.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

export interface AuditedServer extends TestServer {
  audit: Audit;
  /** An agent (the agent token: not privileged). */
  agent(name?: string): Promise<RpcClient & { sessionId: string }>;
  /** The public id of a client's session (what the audit trail records; its `sessionId` is the secret resume key). */
  publicId(client: { sessionId: string }): string;
  /** The URL an agent connects to, token included. */
  agentUrl: string;
}

/** An exec server with the audit trail on, recording into `audit.dbPath`, with an agent and a panel token. */
export async function startAuditedServer(
  audit: AuditOptions,
  opts: Omit<ExecServerOptions, 'log'> = {},
): Promise<AuditedServer> {
  const a = await startAudit(audit, silentLogger);
  const ts = await startTestServer({
    ...opts,
    launcher: { ...opts.launcher, sandbox: { ...opts.launcher?.sandbox, hiddenPaths: a.hiddenPaths } },
    tokens: true,
  });
  a.attach(ts.server);
  return {
    ...ts,
    audit: a,
    agent: (name = 'agent') => ts.client(name),
    publicId: (c) => ts.sessionOf(c).id,
    agentUrl: `${ts.url}/?token=${ts.tokens!.agent}`,
    async close() {
      await ts.close();
      await a.stop();
    },
  };
}

/** Runs a command to its process/closed. */
export async function run(
  c: RpcClient,
  processId: string,
  argv: string[],
  extra: Record<string, unknown> = {},
): Promise<void> {
  await c.request('process/start', {
    processId,
    argv,
    cwd: '/tmp',
    env: { PATH: '/usr/bin:/bin' },
    tty: false,
    ...extra,
  });
  await c.collect(processId, 20_000);
}

/** Opens the database file directly (read-only), as another program would. */
export function openDb(path: string): Database.Database {
  return new Database(path, { readonly: true, fileMustExist: true });
}

/** A managed network that asks the panel about hosts it neither allows nor denies. */
export const asking = (timeoutMs: number) => ({
  config: {
    network: {
      enabled: true,
      allow_local_binding: true,
      hard_deny_allowlist_misses: false,
      approval_timeout_ms: timeoutMs,
    },
  },
});
