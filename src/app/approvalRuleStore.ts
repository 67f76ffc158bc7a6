/**
 * Where project rules (src/server/approvals/projectRules.ts) are kept: a small SQLite file beside the audit database,
 * in its directory (0700, hidden from every sandbox, so no sandboxed command can read or plant a rule), with the
 * audit database's checks of place (its own user's directory, no symbolic link) and mode (0600). Synchronous and
 * durable (WAL, synchronous=FULL): a rule is on disk when the answer that made it returns. Every row is read back
 * through the wire schema, so a file edited by hand cannot hand the server a rule broader than the schema allows.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { prepareFile, unsafePlace } from '../audit/dbFile.js';
import { type SqliteDatabase, sqlite } from '../audit/sqliteDriver.js';
import { auditDirectory } from '../audit/trail.js';
import { ApprovalRule, RepoAcceptance } from '../protocol/approvals.js';
import type { ProjectRuleStore } from '../server/approvals/projectRules.js';
import type { Logger } from '../server/core/log.js';

export const RULES_FILE = 'approval-rules.db';
const SCHEMA_VERSION = 1;

/** The rules file for an audit database at `auditDbPath`: in the same (hidden) directory. */
export function ruleStorePath(auditDbPath: string): string {
  return join(auditDirectory(auditDbPath), RULES_FILE);
}

/** Opens (creating) the rules file at `path`; throws saying why it cannot. */
export function openRuleStore(path: string, log: Logger): ProjectRuleStore {
  // The driver first: without one (the audit trail then runs degraded) nothing is created on disk.
  const Database = sqlite();
  const dir = auditDirectory(path);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const unsafe = unsafePlace(path);
  if (unsafe) throw new Error(`approval rules ${path}: ${unsafe}`);
  prepareFile(path, existsSync(path), (t) => log.warn(t.replace('audit database', 'approval rules')));
  const db: SqliteDatabase = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  const version = db.pragma('user_version', { simple: true }) as number;
  if (version > SCHEMA_VERSION) {
    db.close();
    throw new Error(
      `approval rules ${path}: schema ${version} is newer than this Corral's (${SCHEMA_VERSION})`,
    );
  }
  db.exec(`CREATE TABLE IF NOT EXISTS rules (
    id TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0,
    last_hit_at INTEGER
  )`);
  // The accepted `.corral/network.json` hash per workspace (issue 36, item 6): an older Corral ignores the table.
  db.exec(`CREATE TABLE IF NOT EXISTS repo_accepted (
    workspace TEXT PRIMARY KEY,
    body TEXT NOT NULL
  )`);
  db.pragma(`user_version = ${SCHEMA_VERSION}`);
  const accept = db.prepare('INSERT OR REPLACE INTO repo_accepted (workspace, body) VALUES (?, ?)');
  const accepted = db.prepare('SELECT workspace, body FROM repo_accepted ORDER BY rowid');
  const insert = db.prepare('INSERT OR REPLACE INTO rules (id, body, hits, last_hit_at) VALUES (?, ?, ?, ?)');
  const remove = db.prepare('DELETE FROM rules WHERE id = ?');
  const hit = db.prepare('UPDATE rules SET hits = ?, last_hit_at = ? WHERE id = ?');
  const all = db.prepare('SELECT id, body, hits, last_hit_at FROM rules ORDER BY rowid');
  return {
    location: path,
    load() {
      const out: ApprovalRule[] = [];
      for (const row of all.all() as {
        id: string;
        body: string;
        hits: number;
        last_hit_at: number | null;
      }[]) {
        let parsed: ReturnType<typeof ApprovalRule.safeParse>;
        try {
          parsed = ApprovalRule.safeParse({
            ...JSON.parse(row.body),
            id: row.id,
            hits: row.hits,
            lastHitAt: row.last_hit_at,
          });
        } catch {
          parsed = ApprovalRule.safeParse(null);
        }
        if (parsed.success) out.push(parsed.data);
        else log.warn(`approval rules ${path}: rule ${row.id} is unreadable, ignored`);
      }
      return out;
    },
    insert(rule) {
      const { id, hits, lastHitAt, contradiction: _seenLive, ...body } = rule;
      insert.run(id, JSON.stringify(body), hits, lastHitAt);
    },
    remove(id) {
      remove.run(id);
    },
    hit(id, hits, lastHitAt) {
      hit.run(hits, lastHitAt, id);
    },
    loadRepoAcceptances() {
      const out: RepoAcceptance[] = [];
      for (const row of accepted.all() as { workspace: string; body: string }[]) {
        let parsed: ReturnType<typeof RepoAcceptance.safeParse>;
        try {
          parsed = RepoAcceptance.safeParse({ ...JSON.parse(row.body), workspace: row.workspace });
        } catch {
          parsed = RepoAcceptance.safeParse(null);
        }
        if (parsed.success) out.push(parsed.data);
        else
          log.warn(
            `approval rules ${path}: the accepted repository file of a workspace is unreadable, ignored`,
          );
      }
      return out;
    },
    acceptRepo(a) {
      const { workspace, ...body } = a;
      accept.run(workspace, JSON.stringify(body));
    },
  };
}

/**
 * The composition root's rule store: at `path` (absent: beside the audit database `auditDbPath`; null: off), the
 * paths every sandbox must not see, and why there is none when there is none (said when a project answer is refused).
 */
export function projectRuleStore(
  path: string | null | undefined,
  auditDbPath: string | null,
  log: Logger,
): { store: ProjectRuleStore | null; problem: string | null; hiddenPaths: string[] } {
  const file = path === undefined ? (auditDbPath ? ruleStorePath(auditDbPath) : null) : path;
  if (!file)
    return { store: null, problem: 'no audit database to keep them beside (--no-audit)', hiddenPaths: [] };
  // Beside the audit database, its whole directory is hidden already; elsewhere, the file and SQLite's companions.
  const hiddenPaths = path === undefined ? [auditDirectory(file)] : [file, `${file}-wal`, `${file}-shm`];
  try {
    return { store: openRuleStore(file, log), problem: null, hiddenPaths };
  } catch (e) {
    const problem = (e as Error).message;
    log.warn(`project approval rules are off: ${problem}`);
    return { store: null, problem, hiddenPaths };
  }
}
