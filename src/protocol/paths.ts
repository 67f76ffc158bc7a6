import { z } from 'zod';

/**
 * Decodes a path field: an absolute POSIX path, or a `file://` URI (0.169 clients send URIs everywhere).
 * Returns null when the value is neither (relative path, other scheme, remote host).
 */
export function decodePathOrFileUri(value: string): string | null {
  if (value.startsWith('file:')) {
    const m = /^file:\/\/([^/]*)(\/.*)?$/.exec(value);
    if (!m) return null;
    const host = m[1] ?? '';
    if (host !== '' && host !== 'localhost') return null;
    const raw = (m[2] ?? '/').replace(/[?#].*$/, '');
    let decoded: string;
    try {
      decoded = decodeURIComponent(raw);
    } catch {
      return null;
    }
    return decoded.includes('\0') ? null : decoded;
  }
  if (!value.startsWith('/') || value.includes('\0')) return null;
  return value;
}

/** A path field on the wire: absolute path or `file://` URI, decoded to an absolute path. */
export const AbsolutePath = z.string().transform((value, ctx) => {
  const decoded = decodePathOrFileUri(value);
  if (decoded === null) {
    ctx.addIssue({
      code: 'custom',
      message: value.includes('://')
        ? `invalid path ${JSON.stringify(value)}: only absolute paths and file:// URIs are accepted`
        : `AbsolutePathBuf deserialized without a base path: ${JSON.stringify(value)} is not absolute`,
    });
    return z.NEVER;
  }
  return decoded;
});
