// The panel's only way to the server: a ClientApi (request/onNotification). In Electron it is the preload's bridge
// (IPC); in a browser it is a WebSocket to the host that served the page, with the token from the URL fragment.
// The Connection adds the handshake, a visible state and reconnection with backoff.
import {
  type ClientApi,
  decodeBridgeError,
  type NotificationHandler,
  RpcClientCore,
  RpcRemoteError,
  type TypedRequests,
  typedRequests,
} from '../src/protocol/client.js';
import type { InitializeResult } from '../src/protocol/exec.js';
import type { MethodName, MethodParams, MethodResult } from '../src/protocol/methods.js';

declare global {
  interface Window {
    corral?: ClientApi;
  }
}

export type ConnState = 'connecting' | 'connected' | 'disconnected';

interface Link {
  api: ClientApi;
  /** Resolves when the link is gone. */
  closed: Promise<string>;
  close(): void;
}

/**
 * Electron: the preload's two functions; errors come back with their code in the message. The link holds one handler
 * on the bridge and hands each notification to the page's handlers itself: contextBridge copies a notification's
 * params into the page once per handler it calls, so a second handler there would be a second deep copy of every
 * notification (the one piece of per-event work the desktop window adds over the browser's WebSocket). A link whose
 * connection closed takes its handler off the bridge (a reconnect leaves no handler behind).
 */
function bridgeLink(bridge: ClientApi): Link {
  let onClosed: (why: string) => void = () => {};
  const closed = new Promise<string>((r) => {
    onClosed = r;
  });
  const handlers = new Set<NotificationHandler>();
  const off = bridge.onNotification((method, params) => {
    if (method === 'transport/closed') {
      off();
      onClosed('the app closed the connection');
    }
    for (const h of [...handlers]) h(method, params);
  });
  return {
    api: {
      request: (m, p) =>
        bridge.request(m, p).catch((e: unknown) => {
          throw decodeBridgeError(e);
        }),
      onNotification: (h) => {
        handlers.add(h);
        return () => handlers.delete(h);
      },
    },
    closed,
    close: () => {
      off();
      onClosed('closed');
    },
  };
}

export function tokenFromLocation(): string | null {
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  return m ? decodeURIComponent(m[1]!) : null;
}

/** Browser: a WebSocket to the host that served the panel (same origin, allow-listed by `corral serve`). */
function webSocketLink(token: string): Promise<Link> {
  return new Promise((resolve, reject) => {
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const ws = new WebSocket(`${proto}//${location.host}/?token=${encodeURIComponent(token)}`);
    const core = new RpcClientCore((text) => {
      if (ws.readyState !== WebSocket.OPEN) throw new Error('not connected');
      ws.send(text);
    });
    let opened = false;
    let onClosed: (why: string) => void = () => {};
    const closed = new Promise<string>((r) => {
      onClosed = r;
    });
    ws.onmessage = (ev) => core.receive(typeof ev.data === 'string' ? ev.data : '');
    ws.onopen = () => {
      opened = true;
      resolve({ api: core, closed, close: () => ws.close(1000) });
    };
    ws.onclose = (ev) => {
      const why = opened
        ? `connection closed (${ev.code}${ev.reason ? `: ${ev.reason}` : ''})`
        : 'cannot reach the Corral host (is it running? is the token in the URL current?)';
      core.fail(why);
      onClosed(why);
      if (!opened) reject(new Error(why));
    };
  });
}

export interface ConnectionEvents {
  state(state: ConnState, detail: string): void;
  /** Called after each (re)connect + handshake: subscribe here. */
  ready(api: TypedRequests, sessionId: string): Promise<void> | void;
  notification: NotificationHandler;
}

/** Keeps one live, initialised client connection; reconnects with backoff when it drops. */
export class Connection {
  private link: Link | null = null;
  private attempt = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  state: ConnState = 'connecting';
  detail = '';
  retryAt: number | null = null;
  /** The panel's session, resumed on reconnect. */
  sessionId: string | null = null;
  /** The server runs with `--require-sandbox` (initialize says so). */
  requireSandbox = false;
  readonly transport: 'ipc' | 'websocket';

  constructor(private readonly events: ConnectionEvents) {
    this.transport = window.corral ? 'ipc' : 'websocket';
  }

  get api(): ClientApi | null {
    return this.state === 'connected' ? (this.link?.api ?? null) : null;
  }

  /** Request through the live connection (rejects clearly when disconnected), typed by the method table. */
  request<M extends MethodName>(method: M, params: MethodParams<M>): Promise<MethodResult<M>>;
  /** @deprecated The table types the result: drop the type argument. */
  request<T>(method: MethodName, params: MethodParams<MethodName>): Promise<T>;
  request(method: MethodName, params: unknown): Promise<unknown> {
    const api = this.api;
    if (!api) return Promise.reject(new RpcRemoteError(0, 'not connected to the Corral host'));
    return api.request(method, params ?? null);
  }

  private set(state: ConnState, detail: string): void {
    this.state = state;
    this.detail = detail;
    this.events.state(state, detail);
  }

  start(): void {
    void this.connect();
  }

  /** Reconnect now (the "Reconnect" button). */
  retry(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.retryAt = null;
    if (this.state !== 'connected') void this.connect();
  }

  private async connect(): Promise<void> {
    this.set(
      'connecting',
      this.attempt === 0 ? 'connecting…' : `reconnecting (attempt ${this.attempt + 1})…`,
    );
    let link: Link;
    try {
      if (window.corral) link = bridgeLink(window.corral);
      else {
        const token = tokenFromLocation();
        if (!token) {
          this.set('disconnected', 'no token in the URL: open the panel URL printed by `corral serve`');
          return;
        }
        link = await webSocketLink(token);
      }
      const off = link.api.onNotification((m, p) => this.events.notification(m, p));
      void link.closed.then((why) => {
        off();
        if (this.link === link) this.lost(why);
      });
      this.link = link;
      // Resume the panel's own session after a drop (its processes keep running within the grace period);
      // if it has expired, start a new one. A failed initialize leaves the connection usable (protocol.md §4).
      let init: InitializeResult;
      try {
        init = (await link.api.request('initialize', {
          clientName: 'corral-panel',
          resumeSessionId: this.sessionId,
        })) as InitializeResult;
      } catch (e) {
        if (!this.sessionId || !(e instanceof RpcRemoteError) || e.code !== -32600) throw e;
        this.sessionId = null;
        init = (await link.api.request('initialize', { clientName: 'corral-panel' })) as InitializeResult;
      }
      this.sessionId = init.sessionId;
      this.requireSandbox = init.requireSandbox === true;
      await link.api.request('initialized', {});
      this.attempt = 0;
      this.set('connected', '');
      await this.events.ready(typedRequests(link.api), init.sessionId);
    } catch (e) {
      this.link?.close();
      this.link = null;
      this.lost(e instanceof Error ? e.message : String(e));
    }
  }

  private lost(why: string): void {
    this.link = null;
    this.attempt++;
    const delay = Math.min(10_000, 500 * 2 ** Math.min(this.attempt, 5));
    this.retryAt = Date.now() + delay;
    this.set('disconnected', why);
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.retryAt = null;
      void this.connect();
    }, delay);
  }
}
