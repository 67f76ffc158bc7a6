/**
 * Request-head limits of the HTTP proxy (network-proxy.md §4.10): a header block over 16 KiB or over 100 lines is
 * 431, a URI of 64 KiB or more is 414. Node's parser runs with a larger bound so that these rules, not its own
 * overflow error, decide — except past that bound, where the overflow is classified the same way.
 */
import type http from 'node:http';

const MAX_HEADER_BYTES = 16 * 1024;
const MAX_HEADER_LINES = 100;
const MAX_URI_BYTES = 64 * 1024;

/** How Node's HTTP parser (llhttp) is configured for the proxy port: what both the proxy and its tests build on. */
export const PARSER_OPTIONS = {
  /** Above the 16 KiB rule so that long URIs reach the 414 check. */
  maxHeaderSize: 256 * 1024,
  /** Origin-form without Host gets our own `missing host`, not Node's 400. */
  requireHostHeader: false,
} as const;
/** Node keeps at most this many header lines (far above the 100-line rule, which is checked on what it kept). */
export const PARSER_MAX_HEADERS_COUNT = 2000;

/** Header-block size and line-count limits on a parsed request: 431 / 414, or null when fine. */
export function limitStatus(
  req: Pick<http.IncomingMessage, 'url' | 'method' | 'rawHeaders'>,
): 431 | 414 | null {
  const url = req.url ?? '';
  if (url.length >= MAX_URI_BYTES) return 414;
  const raw = req.rawHeaders;
  if (raw.length / 2 > MAX_HEADER_LINES) return 431;
  let size = (req.method?.length ?? 0) + url.length + 12;
  for (let i = 0; i < raw.length; i++) size += raw[i]!.length + 2;
  return size > MAX_HEADER_BYTES ? 431 : null;
}

/**
 * The answer to a head past the parser's own bound (`HPE_HEADER_OVERFLOW`, with the bytes it read): 414 when the
 * request line is still open or is itself huge, else 431.
 */
export function overflowStatus(packet: Buffer | undefined): 431 | 414 {
  const eol = packet ? packet.indexOf('\r\n') : -1;
  const firstLine = packet && eol >= 0 ? packet.subarray(Math.max(0, eol - 10), eol).toString('latin1') : '';
  const longUri =
    packet !== undefined && (eol < 0 || (eol > MAX_HEADER_BYTES && / HTTP\/1\.[01]$/.test(firstLine)));
  return longUri ? 414 : 431;
}
