import type { z } from 'zod';

/**
 * Turns a zod validation failure into serde-style text, the dialect Codex clients know:
 * ``missing field `processId` `` and `invalid type: string "true", expected a sequence`. Unlike serde we append the
 * field path for nested fields, so the message always names the offending field.
 */
export function serdeMessage(error: z.ZodError, input: unknown, structName: string): string {
  const issue = error.issues[0];
  if (!issue) return 'invalid params';
  const path = issue.path.filter((p) => typeof p !== 'symbol') as (string | number)[];
  const at = path.length > 0 ? ` at \`${path.join('.')}\`` : '';
  const value = valueAt(input, path);
  if (
    path.length === 0 &&
    (input === null || input === undefined || typeof input !== 'object' || Array.isArray(input))
  ) {
    return `invalid type: ${describe(input)}, expected struct ${structName}`;
  }
  if (issue.code === 'invalid_type' && value === undefined) {
    const field = path[path.length - 1];
    const parent = path.length > 1 ? ` in \`${path.slice(0, -1).join('.')}\`` : '';
    return `missing field \`${String(field)}\`${parent}`;
  }
  if (issue.code === 'invalid_type') {
    return `invalid type: ${describe(value)}, expected ${expected(issue.expected)}${at}`;
  }
  if (issue.code === 'invalid_value' && typeof value === 'string' && issue.values.length > 0) {
    // serde's enum text: unknown variant `some`, expected one of `all`, `core`, `none`
    const expectedVariants = issue.values.map((v) => `\`${String(v)}\``).join(', ');
    return `unknown variant \`${value}\`, expected one of ${expectedVariants}${at}`;
  }
  if ((issue.code === 'too_small' || issue.code === 'too_big') && typeof value === 'number') {
    // serde's integer range text, e.g. `invalid value: integer `-1`, expected u64`
    const what = issue.code === 'too_small' && Number(issue.minimum) === 0 ? 'u64' : 'an integer in range';
    return `invalid value: ${describe(value)}, expected ${what}${at}`;
  }
  if (issue.code === 'invalid_value' || issue.code === 'invalid_union') {
    return `invalid value: ${describe(value)}${issue.message ? `, ${lowerFirst(issue.message)}` : ''}${at}`;
  }
  return `${issue.message}${at}`;
}

function lowerFirst(s: string): string {
  return s.length > 0 ? s[0]!.toLowerCase() + s.slice(1) : s;
}

function valueAt(input: unknown, path: (string | number)[]): unknown {
  let v: unknown = input;
  for (const key of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<string | number, unknown>)[key];
  }
  return v;
}

function describe(v: unknown): string {
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'string') return `string ${JSON.stringify(v)}`;
  if (typeof v === 'boolean') return `boolean \`${v}\``;
  if (typeof v === 'number') return Number.isInteger(v) ? `integer \`${v}\`` : `floating point \`${v}\``;
  if (Array.isArray(v)) return 'sequence';
  return 'map';
}

function expected(t: string): string {
  switch (t) {
    case 'string':
      return 'a string';
    case 'array':
      return 'a sequence';
    case 'boolean':
      return 'a boolean';
    case 'number':
    case 'int':
    case 'bigint':
      return 'an integer';
    case 'object':
    case 'record':
      return 'a map';
    default:
      return t;
  }
}
