import { invalidParams } from '../protocol/errors.js';

const VALID = new Uint8Array(256);
for (const c of 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/')
  VALID[c.charCodeAt(0)] = 1;

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
    if (c > 255 || VALID[c] === 0) throw invalidParams(`Invalid symbol ${c > 255 ? 63 : c}, offset ${i}.`);
  }
  if (s.length % 4 !== 0) {
    if (pad > 0) throw invalidParams('Invalid padding');
    throw invalidParams(`Invalid input length`);
  }
  return Buffer.from(s, 'base64');
}
