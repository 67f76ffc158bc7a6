/**
 * Standard base64 written into a Buffer (the output notifications' chunks, src/rpc/output.ts): the addon's SIMD
 * encoder (src/platform/native/pipes.c), else Node's, through a string (Node 20 has no encode-into-a-Buffer).
 */
import { addon } from './addon.js';

/** Standard base64 of `src` written into `dst` at `off`; returns the bytes written. */
export type Base64Into = (src: Uint8Array, dst: Uint8Array, off: number) => number;

/** Node's encoder. */
export const nodeBase64Into: Base64Into = (src, dst, off) =>
  (dst as Buffer).write(
    Buffer.from(src.buffer, src.byteOffset, src.length).toString('base64'),
    off,
    'latin1',
  );

export const base64Into: Base64Into = addon ? addon.base64Into.bind(addon) : nodeBase64Into;
