/**
 * Host normalisation and IP-literal canonicalisation for the managed network proxy (network-proxy.md §3.1, §3.4, §5).
 *
 * Every host the proxy sees (request targets, SOCKS addresses, resolver answers) and every IP-literal pattern goes
 * through `canonicalHost`, so `127.1`, `2130706433`, `0x7f.0.0.1`, `[::ffff:7f00:1]` and `127.0.0.1` are one string.
 */
import { isIPv4, isIPv6 } from 'node:net';

/** Parses one WHATWG-style IPv4 part: decimal, `0x` hex or leading-zero octal. */
function parseIpv4Part(part: string): number | null {
  if (part === '') return null;
  let radix = 10;
  let digits = part;
  if (/^0x/i.test(part)) {
    radix = 16;
    digits = part.slice(2);
    if (digits === '') return 0;
  } else if (part.length > 1 && part.startsWith('0')) {
    radix = 8;
    digits = part.slice(1);
  }
  const re = radix === 16 ? /^[0-9a-f]+$/i : radix === 8 ? /^[0-7]+$/ : /^[0-9]+$/;
  if (!re.test(digits)) return null;
  if (digits.length > 12) return null;
  return Number.parseInt(digits, radix);
}

/**
 * Parses the IPv4 shorthands browsers and getaddrinfo accept (`127.1`, `2130706433`, `0x7f.0.0.1`, `0177.0.0.1`)
 * into a dotted quad, or null when the text is not such a literal.
 */
export function parseIpv4Literal(host: string): string | null {
  const text = host.endsWith('.') ? host.slice(0, -1) : host;
  if (!/^[0-9a-fx.]+$/i.test(text)) return null;
  const parts = text.split('.');
  if (parts.length === 0 || parts.length > 4) return null;
  const nums: number[] = [];
  for (const p of parts) {
    const n = parseIpv4Part(p);
    if (n === null) return null;
    nums.push(n);
  }
  const last = nums.pop()!;
  for (const n of nums) if (n > 255) return null;
  if (last >= 256 ** (4 - nums.length)) return null;
  let value = last;
  for (let i = 0; i < nums.length; i++) value += nums[i]! * 256 ** (3 - i);
  return [value >>> 24, (value >>> 16) & 255, (value >>> 8) & 255, value & 255].join('.');
}

/** Expands an IPv6 literal (no brackets, no scope) into 8 16-bit groups, or null. */
export function ipv6Groups(text: string): number[] | null {
  if (!isIPv6(text)) return null;
  let s = text.toLowerCase();
  const lastColon = s.lastIndexOf(':');
  const tail = s.slice(lastColon + 1);
  if (tail.includes('.')) {
    const o = tail.split('.').map(Number);
    s = `${s.slice(0, lastColon + 1)}${((o[0]! << 8) | o[1]!).toString(16)}:${((o[2]! << 8) | o[3]!).toString(16)}`;
  }
  const halves = s.split('::');
  const parse = (h: string) => (h === '' ? [] : h.split(':').map((g) => Number.parseInt(g, 16)));
  let groups: number[];
  if (halves.length === 2) {
    const a = parse(halves[0]!);
    const b = parse(halves[1]!);
    const fill = 8 - a.length - b.length;
    if (fill < 0) return null;
    groups = [...a, ...new Array<number>(fill).fill(0), ...b];
  } else {
    groups = parse(s);
  }
  return groups.length === 8 && groups.every((g) => Number.isInteger(g) && g >= 0 && g <= 0xffff)
    ? groups
    : null;
}

function groupsToIpv4(g: number[]): string {
  return [g[6]! >> 8, g[6]! & 255, g[7]! >> 8, g[7]! & 255].join('.');
}

/** RFC 5952 text of 8 groups: lowercase, longest run (≥ 2) of zero groups compressed. */
function compressIpv6(g: number[]): string {
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (g[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = g.map((x) => x.toString(16));
  if (bestStart < 0) return hex.join(':');
  const left = hex.slice(0, bestStart).join(':');
  const right = hex.slice(bestStart + bestLen).join(':');
  return `${left}::${right}`;
}

/**
 * Canonical IP text: dotted quad for IPv4 (and IPv4-mapped / IPv4-compatible IPv6), compressed lowercase IPv6
 * otherwise. A `%scope` suffix is kept on IPv6 (after canonicalising the address part). Null if not an IP literal.
 */
export function canonicalIp(input: string): string | null {
  let text = input;
  if (text.startsWith('[') && text.endsWith(']')) text = text.slice(1, -1);
  const v4 = isIPv4(text) ? text : parseIpv4Literal(text);
  if (v4) return v4;
  let scope = '';
  const pct = text.indexOf('%');
  if (pct >= 0) {
    scope = text.slice(pct).replace(/^%25/, '%');
    text = text.slice(0, pct);
  }
  const g = ipv6Groups(text);
  if (!g) return null;
  const first5Zero = g[0] === 0 && g[1] === 0 && g[2] === 0 && g[3] === 0 && g[4] === 0;
  if (first5Zero && g[5] === 0xffff) return groupsToIpv4(g);
  // IPv4-compatible (::a.b.c.d), except :: and ::1 which are IPv6's own unspecified and loopback addresses.
  if (first5Zero && g[5] === 0 && (g[6] !== 0 || (g[7] ?? 0) > 1)) return groupsToIpv4(g);
  return compressIpv6(g) + scope;
}

/** Characters allowed in a DNS-style host name on the wire (after lowercasing). */
const NAME_RE = /^[a-z0-9_-]+(\.[a-z0-9_-]+)*$/;

export type HostParse = { ok: true; host: string; isIp: boolean } | { ok: false };

/**
 * §3.1 normalisation plus our canonicalisation: trim; take the text inside brackets; drop a `:port` when exactly one
 * `:` is present; lowercase; strip trailing dots; canonicalise IP literals. Rejects control characters, spaces,
 * non-ASCII and other characters that cannot appear in a host (`{ok:false}` → 400 "invalid host").
 * An empty host is returned as `{ok:true, host:''}` (the policy blocks it as `not_allowed`).
 */
export function normalizeHost(raw: string): HostParse {
  let h = raw.trim();
  if (h.startsWith('[')) {
    const end = h.indexOf(']');
    h = end < 0 ? h.slice(1) : h.slice(1, end);
  } else {
    const first = h.indexOf(':');
    if (first >= 0 && first === h.lastIndexOf(':')) h = h.slice(0, first);
  }
  h = h.toLowerCase();
  while (h.endsWith('.')) h = h.slice(0, -1);
  if (h === '') return { ok: true, host: '', isIp: false };
  const ip = canonicalIp(h);
  if (ip !== null) return { ok: true, host: ip, isIp: true };
  if (!NAME_RE.test(h)) return { ok: false };
  // A numeric last label that did not parse as IPv4 (`256.1`, `1.2.3.4.5`) is not a valid host either.
  if (/(^|\.)(0x[0-9a-f]*|[0-9]+)$/.test(h)) return { ok: false };
  return { ok: true, host: h, isIp: false };
}

function ipv4ToInt(ip: string): number {
  const o = ip.split('.').map(Number);
  return ((o[0]! << 24) >>> 0) + (o[1]! << 16) + (o[2]! << 8) + o[3]!;
}

const V4_NON_PUBLIC: [string, number][] = [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
];
const V4_RANGES = V4_NON_PUBLIC.map(([base, bits]) => {
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
  return { net: (ipv4ToInt(base) & mask) >>> 0, mask };
});

/**
 * §3.4 `is_non_public_ip`: loopback, private, link-local, unspecified, multicast, broadcast, 0/8, CGNAT, the
 * documentation and benchmark ranges, 240/4; IPv6 `::1`, `::`, multicast, ULA and link-local. IPv4-mapped and
 * compatible IPv6 are judged by their IPv4 part. Anything that is not an IP literal returns false.
 */
export function isNonPublicIp(input: string): boolean {
  const ip = canonicalIp(input);
  if (ip === null) return false;
  if (isIPv4(ip)) {
    const n = ipv4ToInt(ip);
    return V4_RANGES.some((r) => (n & r.mask) >>> 0 === r.net);
  }
  const g = ipv6Groups(ip.replace(/%.*$/, ''));
  if (!g) return true;
  if (g.every((x) => x === 0)) return true; // ::
  if (g.slice(0, 7).every((x) => x === 0) && g[7] === 1) return true; // ::1
  const top = g[0]!;
  if ((top & 0xff00) === 0xff00) return true; // multicast ff00::/8
  if ((top & 0xfe00) === 0xfc00) return true; // ULA fc00::/7
  if ((top & 0xffc0) === 0xfe80) return true; // link-local fe80::/10
  return false;
}

/** Formats host:port for logs and `client` fields (`[v6]:port`). */
export function hostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/** The `client` field of events: `ip:port` of a connected socket (IPv4-mapped IPv6 as IPv4), or null. */
export function clientAddr(socket: {
  remoteAddress?: string | undefined;
  remotePort?: number | undefined;
}): string | null {
  if (!socket.remoteAddress || socket.remotePort === undefined) return null;
  return hostPort(socket.remoteAddress.replace(/^::ffff:/, ''), socket.remotePort);
}
