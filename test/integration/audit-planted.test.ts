// The audit database's file against what a hostile repository or another local user can leave where it goes:
// a symbolic link at the database or its -wal (a repository can ship one, and --audit-db may point into a workspace),
// a directory others can write, a planted database whose trigger deletes what is recorded, and a flood of output that
// would outgrow the size limit between retention passes. Each through the worker thread the server uses.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import Database from 'better-sqlite3';
import type { AuditRecord } from '../../src/audit/events.js';
import { MIGRATIONS, SCHEMA_VERSION } from '../../src/audit/schema.js';
import { AuditTrail } from '../../src/audit/trail.js';
import { AuditQueryParams } from '../../src/protocol/audit.js';
import { tempDir, until } from '../helpers/server.js';

const sha = (p: string) => createHash('sha256').update(readFileSync(p)).digest('hex');

function processRecords(i: number, output: Uint8Array | null = null): AuditRecord[] {
  const time = Date.now();
  return [
    {
      kind: 'processStart',
      time,
      sessionId: 's',
      processId: `p${i}`,
      clientName: 'agent',
      argv: ['/bin/echo', `run-${i}`],
      cwd: '/work',
      tty: false,
      envNames: [],
      sandboxType: 'none',
      policy: null,
      network: null,
      metadata: null,
      pid: 1000 + i,
    },
    {
      kind: 'processClose',
      time: time + 1,
      sessionId: 's',
      processId: `p${i}`,
      outputBytes: output ? 2 * output.length : 0,
      head: output ? new Uint8Array(output) : null,
      tail: output ? new Uint8Array(output) : null,
      omittedBytes: 0,
    },
  ];
}

describe('a hostile file where the audit database goes', () => {
  const dirs: { cleanup(): void }[] = [];
  const fresh = () => {
    const d = tempDir('corral-audit-planted-');
    dirs.push(d);
    return d.path;
  };
  after(() => {
    for (const d of dirs) d.cleanup();
  });

  test('a symbolic link at the database (shipped in a workspace) is refused; its target is left as it was', async () => {
    const ws = fresh();
    // Another program's database, and a plain file of the user's.
    const victim = join(ws, 'places.sqlite');
    const other = new Database(victim);
    other.exec("CREATE TABLE places (url TEXT); INSERT INTO places VALUES ('https://example.invalid/')");
    other.close();
    chmodSync(victim, 0o644);
    const notes = join(ws, 'notes.txt');
    writeFileSync(notes, 'my notes\n');
    chmodSync(notes, 0o644);
    for (const target of [victim, notes]) {
      const dir = join(ws, `.corral-${target === victim ? 'db' : 'txt'}`);
      mkdirSync(dir);
      const dbPath = join(dir, 'audit.db');
      symlinkSync(target, dbPath);
      const before = sha(target);
      await assert.rejects(AuditTrail.open({ dbPath }), (e: Error) => {
        assert.match(
          e.message,
          new RegExp(`audit database ${dbPath}: ${dbPath} is a symbolic link \\(to ${target}\\)`),
        );
        return true;
      });
      assert.equal(sha(target), before, `${target} unchanged`);
      assert.equal(statSync(target).mode & 0o777, 0o644, `${target} keeps its mode`);
      assert.equal(existsSync(`${target}-wal`), false);
    }
  });

  test('a symbolic link at its -wal is refused, and its target never written', async () => {
    const dir = join(fresh(), 'state');
    mkdirSync(dir, { mode: 0o700 });
    const precious = join(dir, '..', 'precious.txt');
    writeFileSync(precious, 'do not overwrite\n');
    const before = sha(precious);
    const dbPath = join(dir, 'audit.db');
    symlinkSync(precious, `${dbPath}-wal`);
    await assert.rejects(
      AuditTrail.open({ dbPath }),
      /audit\.db-wal is a symbolic link .*refusing to write through it/,
    );
    assert.equal(sha(precious), before);
  });

  test('a directory other users can write (or another user owns) is refused, naming it', async (t) => {
    const root = fresh();
    for (const mode of [0o777, 0o1777, 0o770]) {
      const dir = join(root, `shared-${mode.toString(8)}`);
      mkdirSync(dir);
      chmodSync(dir, mode);
      const dbPath = join(dir, 'audit.db');
      await assert.rejects(
        AuditTrail.open({ dbPath }),
        new RegExp(
          `its directory ${dir} is writable by (every user|its group) \\(mode ${mode.toString(8)}\\)`,
        ),
      );
      assert.equal(existsSync(dbPath), false, 'nothing created there');
    }
    if (process.getuid?.() !== 0) return t.skip('needs root to make a directory of another user');
    const theirs = join(root, 'theirs');
    mkdirSync(theirs, { mode: 0o755 });
    chownSync(theirs, 65534, 65534);
    await assert.rejects(
      AuditTrail.open({ dbPath: join(theirs, 'audit.db') }),
      new RegExp(`its directory ${theirs} belongs to another user \\(uid 65534\\)`),
    );
  });

  test('a planted database of the current version whose trigger deletes what is recorded is moved aside', async () => {
    const dir = join(fresh(), 'state');
    mkdirSync(dir, { mode: 0o700 });
    const dbPath = join(dir, 'audit.db');
    const planted = new Database(dbPath);
    for (const m of MIGRATIONS) planted.exec(m);
    planted.pragma(`user_version = ${SCHEMA_VERSION}`);
    planted.exec('CREATE TRIGGER forget AFTER INSERT ON processes BEGIN DELETE FROM processes; END');
    planted.close();
    chmodSync(dbPath, 0o600);
    const before = sha(dbPath);
    const trail = await AuditTrail.open({ dbPath });
    try {
      const m = new RegExp(
        `audit database ${dbPath} is not one Corral made \\(objects Corral did not create: trigger forget\\): moved it to (\\S+), started a fresh one`,
      ).exec(trail.startupNotices.join('\n'));
      assert.ok(m, trail.startupNotices.join('\n'));
      assert.equal(sha(m[1]!), before, 'the planted file is kept aside as it was');
      for (const r of processRecords(1)) trail.record(r);
      await trail.flush();
      const r = await trail.query(AuditQueryParams.parse({ type: 'process' }));
      assert.deepEqual(
        r.items.map((i) => (i.type === 'process' ? i.processId : null)),
        ['p1'],
        'the process is recorded',
      );
    } finally {
      await trail.close();
    }
  });

  test('a flood of output does not outgrow the size limit: retention runs after every tenth of it', async () => {
    const dbPath = join(fresh(), 'state', 'audit.db');
    const maxBytes = 4 * 1024 * 1024;
    const trail = await AuditTrail.open({ dbPath, maxBytes, outputBytes: 64 * 1024 });
    try {
      // 400 processes that each print 128 KiB worth keeping: 50 MiB of output, in batches as a busy agent makes them.
      const chunk = randomBytes(64 * 1024);
      for (let i = 0; i < 400; i++) {
        for (const r of processRecords(i, chunk)) trail.record(r);
        if (i % 20 === 19) await trail.flush();
      }
      await trail.flush();
      let size = 0;
      await until(
        async () => {
          size = (await trail.info()).sizeBytes;
          return size <= 3 * maxBytes;
        },
        20_000,
        'the database to be back near its size limit',
      ).catch(() => assert.fail(`the database holds ${size} bytes for a limit of ${maxBytes}`));
      const kept = (await trail.info()).counts.process;
      assert.ok(kept < 400, `${kept} processes kept: the oldest went`);
    } finally {
      await trail.close();
    }
  });
});
