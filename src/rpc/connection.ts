import { type Clock, realClock, type Timer } from '../clock.js';
import { parseJson } from '../protocol/boundedJson.js';
import { ErrorCode, RpcError } from '../protocol/errors.js';
import type { OutputStream } from '../protocol/exec.js';
import { encodeOutput, encodeOutputs, type OutputHead, OutputLease } from './output.js';

/**
 * What a connection needs from its transport (a WebSocket, Electron IPC, stdio, or a test pipe): something that
 * moves the bytes of whole messages. Serialisation and flow control are the connection's.
 */
export interface Transport {
  /**
   * Moves `messages` (each the UTF-8 text of one JSON-RPC message), in order. `onWritten` runs once they have all
   * left this process's buffers (a transport that is closed may never call it: the connection is closed then too).
   * From then on their memory may hold other messages (output.ts OutputLease): a transport that keeps a message
   * past its onWritten keeps a copy.
   */
  write(messages: readonly Buffer[], onWritten: () => void): void;
  /** Closes the transport (WebSocket close code semantics: 1002 protocol error, 1009 too big, 1000 normal). */
  close(code: number, reason?: string): void;
  /** "ip:port" of the peer, used in parse-error texts. */
  readonly peer: string;
}

/** The JSON text of a notification as bytes, for one message sent to several connections (RpcConnection.send). */
export function encodeNotification(method: string, params: unknown): Buffer {
  return Buffer.from(`{"method":${JSON.stringify(method)},"params":${JSON.stringify(params)}}`);
}

/** A watcher of a connection's queue (see RpcConnection.watchQueue). */
interface QueueWatcher {
  readonly high: number;
  readonly low: number;
  readonly fn: (congested: boolean) => void;
  congested: boolean;
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
  timer: Timer;
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
  private bytesQueued = 0;
  /** Bumped at close: write callbacks of an earlier generation are ignored. */
  private generation = 0;
  private readonly watchers: QueueWatcher[] = [];
  /** Free slot for the dispatcher's per-connection state. */
  state: unknown = undefined;

  constructor(
    private readonly transport: Transport,
    private readonly dispatcher: Dispatcher,
    /** The time of requests to the client (their timeouts). */
    private readonly clock: Clock = realClock,
    private readonly parsePrefix = 'failed to parse websocket JSON-RPC message from exec-server websocket',
  ) {}

  get closed(): boolean {
    return this.closedFlag;
  }

  /** Requests received and waiting for a slot (`maxConcurrent` handlers are already running). */
  get queued(): number {
    return this.queue.length;
  }

  /**
   * Feeds one inbound message (the text of one WebSocket message). Never throws: whatever the peer sent is answered
   * (a parse error with id -1), or closes the connection (a protocol violation, or a fault of ours: 1011).
   */
  receive(text: string): void {
    if (this.closedFlag) return;
    try {
      this.receiveParsed(text);
    } catch {
      this.close(1011, 'internal error');
    }
  }

  private receiveParsed(text: string): void {
    // Bounded: no message nests deeper than MESSAGE_BOUNDS or holds more values (src/protocol/boundedJson.ts).
    const parsed = parseJson(text);
    if (!parsed.ok) {
      this.parseError(parsed.error);
      return;
    }
    const msg = parsed.value;
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
      this.clock.clearTimeout(pending.timer);
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
      const timer = this.clock
        .setTimeout(() => {
          this.outbound.delete(id);
          reject(new OutboundRequestError(`${method}: no answer within ${timeoutMs} ms`, null));
        }, timeoutMs)
        .unref();
      this.outbound.set(id, { resolve, reject, timer });
      this.send(`{"id":${id},"method":${JSON.stringify(method)},"params":${JSON.stringify(params)}}`);
    });
  }

  /** Bytes handed to the transport and not yet written out. */
  get queuedBytes(): number {
    return this.bytesQueued;
  }

  /**
   * Calls `fn(true)` when more than `high` bytes are queued on the transport (at once if they already are), and
   * `fn(false)` when that has fallen back to `low` or below. Returns the function that stops watching. (Sessions
   * pause their children's output this way, protocol.md §5.9; the panel's feed drops output.)
   */
  watchQueue(high: number, low: number, fn: (congested: boolean) => void): () => void {
    const w: QueueWatcher = { high, low, fn, congested: false };
    this.watchers.push(w);
    if (this.bytesQueued > high) {
      w.congested = true;
      fn(true);
    }
    return () => {
      const i = this.watchers.indexOf(w);
      if (i >= 0) this.watchers.splice(i, 1);
    };
  }

  /** Sends a notification. */
  notify(method: string, params: unknown): void {
    this.send(encodeNotification(method, params));
  }

  /** Sends the output notification of one chunk (head: see src/rpc/output.ts). */
  notifyOutput(head: OutputHead, seq: number, stream: OutputStream, data: Uint8Array): void {
    this.send(encodeOutput(head, seq, stream, data));
  }

  /** Sends the output notifications of one read: `data` in chunks of `chunkSize`, seqs from `firstSeq`, one write. */
  notifyOutputs(
    head: OutputHead,
    firstSeq: number,
    stream: OutputStream,
    data: Uint8Array,
    chunkSize: number,
  ): void {
    if (this.closedFlag || data.length === 0) return;
    const messages: Buffer[] = [];
    const lease = new OutputLease();
    const bytes = encodeOutputs(head, firstSeq, stream, data, chunkSize, messages, lease);
    this.write(messages, bytes, undefined, () => lease.release());
  }

  /**
   * Sends one message already serialised (encodeNotification, encodeOutput, or JSON text); `onWritten` runs once it
   * has been written out (never after the connection closed).
   */
  send(message: Buffer | string, onWritten?: () => void): void {
    if (this.closedFlag) return;
    const m = typeof message === 'string' ? Buffer.from(message) : message;
    this.write([m], m.length, onWritten);
  }

  /** `done` runs when the transport has written the messages, also after the connection closed (a lease's release). */
  private write(messages: Buffer[], bytes: number, onWritten?: () => void, done?: () => void): void {
    this.bytesQueued += bytes;
    const gen = this.generation;
    this.transport.write(messages, () => {
      done?.();
      if (gen !== this.generation) return;
      this.written(bytes);
      onWritten?.();
    });
    if (this.watchers.length === 0) return;
    for (const w of this.watchers) {
      if (!w.congested && this.bytesQueued > w.high) {
        w.congested = true;
        w.fn(true);
      }
    }
  }

  private written(bytes: number): void {
    this.bytesQueued -= bytes;
    if (!this.watchers.some((w) => w.congested && this.bytesQueued <= w.low)) return;
    for (const w of [...this.watchers]) {
      if (w.congested && this.bytesQueued <= w.low) {
        w.congested = false;
        w.fn(false);
      }
    }
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
      this.clock.clearTimeout(p.timer);
      p.reject(new OutboundRequestError('connection closed', null));
    }
    this.outbound.clear();
    // Whatever the transport still reports as written no longer counts (nothing is queued on a closed connection).
    this.generation++;
    this.bytesQueued = 0;
    this.watchers.length = 0;
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
      this.sendText(`{"id":${JSON.stringify(id)},"result":${JSON.stringify(result.value)}}`);
      result.afterSend();
      return;
    }
    this.sendText(`{"id":${JSON.stringify(id)},"result":${JSON.stringify(result ?? {})}}`);
  }

  private sendError(id: RequestId, e: unknown): void {
    const err =
      e instanceof RpcError
        ? e
        : new RpcError(ErrorCode.InternalError, e instanceof Error ? e.message : String(e));
    this.sendText(
      `{"error":{"code":${err.code},"message":${JSON.stringify(err.message)}},"id":${JSON.stringify(id)}}`,
    );
  }

  private sendText(text: string): void {
    if (!this.closedFlag) this.send(Buffer.from(text));
  }
}

/** A result whose sender must run a callback right after the response is queued (e.g. release held notifications). */
export class ResultWithCallback<T = unknown> {
  constructor(
    readonly value: T,
    readonly afterSend: () => void,
  ) {}
}
