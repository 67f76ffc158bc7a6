import { ErrorCode, RpcError } from '../protocol/errors.js';

/** How a transport frames one message on the wire, for senders that build several framed messages into one buffer. */
export interface Framing {
  /** Bytes of framing in front of a message of `payloadLength` bytes. */
  headerLength(payloadLength: number): number;
  /** Writes that framing at `off` (exactly headerLength(payloadLength) bytes). */
  writeHeader(buf: Buffer, off: number, payloadLength: number): void;
  /** Set when this is unmasked WebSocket text framing (RFC 6455), which native code can also write. */
  readonly webSocketText?: boolean;
}

/** What a connection needs from its transport (a WebSocket, Electron IPC, stdio, or a test pipe). */
export interface Transport {
  /** Sends one JSON-RPC message. `onWritten` (optional) runs once the bytes have left this process's buffers. */
  send(text: string, onWritten?: () => void): void;
  /** Optional fast path: sends one message given as its UTF-8 bytes (a text frame; the caller no longer touches it). */
  sendBuffer?(data: Buffer, onWritten?: () => void): void;
  /** Optional fast path: sends several messages (UTF-8 bytes, in order) with one write; `onWritten` once for all. */
  sendBatch?(messages: Buffer[], onWritten?: () => void): void;
  /** Optional, with sendFramed: the framing of one message. */
  readonly framing?: Framing;
  /** Optional fast path: writes bytes holding whole messages, each already framed with `framing`. */
  sendFramed?(data: Buffer, onWritten?: () => void): void;
  /** Closes the transport (WebSocket close code semantics: 1002 protocol error, 1009 too big, 1000 normal). */
  close(code: number, reason?: string): void;
  /** "ip:port" of the peer, used in parse-error texts. */
  readonly peer: string;
}

/** A handler result that completes later without holding up the connection's request queue (long-poll reads). */
export class Deferred<T = unknown> {
  constructor(readonly promise: Promise<T>) {}
}

export type RequestId = number | string;

/** What a dispatcher answers for one request: a value, a promise (serialised), or a Deferred (not serialised). */
export type HandlerOutcome = unknown;

/** The method table side of a connection: knows methods and lifecycle, not transports. */
export interface Dispatcher {
  /** Handles a request. Throw RpcError for JSON-RPC errors. */
  request(method: string, params: unknown, conn: RpcConnection): HandlerOutcome;
  /** Handles a notification from the client; return false to close the connection as a protocol violation. */
  notification(method: string, params: unknown, conn: RpcConnection): boolean;
  /** The connection is gone (transport closed). */
  closed(conn: RpcConnection): void;
}

interface QueuedRequest {
  id: RequestId;
  method: string;
  params: unknown;
}

/** A server→client request that got an error response, timed out, or lost its connection. */
export class OutboundRequestError extends Error {
  constructor(
    message: string,
    readonly code: number | null,
  ) {
    super(message);
  }
}

/** Server→client requests awaiting an answer at once, per connection (as Codex's exec-server). */
export const MAX_OUTBOUND_REQUESTS = 256;

interface OutboundPending {
  resolve: (v: unknown) => void;
  reject: (e: OutboundRequestError) => void;
  timer: NodeJS.Timeout;
}

/**
 * One JSON-RPC connection in Codex's dialect: no "jsonrpc" member required or sent, `{id,result}` / `{error,id}`
 * member order, parse errors answered with id -1 and the connection kept, unknown notifications and responses to
 * nothing we asked closing it with 1002. Requests run `maxConcurrent` at a time (default 1: one at a time in arrival
 * order, `--concurrent-requests`); a handler may return a Deferred to answer later without holding a slot (a parked
 * long-poll never blocks the requests behind it). The server may also ask the client (`request`): the answer is
 * matched by the id we chose, on this connection only.
 */
export class RpcConnection {
  private readonly queue: QueuedRequest[] = [];
  private inFlight = 0;
  /** Requests whose handler may run at once (promise-returning handlers hold a slot until they settle). */
  maxConcurrent = 1;
  private closedFlag = false;
  private nextOutboundId = 1;
  private readonly outbound = new Map<number, OutboundPending>();
  /** Free slot for the dispatcher's per-connection state. */
  state: unknown = undefined;

  constructor(
    readonly transport: Transport,
    private readonly dispatcher: Dispatcher,
    private readonly parsePrefix = 'failed to parse websocket JSON-RPC message from exec-server websocket',
  ) {}

  get closed(): boolean {
    return this.closedFlag;
  }

  /** Requests received and waiting for a slot (`maxConcurrent` handlers are already running). */
  get queued(): number {
    return this.queue.length;
  }

  /** Feeds one inbound message (the text of one WebSocket message). */
  receive(text: string): void {
    if (this.closedFlag) return;
    let msg: unknown;
    try {
      msg = JSON.parse(text);
    } catch (e) {
      this.parseError((e as Error).message);
      return;
    }
    if (msg === null || typeof msg !== 'object' || Array.isArray(msg)) {
      this.parseError(
        `invalid type: ${Array.isArray(msg) ? 'sequence' : typeof msg}, expected a JSON-RPC message`,
      );
      return;
    }
    const m = msg as Record<string, unknown>;
    const hasId = typeof m.id === 'number' || typeof m.id === 'string';
    if (typeof m.method === 'string') {
      if (hasId) this.enqueue({ id: m.id as RequestId, method: m.method, params: m.params ?? null });
      else if (!this.dispatcher.notification(m.method, m.params ?? null, this)) this.violation();
      return;
    }
    if (hasId && ('result' in m || 'error' in m)) {
      // A response is only valid for a request we sent on this connection; anything else is a protocol violation.
      const pending = typeof m.id === 'number' ? this.outbound.get(m.id) : undefined;
      if (!pending) {
        this.violation();
        return;
      }
      this.outbound.delete(m.id as number);
      clearTimeout(pending.timer);
      if ('error' in m) {
        const err = (m.error ?? {}) as { code?: unknown; message?: unknown };
        pending.reject(
          new OutboundRequestError(
            typeof err.message === 'string' ? err.message : 'error response',
            typeof err.code === 'number' ? err.code : null,
          ),
        );
      } else pending.resolve(m.result);
      return;
    }
    this.parseError('data did not match any variant of untagged enum JSONRPCMessage');
  }

  /**
   * Asks the client (a server→client JSON-RPC request) and resolves with its result. Rejects with an
   * OutboundRequestError on an error response, after `timeoutMs`, when the connection closes, or at once when
   * MAX_OUTBOUND_REQUESTS are already waiting.
   */
  request(method: string, params: unknown, timeoutMs: number): Promise<unknown> {
    if (this.closedFlag) return Promise.reject(new OutboundRequestError('connection closed', null));
    if (this.outbound.size >= MAX_OUTBOUND_REQUESTS)
      return Promise.reject(
        new OutboundRequestError(`${MAX_OUTBOUND_REQUESTS} requests to the client are already waiting`, null),
      );
    const id = this.nextOutboundId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.outbound.delete(id);
        reject(new OutboundRequestError(`${method}: no answer within ${timeoutMs} ms`, null));
      }, timeoutMs);
      timer.unref?.();
      this.outbound.set(id, { resolve, reject, timer });
      this.sendRaw(`{"id":${id},"method":${JSON.stringify(method)},"params":${JSON.stringify(params)}}`);
    });
  }

  /** Sends a notification. */
  notify(method: string, params: unknown, onWritten?: () => void): void {
    this.sendRaw(`{"method":${JSON.stringify(method)},"params":${JSON.stringify(params)}}`, onWritten);
  }

  /** Sends a pre-serialised message (hot paths build their own JSON). */
  sendRaw(text: string, onWritten?: () => void): void {
    if (this.closedFlag) return;
    this.transport.send(text, onWritten);
  }

  /** Sends a pre-serialised message given as UTF-8 bytes (output notifications), without a string round trip when
   * the transport takes bytes. */
  sendBuffer(data: Buffer, onWritten?: () => void): void {
    if (this.closedFlag) return;
    if (this.transport.sendBuffer) this.transport.sendBuffer(data, onWritten);
    else this.transport.send(data.toString('utf8'), onWritten);
  }

  /** Sends several pre-serialised messages (UTF-8 bytes) in order; `onWritten` runs once all have been written. */
  sendBatch(messages: Buffer[], onWritten?: () => void): void {
    if (this.closedFlag) return;
    if (this.transport.sendBatch) {
      this.transport.sendBatch(messages, onWritten);
      return;
    }
    const last = messages.length - 1;
    for (let i = 0; i <= last; i++) this.sendBuffer(messages[i]!, i === last ? onWritten : undefined);
  }

  /** The transport's framing when it accepts pre-framed bytes (sendFramed), else null. */
  get framing(): Framing | null {
    return this.transport.sendFramed ? (this.transport.framing ?? null) : null;
  }

  /** Sends bytes holding whole messages framed with `framing` (only when `framing` is not null). */
  sendFramed(data: Buffer, onWritten?: () => void): void {
    if (this.closedFlag) return;
    this.transport.sendFramed!(data, onWritten);
  }

  /** Closes the connection (transport close code). */
  close(code = 1000, reason?: string): void {
    if (this.closedFlag) return;
    this.transport.close(code, reason);
    this.transportClosed();
  }

  /** The transport reports it has closed. Idempotent. */
  transportClosed(): void {
    if (this.closedFlag) return;
    this.closedFlag = true;
    this.queue.length = 0;
    for (const p of this.outbound.values()) {
      clearTimeout(p.timer);
      p.reject(new OutboundRequestError('connection closed', null));
    }
    this.outbound.clear();
    this.dispatcher.closed(this);
  }

  private violation(): void {
    this.close(1002, 'protocol violation');
  }

  private parseError(detail: string): void {
    this.sendError(
      -1,
      new RpcError(ErrorCode.InvalidRequest, `${this.parsePrefix} ${this.transport.peer}: ${detail}`),
    );
  }

  private enqueue(req: QueuedRequest): void {
    this.queue.push(req);
    this.next();
  }

  private run(req: QueuedRequest): void {
    let outcome: unknown;
    try {
      outcome = this.dispatcher.request(req.method, req.params, this);
    } catch (e) {
      this.sendError(req.id, e);
      this.next();
      return;
    }
    if (outcome instanceof Deferred) {
      outcome.promise.then(
        (v) => this.sendResult(req.id, v),
        (e) => this.sendError(req.id, e),
      );
      this.next();
    } else if (outcome instanceof Promise) {
      this.inFlight++;
      outcome
        .then(
          (v) => (v instanceof Deferred ? this.settleLater(req.id, v) : this.sendResult(req.id, v)),
          (e) => this.sendError(req.id, e),
        )
        .finally(() => {
          this.inFlight--;
          this.next();
        });
    } else {
      this.sendResult(req.id, outcome);
      this.next();
    }
  }

  private settleLater(id: RequestId, d: Deferred): void {
    d.promise.then(
      (v) => this.sendResult(id, v),
      (e) => this.sendError(id, e),
    );
  }

  private next(): void {
    while (this.inFlight < this.maxConcurrent && !this.closedFlag) {
      const req = this.queue.shift();
      if (!req) return;
      this.run(req);
    }
  }

  private sendResult(id: RequestId, result: unknown): void {
    if (result instanceof ResultWithCallback) {
      this.sendRaw(`{"id":${JSON.stringify(id)},"result":${JSON.stringify(result.value)}}`);
      result.afterSend();
      return;
    }
    this.sendRaw(`{"id":${JSON.stringify(id)},"result":${JSON.stringify(result ?? {})}}`);
  }

  private sendError(id: RequestId, e: unknown): void {
    const err =
      e instanceof RpcError
        ? e
        : new RpcError(ErrorCode.InternalError, e instanceof Error ? e.message : String(e));
    this.sendRaw(
      `{"error":{"code":${err.code},"message":${JSON.stringify(err.message)}},"id":${JSON.stringify(id)}}`,
    );
  }
}

/** A result whose sender must run a callback right after the response is queued (e.g. release held notifications). */
export class ResultWithCallback<T = unknown> {
  constructor(
    readonly value: T,
    readonly afterSend: () => void,
  ) {}
}
