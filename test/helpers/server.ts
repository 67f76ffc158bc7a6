import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ExecServer, type ExecServerOptions } from '../../src/server/execServer.js';
import { type Listener, type ListenOptions, listenWebSocket } from '../../src/server/wsListener.js';
import { RpcClient } from './client.js';

export interface TestServer {
  server: ExecServer;
  listener: Listener;
  url: string;
  /** Connects a client and completes the handshake. */
  client(name?: string): Promise<RpcClient & { sessionId: string }>;
  close(): Promise<void>;
}

/** Starts an in-process exec server on an ephemeral loopback port. */
export async function startTestServer(
  opts: ExecServerOptions & { listen?: ListenOptions } = {},
): Promise<TestServer> {
  const server = new ExecServer({ resumeGraceMs: 0, ...opts });
  const listener = await listenWebSocket(server, opts.listen ?? {});
  const clients: RpcClient[] = [];
  return {
    server,
    listener,
    url: listener.url,
    async client(name = 'test') {
      const c = await RpcClient.open(listener.url, name);
      clients.push(c);
      return c;
    },
    async close() {
      for (const c of clients) c.close();
      await server.shutdown();
      await listener.close();
    },
  };
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
