/**
 * Upstream proxy support (network-proxy.md §4.2 step 10, §4.3 step 7, §5 item 8): with `allow_upstream_proxy`, the
 * managed proxy chains to the proxy named in its own process's environment (http/https schemes only) — but never for
 * `localhost` or non-public targets.
 */
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import tls from 'node:tls';
import { UPSTREAM_PROXY_ENV_KEYS } from './env.js';
import { isNonPublicIp } from './host.js';

export interface UpstreamProxies {
  http?: URL;
  https?: URL;
  all?: URL;
}

function proxyUrl(value: string | undefined): URL | undefined {
  if (!value || value.trim() === '') return undefined;
  try {
    const u = new URL(value.includes('://') ? value : `http://${value}`);
    return u.protocol === 'http:' || u.protocol === 'https:' ? u : undefined;
  } catch {
    return undefined;
  }
}

/** Reads HTTP_PROXY / HTTPS_PROXY / ALL_PROXY (upper case first, then lower case), keeping http(s) URLs only. */
export function upstreamFromEnv(env: Record<string, string | undefined>): UpstreamProxies {
  const pick = (name: string) => proxyUrl(env[name] ?? env[name.toLowerCase()]);
  const out: UpstreamProxies = {};
  const h = pick(UPSTREAM_PROXY_ENV_KEYS.http);
  const s = pick(UPSTREAM_PROXY_ENV_KEYS.https);
  const a = pick(UPSTREAM_PROXY_ENV_KEYS.all);
  if (h) out.http = h;
  if (s) out.https = s;
  if (a) out.all = a;
  return out;
}

/** Plain HTTP uses HTTP_PROXY then ALL_PROXY; tunnels (CONNECT, https://, SOCKS TCP) try HTTPS, HTTP, then ALL. */
export function upstreamFor(kind: 'http' | 'tunnel', u: UpstreamProxies): URL | undefined {
  return kind === 'http' ? (u.http ?? u.all) : (u.https ?? u.http ?? u.all);
}

/** Only public targets may leave through an upstream proxy: never `localhost`, never a non-public address. */
export function mayUseUpstream(host: string, addresses: readonly string[]): boolean {
  if (host === 'localhost' || host.endsWith('.localhost')) return false;
  return addresses.length > 0 && addresses.every((a) => !isNonPublicIp(a));
}

function proxyAuth(u: URL): string | undefined {
  if (!u.username) return undefined;
  const creds = `${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`;
  return `Basic ${Buffer.from(creds).toString('base64')}`;
}

function proxyPort(u: URL): number {
  return u.port ? Number(u.port) : u.protocol === 'https:' ? 443 : 80;
}

const MAX_CONNECT_REPLY = 16 * 1024;

/** Opens a tunnel to host:port through the upstream proxy `u` (CONNECT). Rejects unless it answers 2xx. */
export function connectVia(u: URL, host: string, port: number): Promise<Duplex> {
  return new Promise((resolve, reject) => {
    const options = { host: u.hostname.replace(/^\[|\]$/g, ''), port: proxyPort(u) };
    const socket: net.Socket =
      u.protocol === 'https:'
        ? tls.connect({ ...options, servername: net.isIP(options.host) ? undefined : options.host })
        : net.connect(options);
    const target = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
    const auth = proxyAuth(u);
    let buf = Buffer.alloc(0);
    const fail = (e: Error) => {
      socket.destroy();
      reject(e);
    };
    socket.once('error', fail);
    socket.once(u.protocol === 'https:' ? 'secureConnect' : 'connect', () => {
      socket.write(
        `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n${auth ? `Proxy-Authorization: ${auth}\r\n` : ''}\r\n`,
      );
    });
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) {
        if (buf.length > MAX_CONNECT_REPLY) fail(new Error('upstream proxy reply too large'));
        return;
      }
      socket.off('data', onData);
      socket.off('error', fail);
      socket.pause();
      const status = Number(buf.subarray(0, end).toString('latin1').split(' ')[1]);
      if (!(status >= 200 && status < 300)) {
        socket.destroy();
        reject(new Error(`upstream proxy answered ${status}`));
        return;
      }
      const rest = buf.subarray(end + 4);
      if (rest.length > 0) socket.unshift(rest);
      resolve(socket);
    };
    socket.on('data', onData);
  });
}

/** Agents for plain-HTTP requests sent in absolute form to an upstream proxy. */
export class UpstreamAgents {
  private readonly httpAgent = new http.Agent({ keepAlive: true, maxSockets: 256 });
  private readonly httpsAgent = new https.Agent({ keepAlive: true, maxSockets: 256 });

  /** Request options that send `absoluteUrl` through the proxy `u`. */
  requestOptions(
    u: URL,
    absoluteUrl: string,
  ): { module: typeof http | typeof https; options: http.RequestOptions } {
    const auth = proxyAuth(u);
    return {
      module: u.protocol === 'https:' ? https : http,
      options: {
        agent: u.protocol === 'https:' ? this.httpsAgent : this.httpAgent,
        host: u.hostname.replace(/^\[|\]$/g, ''),
        port: proxyPort(u),
        path: absoluteUrl,
        ...(auth ? { headers: { 'proxy-authorization': auth } } : {}),
      },
    };
  }

  destroy(): void {
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
  }
}
