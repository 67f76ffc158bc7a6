import { base64Into as nativeBase64Into } from '../process/spawner.js';

/** Standard base64 of `src` written into `dst` at `off`; returns the bytes written. */
export type Base64Into = (src: Uint8Array, dst: Uint8Array, off: number) => number;

/** Node's encoder, through a string (Node 20 has no encode-into-a-Buffer). */
export const nodeBase64Into: Base64Into = (src, dst, off) =>
  (dst as Buffer).write(
    Buffer.from(src.buffer, src.byteOffset, src.length).toString('base64'),
    off,
    'latin1',
  );

export const base64Into: Base64Into = nativeBase64Into ?? nodeBase64Into;
