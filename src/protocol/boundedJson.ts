/**
 * JSON from a peer, bounded before it becomes objects: `parseJson` scans the text once (linear, strings skipped with
 * `indexOf`) and refuses nesting deeper than `maxDepth` or more than `maxValues` containers and elements before
 * `JSON.parse` builds anything, so no message can hand a recursive consumer (JSON.stringify, a walker) a tree that
 * overflows its stack, or build millions of objects out of a few megabytes. `measureJson` is the same bound over a
 * value already built (what a fleet host keeps of a joined server): its size and value count, stopping at the first
 * bound it breaks. Every inbound parser uses these (src/rpc/connection.ts, src/fleet/link.ts); pure, so the
 * renderer may too.
 */

export interface JsonBounds {
  /** Deepest nesting of arrays and objects accepted (the top-level value is depth 1). */
  maxDepth: number;
  /** Most values accepted (arrays and objects, and each element or member after a comma). */
  maxValues: number;
}

/** What every JSON-RPC message may hold: far above any message of the protocol, far below what hurts. */
export const MESSAGE_BOUNDS: JsonBounds = { maxDepth: 64, maxValues: 1 << 20 };

export type JsonParse = { ok: true; value: unknown } | { ok: false; error: string; bound: boolean };

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_ARRAY = 0x5b;
const OPEN_OBJECT = 0x7b;
const CLOSE_ARRAY = 0x5d;
const CLOSE_OBJECT = 0x7d;
const COMMA = 0x2c;

/**
 * Which bound `text` breaks as JSON, in words, or null. Counts nesting and values outside strings only (a `[` in a
 * string is text); it does not validate: malformed text passes here and fails in JSON.parse.
 */
export function jsonBoundBroken(text: string, bounds: JsonBounds = MESSAGE_BOUNDS): string | null {
  const n = text.length;
  const { maxDepth, maxValues } = bounds;
  // The fast path of every small message: each value takes a character, so no more than `n` of them; and with no
  // more than `maxDepth` brackets and braces in all (in strings too), none is nested deeper.
  if (n <= maxValues && fewerOpenings(text, maxDepth)) return null;
  let depth = 0;
  let values = 0;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      // Skip to the closing quote: one not preceded by an odd run of backslashes.
      let j = i;
      for (;;) {
        j = text.indexOf('"', j + 1);
        if (j < 0) return null; // unterminated: JSON.parse says so
        let k = j - 1;
        while (text.charCodeAt(k) === BACKSLASH) k--;
        if ((j - 1 - k) % 2 === 0) break;
      }
      i = j;
    } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      if (++depth > maxDepth) return `nesting deeper than ${maxDepth} levels (at offset ${i})`;
      if (++values > maxValues) return `more than ${maxValues} values`;
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
      depth--;
    } else if (c === COMMA) {
      if (++values > maxValues) return `more than ${maxValues} values`;
    }
  }
  return null;
}

/** Whether `text` holds at most `max` `[` and `{` (native searches, no loop over characters). */
function fewerOpenings(text: string, max: number): boolean {
  let count = 0;
  for (let i = text.indexOf('{'); i >= 0; i = text.indexOf('{', i + 1)) if (++count > max) return false;
  for (let i = text.indexOf('['); i >= 0; i = text.indexOf('[', i + 1)) if (++count > max) return false;
  return true;
}

/** `text` parsed, or why not: `bound` when it broke a bound (the peer's fault by design), else malformed JSON. */
export function parseJson(text: string, bounds: JsonBounds = MESSAGE_BOUNDS): JsonParse {
  const broken = jsonBoundBroken(text, bounds);
  if (broken !== null) return { ok: false, error: broken, bound: true };
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch (e) {
    return { ok: false, error: (e as Error).message, bound: false };
  }
}

/** The measure of a value: about its JSON size, its values, its depth; `broken` names the first bound it broke. */
export interface JsonMeasure {
  bytes: number;
  values: number;
  depth: number;
  broken: string | null;
}

/**
 * About the JSON size (bytes), the values and the depth of `value` (a tree from JSON.parse: no cycles), walking at
 * most `bounds` of it: deeper or more than that, it stops and says which bound it broke. Never recurses deeper
 * than `maxDepth`, so it cannot overflow the stack whatever it is given.
 */
export function measureJson(value: unknown, bounds: JsonBounds): JsonMeasure {
  const m: JsonMeasure = { bytes: 0, values: 0, depth: 0, broken: null };
  walk(value, 1, bounds, m);
  return m;
}

function walk(v: unknown, depth: number, b: JsonBounds, m: JsonMeasure): void {
  if (m.broken !== null) return;
  if (++m.values > b.maxValues) {
    m.broken = `more than ${b.maxValues} values`;
    return;
  }
  if (typeof v === 'string') {
    m.bytes += v.length + 2;
    return;
  }
  if (v === null || typeof v !== 'object') {
    m.bytes += typeof v === 'number' ? 8 : 5;
    return;
  }
  if (depth > b.maxDepth) {
    m.broken = `nesting deeper than ${b.maxDepth} levels`;
    return;
  }
  if (depth > m.depth) m.depth = depth;
  m.bytes += 2;
  if (Array.isArray(v)) {
    for (const x of v) {
      m.bytes += 1;
      walk(x, depth + 1, b, m);
      if (m.broken !== null) return;
    }
    return;
  }
  for (const k in v) {
    if (!Object.hasOwn(v, k)) continue;
    m.bytes += k.length + 4;
    walk((v as Record<string, unknown>)[k], depth + 1, b, m);
    if (m.broken !== null) return;
  }
}

/** What a peer sent broke a bound: the link or connection it came on is dropped, with this message as the reason. */
export class JsonBoundError extends Error {}
