/**
 * The few DER (X.690) encodings an X.509 certificate needs, written by hand: a certificate is a handful of nested
 * SEQUENCEs, and encoding them directly then signing with Node's `crypto.sign` mints a leaf in well under a
 * millisecond (`npm run bench -- mitm`), with no dependency.
 */

function lengthBytes(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const bytes: number[] = [];
  for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

/** One tag-length-value. */
export function tlv(tag: number, ...content: Buffer[]): Buffer {
  const body = content.length === 1 ? content[0]! : Buffer.concat(content);
  return Buffer.concat([Buffer.from([tag]), lengthBytes(body.length), body]);
}

export const seq = (...items: Buffer[]): Buffer => tlv(0x30, ...items);
export const set = (...items: Buffer[]): Buffer => tlv(0x31, ...items);
export const octets = (b: Buffer): Buffer => tlv(0x04, b);
export const bool = (v: boolean): Buffer => tlv(0x01, Buffer.from([v ? 0xff : 0]));
export const utf8 = (s: string): Buffer => tlv(0x0c, Buffer.from(s, 'utf8'));
/** `[n] EXPLICIT` (constructed, context-specific). */
export const explicit = (n: number, inner: Buffer): Buffer => tlv(0xa0 | n, inner);
/** `[n] IMPLICIT` of a primitive (context-specific). */
export const implicit = (n: number, content: Buffer): Buffer => tlv(0x80 | n, content);

/** A non-negative INTEGER from its big-endian magnitude (leading zeros dropped, a 0 prepended when the top bit is set). */
export function uint(magnitude: Buffer): Buffer {
  let i = 0;
  while (i < magnitude.length - 1 && magnitude[i] === 0) i++;
  let b = magnitude.subarray(i);
  if (b.length === 0) b = Buffer.from([0]);
  if (b[0]! & 0x80) b = Buffer.concat([Buffer.from([0]), b]);
  return tlv(0x02, b);
}

export const smallInt = (n: number): Buffer => uint(Buffer.from([n]));

/** BIT STRING with `unused` trailing bits in the last byte. */
export const bits = (b: Buffer, unused = 0): Buffer => tlv(0x03, Buffer.from([unused]), b);

/** An OBJECT IDENTIFIER from its dotted form. */
export function oid(dotted: string): Buffer {
  const parts = dotted.split('.').map(Number);
  const out: number[] = [40 * parts[0]! + parts[1]!];
  for (const p of parts.slice(2)) {
    const chunk: number[] = [p & 0x7f];
    for (let v = Math.floor(p / 128); v > 0; v = Math.floor(v / 128)) chunk.unshift(0x80 | (v & 0x7f));
    out.push(...chunk);
  }
  return tlv(0x06, Buffer.from(out));
}

/** A certificate time: UTCTime up to 2049, GeneralizedTime after (RFC 5280 §4.1.2.5), seconds precision, Z. */
export function time(d: Date): Buffer {
  const iso = d.toISOString(); // YYYY-MM-DDTHH:MM:SS.sssZ
  const digits = iso.slice(0, 19).replace(/[-:T]/g, '');
  return d.getUTCFullYear() < 2050
    ? tlv(0x17, Buffer.from(`${digits.slice(2)}Z`, 'latin1'))
    : tlv(0x18, Buffer.from(`${digits}Z`, 'latin1'));
}
