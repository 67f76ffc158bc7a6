import { closeSync, writeSync } from 'node:fs';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import { BOTH_CASE_PROXY_URL_KEYS, PROXY_URL_ENV_KEYS } from '../../network/env.js';
import type { ProxyListener, ProxyRoute } from '../../network/proxy.js';
import { tunnel } from '../../network/tunnel.js';
import { listenInNetns as nativeListenInNetns } from '../../platform/netns.js';
import { SandboxSetupError } from '../errors.js';

/**
 * Managed network inside `bwrap --unshare-net` (sandbox.md §8.6): for each proxy endpoint, a listener on
 * 127.0.0.1:<port> inside the sandbox's network namespace, made there by the addon (netns.c) and served from this
 * process. The server's own managed proxy is handed over as a structured value (`ProxyRoute`): its ports and its
 * `accept`, to which each in-namespace connection goes straight. A proxy the client runs itself is known only from the
 * command's proxy variables (loopback endpoints found there), and each connection is dialled to it. The command is
 * held by bwrap's `--block-fd` until the listeners exist.
 */

/** First in-namespace forwarder port; endpoint i listens on FORWARD_BASE_PORT + i. */
export const FORWARD_BASE_PORT = 3128;

export interface ProxyEndpoint {
  host: string;
  port: number;
  /** Set for the server's own proxy: in-namespace connections are handed to it, not dialled. */
  accept?: ProxyListener['accept'];
}

export interface ManagedRoutes {
  endpoints: ProxyEndpoint[];
  /** The command env with every loopback proxy variable pointing at the in-namespace forwarder. */
  env: Record<string, string>;
  /**
   * The SOCKS5 listener's port on the host's 127.0.0.1 (the server's proxy's, or a socks5/socks5h variable's), for
   * transparent TCP: the connect supervisor asks it for every other destination. Absent: none.
   */
  socks?: number;
}

const LOOPBACK = new Set(['localhost', '127.0.0.1', '::1', '[::1]']);
const DEFAULT_PORT: Record<string, number> = {
  http: 80,
  https: 443,
  socks: 1080,
  socks4: 1080,
  socks4a: 1080,
  socks5: 1080,
  socks5h: 1080,
};

function parseProxy(value: string): { url: URL; endpoint: ProxyEndpoint } | null {
  const v = value.trim();
  if (!v) return null;
  let url: URL;
  try {
    url = new URL(v.includes('://') ? v : `http://${v}`);
  } catch {
    return null;
  }
  const scheme = url.protocol.replace(/:$/, '').toLowerCase();
  const host = url.hostname.toLowerCase();
  if (!LOOPBACK.has(host)) return null;
  const port = url.port ? Number(url.port) : DEFAULT_PORT[scheme];
  if (!port) return null;
  return { url, endpoint: { host: host === 'localhost' ? '127.0.0.1' : host.replace(/^\[|\]$/g, ''), port } };
}

/**
 * The routes to the command's proxy. With the server's own proxy (`proxy`): its listeners, in the order the
 * variables name them (ALL_PROXY's first), and its variables for the in-namespace forwarders' ports (or, with
 * `forward` false, its own). Otherwise see `routesFromEnv`.
 */
export function planManagedRoutes(
  env: Record<string, string>,
  forward = true,
  proxy?: ProxyRoute,
): ManagedRoutes {
  if (!proxy) return routesFromEnv(env, forward);
  const listeners = proxy.socks ? [proxy.socks, proxy.http] : [proxy.http];
  const endpoints = listeners.map((l) => ({ host: '127.0.0.1', port: l.port, accept: l.accept }));
  const portOf = (l: ProxyListener | undefined) =>
    l === undefined ? undefined : forward ? FORWARD_BASE_PORT + listeners.indexOf(l) : l.port;
  const vars = proxy.env({ http: portOf(proxy.http)!, socks: portOf(proxy.socks) });
  return { endpoints, env: { ...env, ...vars }, ...(proxy.socks ? { socks: proxy.socks.port } : {}) };
}

/**
 * Finds the loopback proxy endpoints in `env` (a proxy the client runs itself) and rewrites the variables to the
 * in-namespace forwarders (scheme, credentials and path kept); with `forward` false (the Landlock backend: the sandbox
 * shares the host's loopback) they keep pointing at the proxy. Either way every URL variable is set in both cases
 * (curl reads only http_proxy for http:// URLs). Fails closed when there are none.
 */
function routesFromEnv(env: Record<string, string>, forward: boolean): ManagedRoutes {
  const keys = Object.keys(env).filter((k) => PROXY_URL_ENV_KEYS.includes(k.toUpperCase()));
  if (keys.length === 0 || keys.every((k) => !env[k]?.trim())) {
    throw new SandboxSetupError(
      'managed proxy mode requires proxy environment variables (HTTP_PROXY, HTTPS_PROXY or ALL_PROXY pointing at a loopback proxy); refusing to run with open network',
    );
  }
  const endpoints: ProxyEndpoint[] = [];
  let socks: number | undefined;
  const out = { ...env };
  const rewritten = new Map<string, string>();
  for (const k of keys.sort()) {
    const parsed = parseProxy(env[k] ?? '');
    if (!parsed) continue;
    let i = endpoints.findIndex((e) => e.host === parsed.endpoint.host && e.port === parsed.endpoint.port);
    if (i < 0) i = endpoints.push(parsed.endpoint) - 1;
    const u = parsed.url;
    if (socks === undefined && /^socks5h?:$/i.test(u.protocol) && parsed.endpoint.host === '127.0.0.1')
      socks = parsed.endpoint.port;
    u.hostname = '127.0.0.1';
    u.port = String(FORWARD_BASE_PORT + i);
    const original = env[k]!.trim();
    if (!forward) {
      out[k] = original;
      rewritten.set(k.toUpperCase(), original);
      continue;
    }
    let value = u.toString();
    if (!original.includes('://')) value = value.replace(/^http:\/\//, '');
    if (!/\/$/.test(original) && value.endsWith('/') && u.pathname === '/') value = value.slice(0, -1);
    out[k] = value;
    rewritten.set(k.toUpperCase(), value);
  }
  if (endpoints.length === 0) {
    throw new SandboxSetupError(
      'managed proxy mode requires parseable loopback proxy endpoints in the proxy environment variables; refusing to run with open network',
    );
  }
  for (const k of BOTH_CASE_PROXY_URL_KEYS) {
    const v = rewritten.get(k);
    if (v === undefined) continue;
    out[k] = v;
    out[k.toLowerCase()] = v;
  }
  return { endpoints, env: out, ...(socks !== undefined ? { socks } : {}) };
}

/**
 * Serves a connection accepted in the namespace: handed straight to the server's own proxy (`accept`), or else
 * connected to the endpoint and tunnelled (tunnel.ts: half-closes forwarded, the bytes moved by splice once the
 * upstream socket is connected; until then Node buffers what the sandbox sends).
 */
function forwardTo(c: net.Socket, ep: ProxyEndpoint, conns: Set<Duplex>): void {
  if (ep.accept) {
    conns.add(c);
    c.once('close', () => conns.delete(c));
    ep.accept(c);
    return;
  }
  const up = net.connect({ host: ep.host, port: ep.port, allowHalfOpen: true });
  conns.add(c);
  conns.add(up);
  const forget = () => {
    conns.delete(c);
    conns.delete(up);
  };
  c.once('close', forget);
  up.once('close', forget);
  const early = () => {
    c.destroy();
    up.destroy();
  };
  c.once('error', early);
  up.once('error', early);
  c.once('close', early);
  up.once('connect', () => {
    c.off('error', early);
    up.off('error', early);
    c.off('close', early);
    tunnel(c, up, undefined, (s) => {
      conns.add(s);
      s.once('close', () => conns.delete(s));
    });
  });
}

/**
 * Listens on 127.0.0.1:FORWARD_BASE_PORT + i inside the network namespace of `pid` (the sockets are created there by
 * the native addon, netns.c) and serves each connection from this process with endpoint i (`forwardTo`). Throws a SandboxSetupError
 * naming the errno when the namespace cannot be entered or a port cannot be bound there.
 */
export function listenInSandboxNetns(pid: number, endpoints: ProxyEndpoint[]): { close(): void } {
  if (!nativeListenInNetns) throw new SandboxSetupError('managed network: the native addon is not loaded');
  let fds: number[];
  try {
    fds = nativeListenInNetns(
      pid,
      endpoints.map((_, i) => FORWARD_BASE_PORT + i),
    );
  } catch (e) {
    throw new SandboxSetupError(`managed network: cannot listen in the sandbox: ${(e as Error).message}`);
  }
  const servers: net.Server[] = [];
  const conns = new Set<Duplex>();
  try {
    for (const [i, ep] of endpoints.entries()) {
      const srv = net.createServer({ allowHalfOpen: true }, (c) => forwardTo(c, ep, conns));
      srv.on('error', () => {});
      srv.listen({ fd: fds[i]! });
      servers.push(srv);
    }
  } catch (e) {
    for (const s of servers) s.close();
    for (const fd of fds.slice(servers.length)) closeQuietly(fd);
    throw e;
  }
  return {
    close() {
      for (const s of servers) s.close();
      for (const c of conns) c.destroy();
    },
  };
}

/** Reads bwrap's `--info-fd` JSON (`{"child-pid": N}`) from the read end of a pipe (taken over: closed by cancel). */
export function readChildPid(fd: number, timeoutMs: number): { promise: Promise<number>; cancel(): void } {
  const sock = new net.Socket({ fd, readable: true, writable: false });
  let buf = '';
  let settle: ((v: number | Error) => void) | undefined;
  const promise = new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => {
      settle?.(new Error('timed out waiting for the sandbox namespace'));
      sock.destroy();
    }, timeoutMs);
    settle = (v) => {
      settle = undefined;
      clearTimeout(timer);
      if (v instanceof Error) reject(new SandboxSetupError(`managed network: ${v.message}`));
      else resolve(v);
    };
  });
  sock.setEncoding('utf8');
  // bwrap writes its info JSON in several writes and closes the fd after the last one. Keep reading until then even
  // once the child pid is known: closing the read end early makes bwrap's next write raise SIGPIPE, which kills it
  // (and the whole sandbox) — seen under load, where the writes arrive split across reads.
  sock.on('data', (d: string) => {
    buf += d;
    const m = /"child-pid"\s*:\s*(\d+)/.exec(buf);
    if (m) settle?.(Number(m[1]));
  });
  sock.on('error', (e) => settle?.(e));
  sock.on('end', () => {
    settle?.(new Error('the sandbox exited before reporting its namespace'));
    sock.destroy();
  });
  return {
    promise,
    cancel: () => {
      settle?.(new Error('cancelled'));
      sock.destroy();
    },
  };
}

/** Writes the release byte to bwrap's `--block-fd` (the write end of its pipe, held by us). */
export function release(blockFd: number): void {
  try {
    writeSync(blockFd, Buffer.from('1'));
  } catch (e) {
    // EPIPE: bwrap is gone (nothing reads its block pipe any more).
    if ((e as NodeJS.ErrnoException).code === 'EPIPE')
      throw new SandboxSetupError('sandbox setup: the process exited during setup');
    throw e;
  }
}

export function closeQuietly(fd: number | undefined): void {
  if (fd === undefined) return;
  try {
    closeSync(fd);
  } catch {
    // already closed
  }
}
