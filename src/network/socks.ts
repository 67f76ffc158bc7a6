/**
 * SOCKS5 side of the managed proxy (RFC 1928; network-proxy.md §4.4, §5 item 5): no-auth only, CONNECT, BIND → 07,
 * UDP ASSOCIATE with replies relayed back to the client.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import { netNotifyTransparent } from '../platform/netNotify.js';
import { type AdmissionRequest, admitAndRecord, intercepts } from './admission.js';
import { type Dialer, type TunnelOrigin, tunnelFor } from './dial.js';
import { canonicalIp, clientAddr, hostPort, normalizeHost } from './host.js';
import { listenLoopback } from './listen.js';
import type { Interceptor } from './mitm/interceptor.js';
import type { PolicyEngine } from './policy.js';
import type { Recorder } from './recorder.js';
import { blockedSocksReply } from './responses.js';
import { dialFailureReply, parseAddress, REP, reply } from './socksWire.js';
import { tunnel } from './tunnel.js';
import type { UpstreamProxies } from './upstream.js';

export interface SocksProxyDeps {
  policy: PolicyEngine;
  recorder: Recorder;
  dial: Dialer;
  idleTimeoutMs: number;
  udpEnabled: boolean;
  upstream: UpstreamProxies;
  /** TLS interception, when on (issue 34). */
  mitm?: Interceptor | undefined;
}

const MAX_HANDSHAKE_BYTES = 600;

export class SocksProxy {
  readonly server: net.Server;
  private readonly sockets = new Set<Duplex>();
  private readonly udpSockets = new Set<dgram.Socket>();
  private closed = false;
  private readonly origin: TunnelOrigin;

  constructor(private readonly deps: SocksProxyDeps) {
    this.server = net.createServer({ noDelay: true }, (socket) => this.onConnection(socket));
    const isClosed = () => this.closed;
    this.origin = {
      dial: deps.dial,
      upstream: deps.upstream,
      get closed() {
        return isClosed();
      },
      track: (s) => this.track(s),
    };
  }

  listen(): Promise<number> {
    return listenLoopback(this.server);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const done = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const s of this.sockets) s.destroy();
    for (const u of this.udpSockets) u.close();
    await done;
  }

  /**
   * Serves a connection handed over directly (a sandbox's in-namespace listener, managedNet.ts) as one accepted on
   * the proxy's port: no delay, no half-open.
   */
  accept(socket: net.Socket): void {
    socket.setNoDelay(true);
    socket.allowHalfOpen = false;
    this.onConnection(socket);
  }

  private track(s: Duplex): void {
    this.sockets.add(s);
    s.once('close', () => this.sockets.delete(s));
  }

  private onConnection(socket: net.Socket): void {
    this.track(socket);
    socket.setTimeout(this.deps.idleTimeoutMs, () => socket.destroy());
    socket.on('error', () => socket.destroy());
    let buf: Buffer = Buffer.alloc(0);
    let stage: 'greeting' | 'request' | 'busy' = 'greeting';
    const onData = (chunk: Buffer) => {
      buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
      if (buf.length > MAX_HANDSHAKE_BYTES) {
        socket.destroy();
        return;
      }
      if (stage === 'greeting') {
        if (buf[0] !== 5) {
          socket.resetAndDestroy();
          return;
        }
        if (buf.length < 2 || buf.length < 2 + buf[1]!) return;
        const methods = buf.subarray(2, 2 + buf[1]!);
        buf = buf.subarray(2 + buf[1]!);
        if (!methods.includes(0)) {
          socket.end(Buffer.from([5, 0xff]));
          stage = 'busy';
          return;
        }
        socket.write(Buffer.from([5, 0]));
        stage = 'request';
      }
      if (stage === 'request') {
        if (buf.length < 4) return;
        if (buf[0] !== 5) {
          socket.resetAndDestroy();
          return;
        }
        const addr = parseAddress(buf, 3);
        if (addr === null) return;
        const cmd = buf[1]!;
        const rest = buf.subarray(addr.end);
        stage = 'busy';
        socket.off('data', onData);
        socket.pause();
        if (addr.bad) {
          socket.end(reply(REP.addressTypeNotSupported));
          return;
        }
        if (cmd === 1) void this.onConnect(socket, addr.host, addr.port, rest).catch(() => socket.destroy());
        else if (cmd === 3 && this.deps.udpEnabled)
          void this.onUdpAssociate(socket).catch(() => socket.destroy());
        else socket.end(reply(REP.commandNotSupported));
      }
    };
    socket.on('data', onData);
  }

  /** Whether this connection is the connect supervisor's exchange for a command's plain TCP connect. */
  private isTransparent(socket: net.Socket): boolean {
    const listening = this.server.address();
    return (
      typeof listening === 'object' &&
      listening !== null &&
      netNotifyTransparent(socket.remoteAddress, socket.remotePort, listening.port)
    );
  }

  private async onConnect(socket: net.Socket, rawHost: string, port: number, rest: Buffer): Promise<void> {
    const norm = normalizeHost(rawHost);
    if (!norm.ok) {
      socket.end(reply(REP.generalFailure));
      return;
    }
    const r: AdmissionRequest = {
      protocol: 'socks5_tcp',
      host: norm.host,
      port,
      method: null,
      client: clientAddr(socket),
      ...(this.isTransparent(socket) ? { transparent: true as const } : {}),
    };
    const a = await admitAndRecord(this.deps, r);
    if (!a.allowed) {
      socket.end(blockedSocksReply());
      return;
    }
    const target = { host: a.host, port, admitted: a, client: r.client };
    if (intercepts(this.deps.policy, r)) {
      // Terminated here (issue 34), dialled per request inside; no place left: general failure.
      if (!this.deps.mitm?.reserve()) {
        socket.end(reply(REP.generalFailure));
        return;
      }
      socket.setTimeout(0);
      socket.write(reply(REP.succeeded, '0.0.0.0', 0));
      this.deps.mitm.intercept(socket, rest, target);
      return;
    }
    if (this.deps.mitm?.wantsHost(a.host)) {
      // A host with hooks or a brokered credential: success first (the client starts TLS after it), then a
      // ClientHello is intercepted and anything else goes through an opaque tunnel dialled now.
      socket.setTimeout(0);
      socket.write(reply(REP.succeeded, '0.0.0.0', 0));
      const first = await this.deps.mitm.interceptIfTls(socket, rest, target);
      if (first === null) return;
      let opaque: Duplex | null = null;
      try {
        opaque = await tunnelFor(this.origin, socket, { host: a.host, addresses: a.addresses, port });
      } catch {
        socket.destroy();
      }
      if (opaque) tunnel(socket, opaque, first, this.origin.track);
      return;
    }
    let upstream: Duplex | null;
    try {
      upstream = await tunnelFor(this.origin, socket, { host: a.host, addresses: a.addresses, port });
    } catch (e) {
      socket.end(reply(dialFailureReply((e as NodeJS.ErrnoException).code)));
      return;
    }
    if (!upstream) return;
    const local = upstream as Partial<net.Socket>;
    socket.setTimeout(0);
    socket.write(reply(REP.succeeded, local.localAddress ?? '0.0.0.0', local.localPort ?? 0));
    tunnel(socket, upstream, rest, this.origin.track);
  }

  private async onUdpAssociate(control: net.Socket): Promise<void> {
    const clientIp = canonicalIp((control.remoteAddress ?? '').replace(/^::ffff:/, '')) ?? '';
    const relay = dgram.createSocket('udp4');
    const out4 = dgram.createSocket('udp4');
    const out6 = dgram.createSocket({ type: 'udp6', ipv6Only: true });
    const all = [relay, out4, out6];
    for (const s of all) {
      this.udpSockets.add(s);
      s.on('error', () => {});
    }
    const closeAll = () => {
      for (const s of all) {
        if (this.udpSockets.delete(s)) {
          try {
            s.close();
          } catch {}
        }
      }
    };
    control.on('close', closeAll);
    await new Promise<void>((r) => relay.bind(0, '127.0.0.1', () => r()));
    await new Promise<void>((r) => out4.bind(0, () => r()));
    await new Promise<void>((r) => out6.bind(0, () => r()));
    if (control.destroyed) {
      closeAll();
      return;
    }
    control.setTimeout(0);
    let clientUdp: { address: string; port: number } | null = null;
    const targets = new Set<string>();
    const allowedCache = new Map<string, string>();
    const client = () => (clientUdp ? hostPort(clientUdp.address, clientUdp.port) : null);

    relay.on('message', (msg, rinfo) => {
      if ((canonicalIp(rinfo.address) ?? '') !== clientIp) return;
      if (msg.length < 4 || msg[0] !== 0 || msg[1] !== 0) return;
      if (msg[2] !== 0) return; // fragments are dropped
      const addr = parseAddress(msg, 3);
      if (addr === null || addr.bad) return;
      clientUdp = { address: rinfo.address, port: rinfo.port };
      const data = msg.subarray(addr.end);
      const norm = normalizeHost(addr.host);
      if (!norm.ok) return;
      const key = hostPort(norm.host, addr.port);
      const cached = allowedCache.get(key);
      if (cached !== undefined) {
        send(cached, addr.port, data);
        return;
      }
      const r: AdmissionRequest = {
        protocol: 'socks5_udp',
        host: norm.host,
        port: addr.port,
        method: null,
        client: client(),
      };
      // A refused datagram is dropped (and recorded); an allowed destination is remembered for the association.
      void admitAndRecord(this.deps, r)
        .then((a) => {
          const address = a.allowed ? a.addresses[0] : undefined;
          if (address === undefined) return;
          allowedCache.set(key, address);
          send(address, addr.port, data);
        })
        .catch(() => {});
    });

    const send = (address: string, port: number, data: Buffer) => {
      targets.add(hostPort(address, port));
      const sock = net.isIPv6(address) ? out6 : out4;
      if (port === 0 || !this.udpSockets.has(sock)) return;
      try {
        sock.send(data, port, address);
      } catch {
        // A datagram that cannot be sent is dropped, like any other UDP loss.
      }
    };

    const onReply = (msg: Buffer, rinfo: dgram.RemoteInfo) => {
      const from = canonicalIp(rinfo.address) ?? rinfo.address;
      if (!targets.has(hostPort(from, rinfo.port)) || clientUdp === null) return;
      const header = reply(REP.succeeded, from, rinfo.port);
      header[1] = 0; // RSV RSV FRAG ATYP …: the reply header starts 00 00 00
      header[0] = 0;
      if (this.udpSockets.has(relay))
        relay.send(Buffer.concat([header, msg]), clientUdp.port, clientUdp.address);
    };
    out4.on('message', onReply);
    out6.on('message', onReply);

    // The relay reports 0.0.0.0 like Codex; clients then send to the proxy's own address.
    control.write(reply(REP.succeeded, '0.0.0.0', relay.address().port));
    control.resume();
    control.on('data', () => {});
  }
}
