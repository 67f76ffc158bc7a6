/** SOCKS5 wire encoding (RFC 1928): reply codes, the reply message, and the ATYP + address + port field. */
import net from 'node:net';
import { canonicalIp } from './host.js';

/** Reply codes (RFC 1928 §6) the proxy sends. */
export const REP = {
  succeeded: 0x00,
  generalFailure: 0x01,
  notAllowed: 0x02,
  hostUnreachable: 0x04,
  connectionRefused: 0x05,
  commandNotSupported: 0x07,
  addressTypeNotSupported: 0x08,
} as const;

/** The reply to a CONNECT whose dial failed: refused, unreachable, or a general failure. */
export function dialFailureReply(code: string | undefined): number {
  if (code === 'ECONNREFUSED') return REP.connectionRefused;
  if (code === 'EHOSTUNREACH' || code === 'ENETUNREACH') return REP.hostUnreachable;
  return REP.generalFailure;
}

/** `VER REP RSV ATYP BND.ADDR BND.PORT`. */
export function reply(rep: number, addr = '0.0.0.0', port = 0): Buffer {
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
export function parseAddress(
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
