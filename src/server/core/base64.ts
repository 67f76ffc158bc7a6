import { invalidParams } from '../../protocol/errors.js';

const VALID = new Uint8Array(256);
/** The 6-bit value of each alphabet symbol. */
const SEXTET = new Uint8Array(256);
for (const [i, c] of [...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'].entries()) {
  VALID[c.charCodeAt(0)] = 1;
  SEXTET[c.charCodeAt(0)] = i;
}

/**
 * Strict standard-alphabet, padded base64 (Node's decoder is lenient). Errors use the Rust base64 crate's texts,
 * e.g. `Invalid symbol 33, offset 0.`
 */
export function decodeBase64Strict(s: string): Buffer {
  let end = s.length;
  let pad = 0;
  while (end > 0 && s.charCodeAt(end - 1) === 61 && pad < 2) {
    end--;
    pad++;
  }
  for (let i = 0; i < end; i++) {
    const c = s.charCodeAt(i);
    if (c > 127 || VALID[c] === 0) {
      // The wire text is UTF-8: report the first byte of the offending character at its byte offset, as Rust does.
      const offset = Buffer.byteLength(s.slice(0, i), 'utf8');
      throw invalidParams(
        `Invalid symbol ${c > 127 ? Buffer.from(s.slice(i, i + 2), 'utf8')[0] : c}, offset ${offset}.`,
      );
    }
  }
  if (s.length % 4 !== 0) {
    if (pad > 0) throw invalidParams('Invalid padding');
    throw invalidParams(`Invalid input length`);
  }
  // Canonical encodings only: the bits the last symbol carries beyond the data must be zero ("aGk=", not "aGl=").
  const unused = pad === 2 ? 0x0f : pad === 1 ? 0x03 : 0;
  if (unused !== 0 && (SEXTET[s.charCodeAt(end - 1)]! & unused) !== 0) {
    throw invalidParams(`Invalid last symbol ${s.charCodeAt(end - 1)}, offset ${end - 1}.`);
  }
  return Buffer.from(s, 'base64');
}
