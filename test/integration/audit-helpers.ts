/** Shared helpers of the audit-trail tests: an in-process server with a real audit database, and raw db reads. */
import Database from 'better-sqlite3';
import { type Audit, type AuditOptions, startAudit } from '../../src/audit/index.js';
import { type ExecServer, type ExecServerOptions, silentLogger } from '../../src/server/execServer.js';
import { type Listener, listenWebSocket } from '../../src/server/wsListener.js';
import { RpcClient } from '../helpers/client.js';
import { startTestServer } from '../helpers/server.js';

export const TOKEN = 'audit-test-token';

export interface AuditedServer {
  server: ExecServer;
  audit: Audit;
  /** Requires the token: its clients are privileged (the panel's way in). */
  listener: Listener;
  /** No token: its clients are ordinary agents, not privileged. */
  agentListener: Listener;
  /** An agent (not privileged). */
  agent(name?: string): Promise<RpcClient & { sessionId: string }>;
  /** A privileged client (holds the token), as the panel is. */
  panel(name?: string): Promise<RpcClient & { sessionId: string }>;
  close(): Promise<void>;
}

/** An exec server with the audit trail on, recording into `audit.dbPath`, listening on loopback with a token. */
export async function startAuditedServer(
  audit: AuditOptions,
  opts: Omit<ExecServerOptions, 'log'> = {},
): Promise<AuditedServer> {
  const a = await startAudit(audit, silentLogger);
  const ts = await startTestServer({
    ...opts,
    launcher: { ...opts.launcher, sandbox: { ...opts.launcher?.sandbox, hiddenPaths: a.hiddenPaths } },
    listen: { token: TOKEN },
  });
  a.attach(ts.server);
  const agentListener = await listenWebSocket(ts.server, {});
  const agents: RpcClient[] = [];
  return {
    server: ts.server,
    audit: a,
    listener: ts.listener,
    agentListener,
    async agent(name = 'agent') {
      const c = await RpcClient.open(agentListener.url, name);
      agents.push(c);
      return c;
    },
    panel: (name = 'panel') =>
      RpcClient.open(`${ts.url}/?token=${TOKEN}`, name).then((c) => {
        agents.push(c);
        return c;
      }),
    async close() {
      for (const c of agents) c.close();
      await ts.close();
      await agentListener.close();
      await a.stop();
    },
  };
}

/** Runs a command to its process/closed and returns its notifications. */
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
