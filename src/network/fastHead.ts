/**
 * The fast path's reading of one request head (see fastpath.ts). It takes only a strict subset of HTTP/1.1 — an
 * absolute-form `http://` request line, plain token headers, at most one Host and one Content-Length, no
 * Transfer-Encoding, Expect, Upgrade or Connection options — and answers null for anything else, which then goes to
 * Node's own parser (llhttp) with the bytes unread. test/unit/network-fasthead.test.ts holds it against llhttp.
 */
import { METHODS } from 'node:http';
import { forwardedRequestHeaders } from './headers.js';
import { readRequestTarget } from './target.js';

/** Far under the Node path's 16 KiB / 100-line / 64 KiB URI rules: anything near them goes there for the answer. */
export const MAX_FAST_HEAD = 8 * 1024;
const MAX_LINES = 64;

/** `http://` + an authority + a path or a query (a fragment right after the authority: llhttp refuses it). */
const REQUEST_LINE = /^([A-Z]{1,20}) (http:\/\/[^/?#\s]*(?:[/?][!-~]*)?) HTTP\/1\.1$/;
const HEADER_LINE = /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*(.*?)[ \t]*$/;
const BAD_BYTES = /[^\t\x20-\x7e]/;
/** A Content-Length line as llhttp takes it: digits, with spaces (not tabs: llhttp refuses a trailing one) around. */
const CONTENT_LENGTH_LINE = /^[^:]*: *([0-9]{1,15}) *$/;
/** The methods llhttp knows (it answers 400 to any other token), except CONNECT, which is never forwarded as is. */
const METHODS_TAKEN: ReadonlySet<string> = new Set(METHODS.filter((m) => m !== 'CONNECT'));

export interface FastHead {
  method: string;
  /** The request target as sent. */
  url: string;
  /** The normalised host the policy decides on, and the port. */
  host: string;
  port: number;
  /** Origin-form path for the upstream request line. */
  path: string;
  /** The headers to forward (name, value, …): end-to-end only, Host first when the client sent none. */
  headers: string[];
  bodyLength: number;
  /** Bytes of the head, final CRLFCRLF included. */
  headLength: number;
}

/**
 * Reads the request head that ends (at its blank line) at `end` in `buf`; null when it is not the fast path's simple
 * case. The head must have been found complete (`buf.indexOf('\r\n\r\n')`).
 */
export function readFastHead(buf: Buffer, end: number): FastHead | null {
  if (end + 4 > MAX_FAST_HEAD) return null;
  const text = buf.toString('latin1', 0, end);
  if (BAD_BYTES.test(text.replaceAll('\r\n', ''))) return null;
  const lines = text.split('\r\n');
  if (lines.length > MAX_LINES) return null;
  const rl = REQUEST_LINE.exec(lines[0]!);
  if (!rl) return null;
  const method = rl[1]!;
  const url = rl[2]!;
  if (!METHODS_TAKEN.has(method)) return null;
  const raw: string[] = [];
  let hostHeader: string | undefined;
  let bodyLength = 0;
  let sawLength = false;
  for (let i = 1; i < lines.length; i++) {
    const m = HEADER_LINE.exec(lines[i]!);
    if (!m) return null;
    const name = m[1]!;
    const value = m[2]!;
    switch (name.toLowerCase()) {
      case 'host':
        if (hostHeader !== undefined) return null;
        hostHeader = value;
        break;
      case 'content-length': {
        const cl = CONTENT_LENGTH_LINE.exec(lines[i]!);
        if (sawLength || !cl) return null;
        sawLength = true;
        bodyLength = Number(cl[1]);
        break;
      }
      case 'connection':
      case 'proxy-connection':
        for (const t of value.split(',')) {
          const tok = t.trim().toLowerCase();
          if (tok !== '' && tok !== 'keep-alive') return null;
        }
        break;
      case 'transfer-encoding':
      case 'expect':
      case 'upgrade':
      case 'x-unix-socket':
        return null;
    }
    raw.push(name, value);
  }
  const t = readRequestTarget(url, hostHeader);
  if (!t.ok || t.host === '' || t.target.scheme !== 'http') return null;
  return {
    method,
    url,
    host: t.host,
    port: t.port,
    path: t.target.path,
    headers: forwardedRequestHeaders(raw, t.target.authority),
    bodyLength,
    headLength: end + 4,
  };
}
