/**
 * One managed proxy per process (network-proxy.md §1, §4.1): HTTP and (optionally) SOCKS5 listeners on ephemeral
 * 127.0.0.1 ports, the policy, the blocked ring and events, and the child's proxy environment.
 */
import net from 'node:net';
import type { Duplex } from 'node:stream';
import type { BlockedSnapshot } from '../protocol/network.js';
import type { Dialer } from './dial.js';
import { buildProxyEnv } from './env.js';
import type { NetworkEvents } from './events.js';
import { HttpProxy } from './http.js';
import type { ManagedNetworkSpec } from './managedNetwork.js';
import { CredentialBroker } from './mitm/broker.js';
import { MitmHooks } from './mitm/hooks.js';
import { Interceptor } from './mitm/interceptor.js';
import { requestRewriter, wantsInterception } from './mitm/rewriter.js';
import { type MitmTrust, mitmTrust } from './mitm/trust.js';
import { type Decider, PolicyEngine, type Resolver } from './policy.js';
import { Recorder } from './recorder.js';
import { SocksProxy } from './socks.js';
import { proxyUpstreams, type UpstreamSettings } from './upstream.js';

export const DEFAULT_IDLE_TIMEOUT_MS = 30_000;

export interface StartProxyOptions {
  processId: string;
  sessionId?: string;
  resolver?: Resolver;
  dialer?: Dialer;
  decider?: Decider;
  events?: NetworkEvents;
  log?: (line: string) => void;
  idleTimeoutMs?: number;
  resolveTimeoutMs?: number;
  /**
   * Where `allow_upstream_proxy` reads HTTP_PROXY / HTTPS_PROXY / ALL_PROXY from. Default: this process's
   * environment.
   */
  upstreamEnv?: Record<string, string | undefined>;
  /**
   * The server's upstream settings (`--tcp-upstream-proxy`, `--proxy-private-ips-via-upstream`, its environment);
   * when given, `upstreamEnv` is not read.
   */
  upstream?: UpstreamSettings;
  /** The interception trust (CA, bundle, upstream roots); default: the server process's own, made on first use. */
  mitmTrust?: MitmTrust;
  /** Interception's timeouts (tests): the client's handshake (default 10 s), the ClientHello peek (default 1 s). */
  mitmTimeouts?: { handshakeMs?: number; peekMs?: number };
  /** Where `mitm_hooks` read secrets and the operator's lists of them. Default: this process's environment. */
  secretEnv?: Record<string, string | undefined>;
}

/**
 * One listener of the managed proxy as a sandbox reaches it: its loopback port, and `accept`, which serves a
 * connection handed to it directly (one accepted inside a sandbox's network namespace) exactly as one accepted on
 * the port.
 */
export interface ProxyListener {
  readonly port: number;
  accept(socket: net.Socket): void;
}

/**
 * What a sandbox is handed of its command's managed proxy (a structured value: nothing is parsed back from the
 * environment): the listeners, and the proxy variables for the ports the child is told to use.
 */
export interface ProxyRoute {
  readonly http: ProxyListener;
  readonly socks?: ProxyListener;
  /** The 33 variables of §4.6 pointing at these ports (the proxy's own, or forwarders in a network namespace). */
  env(ports: { http: number; socks?: number | undefined }): Record<string, string>;
}

export interface ManagedProxy {
  readonly httpPort: number;
  readonly socksPort?: number;
  /** The 33 variables of §4.6 (and the CA variables when it may intercept), written over the child's environment. */
  readonly env: Record<string, string>;
  /** With the credential broker: replaces the brokered tokens of a child's environment by dummies, in place. */
  readonly brokerEnv?: (env: Record<string, string>) => void;
  /** The listeners and the environment for a sandbox that reaches the proxy through its own forwarders. */
  readonly route: ProxyRoute;
  readonly spec: ManagedNetworkSpec;
  blocked(): BlockedSnapshot;
  drainBlocked(): BlockedSnapshot;
  /** Installs (or removes) the async decider consulted for `not_allowed` (§3.6). */
  setDecider(decider: Decider | undefined): void;
  close(): Promise<void>;
}

export const CONNECT_TIMEOUT_MS = 30_000;

/** Dials exactly the given (already checked) address, giving up after 30 s without an answer. */
export const defaultDialer: Dialer = ({ host, port }) =>
  new Promise<Duplex>((resolve, reject) => {
    const s = net.connect({ host, port, noDelay: true });
    const timer = setTimeout(() => {
      s.destroy();
      reject(Object.assign(new Error(`connect ${host}:${port} timed out`), { code: 'ETIMEDOUT' }));
    }, CONNECT_TIMEOUT_MS);
    const onError = (e: Error) => {
      clearTimeout(timer);
      reject(e);
    };
    s.once('error', onError);
    s.once('connect', () => {
      clearTimeout(timer);
      s.off('error', onError);
      resolve(s);
    });
  });

const defaultLog = (line: string) => {
  process.stderr.write(`${line}\n`);
};

export async function startManagedProxy(
  spec: ManagedNetworkSpec,
  opts: StartProxyOptions,
): Promise<ManagedProxy> {
  const settings = spec.settings;
  const idleTimeoutMs = opts.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
  const policy = new PolicyEngine(settings, {
    ...(opts.resolver ? { resolver: opts.resolver } : {}),
    ...(opts.decider ? { decider: opts.decider } : {}),
    ...(opts.resolveTimeoutMs !== undefined ? { resolveTimeoutMs: opts.resolveTimeoutMs } : {}),
  });
  const recorder = new Recorder({
    processId: opts.processId,
    sessionId: opts.sessionId,
    auditMetadata: spec.auditMetadata,
    events: opts.events,
    log: opts.log ?? defaultLog,
    mode: settings.mode,
  });
  const dial = opts.dialer ?? defaultDialer;
  const upstreams = proxyUpstreams(
    opts.upstream ?? { tcp: null, privateIps: false, env: opts.upstreamEnv ?? process.env },
    settings.allow_upstream_proxy,
  );
  const upstream = upstreams.http;
  // TLS interception (issue 34): only when the config can use it; the CA is made on the first such proxy. Hook
  // secrets are read now, from the server's own environment and files.
  const hooks =
    settings.mitm_hooks.length > 0
      ? new MitmHooks(settings.mitm_hooks, { env: opts.secretEnv ?? process.env })
      : undefined;
  const broker = settings.credential_broker
    ? new CredentialBroker({ plaintext: settings.dangerously_allow_plaintext_credential_injection })
    : undefined;
  const trust = settings.mitm || hooks || broker ? (opts.mitmTrust ?? mitmTrust()) : undefined;
  const rewrite = requestRewriter(hooks, broker);
  const mitm = trust
    ? new Interceptor({
        trust,
        policy,
        recorder,
        dial,
        upstream,
        idleTimeoutMs,
        ...(rewrite ? { rewrite } : {}),
        wantsHost: (host) => wantsInterception(hooks, broker, host),
        ...(opts.mitmTimeouts?.handshakeMs !== undefined
          ? { handshakeTimeoutMs: opts.mitmTimeouts.handshakeMs }
          : {}),
        ...(opts.mitmTimeouts?.peekMs !== undefined ? { peekTimeoutMs: opts.mitmTimeouts.peekMs } : {}),
      })
    : undefined;
  const http = new HttpProxy({ policy, recorder, dial, idleTimeoutMs, upstream, mitm, broker });
  const socks = settings.enable_socks5
    ? new SocksProxy({
        policy,
        recorder,
        dial,
        idleTimeoutMs,
        udpEnabled: settings.enable_socks5_udp,
        upstream: upstreams.socks,
        mitm,
      })
    : undefined;
  let httpPort: number;
  let socksPort: number | undefined;
  try {
    httpPort = await http.listen();
    socksPort = socks ? await socks.listen() : undefined;
  } catch (e) {
    await http.close();
    await socks?.close();
    throw e;
  }
  // Checked (and rewritten if changed) once per start: a stat, ~15 us.
  const caBundle = trust?.bundlePath();
  const envFor = (ports: { http: number; socks?: number | undefined }) =>
    buildProxyEnv({
      httpPort: ports.http,
      socksPort: ports.socks,
      allowLocalBinding: settings.allow_local_binding,
      caBundle,
    });
  const route: ProxyRoute = {
    http: { port: httpPort, accept: (s) => http.accept(s) },
    ...(socks && socksPort !== undefined
      ? { socks: { port: socksPort, accept: (s: net.Socket) => socks.accept(s) } }
      : {}),
    env: envFor,
  };
  let closing: Promise<void> | null = null;
  return {
    httpPort,
    ...(socksPort !== undefined ? { socksPort } : {}),
    env: envFor({ http: httpPort, socks: socksPort }),
    ...(broker ? { brokerEnv: (env: Record<string, string>) => broker.virtualize(env) } : {}),
    route,
    spec,
    blocked: () => recorder.ring.snapshot(),
    drainBlocked: () => recorder.ring.drain(),
    setDecider: (d) => {
      policy.decider = d;
    },
    close: () => {
      mitm?.close();
      closing ??= Promise.all([http.close(), socks?.close()]).then(() => undefined);
      return closing;
    },
  };
}
