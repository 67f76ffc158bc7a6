/**
 * A trail nobody can quietly edit (issue 37, item 3; src/audit/chain.ts, verify.ts, exportChain.ts). Events are
 * stored through the real store (a signed chain, checkpoints at close); then someone edits, deletes, inserts or
 * reorders rows with the sqlite3 CLI (another process, as an attacker without the key would), and
 * `corral audit verify` names the first event touched and exits 1. Rewriting the whole chain after an edit is caught by
 * the signed checkpoint. An untouched database whose head retention pruned verifies; an export verifies elsewhere with
 * the public key alone, and an edited export line is named. verify's parser of an export is fed malformed input.
 *
 * On the old code (cca01b7) there was no chain and no `audit verify`: every case here fails there.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { createPrivateKey, createPublicKey } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as chain from '../../src/audit/chain.js';
import { chainKeyPath } from '../../src/audit/chainKey.js';
import { exportAudit, verifyCommand } from '../../src/audit/cli.js';
import type { AuditRecord } from '../../src/audit/events.js';
import { verifyExport } from '../../src/audit/exportChain.js';
import { openAuditStore } from '../../src/audit/openStore.js';
import { sqliteProblem } from '../../src/audit/sqliteDriver.js';
import { databaseSource } from '../../src/audit/verify.js';
import { CORRAL_BIN, ROOT } from '../helpers/cli.js';
import { textSink as sink } from '../helpers/textSink.js';

const skip = sqliteProblem() ?? false;
const hasSqliteCli = spawnSync('sqlite3', ['-version']).status === 0;
const T0 = Date.parse('2026-01-01T00:00:00Z');

function records(n: number, t0 = T0): AuditRecord[] {
  const out: AuditRecord[] = [];
  for (let i = 0; i < n; i++) {
    const t = t0 + i * 1000;
    out.push({ kind: 'session', time: t, sessionId: `s${i}`, clientName: 'agent', event: 'connect' });
    out.push({
      kind: 'processStart',
      time: t + 1,
      sessionId: `s${i}`,
      processId: `p${i}`,
      clientName: 'agent',
      argv: ['/bin/echo', `hello ${i}`],
      cwd: '/tmp',
      tty: false,
      envNames: ['PATH'],
      sandboxType: 'none',
      policy: null,
      network: null,
      metadata: null,
      pid: 1000 + i,
    });
    out.push({
      kind: 'network',
      time: t + 2,
      sessionId: `s${i}`,
      processId: `p${i}`,
      host: `host${i}.test`,
      port: 443,
      protocol: 'https',
      method: 'CONNECT',
      decision: i % 2 ? 'allow' : 'deny',
      reason: 'policy',
      source: 'config',
      scope: null,
      override: false,
      clientAddress: '127.0.0.1',
      metadata: null,
    });
    out.push({
      kind: 'processExit',
      time: t + 3,
      sessionId: `s${i}`,
      processId: `p${i}`,
      exitCode: 0,
      signal: null,
      sandboxDenied: false,
      limitHit: null,
    });
    out.push({
      kind: 'processClose',
      time: t + 4,
      sessionId: `s${i}`,
      processId: `p${i}`,
      outputBytes: 8,
      head: new Uint8Array(Buffer.from(`hello ${i}\n`)),
      tail: null,
      omittedBytes: 0,
    });
    out.push({
      kind: 'fs',
      time: t + 5,
      sessionId: `s${i}`,
      clientName: 'agent',
      op: 'writeFile',
      path: `/tmp/f${i}`,
      destination: null,
      bytes: 3,
      outcome: 'allowed',
      error: null,
    });
  }
  return out;
}

/** A database of `n` rounds of events written by the store, closed with its checkpoint. */
function makeDb(dir: string, name: string, n = 6): string {
  const path = join(dir, name, 'audit.db');
  const store = openAuditStore(path, { sign: true });
  const all = records(n);
  // Several batches, as the worker commits them.
  for (let i = 0; i < all.length; i += 7) store.write(all.slice(i, i + 7));
  store.checkpoint();
  store.close();
  return path;
}

const sql = (db: string, statement: string) => execFileSync('sqlite3', [db, statement], { encoding: 'utf8' });

function verify(db: string): { code: number; text: string } {
  const out = sink();
  const code = verifyCommand(['--db', db], { out, err: sink() } as never);
  return { code, text: out.text };
}

describe('audit verify: the hash chain', { skip }, () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'corral-chain-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('an untouched database verifies, signed through its last event; the key file is 0600', () => {
    const db = makeDb(dir, 'clean');
    const r = verify(db);
    assert.equal(r.code, 0, r.text);
    assert.match(r.text, /the chain holds \(36 events, 1\.\.36\)/);
    assert.match(r.text, /signed through event 36/);
    const mode = (
      execFileSync('stat', ['-c', '%a', chainKeyPath(db)], { encoding: 'utf8' }) as string
    ).trim();
    assert.equal(mode, '600');
  });

  test('the CLI: corral audit verify exits 0 on a clean database and 1 on an edited one', {
    skip: !hasSqliteCli,
  }, () => {
    const db = makeDb(dir, 'cli');
    const ok = spawnSync(process.execPath, [CORRAL_BIN, 'audit', 'verify', '--db', db], {
      cwd: ROOT,
      encoding: 'utf8',
    });
    assert.equal(ok.status, 0, ok.stderr + ok.stdout);
    sql(db, "UPDATE network SET decision = 'allow' WHERE id = 3");
    const bad = spawnSync(process.execPath, [CORRAL_BIN, 'audit', 'verify', '--db', db], {
      cwd: ROOT,
      encoding: 'utf8',
    });
    assert.equal(bad.status, 1, bad.stderr + bad.stdout);
    assert.match(bad.stdout, /BROKEN: event \d+, the network event \(network row 3\): its row was edited/);
  });

  const cases: { name: string; edit: string; expect: RegExp }[] = [
    {
      name: 'a network decision edited',
      edit: "UPDATE network SET decision = 'allow' WHERE id = 1",
      expect: /BROKEN: event \d+, the network event \(network row 1\): its row was edited/,
    },
    {
      name: "a process's exit code edited",
      edit: 'UPDATE processes SET exit_code = 1 WHERE id = 4',
      expect: /BROKEN: event \d+, the process-exit event \(processes row 4\): its row was edited/,
    },
    {
      name: "a process's stored output edited",
      edit: "UPDATE process_output SET head = X'00' WHERE process = 5",
      expect: /BROKEN: event \d+, the process-close event \(processes row 5\): its row was edited/,
    },
    {
      name: "a process's argv edited (details table)",
      edit: `UPDATE process_details SET argv = '["/bin/true"]' WHERE process = 3`,
      expect: /BROKEN: event \d+, the process-start event \(processes row 3\): its row was edited/,
    },
    {
      name: 'a session row deleted',
      edit: 'DELETE FROM sessions WHERE id = 3',
      expect: /BROKEN: event \d+, the session event \(sessions row 3\): its row was deleted/,
    },
    {
      name: 'a row inserted',
      edit: `INSERT INTO fs_events (time, session_id, client_name, op, path, outcome) VALUES (${T0 + 1500}, 's1', 'agent', 'remove', '/etc/x', 'allowed')`,
      expect: /BROKEN: fs_events row 7 was inserted: no event of the chain names it/,
    },
    {
      name: 'two network rows reordered (contents swapped)',
      edit: 'UPDATE network SET id = -1 WHERE id = 2; UPDATE network SET id = 2 WHERE id = 3; UPDATE network SET id = 3 WHERE id = -1',
      expect:
        /BROKEN: event \d+, the network event \(network row \d\): its row now holds what event \d+ recorded \(network row \d\): rows were reordered/,
    },
    {
      name: 'a chain entry deleted with its row',
      edit: "DELETE FROM fs_events WHERE id = 3; DELETE FROM chain WHERE tbl = 'fs_events' AND row = 3",
      expect: /BROKEN: event \d+ was deleted \(the chain goes from \d+ to \d+\)/,
    },
    {
      name: 'the last events deleted with their chain entries',
      edit: "DELETE FROM fs_events WHERE id = 6; DELETE FROM chain WHERE tbl = 'fs_events' AND row = 6",
      expect: /BROKEN: events 36\.\.36 were deleted: the chain ends at event 35/,
    },
    {
      name: "an entry's digest rewritten to match an edited row",
      edit: "UPDATE sessions SET client_name = 'someone' WHERE id = 1; UPDATE chain SET digest = 'ab' WHERE tbl = 'sessions' AND row = 1",
      expect: /BROKEN: event 1, the session event \(sessions row 1\): its chain entry was edited/,
    },
  ];
  for (const c of cases) {
    test(`${c.name}: verify names it and exits 1`, { skip: !hasSqliteCli }, () => {
      const db = makeDb(dir, c.name.replace(/\W+/g, '-'));
      sql(db, c.edit);
      const r = verify(db);
      assert.equal(r.code, 1, r.text);
      assert.match(r.text.split('\n')[0]!, c.expect, r.text);
    });
  }

  test('the whole chain recomputed after an edit (no key): the signed checkpoint catches it', () => {
    const db = makeDb(dir, 'rewritten');
    // The attacker edits a row and rebuilds every digest and hash with Corral's own code, but cannot sign.
    const h = openAuditStore(db, {});
    h.db.prepare("UPDATE network SET host = 'evil.test' WHERE id = 1").run();
    const src = databaseSource(h.db);
    const fixes: { seq: number; digest: string; hash: string }[] = [];
    let prev = '0'.repeat(64);
    // Recompute with the same functions verify uses (an attacker has Corral's source).
    for (const e of src.entries()) {
      const values = e.kind === 'prune' ? null : src.read(e.kind as never, e.row!);
      const digest = values ? chain.rowDigest(e.kind, values) : e.digest;
      const hash = chain.entryHash(prev, { ...e, digest });
      fixes.push({ seq: e.seq, digest, hash });
      prev = hash;
    }
    const upd = h.db.prepare('UPDATE chain SET digest = ?, hash = ? WHERE seq = ?');
    for (const f of fixes) upd.run(f.digest, f.hash, f.seq);
    h.close();
    const r = verify(db);
    assert.equal(r.code, 1, r.text);
    assert.match(r.text, /BROKEN: the chain up to event 36 was rewritten/);
  });

  test('retention pruned the head: the rest still verifies (a signed anchor at the cut)', () => {
    const path = join(dir, 'pruned', 'audit.db');
    const store = openAuditStore(path, { sign: true });
    store.write(records(6));
    store.write(records(4, T0 + 10 * 86_400_000));
    // Everything of the first batch is older than 5 days at this `now`.
    while (store.retentionStep({ maxAgeMs: 5 * 86_400_000, maxBytes: 1e12 }, T0 + 12 * 86_400_000)) {}
    store.checkpoint();
    store.close();
    const r = verify(path);
    assert.equal(r.code, 0, r.text);
    const h = openAuditStore(path, { readonly: true });
    const anchor = h.db.prepare('SELECT seq FROM chain_anchor').pluck(true).get() as number;
    assert.ok(anchor >= 36, `the cut is after the first batch: ${anchor}`);
    assert.equal(h.db.prepare('SELECT count(*) FROM sessions').pluck(true).get(), 4);
    h.close();
    // Deleting one more row by hand after the cut is still named.
    if (hasSqliteCli) {
      sql(path, 'DELETE FROM network WHERE id = (SELECT max(id) FROM network)');
      const bad = verify(path);
      assert.equal(bad.code, 1);
      assert.match(bad.text, /its row was deleted/);
    }
  });

  test('a process whose exit and close come in later batches is chained by its row; one retention deleted meanwhile is not', () => {
    const path = join(dir, 'split', 'audit.db');
    const store = openAuditStore(path, { sign: true });
    const old = records(2);
    const recent = records(2, T0 + 10 * 86_400_000).map((r) =>
      'sessionId' in r ? { ...r, sessionId: `r-${r.sessionId}` } : r,
    );
    const starts = (rs: AuditRecord[]) =>
      rs.filter((r) => r.kind !== 'processExit' && r.kind !== 'processClose');
    const ends = (rs: AuditRecord[]) =>
      rs.filter((r) => r.kind === 'processExit' || r.kind === 'processClose');
    store.write([...starts(old), ...starts(recent)]);
    // The old processes' rows go (started more than 5 days before `now`) while they still run.
    while (store.retentionStep({ maxAgeMs: 5 * 86_400_000, maxBytes: 1e12 }, T0 + 12 * 86_400_000)) {}
    store.write([...ends(old), ...ends(recent)]);
    store.checkpoint();
    store.close();
    const r = verify(path);
    assert.equal(r.code, 0, r.text);
    const h = openAuditStore(path, { readonly: true });
    const entries = h.db
      .prepare(
        "SELECT c.kind, p.process_id AS pid FROM chain c JOIN processes p ON p.id = c.row WHERE c.tbl = 'processes' ORDER BY c.seq",
      )
      .all() as { kind: string; pid: string }[];
    assert.deepEqual(
      entries.map((e) => `${e.kind} ${e.pid}`),
      [
        'process-start p0',
        'process-start p1',
        'process-exit p0',
        'process-close p0',
        'process-exit p1',
        'process-close p1',
      ],
    );
    assert.equal(h.db.prepare('SELECT count(*) FROM processes').pluck(true).get(), 2);
    h.close();
  });

  test('an export verifies elsewhere with the public key alone; an edited line is named', async () => {
    const db = makeDb(dir, 'export');
    const exported = sink();
    await exportAudit({ dbPath: db, since: null, sessionId: null, out: exported as never, chain: true });
    const text = exported.text;
    const pub = createPublicKey(createPrivateKey(readFileSync(chainKeyPath(db), 'utf8')));
    const ok = verifyExport(text, pub);
    assert.equal(ok.ok, true, JSON.stringify(ok.problems.slice(0, 3)));
    const file = join(dir, 'export.jsonl');
    writeFileSync(file, text);
    const pem = pub.export({ type: 'spki', format: 'pem' }) as string;
    writeFileSync(join(dir, 'pub.pem'), pem);
    const out = sink();
    const io = { out, err: sink() };
    assert.equal(
      verifyCommand(['--export', file, '--public-key', `@${join(dir, 'pub.pem')}`], io as never),
      0,
      out.text,
    );
    // An event line edited (the decision of a network event).
    const lines = text.split('\n');
    const i = lines.findIndex((l) => l.includes('"type":"network"') && l.includes('"decision":"deny"'));
    lines[i] = lines[i]!.replace('"decision":"deny"', '"decision":"allow"');
    const edited = verifyExport(lines.join('\n'), pub);
    assert.equal(edited.ok, false);
    assert.match(
      edited.problems[0]!.message,
      new RegExp(`export line ${i + 1} \\(network row \\d+\\) is not what the chain vouches for`),
    );
    // An event line removed from an unfiltered export.
    const removed = verifyExport(lines.filter((_, j) => j !== i).join('\n'), pub);
    assert.equal(removed.ok, false);
    assert.ok(removed.problems.some((p) => p.kind === 'deleted'));
    // Signed by another key: refused with the right one.
    const other = createPublicKey(
      createPrivateKey(
        (await import('node:crypto'))
          .generateKeyPairSync('ed25519')
          .privateKey.export({ type: 'pkcs8', format: 'pem' }),
      ),
    );
    const wrongKey = verifyExport(text, other);
    assert.equal(wrongKey.ok, false);
    assert.equal(wrongKey.problems[0]!.kind, 'signature');
  });

  test("verify's export parser: deep, wide, huge and malformed input gets a clear error or a named problem", () => {
    assert.throws(() => verifyExport('', null), /carries no hash chain/);
    assert.throws(() => verifyExport('{"type":"session"}\n', null), /carries no hash chain/);
    const deep = `${'['.repeat(100_000)}${']'.repeat(100_000)}`;
    const header = '{"type":"chain","publicKey":null,"filtered":false,"anchor":null,"checkpoints":[]}';
    for (const junk of [
      deep,
      'not json',
      '42',
      'null',
      '[1,2,3]',
      `{"type":"chain-entry","seq":"x","kind":{},"table":[],"row":"1","digest":1,"hash":null,"pruned":7,"values":"v"}`,
      `{"type":"chain-entry","seq":1,"kind":"prune","table":"network","row":null,"digest":"d","hash":"h","pruned":"not json","values":null}`,
      `{"type":"network","chain":{"table":"network","row":1e300}}`,
      JSON.stringify({ type: 'fs', wide: Array.from({ length: 100_000 }, (_, i) => i) }),
      `{"type":"session","x":"${'a'.repeat(5_000_000)}"}`,
    ]) {
      const r = verifyExport(`${header}\n${junk}\n`, null);
      assert.equal(r.ok, false, `${junk.slice(0, 40)} must not verify`);
      assert.ok(r.problems.length > 0);
    }
  });
});
