/**
 * The way out of the managed proxy: connections go only to addresses the policy checked (resolve once and pin,
 * network-proxy.md §5 item 2), or through an upstream proxy where one applies (§4.2 step 10, §5 item 8), and plain
 * forwarding keeps pooled keep-alive connections per checked address.
 */
import http from 'node:http';
import https from 'node:https';
import { isIP } from 'node:net';
import type { Duplex } from 'node:stream';
import tls from 'node:tls';
import { connectVia, UpstreamAgents, type UpstreamProxies, upstreamRoute } from './upstream.js';

/** Opens a byte stream to `host:port` — an address the policy checked; `hostname` is the name it stands for. */
export type Dialer = (target: { host: string; port: number; hostname: string }) => Promise<Duplex>;

/**
 * Opens a byte stream to an allowed target: through the upstream proxy when one applies (upstreamRoute: never for
 * loopback), otherwise straight to the checked addresses, in order (never anything else: a name with a dead IPv6
 * answer still connects).
 */
export function openTunnel(
  out: { dial: Dialer; upstream: UpstreamProxies },
  target: { host: string; addresses: readonly string[]; port: number },
): Promise<Duplex> {
  const up = upstreamRoute('tunnel', out.upstream, target);
  if (up) return connectVia(up, target.host, target.port);
  if (target.addresses.length === 0) return Promise.reject(new Error('no address'));
  const attempt = async (i: number): Promise<Duplex> => {
    try {
      return await out.dial({ host: target.addresses[i]!, port: target.port, hostname: target.host });
    } catch (e) {
      if (i + 1 >= target.addresses.length) throw e;
      return attempt(i + 1);
    }
  };
  return attempt(0);
}

/** Where a client's tunnel is opened from: the way out, and the proxy's socket registry. */
export interface TunnelOrigin {
  dial: Dialer;
  upstream: UpstreamProxies;
  /** True once the proxy is closing. */
  readonly closed: boolean;
  track(s: Duplex): void;
}

/**
 * Opens the tunnel of an admitted `client` (openTunnel): the upstream stream, tracked; or null when the client went
 * away or the proxy closed during the dial (both are then destroyed). A failed dial rejects, for the caller's
 * protocol to answer.
 */
export async function tunnelFor(
  from: TunnelOrigin,
  client: Duplex,
  target: { host: string; addresses: readonly string[]; port: number },
): Promise<Duplex | null> {
  const upstream = await openTunnel(from, target);
  if (client.destroyed || from.closed) {
    upstream.destroy();
    client.destroy();
    return null;
  }
  from.track(upstream);
  return upstream;
}

/** TLS to `hostname` over an open socket (SNI unless it is an IP literal; the certificate is verified). */
export function tlsOver(raw: Duplex, hostname: string): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const secure = tls.connect({
      socket: raw,
      ...(isIP(hostname) ? { host: hostname } : { servername: hostname, host: hostname }),
      ALPNProtocols: ['http/1.1'],
    });
    const onError = (e: Error) => {
      raw.destroy();
      reject(e);
    };
    secure.once('error', onError);
    secure.once('secureConnect', () => {
      secure.off('error', onError);
      resolve(secure);
    });
  });
}

type ConnectionOptions = { host?: string; port?: number; servername?: string };
type ConnectionCallback = (err: Error | null, socket?: Duplex) => void;

const POOL = { keepAlive: true, maxSockets: 256, maxFreeSockets: 64, scheduling: 'lifo' } as const;

/** Plain HTTP: a request names the checked address as `host` and the name as `servername`; exactly that is dialled. */
class PinnedAgent extends http.Agent {
  constructor(private readonly dial: Dialer) {
    super(POOL);
  }

  override createConnection(o: ConnectionOptions, cb: ConnectionCallback): undefined {
    const target = { host: o.host ?? '', port: o.port ?? 80, hostname: o.servername ?? o.host ?? '' };
    this.dial(target).then(
      (s) => cb(null, s),
      (e: Error) => cb(e),
    );
    return undefined;
  }
}

/** `https://` targets: the proxy speaks TLS to the name itself, over a socket to the checked address. */
class PinnedTlsAgent extends https.Agent {
  constructor(private readonly dial: Dialer) {
    super(POOL);
  }

  override createConnection(o: ConnectionOptions, cb: ConnectionCallback): undefined {
    const name = o.servername ?? '';
    this.dial({ host: o.host ?? '', port: o.port ?? 443, hostname: name })
      .then((raw) => tlsOver(raw, name))
      .then((s) => cb(null, s), cb);
    return undefined;
  }
}

/** The keep-alive agents of plain forwarding, straight to checked addresses and towards an upstream proxy. */
export class ForwardAgents {
  readonly http: http.Agent;
  readonly https: https.Agent;
  readonly upstream = new UpstreamAgents();

  constructor(dial: Dialer) {
    this.http = new PinnedAgent(dial);
    this.https = new PinnedTlsAgent(dial);
  }

  destroy(): void {
    this.http.destroy();
    this.https.destroy();
    this.upstream.destroy();
  }
}
