// The audit database as a file on disk (issue 15): permissions, schema versions, bad files, retention, queries and
// the JSONL export — each against a real SQLite file, through the worker thread the server uses.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import Database from 'better-sqlite3';
import { prepareFile } from '../../src/audit/dbFile.js';
import type { AuditRecord } from '../../src/audit/events.js';
import { openAuditStore } from '../../src/audit/openStore.js';
import { VACUUM_PAGES_PER_STEP } from '../../src/audit/retention.js';
import { SCHEMA_VERSION } from '../../src/audit/schema.js';
import { AuditTrail } from '../../src/audit/trail.js';
import { type AuditProcessItem, AuditQueryParams } from '../../src/protocol/audit.js';
import { CORRAL_BIN } from '../helpers/cli.js';
import { tempDir, until } from '../helpers/server.js';
import { openDb } from './audit-helpers.js';

const CLI = CORRAL_BIN;
const DAY = 86_400_000;
const sha = (p: string) => createHash('sha256').update(readFileSync(p)).digest('hex');

/** The close of a process whose whole output is `out` (kept as its head). */
function closedWith(out: Uint8Array, time: number, sessionId: string, processId: string): AuditRecord {
  return {
    kind: 'processClose',
    time,
    sessionId,
    processId,
    outputBytes: out.length,
    head: out,
    tail: null,
    omittedBytes: 0,
  };
}

function start(
  time: number,
  sessionId: string,
  processId: string,
  argv: string[],
  clientName = 'codex',
): AuditRecord {
  return {
    kind: 'processStart',
    time,
    sessionId,
    processId,
    clientName,
    argv,
    cwd: '/work/project',
    tty: false,
    envNames: ['HOME', 'PATH'],
    sandboxType: 'none',
    policy: null,
    network: null,
    metadata: null,
    pid: 100,
  };
}

function exit(
  time: number,
  sessionId: string,
  processId: string,
  exitCode: number,
  signal: string | null = null,
): AuditRecord {
  return {
    kind: 'processExit',
    time,
    sessionId,
    processId,
    exitCode,
    signal,
    sandboxDenied: false,
    limitHit: null,
  };
}

describe('audit database file', () => {
  const dirs: { cleanup(): void }[] = [];
  const fresh = () => {
    const d = tempDir('corral-audit-');
    dirs.push(d);
    return d.path;
  };
  after(() => {
    for (const d of dirs) d.cleanup();
  });

  test('a fresh database: file 0600, its directory 0700, WAL mode, the current schema version', async () => {
    const path = join(fresh(), 'state', 'corral', 'audit.db');
    const trail = await AuditTrail.open({ dbPath: path });
    try {
      assert.equal(statSync(path).mode & 0o777, 0o600);
      assert.equal(statSync(join(path, '..')).mode & 0o777, 0o700);
      assert.deepEqual(trail.startupNotices, []);
      trail.record(start(Date.now(), 's1', 'p1', ['/bin/true']));
      await trail.flush();
      for (const ext of ['-wal', '-shm']) assert.equal(statSync(path + ext).mode & 0o777, 0o600, ext);
    } finally {
      await trail.close();
    }
    const db = openDb(path);
    assert.equal(db.pragma('journal_mode', { simple: true }), 'wal');
    assert.equal(db.pragma('user_version', { simple: true }), SCHEMA_VERSION);
    assert.equal((db.prepare('SELECT count(*) AS n FROM processes').get() as { n: number }).n, 1);
    db.close();
  });

  test('an existing file readable by others is tightened to 0600, and said so', async () => {
    const path = join(fresh(), 'audit.db');
    writeFileSync(path, '');
    chmodSync(path, 0o644);
    const trail = await AuditTrail.open({ dbPath: path });
    await trail.close();
    assert.equal(statSync(path).mode & 0o777, 0o600);
    assert.match(trail.startupNotices.join('\n'), new RegExp(`${path} had mode 644: set to 600`));
  });

  test('a file another server created after this one looked is opened and tightened, not an error (CI: EEXIST)', () => {
    // Servers sharing one database all see it absent; all but the first then find it there when they create it.
    const path = join(fresh(), 'audit.db');
    writeFileSync(path, '', { mode: 0o640 });
    chmodSync(path, 0o640);
    const notices: string[] = [];
    prepareFile(path, false, (t) => notices.push(t));
    assert.equal(statSync(path).mode & 0o777, 0o600);
    assert.deepEqual(notices, [`audit database ${path} had mode 640: set to 600`]);
    // What is not a lost race still throws.
    assert.throws(() => prepareFile(join(path, 'below-a-file.db'), false), { code: 'ENOTDIR' });
  });

  test('a database of a newer schema version is refused, and left exactly as it was', async () => {
    const path = join(fresh(), 'audit.db');
    const db = new Database(path);
    db.exec("CREATE TABLE future (x TEXT); INSERT INTO future VALUES ('kept')");
    db.pragma(`user_version = ${SCHEMA_VERSION + 1}`);
    db.close();
    const before = sha(path);
    const files = readdirSync(join(path, '..')).sort();
    await assert.rejects(
      AuditTrail.open({ dbPath: path }),
      (e: Error) =>
        e.message.includes(path) &&
        e.message.includes(`schema version ${SCHEMA_VERSION + 1}`) &&
        /newer Corral/.test(e.message),
    );
    assert.equal(sha(path), before, 'not a byte changed');
    assert.deepEqual(readdirSync(join(path, '..')).sort(), files, 'no file added or moved');
    // The CLI refuses to start on it, naming the file.
    const r = spawnCli(['exec-server', '--audit-db', path]);
    assert.equal(await r.exit, 1);
    assert.match(r.stderr(), new RegExp(`audit database ${path} has schema version`));
    assert.equal(sha(path), before);
  });

  test('a file that is not a database is reported with its path, moved aside, and a fresh one started', async () => {
    const path = join(fresh(), 'audit.db');
    writeFileSync(path, 'this is not a SQLite database, it is a hostile blob\n'.repeat(100));
    const garbage = sha(path);
    const trail = await AuditTrail.open({ dbPath: path });
    try {
      const notice = trail.startupNotices.join('\n');
      const m = new RegExp(
        `audit database ${path} is corrupt .*moved it to (\\S+), started a fresh one`,
      ).exec(notice);
      assert.ok(m, notice);
      assert.equal(sha(m[1]!), garbage, 'the bad file is kept aside, untouched');
      trail.record(start(Date.now(), 's', 'after', ['/bin/echo', 'fresh']));
      const page = await trail.query({ type: 'process', limit: 10 });
      assert.deepEqual(
        page.items.map((i) => (i as AuditProcessItem).processId),
        ['after'],
      );
    } finally {
      await trail.close();
    }
  });

  test('a database damaged inside (its schema page overwritten) is moved aside at startup, and the CLI says so', async () => {
    const path = join(fresh(), 'audit.db');
    const t1 = await AuditTrail.open({ dbPath: path });
    for (let i = 0; i < 50; i++) t1.record(start(Date.now(), 's', `p${i}`, ['/bin/echo', String(i)]));
    await t1.close();
    const bytes = readFileSync(path);
    bytes.fill(0xa5, 100, 4096); // page 1 after the header: sqlite_master
    writeFileSync(path, bytes);
    const r = spawnCli(['exec-server', '--audit-db', path]);
    await until(() => /exec-server listening/.test(r.stderr()), 15_000, 'the server to start');
    r.child.kill('SIGTERM');
    assert.equal(await r.exit, 0);
    const m = new RegExp(
      `audit database ${path} is corrupt \\(.*\\): moved it to (\\S+), started a fresh one`,
    ).exec(r.stderr());
    assert.ok(m, r.stderr());
    assert.ok(existsSync(m[1]!));
    const db = openDb(path);
    assert.equal(db.pragma('integrity_check', { simple: true }), 'ok');
    assert.equal((db.prepare('SELECT count(*) AS n FROM processes').get() as { n: number }).n, 0);
    db.close();
  });

  test('an unreadable file (a server running as uid 65534) is reported with its path, moved aside, fresh one started', async (t) => {
    if (process.getuid?.() !== 0) return t.skip('needs root to switch to uid 65534');
    try {
      execFileSync('setpriv', ['--reuid', '65534', '--regid', '65534', '--clear-groups', 'test', '-r', CLI]);
    } catch {
      return t.skip(`uid 65534 cannot read ${CLI}`);
    }
    const dir = join(fresh(), 'nobody');
    mkdirSync(dir, { mode: 0o700 });
    chownSync(dir, 65534, 65534);
    const path = join(dir, 'audit.db');
    // A database that uid 65534 cannot read (say, left by a server run as root): its own directory, someone else's file.
    const other = new Database(path);
    other.exec("CREATE TABLE t (x TEXT); INSERT INTO t VALUES ('root''s trail')");
    other.close();
    chmodSync(path, 0o600);
    const before = sha(path);
    chmodSync(join(dir, '..'), 0o755);
    const r = spawnCli(
      ['exec-server', '--audit-db', path],
      ['setpriv', '--reuid', '65534', '--regid', '65534', '--clear-groups'],
    );
    await until(() => /exec-server listening|corral: /.test(r.stderr()), 15_000, 'the server to start');
    r.child.kill('SIGTERM');
    await r.exit;
    const m = new RegExp(
      `audit database ${path} is unreadable \\(.*EACCES.*\\): moved it to (\\S+), started a fresh one`,
    ).exec(r.stderr());
    assert.ok(m, r.stderr());
    assert.equal(sha(m[1]!), before, 'the unreadable file is kept aside as it was');
    assert.equal(statSync(m[1]!).uid, 0);
    assert.equal(statSync(path).mode & 0o777, 0o600);
    assert.equal(statSync(path).uid, 65534, "the fresh database is the server user's");
  });

  test('retention by age: events older than the limit go, newer ones stay (run by the worker)', async () => {
    const path = join(fresh(), 'audit.db');
    const now = Date.now();
    const trail = await AuditTrail.open({ dbPath: path, retentionDays: 30 });
    try {
      for (const age of [40, 31, 29, 1]) {
        const t = now - age * DAY;
        trail.record(start(t, 's', `p${age}`, ['/bin/echo', String(age)]));
        trail.record({ kind: 'session', time: t, sessionId: `s${age}`, clientName: 'c', event: 'connect' });
        trail.record({
          kind: 'fs',
          time: t,
          sessionId: 's',
          clientName: 'c',
          op: 'writeFile',
          path: `/w/${age}`,
          destination: null,
          bytes: 1,
          outcome: 'allowed',
          error: null,
        });
      }
      await trail.retention(now);
      const procs = await trail.query({ type: 'process', limit: 100 });
      assert.deepEqual(
        procs.items.map((i) => (i as AuditProcessItem).processId),
        ['p1', 'p29'],
      );
      const files = await trail.query({ type: 'fs', limit: 100 });
      assert.equal(files.items.length, 2);
      const sessions = await trail.query({ type: 'session', limit: 100 });
      assert.equal(sessions.items.length, 2);
      const info = await trail.info();
      assert.equal(info.retentionDays, 30);
      assert.ok(info.oldest! >= now - 29 * DAY - 1);
    } finally {
      await trail.close();
    }
  });

  test('retention by size: above the limit the oldest events go first, across types, until it fits', () => {
    const path = join(fresh(), 'audit.db');
    const store = openAuditStore(path);
    try {
      const t0 = Date.UTC(2026, 0, 1);
      const out = new Uint8Array(8192).fill(0x61);
      const batch: AuditRecord[] = [];
      for (let i = 0; i < 1500; i++) {
        const t = t0 + i * 1000;
        batch.push(start(t, 's', `p${i}`, ['/bin/cat', `file-${i}`]));
        batch.push(closedWith(out, t + 1, 's', `p${i}`));
        batch.push({
          kind: 'network',
          time: t + 2,
          sessionId: 's',
          processId: `p${i}`,
          host: `h${i}.test`,
          port: 443,
          protocol: 'https_connect',
          method: 'CONNECT',
          decision: 'deny',
          reason: 'not_allowed',
          source: 'baseline_policy',
          scope: 'domain',
          override: false,
          clientAddress: null,
          metadata: null,
        });
      }
      store.write(batch);
      assert.equal(store.db.pragma('auto_vacuum', { simple: true }), 2, 'incremental auto-vacuum');
      store.db.pragma('wal_checkpoint(TRUNCATE)');
      const full = statSync(path).size;
      assert.ok(full > 12 * 1024 * 1024, `${full}`);
      const maxBytes = Math.floor(full / 3);
      let steps = 0;
      while (store.retentionStep({ maxAgeMs: 10_000 * DAY, maxBytes, chunkRows: 100 }, t0 + 2000 * 1000))
        steps++;
      assert.ok(steps > 2, `deleted in ${steps} steps of 100 rows`);
      assert.ok(store.usedBytes() <= maxBytes, `${store.usedBytes()} > ${maxBytes}`);
      assert.ok(statSync(path).size < full, 'freed pages were given back to the file system');
      // What is left is the newest: no kept event is older than a deleted one.
      const keptProcs = store.db
        .prepare('SELECT min(started_at) AS lo, count(*) AS n FROM processes')
        .get() as {
        lo: number;
        n: number;
      };
      const keptNet = store.db.prepare('SELECT min(time) AS lo, count(*) AS n FROM network').get() as {
        lo: number;
        n: number;
      };
      assert.ok(keptProcs.n > 100 && keptProcs.n < 1500, `${keptProcs.n}`);
      const firstKept = (keptProcs.lo - t0) / 1000;
      assert.equal(keptProcs.n, 1500 - firstKept, 'processes: exactly the oldest were deleted');
      assert.ok(Math.abs((keptNet.lo - 2 - t0) / 1000 - firstKept) <= 1, 'network decisions went with them');
      const orphans = store.db
        .prepare('SELECT count(*) AS n FROM process_output WHERE process NOT IN (SELECT id FROM processes)')
        .get() as { n: number };
      assert.equal(orphans.n, 0, 'no output is left without its process');
    } finally {
      store.close();
    }
  });

  test('a current database opens while another Corral holds its write lock (CI: "database is locked" at start)', () => {
    const path = join(fresh(), 'audit.db');
    openAuditStore(path).close();
    const other = new Database(path);
    other.pragma('busy_timeout = 0');
    other.exec('BEGIN IMMEDIATE'); // another server in the middle of a long write (a retention step, a big batch)
    try {
      // Without the write lock's holder letting go: a wait for it would end in "database is locked" (the busy timeout).
      const store = openAuditStore(path, { busyTimeoutMs: 2000 });
      try {
        assert.equal(store.db.pragma('user_version', { simple: true }), SCHEMA_VERSION);
      } finally {
        store.close();
      }
      // A database that needs its schema (a new one) does wait for the lock, and names the file when it cannot get it.
      const path2 = join(fresh(), 'audit.db');
      const creating = new Database(path2);
      creating.exec('BEGIN IMMEDIATE');
      try {
        assert.throws(
          () => openAuditStore(path2, { busyTimeoutMs: 50 }),
          (e: Error) => e.message.includes(path2) && /locked|busy/i.test(e.message),
        );
      } finally {
        creating.exec('ROLLBACK');
        creating.close();
      }
    } finally {
      if (other.inTransaction) other.exec('ROLLBACK');
      other.close();
    }
  });

  test('retention gives freed pages back a bounded number per step, and says there is more while it does', () => {
    const path = join(fresh(), 'audit.db');
    const store = openAuditStore(path);
    try {
      const out = new Uint8Array(8192).fill(0x62);
      const t0 = Date.UTC(2026, 0, 1);
      const batch: AuditRecord[] = [];
      for (let i = 0; i < 6000; i++) {
        batch.push(start(t0 + i, 's', `p${i}`, ['/bin/true']));
        batch.push(closedWith(out, t0 + i + 1, 's', `p${i}`));
      }
      store.write(batch);
      // Everything is past the age limit: one step of 10k rows deletes it all at once.
      const opts = { maxAgeMs: DAY, maxBytes: 2 ** 40, chunkRows: 10_000 };
      const later = t0 + 10 * DAY;
      const freeAfter: number[] = [];
      let more = store.retentionStep(opts, later);
      freeAfter.push(store.db.pragma('freelist_count', { simple: true }) as number);
      while (more) {
        more = store.retentionStep(opts, later);
        freeAfter.push(store.db.pragma('freelist_count', { simple: true }) as number);
      }
      assert.ok(freeAfter.length >= 3, `given back in ${freeAfter.length} steps: ${freeAfter.join(' ')}`);
      for (let i = 1; i < freeAfter.length; i++)
        assert.ok(freeAfter[i - 1]! - freeAfter[i]! <= VACUUM_PAGES_PER_STEP, freeAfter.join(' '));
      assert.equal(freeAfter.at(-1), 0, 'all of it in the end');
    } finally {
      store.close();
    }
  });

  test('audit/query filters and pages: text, session, client, exit status, time range, decisions', async () => {
    const path = join(fresh(), 'audit.db');
    const trail = await AuditTrail.open({ dbPath: path });
    try {
      const t0 = Date.now() - 3_600_000;
      for (let i = 0; i < 25; i++) {
        const sid = i % 2 === 0 ? 'even' : 'odd';
        trail.record(
          start(
            t0 + i,
            sid,
            `p${i}`,
            ['npm', 'run', i % 5 === 0 ? 'build_100%' : 'test'],
            i < 10 ? 'codex' : 'claude',
          ),
        );
        trail.record(exit(t0 + i, sid, `p${i}`, i % 3 === 0 ? 0 : 1, i === 7 ? 'SIGKILL' : null));
      }
      const ids = async (q: AuditQueryParams) =>
        (await trail.query(AuditQueryParams.parse(q))).items.map((x) => (x as AuditProcessItem).processId);
      assert.deepEqual(await ids({ type: 'process', text: 'BUILD_100%', limit: 100 }), [
        'p20',
        'p15',
        'p10',
        'p5',
        'p0',
      ]);
      assert.deepEqual(await ids({ type: 'process', text: '_100', limit: 100 }), [
        'p20',
        'p15',
        'p10',
        'p5',
        'p0',
      ]);
      assert.deepEqual(await ids({ type: 'process', text: 'd_1', limit: 100 }), [
        'p20',
        'p15',
        'p10',
        'p5',
        'p0',
      ]);
      assert.deepEqual(await ids({ type: 'process', text: 'x%y', limit: 100 }), [], '% is literal');
      assert.equal(
        (await ids({ type: 'process', text: '/work/project', limit: 100 })).length,
        25,
        'cwd matches',
      );
      assert.deepEqual(await ids({ type: 'process', sessionId: 'odd', clientName: 'codex', limit: 100 }), [
        'p9',
        'p7',
        'p5',
        'p3',
        'p1',
      ]);
      assert.deepEqual(await ids({ type: 'process', exitStatus: 'signal', limit: 100 }), ['p7']);
      assert.deepEqual(await ids({ type: 'process', exitStatus: 'success', until: t0 + 9, limit: 100 }), [
        'p9',
        'p6',
        'p3',
        'p0',
      ]);
      assert.deepEqual(await ids({ type: 'process', since: new Date(t0 + 23).toISOString(), limit: 100 }), [
        'p24',
        'p23',
      ]);
      // Pages of 4, newest first, every process exactly once.
      const seen: string[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const page = await trail.query({ type: 'process', limit: 4, ...(cursor ? { cursor } : {}) });
        seen.push(...page.items.map((x) => (x as AuditProcessItem).processId));
        cursor = page.nextCursor;
        pages++;
      } while (cursor);
      assert.equal(pages, 7);
      assert.deepEqual(
        seen,
        Array.from({ length: 25 }, (_, i) => `p${24 - i}`),
      );

      for (const [decision, host] of [
        ['allow', 'registry.npmjs.org'],
        ['deny', 'evil.test'],
        ['ask', 'unknown.test'],
      ] as const) {
        trail.record({
          kind: 'network',
          time: t0 + 100,
          sessionId: 'odd',
          processId: 'p1',
          host,
          port: 443,
          protocol: 'https_connect',
          method: 'CONNECT',
          decision,
          reason: decision === 'allow' ? 'allow' : 'not_allowed',
          source: 'baseline_policy',
          scope: 'domain',
          override: false,
          clientAddress: '127.0.0.1',
          metadata: null,
        });
      }
      const denied = await trail.query({ type: 'network', decision: 'deny', limit: 10 });
      assert.deepEqual(
        denied.items.map((x) => (x as { host: string }).host),
        ['evil.test'],
      );
      const npm = await trail.query({ type: 'network', text: 'NPMJS', clientName: 'codex', limit: 10 });
      assert.deepEqual(
        npm.items.map((x) => (x as { host: string }).host),
        ['registry.npmjs.org'],
      );
      const detail = await trail.process('odd', 'p1');
      assert.equal(detail.process?.exitCode, 1);
      assert.deepEqual(detail.process?.envNames, ['HOME', 'PATH']);
      assert.equal(detail.network.length, 3);
    } finally {
      await trail.close();
    }
  });

  test('`corral audit export` prints one JSON object per line with type and ISO time, filtered by --since and --session', async () => {
    const path = join(fresh(), 'audit.db');
    const trail = await AuditTrail.open({ dbPath: path });
    const t0 = Date.now() - DAY;
    trail.record({ kind: 'session', time: t0, sessionId: 'a', clientName: 'codex', event: 'connect' });
    trail.record(start(t0 + 1, 'a', 'p1', ['/bin/sh', '-c', 'echo hi']));
    trail.record(exit(t0 + 2, 'a', 'p1', 0));
    trail.record({
      kind: 'processClose',
      time: t0 + 3,
      sessionId: 'a',
      processId: 'p1',
      outputBytes: 3,
      head: new TextEncoder().encode('hi\n'),
      tail: null,
      omittedBytes: 0,
    });
    trail.record({
      kind: 'network',
      time: t0 + 4,
      sessionId: 'a',
      processId: 'p1',
      host: 'pypi.org',
      port: 443,
      protocol: 'https_connect',
      method: 'CONNECT',
      decision: 'deny',
      reason: 'denied',
      source: 'baseline_policy',
      scope: 'domain',
      override: false,
      clientAddress: null,
      metadata: { 'conversation.id': 'c1' },
    });
    trail.record({
      kind: 'approval',
      time: t0 + 5,
      event: 'decided',
      promptId: 'pr1',
      decision: 'allowSession',
      scope: 'session',
      decidedBy: 'panel',
      sessionId: 'a',
      processId: 'p1',
      command: ['/bin/sh'],
      host: 'example.test',
      port: 80,
      protocol: 'http',
      method: 'GET',
      released: 1,
    });
    trail.record({
      kind: 'fs',
      time: t0 + 6,
      sessionId: 'a',
      clientName: 'codex',
      op: 'remove',
      path: '/w/x',
      destination: null,
      bytes: null,
      outcome: 'refused',
      error: 'sandbox denied write to /w/x',
    });
    trail.record(start(t0 + 7, 'b', 'other', ['/bin/true']));
    trail.record({
      kind: 'session',
      time: t0 - 1000,
      sessionId: 'old',
      clientName: 'codex',
      event: 'connect',
    });
    await trail.close();

    const lines = (args: string[]) =>
      execFileSync(process.execPath, [CLI, 'audit', 'export', '--db', path, '--format', 'jsonl', ...args], {
        encoding: 'utf8',
      })
        .trimEnd()
        .split('\n')
        .map((l) => JSON.parse(l) as Record<string, unknown>);
    const all = lines([]);
    assert.deepEqual(
      all.map((o) => o.type),
      ['session', 'session', 'process', 'network', 'approval', 'fs', 'process'],
    );
    for (const o of all) assert.match(o.time as string, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    const times = all.map((o) => Date.parse(o.time as string));
    assert.deepEqual(
      times,
      [...times].sort((a, b) => a - b),
      'oldest first',
    );
    const proc = all[2]!;
    assert.deepEqual(proc.argv, ['/bin/sh', '-c', 'echo hi']);
    assert.equal(proc.cwd, '/work/project');
    assert.equal(proc.exitCode, 0);
    assert.equal(proc.sandboxType, 'none');
    assert.deepEqual(proc.envNames, ['HOME', 'PATH']);
    assert.equal(Buffer.from(proc.outputHeadBase64 as string, 'base64').toString(), 'hi\n');
    const net = all[3]!;
    assert.deepEqual([net.host, net.port, net.decision, net.reason], ['pypi.org', 443, 'deny', 'denied']);
    assert.deepEqual(net.metadata, { 'conversation.id': 'c1' });
    assert.equal(all[4]!.decidedBy, 'panel');
    assert.equal(all[5]!.outcome, 'refused');

    const since = lines(['--since', new Date(t0 + 4).toISOString()]);
    assert.deepEqual(
      since.map((o) => o.type),
      ['network', 'approval', 'fs', 'process'],
    );
    const session = lines(['--session', 'b']);
    assert.deepEqual(
      session.map((o) => [o.type, o.processId]),
      [['process', 'other']],
    );

    const bad = spawnCli(['audit', 'export', '--db', path, '--since', 'yesterday']);
    assert.equal(await bad.exit, 2);
    assert.match(bad.stderr(), /--since: not an ISO 8601 time: yesterday/);
    const missing = spawnCli(['audit', 'export', '--db', join(fresh(), 'none.db')]);
    assert.equal(await missing.exit, 1);
    assert.match(missing.stderr(), /no audit database at .*none\.db/);
  });
});

function spawnCli(args: string[], prefix: string[] = []) {
  const cmd = [...prefix, process.execPath, CLI, ...args];
  const child = spawn(cmd[0]!, cmd.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr.on('data', (d: Buffer) => {
    err += d.toString();
  });
  child.stdout.resume();
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, exit, stderr: () => err };
}
