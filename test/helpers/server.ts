import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import {
  type Listener,
  type ListenOptions,
  listenWebSocket,
} from '../../src/server/connection/wsListener.js';
import { type HostTokens, hostAuth, hostTokens, openAccess } from '../../src/server/core/auth.js';
import type { Session } from '../../src/server/core/session.js';
import { ExecServer, type ExecServerOptions } from '../../src/server/execServer.js';
import { RpcClient } from './client.js';

export interface TestServer {
  server: ExecServer;
  listener: Listener;
  /** ws://127.0.0.1:P, without a token. */
  url: string;
  /** With `tokens: true`: the agent and panel tokens. */
  tokens: HostTokens | null;
  /** Connects a client (with the agent token, if any) and completes the handshake. */
  client(name?: string, initialize?: Record<string, unknown>): Promise<RpcClient & { sessionId: string }>;
  /** With `tokens: true`: a client holding the panel token. */
  panel(name?: string): Promise<RpcClient & { sessionId: string }>;
  /** The session a client was given (its `sessionId` is the session's resume key, not its public id). */
  sessionOf(client: { sessionId: string }): Session;
  close(): Promise<void>;
}

/**
 * Starts an in-process exec server on an ephemeral loopback port. By default anyone may connect (`openAccess`, as
 * `--ws-auth none`); `tokens: true` gives it an agent and a panel token, as `corral serve` has.
 */
export async function startTestServer(
  opts: ExecServerOptions & { listen?: Partial<ListenOptions>; tokens?: boolean } = {},
): Promise<TestServer> {
  const server = new ExecServer({ resumeGraceMs: 0, ...opts });
  const tokens = opts.tokens ? hostTokens() : null;
  const listener = await listenWebSocket(server, {
    auth: tokens ? hostAuth(tokens) : openAccess(),
    ...opts.listen,
  });
  const clients: RpcClient[] = [];
  const open = async (token: string | null, name: string, initialize: Record<string, unknown> = {}) => {
    const c = await RpcClient.open(
      token ? `${listener.url}/?token=${token}` : listener.url,
      name,
      initialize,
    );
    clients.push(c);
    return c;
  };
  return {
    server,
    listener,
    url: listener.url,
    tokens,
    client: (name = 'test', initialize = {}) => open(tokens?.agent ?? null, name, initialize),
    panel(name = 'panel') {
      if (!tokens) throw new Error('panel() needs startTestServer({ tokens: true })');
      return open(tokens.panel, name);
    },
    sessionOf(client) {
      const s = server.sessionByResumeKey(client.sessionId);
      if (!s) throw new Error(`no session for ${client.sessionId}`);
      return s;
    },
    async close() {
      for (const c of clients) c.close();
      await server.shutdown();
      await listener.close();
    },
  };
}

/** A test server, one client of it and a temporary directory, shared by the tests of a file or suite. */
export interface ServerSuite {
  readonly ts: TestServer;
  readonly c: RpcClient & { sessionId: string };
  readonly dir: { path: string; cleanup(): void };
}

/**
 * Registers before/after hooks (in the file, or in the `describe` it is called in) that start a test server with
 * `opts`, connect one client and make a temporary directory, and close and remove them; the members are set once
 * `before` has run.
 */
export function serverSuite(opts: Parameters<typeof startTestServer>[0] = {}): ServerSuite {
  const s = {} as {
    ts: TestServer;
    c: RpcClient & { sessionId: string };
    dir: { path: string; cleanup(): void };
  };
  before(async () => {
    s.ts = await startTestServer(opts);
    s.c = await s.ts.client();
    s.dir = tempDir();
  });
  after(async () => {
    await s.ts.close();
    s.dir.cleanup();
  });
  return s;
}

/** A fresh temporary directory, removed by the returned cleanup. */
export function tempDir(prefix = 'corral-test-'): { path: string; cleanup(): void } {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, cleanup: () => rmSync(path, { recursive: true, force: true }) };
}

/** Polls a condition (for OS state such as the process table) until it holds or the deadline passes. */
export async function until(
  cond: () => boolean | Promise<boolean>,
  timeoutMs = 5000,
  what = 'condition',
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Whether a pid is alive (and not a zombie). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.split(') ')[1]?.[0] !== 'Z';
  } catch {
    return false;
  }
}
