/**
 * No loss on the hot path (issue 32): a client that stops reading while its commands write (the server fills its
 * queue to the backpressure mark and pauses the children) still gets every byte, every process/closed exactly once,
 * in seq order; and the audit trail, batched per turn of the event loop (src/audit/trail.ts), holds every process
 * with its close and its output byte count. Real processes, a real socket, a real audit database.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { HIGH_WATER_BYTES } from '../../src/server/core/session.js';
import { tempDir, until } from '../helpers/server.js';
import { type AuditedServer, startAuditedServer } from './audit-helpers.js';

describe('a slow reader loses nothing', { timeout: 120_000 }, () => {
  let dir: { path: string; cleanup(): void };
  let ts: AuditedServer;
  before(async () => {
    dir = tempDir('corral-slow-reader-');
    ts = await startAuditedServer({ dbPath: join(dir.path, 'audit.db') });
  });
  after(async () => {
    await ts.close();
    dir.cleanup();
  });

  it('every byte, every process/closed and every audit row, with the client paused until the server holds', async () => {
    const c = await ts.agent();
    const data = randomBytes(3 * 1024 * 1024);
    const file = join(dir.path, 'data.bin');
    writeFileSync(file, data);
    const writers = ['w0', 'w1', 'w2', 'w3'];
    const shorts = Array.from({ length: 40 }, (_, i) => `t${i}`);
    const start = (id: string, argv: string[]) =>
      c.request('process/start', {
        processId: id,
        argv,
        cwd: '/tmp',
        env: { PATH: '/usr/bin:/bin' },
        tty: false,
      });
    // The starts go out, then the client reads nothing until the server is holding output for it.
    const started = [
      ...writers.map((id) => start(id, ['/bin/cat', file])),
      ...shorts.map((id) => start(id, ['/bin/true'])),
    ];
    c.ws.pause();
    const session = ts.sessionOf(c);
    await until(
      () =>
        (session.conn?.queuedBytes ?? 0) >= HIGH_WATER_BYTES ||
        [...writers, ...shorts].every((id) => session.get(id)?.state === 'closed'),
      60_000,
      'the server to hold output for the paused client',
    );
    c.ws.resume();
    await Promise.all(started);
    for (const id of [...writers, ...shorts]) {
      const events = await c.collect(id, 60_000);
      assert.deepEqual(
        events.map((n) => n.params.seq),
        events.map((_, i) => i + 1),
        `${id}: seqs contiguous from 1`,
      );
      assert.equal(events.at(-1)!.method, 'process/closed', `${id}: closed last`);
      assert.equal(events.filter((n) => n.method === 'process/closed').length, 1, `${id}: closed once`);
      const out = Buffer.concat(
        events
          .filter((n) => n.method === 'process/output')
          .map((n) => Buffer.from(n.params.chunk as string, 'base64')),
      );
      if (writers.includes(id)) assert.ok(out.equals(data), `${id}: every byte, in order (${out.length})`);
      else assert.equal(out.length, 0);
    }
    await ts.audit.trail!.flush();
    const db = new Database(join(dir.path, 'audit.db'), { readonly: true });
    const rows = db
      .prepare('SELECT process_id, closed_at, exit_code, output_bytes FROM processes WHERE session_id = ?')
      .all(ts.publicId(c)) as {
      process_id: string;
      closed_at: number | null;
      exit_code: number;
      output_bytes: number;
    }[];
    db.close();
    const byId = new Map(rows.map((r) => [r.process_id, r]));
    for (const id of [...writers, ...shorts]) {
      const r = byId.get(id);
      assert.ok(r, `${id}: an audit row`);
      assert.ok(r.closed_at !== null, `${id}: its close recorded`);
      assert.equal(r.exit_code, 0, `${id}: its exit recorded`);
      assert.equal(r.output_bytes, writers.includes(id) ? data.length : 0, `${id}: its output bytes`);
    }
    assert.equal(rows.length, writers.length + shorts.length, 'one row each');
    c.close();
  });
});
