/**
 * Blocked-request ring (§4.8), audit events (§4.9), block reasons and messages (§4.7), and the in-process event bus
 * the desktop panel subscribes to.
 */
import type {
  BlockedEvent,
  BlockedRequest,
  BlockedSnapshot,
  NetworkAuditEvent,
} from '../protocol/network.js';

export type { BlockedEvent, BlockedRequest, BlockedSnapshot, NetworkAuditEvent };

export const MAX_BLOCKED_EVENTS = 200;

export type BlockReason =
  | 'not_allowed'
  | 'not_allowed_local'
  | 'denied'
  | 'method_not_allowed'
  | 'mitm_required'
  | 'proxy_disabled'
  | (string & {});

/** The [seed] messages (§4.7). */
export function blockMessage(reason: BlockReason): string {
  switch (reason) {
    case 'not_allowed':
      return 'Codex blocked this request: domain not in allowlist (this is not a denylist block).';
    case 'not_allowed_local':
      return 'Codex blocked this request: local/private addresses not allowed.';
    case 'denied':
      return 'Codex blocked this request: domain denied by policy.';
    case 'method_not_allowed':
      return 'Codex blocked this request: method not allowed in limited mode.';
    case 'mitm_required':
      return 'Codex blocked this request: MITM required for limited HTTPS.';
    default:
      return 'Codex blocked this request by network policy.';
  }
}

/** `x-proxy-error` tags (§4.7). */
export function blockTag(reason: BlockReason): string {
  switch (reason) {
    case 'not_allowed':
    case 'not_allowed_local':
      return 'blocked-by-allowlist';
    case 'denied':
      return 'blocked-by-denylist';
    case 'method_not_allowed':
      return 'blocked-by-method-policy';
    case 'mitm_required':
      return 'blocked-by-mitm-required';
    default:
      return 'blocked-by-policy';
  }
}

type Listener<T> = (value: T) => void;

export interface NetworkEventMap {
  blocked: BlockedEvent;
  audit: NetworkAuditEvent;
}

/** A small typed event bus. Listener exceptions are isolated (reported to `onListenerError`, default: ignored). */
export class NetworkEvents {
  private readonly listeners: { [K in keyof NetworkEventMap]: Set<Listener<NetworkEventMap[K]>> } = {
    blocked: new Set(),
    audit: new Set(),
  };

  constructor(private readonly onListenerError: (err: unknown) => void = () => {}) {}

  on<K extends keyof NetworkEventMap>(event: K, listener: Listener<NetworkEventMap[K]>): () => void {
    this.listeners[event].add(listener);
    return () => this.off(event, listener);
  }

  off<K extends keyof NetworkEventMap>(event: K, listener: Listener<NetworkEventMap[K]>): void {
    this.listeners[event].delete(listener);
  }

  once<K extends keyof NetworkEventMap>(event: K, listener: Listener<NetworkEventMap[K]>): () => void {
    const wrapped: Listener<NetworkEventMap[K]> = (v) => {
      this.off(event, wrapped);
      listener(v);
    };
    return this.on(event, wrapped);
  }

  listenerCount(event: keyof NetworkEventMap): number {
    return this.listeners[event].size;
  }

  emit<K extends keyof NetworkEventMap>(event: K, value: NetworkEventMap[K]): void {
    for (const l of [...this.listeners[event]]) {
      try {
        l(value);
      } catch (err) {
        this.onListenerError(err);
      }
    }
  }
}

/** The per-proxy FIFO ring of the last 200 blocked requests with an ever-increasing total. */
export class BlockedRing {
  private readonly items: BlockedRequest[] = [];
  private total = 0;

  constructor(private readonly capacity = MAX_BLOCKED_EVENTS) {}

  push(record: BlockedRequest): number {
    this.items.push(record);
    if (this.items.length > this.capacity) this.items.shift();
    this.total++;
    return this.total;
  }

  snapshot(): BlockedSnapshot {
    return { events: [...this.items], blocked_total: this.total };
  }

  drain(): BlockedSnapshot {
    const events = this.items.splice(0, this.items.length);
    return { events, blocked_total: this.total };
  }
}

/** Builds a record with the §4.8 key order, omitting absent optional fields. */
export function blockedRecord(args: {
  host: string;
  reason: string;
  client: string | null;
  method: string | null;
  mode: 'full' | 'limited' | null;
  protocol: BlockedRequest['protocol'];
  decision?: 'deny' | 'ask';
  source?: BlockedRequest['source'];
  port?: number;
  timestamp?: number;
}): BlockedRequest {
  const r: BlockedRequest = {
    host: args.host,
    reason: args.reason,
    client: args.client,
    method: args.method,
    mode: args.mode,
    protocol: args.protocol,
    timestamp: 0,
  };
  // Re-insert in order: decision, source, port, timestamp.
  delete (r as Partial<BlockedRequest>).timestamp;
  if (args.decision !== undefined) r.decision = args.decision;
  if (args.source !== undefined) r.source = args.source;
  if (args.port !== undefined) r.port = args.port;
  r.timestamp = args.timestamp ?? Math.floor(Date.now() / 1000);
  return r;
}

/** The `CODEX_NETWORK_POLICY_VIOLATION {json}` log line (§4.8). */
export function violationLine(record: BlockedRequest): string {
  try {
    return `CODEX_NETWORK_POLICY_VIOLATION ${JSON.stringify(record)}`;
  } catch {
    return `CODEX_NETWORK_POLICY_VIOLATION host=${record.host} reason=${record.reason}`;
  }
}
