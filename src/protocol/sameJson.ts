/**
 * Whether two values spell the same JSON text, found by walking both (no text made): plain objects with the same keys
 * in the same order, arrays of the same length, equal strings, booleans and nulls, equal finite numbers. Anything
 * JSON.stringify would spell by a rule of its own (undefined, functions, NaN and the infinities, a toJSON, a class
 * instance, a bigint), one object met on both sides (a cycle could be), and anything deeper than MAX_DEPTH is never
 * the same: a caller that needs an answer for those asks JSON.stringify. So `true` means the two texts are equal;
 * `false` may be said of two values that spell alike. Pure: no Node imports (the renderer may import protocol/).
 */
export function sameJson(a: unknown, b: unknown): boolean {
  return same(a, b, 0);
}

const MAX_DEPTH = 256;

function same(a: unknown, b: unknown, depth: number): boolean {
  if (a === b) {
    if (typeof a === 'number') return Number.isFinite(a);
    return a === null || typeof a === 'string' || typeof a === 'boolean';
  }
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null || depth >= MAX_DEPTH)
    return false;
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!same(a[i], b[i], depth + 1)) return false;
    return true;
  }
  if (Array.isArray(b) || !plainObject(a) || !plainObject(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  for (let i = 0; i < ka.length; i++) {
    const k = ka[i]!;
    if (k !== kb[i]) return false;
    if (!same((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], depth + 1)) return false;
  }
  return true;
}

/** An object JSON.stringify spells by its own enumerable keys alone. */
function plainObject(v: object): boolean {
  const proto = Object.getPrototypeOf(v);
  return (proto === Object.prototype || proto === null) && !('toJSON' in v);
}
