import WebSocket from 'ws';

export interface RpcErrorShape {
  code: number;
  message: string;
}

export interface Notification {
  method: string;
  params: Record<string, unknown>;
  /** Set when the server sent a request (it expects an answer with this id). */
  id?: number | string;
}

/** Thrown by RpcClient.request when the server answers with an error. */
export class RpcCallError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * A test client for the exec-server protocol over a real WebSocket: requests by id, every raw frame kept in order,
 * and waiting on notifications by predicate (no sleeps).
 */
export class RpcClient {
  private nextId = 1;
  private readonly pending = new Map<
    number | string,
    { resolve: (v: unknown) => void; reject: (e: Error) => void }
  >();
  readonly frames: string[] = [];
  readonly notifications: Notification[] = [];
  private waiters: { pred: (n: Notification) => boolean; resolve: (n: Notification) => void }[] = [];
  closeCode: number | null = null;
  private closeWaiters: ((code: number) => void)[] = [];

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data) => this.onFrame(data.toString()));
    ws.on('close', (code) => {
      this.closeCode = code;
      for (const w of this.closeWaiters) w(code);
      for (const p of this.pending.values()) p.reject(new Error(`connection closed (${code})`));
      this.pending.clear();
    });
  }

  static async connect(url: string, opts: WebSocket.ClientOptions = {}): Promise<RpcClient> {
    const ws = new WebSocket(url, { perMessageDeflate: false, ...opts });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
      ws.once('unexpected-response', (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
    });
    return new RpcClient(ws);
  }

  /** Connects, initializes (with `initialize` members `extra`) and sends `initialized`. */
  static async open(
    url: string,
    clientName = 'test',
    extra: Record<string, unknown> = {},
  ): Promise<RpcClient & { sessionId: string }> {
    const c = await RpcClient.connect(url);
    const r = (await c.request('initialize', { clientName, ...extra })) as { sessionId: string };
    c.notify('initialized', {});
    return Object.assign(c, { sessionId: r.sessionId });
  }

  /**
   * Answers the server's requests (server → client JSON-RPC, e.g. `network/policyRequest`): the handler's value is
   * sent as the result; a thrown error as a JSON-RPC error. Without a handler they stay unanswered. Either way they
   * are also recorded in `notifications` (with their `id`), so `waitFor` sees them.
   */
  onRequest: ((method: string, params: Record<string, unknown>) => unknown) | null = null;

  private onFrame(text: string): void {
    this.frames.push(text);
    const msg = JSON.parse(text) as Record<string, unknown>;
    if (typeof msg.method === 'string' && (typeof msg.id === 'number' || typeof msg.id === 'string')) {
      const handler = this.onRequest;
      if (handler) {
        const id = msg.id;
        Promise.resolve()
          .then(() => handler(msg.method as string, msg.params as Record<string, unknown>))
          .then(
            (result) => this.send({ id, result: result ?? {} }),
            (e: Error) => this.send({ id, error: { code: -32603, message: e.message } }),
          );
      }
    }
    if (typeof msg.method === 'string') {
      const n: Notification = { method: msg.method, params: msg.params as Record<string, unknown> };
      if (typeof msg.id === 'number' || typeof msg.id === 'string') n.id = msg.id;
      this.notifications.push(n);
      this.waiters = this.waiters.filter((w) => {
        if (!w.pred(n)) return true;
        w.resolve(n);
        return false;
      });
      return;
    }
    const id = msg.id as number | string;
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    if (msg.error) {
      const e = msg.error as RpcErrorShape;
      p.reject(new RpcCallError(e.code, e.message));
    } else p.resolve(msg.result);
  }

  request<T = unknown>(method: string, params?: unknown): Promise<T> {
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.send(params === undefined ? { id, method } : { id, method, params });
    });
  }

  /** Sends a request and returns the error it gets (fails if it succeeds). */
  async requestError(method: string, params?: unknown): Promise<RpcCallError> {
    try {
      await this.request(method, params);
    } catch (e) {
      if (e instanceof RpcCallError) return e;
      throw e;
    }
    throw new Error(`${method} unexpectedly succeeded`);
  }

  notify(method: string, params?: unknown): void {
    this.send(params === undefined ? { method } : { method, params });
  }

  send(msg: unknown): void {
    this.ws.send(typeof msg === 'string' ? msg : JSON.stringify(msg));
  }

  /** Resolves with the first notification (past or future) matching the predicate. */
  waitFor(pred: (n: Notification) => boolean, timeoutMs = 10_000): Promise<Notification> {
    const seen = this.notifications.find(pred);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('timed out waiting for a notification')), timeoutMs);
      this.waiters.push({
        pred,
        resolve: (n) => {
          clearTimeout(t);
          resolve(n);
        },
      });
    });
  }

  /** Waits for `process/closed` of a process and returns all its notifications in arrival order. */
  async collect(processId: string, timeoutMs = 10_000): Promise<Notification[]> {
    await this.waitFor((n) => n.method === 'process/closed' && n.params.processId === processId, timeoutMs);
    return this.notifications.filter((n) => n.params?.processId === processId);
  }

  /** Concatenated decoded output of a process from its notifications (optionally one stream). */
  output(processId: string, stream?: string): string {
    return Buffer.concat(
      this.notifications
        .filter(
          (n) =>
            n.method === 'process/output' &&
            n.params.processId === processId &&
            (stream === undefined || n.params.stream === stream),
        )
        .map((n) => Buffer.from(n.params.chunk as string, 'base64')),
    ).toString('utf8');
  }

  waitClose(timeoutMs = 5000): Promise<number> {
    if (this.closeCode !== null) return Promise.resolve(this.closeCode);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('timed out waiting for close')), timeoutMs);
      this.closeWaiters.push((c) => {
        clearTimeout(t);
        resolve(c);
      });
    });
  }

  close(): void {
    this.ws.close();
  }
}

export const b64 = (s: string | Buffer) => Buffer.from(s).toString('base64');

/** The error `c`'s call of `method` got (code 0, message `answered`: it was answered). */
export const callError = (c: RpcClient, method: string, params: unknown) =>
  c.request(method, params).then(
    () => ({ code: 0, message: 'answered' }),
    (x: { code: number; message: string }) => x,
  );
