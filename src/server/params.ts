import type { z } from 'zod';
import { invalidParams } from '../protocol/errors.js';
import { serdeMessage } from '../protocol/serde.js';

/** Parses params with a zod schema, answering -32602 with serde-style text that names the field. */
export function parseParams<S extends z.ZodType>(
  schema: S,
  params: unknown,
  structName: string,
): z.output<S> {
  const r = schema.safeParse(params);
  if (!r.success) throw invalidParams(serdeMessage(r.error, params, structName));
  return r.data;
}
