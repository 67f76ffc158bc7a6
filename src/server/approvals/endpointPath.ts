/**
 * Endpoint granularity (issue 36, item 7): the path of a plain-HTTP request as rules, proposals and a repository's
 * file see it. One normalisation for all of them, so a rule cannot be passed by spelling the same path another way:
 * the query is dropped, each segment percent-decoded once, empty and `.` segments dropped, `..` resolved. A path that
 * cannot be read the same way by every server is not read at all (null): an encoded `/` or `\`, a `\`, a `%` left
 * after decoding (double encoding), an encoded `?` or `#`, a control character, a bad escape, a `..` above the root,
 * a `..;` segment, or more than MAX_REQUEST_PATH characters. An allow with a path prefix never matches such a path; a
 * deny always does.
 */
import { MAX_PATH_PREFIX } from '../../protocol/approvals.js';

/** The longest request path read (query included); longer is unreadable. */
export const MAX_REQUEST_PATH = 8192;

const BAD_CHAR = /[\\%?#\u0000-\u001f\u007f]/;
const BAD_ESCAPE = /%(?![0-9a-fA-F]{2})/;

/** The normalised path of a request target's origin-form path (`/a/b?q`), or null when it cannot be read safely. */
export function normalizeRequestPath(raw: string | null | undefined): string | null {
  if (typeof raw !== 'string' || raw.length === 0 || raw.length > MAX_REQUEST_PATH) return null;
  const q = raw.indexOf('?');
  const path = q >= 0 ? raw.slice(0, q) : raw;
  if (path[0] !== '/' || path.includes('\\') || BAD_ESCAPE.test(path)) return null;
  const out: string[] = [];
  for (const seg of path.split('/')) {
    let s: string;
    try {
      s = decodeURIComponent(seg);
    } catch {
      return null;
    }
    if (s.includes('/') || BAD_CHAR.test(s)) return null;
    if (s === '' || s === '.') continue;
    if (s === '..') {
      if (out.pop() === undefined) return null;
      continue;
    }
    if (/^\.\.?;/.test(s)) return null;
    out.push(s);
  }
  return `/${out.join('/')}`;
}

/** A path prefix as a person or a file gives it, normalised; null when it is not a readable prefix. */
export function normalizePathPrefix(given: string): string | null {
  if (given.length > MAX_PATH_PREFIX || given.includes('?') || given.includes('#')) return null;
  return normalizeRequestPath(given);
}

/** Whether normalised `path` is `prefix` or below it, on segment boundaries (`/api` holds `/api/x`, not `/apix`). */
export function pathWithin(path: string, prefix: string): boolean {
  if (prefix === '/') return true;
  return path === prefix || (path.startsWith(prefix) && path.charCodeAt(prefix.length) === 47);
}

/** The prefix a rule or a proposal takes from a normalised path by default: its first segment, or `/`. */
export function firstSegment(path: string): string {
  const end = path.indexOf('/', 1);
  return end < 0 ? path : path.slice(0, end);
}
