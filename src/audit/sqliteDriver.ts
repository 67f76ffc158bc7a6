/**
 * better-sqlite3, loaded when the audit database is first opened rather than imported: its native binding is built
 * for one runtime's ABI (Node's, at `npm ci`). When it does not load (inside Electron without a rebuild, a package
 * missing or half installed) Corral still starts, without its audit trail, and says why and how to fix it.
 */
import { createRequire } from 'node:module';
import type BetterSqlite3 from 'better-sqlite3';

export type SqliteDatabase = BetterSqlite3.Database;
type SqliteConstructor = typeof BetterSqlite3;

/** better-sqlite3 or its native binding cannot be loaded in this runtime. */
export class SqliteUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SqliteUnavailableError';
  }
}

let loaded: { driver: SqliteConstructor } | { problem: string } | null = null;

/** How to get a binding that loads, for the runtime this is. */
function remedy(e: NodeJS.ErrnoException): string {
  const electron = process.versions.electron;
  if (e.code === 'MODULE_NOT_FOUND' && /'better-sqlite3'/.test(e.message))
    return "install Corral's dependencies (`npm ci` in its directory)";
  return electron
    ? `rebuild it for Electron ${electron} (\`npx @electron/rebuild -f -w better-sqlite3\`)`
    : `rebuild it for this Node (ABI ${process.versions.modules}): \`npm rebuild better-sqlite3\``;
}

function load(): { driver: SqliteConstructor } | { problem: string } {
  try {
    const driver = createRequire(import.meta.url)('better-sqlite3') as SqliteConstructor;
    // The binding is loaded by the first database, not by the require: open one in memory to know now.
    new driver(':memory:').close();
    return { driver };
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    // Node's message spans lines (an ABI mismatch says both versions); a require's stack is no help to a person.
    const why = err.message.split('\nRequire stack:')[0]!.replace(/\s+/g, ' ').trim();
    return { problem: `better-sqlite3 cannot be loaded (${why}); to fix it, ${remedy(err)}` };
  }
}

/** Why the driver cannot be loaded (with how to fix it), or null when it can. Loads it once. */
export function sqliteProblem(): string | null {
  loaded ??= load();
  return 'problem' in loaded ? loaded.problem : null;
}

/** The better-sqlite3 Database constructor; throws SqliteUnavailableError saying why when it cannot be loaded. */
export function sqlite(): SqliteConstructor {
  loaded ??= load();
  if ('problem' in loaded) throw new SqliteUnavailableError(loaded.problem);
  return loaded.driver;
}
