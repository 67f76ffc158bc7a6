/** `corral audit export`: opens the database read-only and writes the JSON Lines export. */
import { existsSync } from 'node:fs';
import { writeJsonl } from './export.js';
import { openAuditStore } from './openStore.js';

export async function exportAudit(opts: {
  dbPath: string;
  since: number | null;
  sessionId: string | null;
  out: NodeJS.WritableStream;
}): Promise<number> {
  if (!existsSync(opts.dbPath)) throw new Error(`no audit database at ${opts.dbPath}`);
  const store = openAuditStore(opts.dbPath, { readonly: true });
  try {
    return await writeJsonl(store.db, { since: opts.since, sessionId: opts.sessionId }, opts.out);
  } finally {
    store.close();
  }
}
