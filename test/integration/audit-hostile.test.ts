// The audit database against a hostile sandboxed process and a hostile local user (issue 15). The database sits
// inside the sandbox's own writable workspace, the worst place for it: a sandboxed process still cannot read, write,
// replace or remove it. Another local user cannot read it either (0600 file in a 0700 directory).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { AuditProcessResult } from '../../src/protocol/audit.js';
import type { RpcClient } from '../helpers/client.js';
import { needsSandbox } from '../helpers/native.js';
import { tempDir } from '../helpers/server.js';
import { type AuditedServer, openDb, startAuditedServer } from './audit-helpers.js';
import { seed, special, workspaceEntries } from './sandbox-util.js';

const BWRAP = '/usr/bin/bwrap';

describe('the audit database and a hostile process', {
  skip: (!existsSync(BWRAP) && 'bubblewrap is not installed') || needsSandbox,
}, () => {
  const dir = tempDir('corral-audit-hostile-');
  const ws = join(dir.path, 'workspace');
  const dbDir = join(ws, '.corral-state');
  const dbPath = join(dbDir, 'audit.db');
  let as: AuditedServer;
  let agent: RpcClient & { sessionId: string };
  let n = 0;

  before(async () => {
    mkdirSync(ws, { recursive: true });
    chmodSync(dir.path, 0o755);
    as = await startAuditedServer({ dbPath }, { launcher: { sandbox: { tmpdir: dir.path } } });
    agent = await as.agent('hostile');
    // Something to steal: a process whose output holds a marker.
    await runIn(null, ['/bin/echo', 'MARKER-in-the-trail']);
    await as.audit.trail!.flush();
  });
  after(async () => {
    await as?.close();
    dir.cleanup();
  });

  /** Runs a command (sandboxed when `sandbox` is given) in the workspace and returns its output and exit code. */
  async function runIn(
    sandbox: unknown,
    argv: string[],
  ): Promise<{ out: string; stdout: string; exitCode: number; sandboxType: string }> {
    const processId = `h${++n}`;
    const started = await agent.request<{ sandboxType: string }>('process/start', {
      processId,
      argv,
      cwd: ws,
      env: { PATH: '/usr/bin:/bin' },
      tty: false,
      ...(sandbox ? { sandbox } : {}),
    });
    const events = await agent.collect(processId, 20_000);
    const exited = events.find((e) => e.method === 'process/exited')!;
    return {
      out: agent.output(processId),
      stdout: agent.output(processId, 'stdout'),
      exitCode: exited.params.exitCode as number,
      sandboxType: started.sandboxType,
    };
  }

  const workspaceWrite = () =>
    seed({
      cwd: ws,
      entries: workspaceEntries(),
    });

  test('a sandboxed process with the database inside its writable workspace cannot read, write, replace or remove it', async () => {
    const attack = [
      'echo "== cat"; cat .corral-state/audit.db | head -c 64 | od -c | head -2',
      'echo "== ls"; ls -la .corral-state',
      'echo "== append"; echo pwned >> .corral-state/audit.db && echo APPENDED',
      'echo "== wal"; echo pwned > .corral-state/audit.db-wal && echo WAL-WRITTEN',
      'echo "== replace"; mv .corral-state gone && echo MOVED',
      'echo "== remove"; rm -rf .corral-state/* && ls .corral-state/audit.db && echo REMOVED-OR-STILL-THERE',
      'echo "== link"; ln -s .corral-state/audit.db ./link && cat ./link | head -c 16; echo',
      'echo "== hardlink"; ln .corral-state/audit.db ./hard && echo HARDLINKED',
      'echo "== grep"; grep -r MARKER-in-the-trail .corral-state && echo FOUND',
      'echo "== proc"; ls -l /proc/*/fd 2>/dev/null | grep -c audit.db',
    ].join('; ');
    const r = await runIn(workspaceWrite(), ['/bin/sh', '-c', attack]);
    assert.equal(r.sandboxType, 'linuxSeccomp');
    for (const bad of [
      'SQLite',
      'APPENDED',
      'WAL-WRITTEN',
      'MOVED',
      'REMOVED-OR-STILL-THERE',
      'HARDLINKED',
      'FOUND',
    ]) {
      assert.equal(r.out.includes(bad), false, `${bad} in:\n${r.out}`);
    }
    // stdout and stderr interleave as read: match each complaint on its own.
    assert.match(r.out, /ls: cannot open directory '\.corral-state': Permission denied/, r.out);
    assert.match(r.out, /cannot create \.corral-state\/audit\.db: Permission denied/, r.out);
    assert.match(r.out, /mv: cannot move '\.corral-state' to 'gone'/, r.out);
    assert.match(r.stdout, /== proc\n0\n/, r.out);
    // The database is whole and still being written.
    await runIn(null, ['/bin/echo', 'after-the-attack']);
    await as.audit.trail!.flush();
    const db = openDb(dbPath);
    assert.equal(db.pragma('integrity_check', { simple: true }), 'ok');
    const rows = db.prepare('SELECT process_id FROM processes ORDER BY id').all() as { process_id: string }[];
    db.close();
    assert.ok(rows.length >= 3, JSON.stringify(rows));
    assert.ok(existsSync(dbPath) && !existsSync(join(ws, 'gone')));
    // The attack itself is on record, with what it printed.
    const d = await (await as.panel()).request<AuditProcessResult>('audit/process', {
      sessionId: as.publicId(agent),
      processId: `h${n - 1}`,
    });
    assert.equal(d.process?.sandboxType, 'linuxSeccomp');
    assert.match(Buffer.from(d.output!.head, 'base64').toString(), /== cat/);
  });

  test('a sandbox with full disk read and only /tmp writable cannot read it either', async () => {
    assert.ok(existsSync(dbPath));
    const sandbox = seed({ cwd: ws, entries: [special('root', 'read'), special('slash_tmp', 'write')] });
    const r = await runIn(sandbox, [
      '/bin/sh',
      '-c',
      `cat ${dbPath} | head -c 16; echo "rc=$?"; ls ${dbDir}; echo done`,
    ]);
    assert.equal(r.out.includes('SQLite'), false, r.out);
    assert.match(r.out, /Permission denied|No such file/, r.out);
  });

  test('another local user (uid 65534) cannot read the database or list its directory', {
    skip: process.getuid?.() !== 0 && 'needs root',
  }, () => {
    // The test's own temporary directories are 0700; open the way down to the database's directory for the test.
    chmodSync(ws, 0o755);
    const nobody = ['--reuid', '65534', '--regid', '65534', '--clear-groups'];
    const cat = spawnSync('setpriv', [...nobody, 'cat', dbPath], { encoding: 'utf8' });
    assert.notEqual(cat.status, 0);
    assert.match(cat.stderr, /Permission denied/);
    assert.equal(statSync(dbDir).mode & 0o777, 0o700, 'the directory the server made for it is 0700');
    const ls = spawnSync('setpriv', [...nobody, 'ls', dbDir], { encoding: 'utf8' });
    assert.notEqual(ls.status, 0);
    assert.match(ls.stderr, /Permission denied/);
  });
});
