/**
 * What the audit trail keeps of the text a client chose: at most MAX_LIST_BYTES of a process's argv (and of an
 * approval's command) and of its env names, MAX_TEXT_BYTES of a client name or an fs path. A value over its cap is
 * cut (whole code points, list items in order, the item that crosses the cap cut too) and the record says so in
 * `truncated`: per field, its original size in UTF-8 bytes (and items, for a list), stored in the row's `truncated`
 * column and exported as is.
 *
 * Cheap when nothing is cut (every start goes through it): a list whose UTF-16 length times 3 is within the cap is
 * within it in bytes, and is returned as it is.
 */

export const MAX_LIST_BYTES = 64 * 1024;
export const MAX_TEXT_BYTES = 4 * 1024;

/** How big a value was before it was cut. */
export interface Truncation {
  originalBytes: number;
  /** For a list: how many items it had. */
  originalItems?: number;
}

/** Per field name, how it was cut; null when nothing was. */
export type Truncations = Record<string, Truncation> | null;

const encoder = new TextEncoder();
let scratch = new Uint8Array(0);

/** `s` cut to at most `max` UTF-8 bytes, on a code point boundary. */
function cutUtf8(s: string, max: number): string {
  if (max <= 0) return '';
  if (scratch.length < max) scratch = new Uint8Array(max);
  const { read } = encoder.encodeInto(s, scratch.subarray(0, max));
  return s.slice(0, read);
}

const bytes = (s: string) => Buffer.byteLength(s, 'utf8');

/** `s` within `max` bytes; a cut is added to `into` under `field`. */
export function capText(
  s: string,
  field: string,
  into: Record<string, Truncation>,
  max = MAX_TEXT_BYTES,
): string {
  if (s.length * 3 <= max) return s;
  const n = bytes(s);
  if (n <= max) return s;
  into[field] = { originalBytes: n };
  return cutUtf8(s, max);
}

/** `items` within `max` bytes in all (each item's bytes); a cut is added to `into` under `field`. */
export function capList(
  items: readonly string[],
  field: string,
  into: Record<string, Truncation>,
  max = MAX_LIST_BYTES,
): string[] {
  let chars = 0;
  for (const s of items) chars += s.length;
  if (chars * 3 <= max) return items as string[];
  let total = 0;
  for (const s of items) total += bytes(s);
  if (total <= max) return items as string[];
  const kept: string[] = [];
  let left = max;
  for (const s of items) {
    const n = bytes(s);
    if (n <= left) {
      kept.push(s);
      left -= n;
      continue;
    }
    if (left > 0) kept.push(cutUtf8(s, left));
    break;
  }
  into[field] = { originalBytes: total, originalItems: items.length };
  return kept;
}

/** `into` as a record's `truncated`: null when empty. */
export const truncations = (into: Record<string, Truncation>): Truncations =>
  Object.keys(into).length > 0 ? into : null;
