import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, writeSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { tunnel } from '../../network/tunnel.js';
import { listenInNetns as nativeListenInNetns } from '../../platform/netns.js';
import { SandboxSetupError } from '../errors.js';

/**
 * Managed network inside `bwrap --unshare-net` (sandbox.md §8.6): a host Unix-socket bridge to each loopback proxy
 * endpoint found in the command's proxy variables, and a forwarder started in the sandbox's network namespace with
 * `nsenter` that listens on 127.0.0.1:<port> there and pipes to the bridge. The command is held by bwrap's
 * `--block-fd` until the forwarder is ready.
 */

/** Proxy variables read from the command env, case-insensitively (as Codex's proxy routing). */
export const PROXY_ENV_KEYS = [
  'HTTP_PROXY',
  'HTTPS_PROXY',
  'ALL_PROXY',
  'FTP_PROXY',
  'WS_PROXY',
  'WSS_PROXY',
  'YARN_HTTP_PROXY',
  'YARN_HTTPS_PROXY',
  'NPM_CONFIG_HTTP_PROXY',
  'NPM_CONFIG_HTTPS_PROXY',
  'NPM_CONFIG_PROXY',
  'BUNDLE_HTTP_PROXY',
  'BUNDLE_HTTPS_PROXY',
  'PIP_PROXY',
  'DOCKER_HTTP_PROXY',
  'DOCKER_HTTPS_PROXY',
];
/** Keys that tools read in either case: both spellings are set (curl ignores HTTP_PROXY for http:// URLs). */
const BOTH_CASES = ['HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY', 'FTP_PROXY', 'WS_PROXY', 'WSS_PROXY'];

/** First in-namespace forwarder port; endpoint i listens on FORWARD_BASE_PORT + i. */
export const FORWARD_BASE_PORT = 3128;

export interface ProxyEndpoint {
  host: string;
  port: number;
}

export interface ManagedRoutes {
  endpoints: ProxyEndpoint[];
  /** The command env with every loopback proxy variable pointing at the in-namespace forwarder. */
  env: Record<string, string>;
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
 * Finds the loopback proxy endpoints in `env` and rewrites the variables to the in-namespace forwarders (scheme,
 * credentials and path kept); with `forward` false (the Landlock backend: the sandbox shares the host's loopback) they
 * keep pointing at the proxy. Either way every URL variable is set in both cases (curl reads only http_proxy for
 * http:// URLs). Fails closed when there are none.
 */
export function planManagedRoutes(env: Record<string, string>, forward = true): ManagedRoutes {
  const keys = Object.keys(env).filter((k) => PROXY_ENV_KEYS.includes(k.toUpperCase()));
  if (keys.length === 0 || keys.every((k) => !env[k]?.trim())) {
    throw new SandboxSetupError(
      'managed proxy mode requires proxy environment variables (HTTP_PROXY, HTTPS_PROXY or ALL_PROXY pointing at a loopback proxy); refusing to run with open network',
    );
  }
  const endpoints: ProxyEndpoint[] = [];
  const out = { ...env };
  const rewritten = new Map<string, string>();
  for (const k of keys.sort()) {
    const parsed = parseProxy(env[k] ?? '');
    if (!parsed) continue;
    let i = endpoints.findIndex((e) => e.host === parsed.endpoint.host && e.port === parsed.endpoint.port);
    if (i < 0) i = endpoints.push(parsed.endpoint) - 1;
    const u = parsed.url;
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
  for (const k of BOTH_CASES) {
    const v = rewritten.get(k);
    if (v === undefined) continue;
    out[k] = v;
    out[k.toLowerCase()] = v;
  }
  return { endpoints, env: out };
}

/** The forwarder run inside the sandbox's netns: argv = [sock0, port0, sock1, port1, …]; prints READY. */
export const FORWARDER_SOURCE = `
const net = require('net');
const a = process.argv.slice(1);
let pending = a.length / 2;
for (let i = 0; i < a.length; i += 2) {
  const sock = a[i], port = Number(a[i + 1]);
  // allowHalfOpen: a FIN from one side ends the other side's output and nothing more (no cut-off replies).
  const srv = net.createServer({ allowHalfOpen: true }, (c) => {
    const u = net.connect({ path: sock, allowHalfOpen: true });
    const done = () => { c.destroy(); u.destroy(); };
    c.on('error', done); u.on('error', done); c.on('close', done); u.on('close', done);
    c.pipe(u); u.pipe(c);
  });
  const listen = (n) => {
    srv.once('error', (e) => {
      if (e.code === 'EADDRNOTAVAIL' && n < 200) setTimeout(() => listen(n + 1), 5);
      else { process.stderr.write('forwarder: ' + e.message + '\\n'); process.exit(1); }
    });
    srv.listen(port, '127.0.0.1', () => { if (--pending === 0) process.stdout.write('READY\\n'); });
  };
  listen(0);
}
process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();
`;

/**
 * Connects an accepted connection to a proxy endpoint and tunnels it (tunnel.ts: half-closes forwarded, the bytes
 * moved by splice once the upstream socket is connected; until then Node buffers what the sandbox sends).
 */
function forwardTo(c: net.Socket, ep: ProxyEndpoint, conns: Set<net.Socket>): void {
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
    tunnel(c, up);
  });
}

/**
 * Listens on 127.0.0.1:FORWARD_BASE_PORT + i inside the network namespace of `pid` (the sockets are created there by
 * the native addon, netns.c) and forwards each connection to endpoint i from this process: no forwarder process and
 * no bridge. Null without the addon; throws when the namespace cannot be entered (the caller falls back to the
 * forwarder).
 */
export function listenInSandboxNetns(pid: number, endpoints: ProxyEndpoint[]): { close(): void } | null {
  if (!nativeListenInNetns) return null;
  const fds = nativeListenInNetns(
    pid,
    endpoints.map((_, i) => FORWARD_BASE_PORT + i),
  );
  const servers: net.Server[] = [];
  const conns = new Set<net.Socket>();
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

/** Host side of the bridge: one UDS listener per endpoint, each forwarding to the proxy over loopback TCP. */
export async function startHostBridges(
  dir: string,
  endpoints: ProxyEndpoint[],
): Promise<{ sockets: string[]; close(): void }> {
  const servers: net.Server[] = [];
  const conns = new Set<net.Socket>();
  const sockets: string[] = [];
  try {
    for (const [i, ep] of endpoints.entries()) {
      const sock = join(dir, `proxy-route-${i}.sock`);
      const srv = net.createServer({ allowHalfOpen: true }, (c) => forwardTo(c, ep, conns));
      await new Promise<void>((resolve, reject) => {
        srv.once('error', reject);
        srv.listen(sock, () => resolve());
      });
      servers.push(srv);
      sockets.push(sock);
    }
  } catch (e) {
    for (const s of servers) s.close();
    throw new SandboxSetupError(`managed network: cannot create the proxy bridge: ${(e as Error).message}`);
  }
  return {
    sockets,
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

/** Starts the forwarder in the netns of `pid` and resolves once it is listening. */
export function startForwarder(
  pid: number,
  routes: { sock: string; port: number }[],
  nsenter = '/usr/bin/nsenter',
): Promise<ChildProcess> {
  const env: Record<string, string> = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
  if (process.versions.electron) env.ELECTRON_RUN_AS_NODE = '1';
  const args = [
    '--target',
    String(pid),
    '--user',
    '--net',
    '--preserve-credentials',
    '--',
    process.execPath,
    '-e',
    FORWARDER_SOURCE,
    ...routes.flatMap((r) => [r.sock, String(r.port)]),
  ];
  const child = spawn(nsenter, args, { stdio: ['pipe', 'pipe', 'pipe'], env });
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    const fail = (why: string) => {
      child.kill('SIGKILL');
      reject(new SandboxSetupError(`managed network: the in-sandbox forwarder failed: ${why}`));
    };
    child.stdout!.setEncoding('utf8');
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (d: string) => {
      err += d;
    });
    child.stdout!.on('data', (d: string) => {
      out += d;
      if (out.includes('READY\n')) {
        child.stdout!.removeAllListeners('data');
        child.stdout!.resume();
        resolve(child);
      }
    });
    child.on('error', (e) => fail(e.message));
    child.on('exit', (code, sig) => {
      if (!out.includes('READY\n')) fail(err.trim() || `exit ${code ?? sig}`);
    });
  });
}

/** Writes the release byte to bwrap's `--block-fd` (the write end of its pipe, held by us). */
export function release(blockFd: number): void {
  writeSync(blockFd, Buffer.from('1'));
}

export function closeQuietly(fd: number | undefined): void {
  if (fd === undefined) return;
  try {
    closeSync(fd);
  } catch {
    // already closed
  }
}
