/**
 * Deep freezing for data shared between readers (a kept parse, a kept resolution, a redaction, a kept launch's
 * summary): every object and array reachable from the value is frozen, so a reader that tries to change what others
 * share throws (strict mode). Each object is frozen before its members are walked, so a cycle ends there. Pure: no
 * Node imports (the renderer may import protocol/).
 */
export function deepFreeze<T>(v: T): T {
  if (v !== null && typeof v === 'object' && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const x of Object.values(v)) deepFreeze(x);
  }
  return v;
}
