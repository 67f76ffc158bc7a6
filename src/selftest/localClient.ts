/**
 * A JSON-RPC client of an in-process exec server over an in-memory transport (the server's `connect`, as the IPC and
 * stdio transports use it): the self-test's way to start commands exactly as a client would, without a socket.
 */
import type { RpcConnection, Transport } from '../rpc/connection.js';
import type { ExecServer } from '../server/execServer.js';

interface Message {
  id?: number;
  method?: string;
  params?: Record<string, unknown>;
  result?: unknown;
  error?: { code: number; message: string };
}

export class LocalClient {
  private readonly conn: RpcConnection;
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private readonly outputs = new Map<string, Buffer[]>();
  private readonly exits = new Map<string, number>();
  private readonly closedWaiters = new Map<string, () => void>();
  private readonly closed = new Set<string>();
  /** Called on each output chunk and on the close of a process (outputSeen). */
  private readonly outputWaiters = new Map<string, () => void>();

  constructor(server: ExecServer) {
    const transport: Transport = {
      peer: 'selftest',
      write: (messages, onWritten) => {
        for (const m of messages) this.onMessage(JSON.parse(m.toString('utf8')) as Message);
        onWritten();
      },
      close: () => {
        for (const p of this.pending.values()) p.reject(new Error('the connection closed'));
        this.pending.clear();
      },
    };
    this.conn = server.connect(transport);
  }

  private onMessage(m: Message): void {
    if (m.id !== undefined && !m.method) {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if (m.error) p.reject(new Error(`${m.error.message} (${m.error.code})`));
      else p.resolve(m.result);
      return;
    }
    const processId = m.params?.processId as string | undefined;
    if (!processId) return;
    if (m.method === 'process/output') {
      const list = this.outputs.get(processId) ?? [];
      list.push(Buffer.from(String(m.params!.chunk), 'base64'));
      this.outputs.set(processId, list);
      this.outputWaiters.get(processId)?.();
    } else if (m.method === 'process/exited') this.exits.set(processId, m.params!.exitCode as number);
    else if (m.method === 'process/closed') {
      this.closed.add(processId);
      this.closedWaiters.get(processId)?.();
      this.outputWaiters.get(processId)?.();
    }
  }

  request(method: string, params: unknown): Promise<unknown> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.conn.receive(JSON.stringify({ id, method, params }));
    });
  }

  notify(method: string, params: unknown): void {
    this.conn.receive(JSON.stringify({ method, params }));
  }

  /** Resolves once the process's output so far includes `text`; rejects when it closes first or after `timeoutMs`. */
  outputSeen(processId: string, text: string, timeoutMs: number): Promise<void> {
    const has = () => Buffer.concat(this.outputs.get(processId) ?? []).includes(text);
    if (has()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const done = (e?: Error) => {
        clearTimeout(timer);
        this.outputWaiters.delete(processId);
        if (e) reject(e);
        else resolve();
      };
      // Real time: a bound on a command of the battery, not policy.
      const timer = setTimeout(
        () => done(new Error(`${processId} did not print ${text} within ${timeoutMs} ms`)),
        timeoutMs,
      );
      this.outputWaiters.set(processId, () => {
        if (has()) done();
        else if (this.closed.has(processId))
          done(
            new Error(
              `${processId} ended without printing ${text}: ${Buffer.concat(this.outputs.get(processId) ?? [])
                .toString('utf8')
                .slice(0, 200)}`,
            ),
          );
      });
    });
  }

  /** The process's output and exit code once it has closed (rejects after `timeoutMs`, the process killed). */
  async outputAndExit(processId: string, timeoutMs: number): Promise<{ exitCode: number; output: string }> {
    if (!this.closed.has(processId)) {
      await new Promise<void>((resolve, reject) => {
        // Real time: a bound on a command of the battery, not policy.
        const timer = setTimeout(() => {
          this.closedWaiters.delete(processId);
          void this.request('process/terminate', { processId }).catch(() => {});
          reject(new Error(`${processId} did not finish within ${timeoutMs} ms`));
        }, timeoutMs);
        this.closedWaiters.set(processId, () => {
          clearTimeout(timer);
          this.closedWaiters.delete(processId);
          resolve();
        });
      });
    }
    const output = Buffer.concat(this.outputs.get(processId) ?? []).toString('utf8');
    this.outputs.delete(processId);
    return { exitCode: this.exits.get(processId) ?? -1, output };
  }

  close(): void {
    this.conn.close(1000);
  }
}
