/**
 * SOCKS5 side of the managed proxy (RFC 1928; network-proxy.md §4.4, §5 item 5): no-auth only, CONNECT, BIND → 07,
 * UDP ASSOCIATE with replies relayed back to the client.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import { canonicalIp, hostPort, normalizeHost } from './host.js';
import { type Dialer, openTunnel } from './http.js';
import { listenLoopback } from './listen.js';
import type { PolicyEngine } from './policy.js';
import type { Recorder } from './recorder.js';
import { tunnel } from './tunnel.js';
import type { UpstreamProxies } from './upstream.js';

export interface SocksProxyDeps {
  policy: PolicyEngine;
  recorder: Recorder;
  dial: Dialer;
  idleTimeoutMs: number;
  udpEnabled: boolean;
  upstream: UpstreamProxies;
}

const MAX_HANDSHAKE_BYTES = 600;

function reply(rep: number, addr = '0.0.0.0', port = 0): Buffer {
  const ip = canonicalIp(addr) ?? '0.0.0.0';
  if (net.isIPv6(ip)) {
    const b = Buffer.alloc(22);
    b[0] = 5;
    b[1] = rep;
    b[3] = 4;
    ipv6Bytes(ip).copy(b, 4);
    b.writeUInt16BE(port, 20);
    return b;
  }
  const b = Buffer.alloc(10);
  b[0] = 5;
  b[1] = rep;
  b[3] = 1;
  ip.split('.').forEach((o, i) => {
    b[4 + i] = Number(o);
  });
  b.writeUInt16BE(port, 8);
  return b;
}

function ipv6Bytes(ip: string): Buffer {
  const b = Buffer.alloc(16);
  const halves = ip.replace(/%.*$/, '').split('::');
  const parse = (h: string) => (h === '' ? [] : h.split(':').map((g) => Number.parseInt(g, 16)));
  const a = parse(halves[0]!);
  const c = halves.length > 1 ? parse(halves[1]!) : [];
  const groups = [...a, ...new Array<number>(8 - a.length - c.length).fill(0), ...c];
  groups.forEach((g, i) => {
    b.writeUInt16BE(g, i * 2);
  });
  return b;
}

/** Parses ATYP + address + port at `off`; returns the raw host text, port and end offset, or null if incomplete. */
function parseAddress(
  buf: Buffer,
  off: number,
): { host: string; port: number; end: number; bad?: boolean } | null {
  if (buf.length < off + 1) return null;
  const atyp = buf[off]!;
  if (atyp === 1) {
    if (buf.length < off + 7) return null;
    const host = [...buf.subarray(off + 1, off + 5)].join('.');
    return { host, port: buf.readUInt16BE(off + 5), end: off + 7 };
  }
  if (atyp === 3) {
    if (buf.length < off + 2) return null;
    const len = buf[off + 1]!;
    if (buf.length < off + 2 + len + 2) return null;
    const host = buf.subarray(off + 2, off + 2 + len).toString('latin1');
    return { host, port: buf.readUInt16BE(off + 2 + len), end: off + 4 + len };
  }
  if (atyp === 4) {
    if (buf.length < off + 19) return null;
    const groups: string[] = [];
    for (let i = 0; i < 8; i++) groups.push(buf.readUInt16BE(off + 1 + i * 2).toString(16));
    return { host: `[${groups.join(':')}]`, port: buf.readUInt16BE(off + 17), end: off + 19 };
  }
  return { host: '', port: 0, end: off + 1, bad: true };
}

export class SocksProxy {
  readonly server: net.Server;
  private readonly sockets = new Set<Duplex>();
  private readonly udpSockets = new Set<dgram.Socket>();
  private closed = false;

  constructor(private readonly deps: SocksProxyDeps) {
    this.server = net.createServer({ noDelay: true }, (socket) => this.onConnection(socket));
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
          socket.end(reply(8));
          return;
        }
        if (cmd === 1) void this.onConnect(socket, addr.host, addr.port, rest).catch(() => socket.destroy());
        else if (cmd === 3 && this.deps.udpEnabled)
          void this.onUdpAssociate(socket).catch(() => socket.destroy());
        else socket.end(reply(7));
      }
    };
    socket.on('data', onData);
  }

  private async onConnect(socket: net.Socket, rawHost: string, port: number, rest: Buffer): Promise<void> {
    const { policy, recorder } = this.deps;
    const norm = normalizeHost(rawHost);
    if (!norm.ok) {
      socket.end(reply(1));
      return;
    }
    const client = hostPort((socket.remoteAddress ?? '').replace(/^::ffff:/, ''), socket.remotePort ?? 0);
    const base = { protocol: 'socks5_tcp' as const, host: norm.host, port, method: null, client };
    if (policy.mode === 'limited') {
      // [seed]: every SOCKS TCP connect is blocked in limited mode, before the host policy (§3.5).
      recorder.blocked({
        ...base,
        scope: 'non_domain',
        reason: 'method_not_allowed',
        source: 'mode_guard',
        decision: 'deny',
      });
      socket.end(reply(2));
      return;
    }
    const decision = await policy.evaluate(norm.host, port, { protocol: 'socks5_tcp', client, method: null });
    if (!decision.allowed) {
      recorder.blocked({
        ...base,
        scope: 'domain',
        reason: decision.reason,
        source: decision.source,
        decision: decision.decision,
      });
      socket.end(reply(2));
      return;
    }
    recorder.allowed(base, decision);
    let upstream: Duplex;
    try {
      upstream = await openTunnel(this.deps, { host: decision.host, addresses: decision.addresses, port });
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      socket.end(
        reply(code === 'ECONNREFUSED' ? 5 : code === 'EHOSTUNREACH' || code === 'ENETUNREACH' ? 4 : 1),
      );
      return;
    }
    if (socket.destroyed || this.closed) {
      upstream.destroy();
      socket.destroy();
      return;
    }
    this.track(upstream);
    const local = upstream as Partial<net.Socket>;
    socket.setTimeout(0);
    socket.write(reply(0, local.localAddress ?? '0.0.0.0', local.localPort ?? 0));
    tunnel(socket, upstream, rest);
  }

  private async onUdpAssociate(control: net.Socket): Promise<void> {
    const { policy, recorder } = this.deps;
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
      const base = {
        protocol: 'socks5_udp' as const,
        host: norm.host,
        port: addr.port,
        method: null,
        client: client(),
      };
      if (policy.mode === 'limited') {
        recorder.blocked({
          ...base,
          scope: 'non_domain',
          reason: 'method_not_allowed',
          source: 'mode_guard',
          decision: 'deny',
        });
        return;
      }
      void policy
        .evaluate(norm.host, addr.port, { protocol: 'socks5_udp', client: client(), method: null })
        .then((d) => {
          if (!d.allowed) {
            recorder.blocked({
              ...base,
              scope: 'domain',
              reason: d.reason,
              source: d.source,
              decision: d.decision,
            });
            return;
          }
          recorder.allowed(base, d);
          const address = d.addresses[0];
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
      const header = reply(0, from, rinfo.port);
      header[1] = 0; // RSV RSV FRAG ATYP …: the reply header starts 00 00 00
      header[0] = 0;
      if (this.udpSockets.has(relay))
        relay.send(Buffer.concat([header, msg]), clientUdp.port, clientUdp.address);
    };
    out4.on('message', onReply);
    out6.on('message', onReply);

    // The relay reports 0.0.0.0 like Codex; clients then send to the proxy's own address.
    control.write(reply(0, '0.0.0.0', relay.address().port));
    control.resume();
    control.on('data', () => {});
  }
}
