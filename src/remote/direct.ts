/**
 * The `direct` remote transport (`corral exec-server --remote URL --environment-id ID --remote-transport direct`):
 * register with the environment registry, dial the WebSocket URL it returns, and serve the exec-server protocol on
 * that OUTBOUND link exactly as on an inbound connection (one `ExecServer.connect` with a transport). The harness
 * reaches us through the registry's relay, one harness per link; when a link ends the executor dials a new one.
 *
 * Behaviour recorded from the released Codex 0.169 executor (test/fixtures/remote/codex-0.169.0-direct.json):
 * - the registration and every handshake are signed (`RegistrationAuth`); the URL's query is kept as given;
 * - a link that ends (harness gone, relay dropped it) is redialled after `retryDelay(0)` (500–750 ms);
 * - HTTP 409 at the handshake means the registration was rejected: register again, then redial;
 * - other handshake failures (5xx, 408, 429, network) back off: 0.5 s, 1 s, 2 s, 4 s, then 5 s, each plus up to
 *   half again of jitter, reset once a handshake succeeds; any other 4xx (401, 403, 404 …) is fatal;
 * - TLS (https://, wss://) is required unless the host is loopback.
 *
 * Unlike Codex, the link (and so the registration credential on its handshake) goes only where registry.ts's
 * checkRelayUrl allows: the registry's own host and port, or a `--relay-host`; checked again before every dial.
 *
 * Every link is the same principal (an agent: `remote:<environment id>`), so a harness that reconnects through a new
 * link can resume its session (`initialize {resumeSessionId}`) within the server's resume grace period.
 */
import { WebSocket } from 'ws';
import type { Clock } from '../clock.js';
import { MAX_MESSAGE_BYTES } from '../protocol/methods.js';
import { webSocketTransport } from '../server/connection/wsListener.js';
import type { Principal } from '../server/core/auth.js';
import type { Logger } from '../server/core/log.js';
import type { ExecServer } from '../server/execServer.js';
import type { RegistrationAuth } from './auth.js';
import { type Registration, type RegistryClient, RegistryError } from './registry.js';

export const HANDSHAKE_TIMEOUT_MS = 10_000;
/** How long stop() waits for the relay to answer the close frame before dropping the link. */
export const CLOSE_GRACE_MS = 2_000;
export const INITIAL_RETRY_MS = 500;
export const MAX_RETRY_MS = 5_000;

/** Codex's schedule: base 500 ms × 2^min(attempt, 4), capped at 5 s, plus up to half of it again at random. */
export function retryDelay(attempt: number, initialMs = INITIAL_RETRY_MS, maxMs = MAX_RETRY_MS): number {
  const base = Math.min(initialMs * 2 ** Math.min(attempt, 4), maxMs);
  return base + Math.floor(Math.random() * (base / 2 + 1));
}

/** The principal of every link of an environment (never the panel). */
export function remotePrincipal(environmentId: string): Principal {
  return { role: 'agent', credential: `remote:${environmentId}` };
}

export interface DirectExecutorOptions {
  registry: RegistryClient;
  auth: RegistrationAuth;
  log: Logger;
  /** Sign the link's handshake with the registration credential (direct: yes; Codex's Noise rendezvous: no). */
  signLink?: boolean;
  /** The link's WebSocket message limit (default the exec server's 16 MiB; the Noise relay's is 256 KiB). */
  maxPayload?: number;
  /** Base of the retry schedule (ms); tests may shorten it. */
  initialRetryMs?: number;
  maxRetryMs?: number;
}

export interface DirectExecutor {
  /** The registration in use (null before the first one succeeded). */
  readonly registration: Registration | null;
  /** Links opened so far. */
  readonly linksOpened: number;
  /** Resolves when stopped; rejects on a fatal error (bad credentials, a 4xx handshake, a non-TLS URL). */
  readonly done: Promise<void>;
  stop(): void;
}

class HandshakeRefused extends Error {
  constructor(readonly status: number) {
    super(`the registry refused the executor WebSocket handshake with HTTP ${status}`);
  }
}

/**
 * Serves one open link: called inside ws's `open` event (the harness's first message may follow at once); returns
 * what to do when the link closes.
 */
export type LinkServer = (ws: WebSocket, peer: string, registration: Registration) => { closed(): void };

/** Registers, then keeps one link open at a time until stopped, serving each on `server` (the exec server). */
export function startDirectExecutor(server: ExecServer, o: DirectExecutorOptions): DirectExecutor {
  server.protectSecrets(o.auth.secrets);
  o.auth.onSecret?.((secret) => server.protectSecrets([secret]));
  const principal = remotePrincipal(o.registry.environmentId);
  return startRegistryLinks(server.clock, o, (ws, peer) => {
    const conn = server.connect(webSocketTransport(ws, peer), principal);
    ws.on('message', (data, isBinary) => {
      conn.receive(isBinary || typeof data !== 'string' ? data.toString() : data);
    });
    return { closed: () => conn.transportClosed() };
  });
}

/**
 * The registration and link loop of the direct transport (Codex's schedule, above), each open link handed to
 * `serve`: the exec server's own connection (startDirectExecutor) or a relay to another exec server (forward.ts).
 * Retry backoffs and the close grace run on `clock`.
 */
export function startRegistryLinks(
  clock: Clock,
  o: DirectExecutorOptions,
  serve: LinkServer,
): DirectExecutor {
  const { registry, auth, log } = o;
  let registration: Registration | null = null;
  let linksOpened = 0;
  let stopped = false;
  let current: WebSocket | null = null;
  let wake: (() => void) | null = null;
  const sleep = (ms: number) =>
    new Promise<void>((resolve) => {
      const t = clock.setTimeout(() => {
        wake = null;
        resolve();
      }, ms);
      wake = () => {
        clock.clearTimeout(t);
        wake = null;
        resolve();
      };
    });

  /**
   * Dials one link and serves it until it closes. Resolves once it has closed (after it was open), rejects if the
   * handshake fails. The connection is made inside ws's `open` event, synchronously: the harness's first message
   * may arrive in the same read as the 101, and ws emits it right after `open`, before any promise continuation.
   */
  const link = (reg: Registration): Promise<void> =>
    new Promise((resolve, reject) => {
      const url = registry.checkRelayUrl(reg.url.href);
      const headers = o.signLink === false ? {} : auth.sign({ method: 'GET', url, headers: {}, body: '' });
      const ws = new WebSocket(url, {
        headers,
        perMessageDeflate: false,
        maxPayload: o.maxPayload ?? MAX_MESSAGE_BYTES,
        // ws's own socket-level timer (not the clock): it bounds one real TCP/TLS handshake.
        handshakeTimeout: HANDSHAKE_TIMEOUT_MS,
        followRedirects: false,
      });
      current = ws;
      let opened = false;
      ws.once('unexpected-response', (_req, res) => {
        res.resume();
        ws.terminate();
        reject(new HandshakeRefused(res.statusCode ?? 0));
      });
      let peer = `${reg.url.hostname}:${reg.url.port || (reg.url.protocol === 'wss:' ? 443 : 80)}`;
      ws.once('upgrade', (res) => {
        if (res.socket.remoteAddress) peer = `${res.socket.remoteAddress}:${res.socket.remotePort}`;
      });
      ws.once('open', () => {
        opened = true;
        const n = ++linksOpened;
        const served = serve(ws, peer, reg);
        ws.once('close', (code) => {
          log.info(`remote: link ${n} closed (${code})`);
          served.closed();
          resolve();
        });
        log.info(
          `remote: link ${n} open (environment ${reg.environmentId}, registration ${reg.registrationId})`,
        );
      });
      ws.on('error', (e) => {
        if (!opened) reject(e);
        else log.warn(`remote: link ${linksOpened} failed: ${e.message}`);
      });
    });

  const run = async (): Promise<void> => {
    // The first registration fails fast, as Codex does: a wrong URL or credential is reported at once.
    registration = await registry.register();
    log.info(
      `remote: registered environment ${registration.environmentId} (registration ${registration.registrationId})`,
    );
    let attempt = 0;
    while (!stopped) {
      try {
        await link(registration);
        attempt = 0; // the handshake succeeded: the next dial waits retryDelay(0)
      } catch (e) {
        if (stopped) break;
        if (e instanceof HandshakeRefused) {
          const s = e.status;
          if (s === 409) {
            log.warn(
              'remote: the registry rejected this registration (409 at the handshake): registering again',
            );
            try {
              registration = await registry.register();
            } catch (r) {
              if (!(r instanceof RegistryError) || !r.retryable) throw r;
              log.warn(`remote: registering again failed, will retry: ${r.message}`);
            }
          } else if (s >= 400 && s < 500 && s !== 408 && s !== 429) {
            throw new RegistryError(`${e.message}: giving up`, s, false);
          } else log.warn(`remote: ${e.message}; retrying`);
        } else if (e instanceof RegistryError && !e.retryable) {
          throw e;
        } else log.warn(`remote: connecting to the registry failed (${(e as Error).message}); retrying`);
      }
      if (stopped) break;
      await sleep(retryDelay(attempt, o.initialRetryMs, o.maxRetryMs));
      attempt++;
    }
  };

  const done = run().finally(() => {
    current?.terminate();
  });
  done.catch(() => {});
  return {
    get registration() {
      return registration;
    },
    get linksOpened() {
      return linksOpened;
    },
    done,
    stop() {
      stopped = true;
      const ws = current;
      if (ws) {
        // A relay that never answers the close frame must not hold the executor for ws's 30 s close timeout.
        ws.close(1001, 'executor stopping');
        const t = clock.setTimeout(() => ws.terminate(), CLOSE_GRACE_MS).unref();
        ws.once('close', () => clock.clearTimeout(t));
      }
      wake?.();
    },
  };
}
