/**
 * `corral audit export`: every stored event as JSON Lines, oldest first, one object per line. Every object has
 * `type` (session | process | network | approval | fs) and `time` (ISO 8601); process objects carry argv, cwd,
 * exitCode, sandboxType, … and their stored output as base64; network objects host, port, decision, reason, ….
 * Reads the database read-only (a running server may keep writing it meanwhile).
 */
import type { AuditEventType } from '../protocol/audit.js';
import { type AuditStore, toItem } from './store.js';

type Row = Record<string, unknown>;

export interface ExportFilter {
  /** ms since the epoch. */
  since?: number | null;
  sessionId?: string | null;
}

const iso = (ms: unknown) => (typeof ms === 'number' ? new Date(ms).toISOString() : null);
const parseJson = (v: unknown) => (typeof v === 'string' ? (JSON.parse(v) as unknown) : null);
const b64 = (v: unknown) => (v instanceof Uint8Array ? Buffer.from(v).toString('base64') : '');

/** One stored row as its export object. */
export function exportObject(type: AuditEventType, row: Row): Record<string, unknown> {
  const item = toItem(type, row) as Record<string, unknown>;
  const { id: _id, time, ...rest } = item;
  const out: Record<string, unknown> = { type, time: iso(time), ...rest };
  if (type === 'process') {
    for (const k of ['startedAt', 'exitedAt', 'closedAt']) out[k] = iso(out[k]);
    out.envNames = parseJson(row.env_names) ?? [];
    out.policy = parseJson(row.policy);
    out.network = parseJson(row.network);
    out.metadata = parseJson(row.metadata);
    out.outputHeadBase64 = b64(row.head);
    out.outputTailBase64 = b64(row.tail);
    out.outputOmittedBytes = typeof row.omitted === 'number' ? row.omitted : out.outputBytes;
  }
  if (type === 'network') out.metadata = parseJson(row.metadata);
  return out;
}

const TYPES: AuditEventType[] = ['session', 'process', 'network', 'approval', 'fs'];

/** Every event matching the filter, merged across types in time order. */
export function* exportObjects(store: AuditStore, filter: ExportFilter): Generator<Record<string, unknown>> {
  const sources = TYPES.map((type) => ({ type, it: store.rows(type, filter) }));
  const heads = sources.map((s) => s.it.next());
  for (;;) {
    let best = -1;
    for (let i = 0; i < heads.length; i++) {
      const h = heads[i]!;
      if (h.done) continue;
      if (best < 0 || h.value.time < (heads[best]!.value as { time: number }).time) best = i;
    }
    if (best < 0) return;
    const { row } = heads[best]!.value as { time: number; row: Row };
    yield exportObject(sources[best]!.type, row);
    heads[best] = sources[best]!.it.next();
  }
}

/** Writes the JSONL export; resolves with the number of lines. Waits for the stream to drain as it goes. */
export async function writeJsonl(
  store: AuditStore,
  filter: ExportFilter,
  out: NodeJS.WritableStream,
): Promise<number> {
  let n = 0;
  for (const obj of exportObjects(store, filter)) {
    n++;
    if (!out.write(`${JSON.stringify(obj)}\n`)) await new Promise<void>((r) => out.once('drain', () => r()));
  }
  return n;
}
