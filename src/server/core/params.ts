import type { z } from 'zod';
import { invalidParams } from '../../protocol/errors.js';
import type { FieldErrorMap } from '../../protocol/methods.js';
import { serdeMessage } from '../../protocol/serde.js';

/**
 * Parses params with a zod schema, answering -32602 with serde-style text that names the field; a member of
 * `fieldErrors` answers its own text. `fast` (the table's fastParams) reads the common shape first, with the schema's
 * output; what it does not take goes to the schema.
 */
export function parseParams<S extends z.ZodType>(
  schema: S,
  params: unknown,
  structName: string,
  fieldErrors?: FieldErrorMap,
  fast?: (params: unknown) => z.output<S> | undefined,
): z.output<S> {
  const quick = fast?.(params);
  if (quick !== undefined) return quick;
  const r = schema.safeParse(params);
  if (r.success) return r.data;
  const field = r.error.issues[0]?.path[0];
  const own = typeof field === 'string' ? fieldErrors?.[field] : undefined;
  if (own) throw invalidParams(own((params as Record<string, unknown>)[field as string]));
  throw invalidParams(serdeMessage(r.error, params, structName));
}
