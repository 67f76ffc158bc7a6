// Terminal controls through the audit trail (issue 30 item 6). An agent chooses its client name, its argv and its
// env names; `corral audit export` (and the server's log) must never write one of their C0/C1 controls, bidi
// controls or line separators raw to a terminal, JSON must parse back to the same values, and what is stored is
// capped per process (argv and env names 64 KiB, a client name 4 KiB), each cut marked with its original size.
// The real CLI both ways: `corral exec-server --audit-db` records, `corral audit export` prints.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { MAX_LIST_BYTES, MAX_TEXT_BYTES } from '../../src/audit/caps.js';
import { openAuditStore } from '../../src/audit/openStore.js';
import { MIGRATIONS, SCHEMA_VERSION } from '../../src/audit/schema.js';
import { escapeTerminalLines, escapeTerminalText, terminalJson } from '../../src/protocol/terminalText.js';
import { type Cli, CORRAL_BIN, ROOT, startCli } from '../helpers/cli.js';
import { RpcClient } from '../helpers/client.js';
import { tempDir } from '../helpers/server.js';

/** Every character a terminal may act on, NUL aside (no argv or env name can hold one). */
const CONTROLS = [
  ...Array.from({ length: 0x1f }, (_, i) => String.fromCharCode(i + 1)),
  '\u007f',
  ...Array.from({ length: 0x20 }, (_, i) => String.fromCharCode(0x80 + i)),
  '\u061c',
  '\u200e',
  '\u200f',
  '\u202a',
  '\u202b',
  '\u202c',
  '\u202d',
  '\u202e',
  '\u2066',
  '\u2067',
  '\u2068',
  '\u2069',
  '\u2028',
  '\u2029',
].join('');
/** Raw in terminal output: any of them but the newline that ends a line. */
const RAW =
  /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;
const RAW_ANY = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

const bytes = (s: string) => Buffer.byteLength(s, 'utf8');
const where = (text: string) => {
  const m = RAW.exec(text);
  return m
    ? `U+${m[0].charCodeAt(0).toString(16).padStart(4, '0')} at ${m.index}: …${JSON.stringify(text.slice(Math.max(0, m.index - 40), m.index + 10))}`
    : '';
};

function exportJsonl(db: string): string {
  return execFileSync(process.execPath, [CORRAL_BIN, 'audit', 'export', '--db', db], {
    cwd: ROOT,
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  });
}

describe('corral audit export and the log write no terminal control raw; stored text is capped and marked', () => {
  const dir = tempDir('corral-audit-controls-');
  const db = join(dir.path, 'state', 'audit.db');
  const NAME = `agent${CONTROLS}name`;
  const BIG_NAME = `big${CONTROLS}${'n'.repeat(100_000)}`;
  const CHUNK = 'a'.repeat(64 * 1024);
  // 1 MiB of argv in 16 arguments (Linux takes at most 128 KiB in one), after one holding every control.
  const ARGV = ['/bin/true', `x${CONTROLS}y`, ...Array.from({ length: 16 }, () => CHUNK)];
  const ENV_NAMES = [`E1${'\u009b'}31m`, `E2\u202eevil`, `E3\u001b[2J`, `E4\u2028x`];
  let cli: Cli;
  let out: string;
  let objects: Record<string, unknown>[];

  before(async () => {
    cli = await startCli(
      ['exec-server', '--listen', 'ws://127.0.0.1:0', '--audit-db', db, '--log-level', 'debug'],
      { env: { ...process.env, HOME: dir.path } },
    );
    for (const [name, id] of [
      [NAME, 'p1'],
      [BIG_NAME, 'p2'],
    ] as const) {
      const c = await RpcClient.open(cli.url!, name);
      await c.request('process/start', {
        processId: id,
        argv: ARGV,
        cwd: '/tmp',
        env: Object.fromEntries(ENV_NAMES.map((n) => [n, 'v'])),
        tty: false,
        metadata: id === 'p1' ? { note: CONTROLS } : { big: 'm'.repeat(100_000) },
      });
      await c.collect(id);
      c.close();
    }
    await cli.stop(); // SIGTERM: the trail is flushed before exit
    out = exportJsonl(db);
    objects = out
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  });
  after(() => dir.cleanup());

  it('the export holds no raw control, bidi or separator character', () => {
    assert.ok(out.length > 0);
    assert.doesNotMatch(out, RAW, where(out));
    // …and they are there, escaped.
    assert.match(out, /\\u009b/);
    assert.match(out, /\\u202e/);
    assert.match(out, /\\u2028/);
    assert.match(out, /\\u001b/);
  });

  it('JSON parses back to the same client names, argv items and env names', () => {
    const sessions = objects.filter((o) => o.type === 'session');
    assert.ok(sessions.some((s) => s.clientName === NAME && s.truncated === undefined));
    const p1 = objects.find((o) => o.type === 'process' && o.processId === 'p1')!;
    assert.ok(p1, out.slice(0, 2000));
    assert.equal(p1.clientName, NAME);
    const argv = p1.argv as string[];
    assert.deepEqual(argv.slice(0, 2), ARGV.slice(0, 2));
    for (const n of ENV_NAMES) assert.ok((p1.envNames as string[]).includes(n), n);
    assert.deepEqual(p1.metadata, { note: CONTROLS });
  });

  it('1 MiB of argv is stored as its first 64 KiB, marked truncated with the original size', () => {
    const p1 = objects.find((o) => o.type === 'process' && o.processId === 'p1')!;
    const argv = p1.argv as string[];
    const kept = argv.reduce((n, a) => n + bytes(a), 0);
    assert.equal(kept, MAX_LIST_BYTES);
    argv.forEach((a, i) => {
      if (i < argv.length - 1) assert.equal(a, ARGV[i]);
      else assert.ok(ARGV[i]!.startsWith(a));
    });
    assert.deepEqual(p1.truncated, {
      argv: { originalBytes: ARGV.reduce((n, a) => n + bytes(a), 0), originalItems: ARGV.length },
    });
    assert.ok(out.length < 4 * MAX_LIST_BYTES * 2, `the export is ${out.length} characters`);
  });

  it('a 100 KB client name is stored as its first 4 KiB, 100 KB of metadata not at all, each marked', () => {
    const p2 = objects.find((o) => o.type === 'process' && o.processId === 'p2')!;
    const name = p2.clientName as string;
    assert.ok(BIG_NAME.startsWith(name) && bytes(name) <= MAX_TEXT_BYTES && bytes(name) > MAX_TEXT_BYTES - 4);
    assert.deepEqual((p2.truncated as Record<string, unknown>).clientName, {
      originalBytes: bytes(BIG_NAME),
    });
    // 100 KB of metadata is not kept (JSON cannot be cut and stay JSON); its size is.
    assert.equal(p2.metadata, null);
    assert.ok(
      ((p2.truncated as Record<string, { originalBytes: number }>).metadata?.originalBytes ?? 0) > 100_000,
    );
    const s = objects.find((o) => o.type === 'session' && (o.clientName as string).startsWith('big'))!;
    assert.equal(s.clientName, name);
    assert.deepEqual(s.truncated, { clientName: { originalBytes: bytes(BIG_NAME) } });
  });

  it("the server's log (debug) writes no control raw either", () => {
    assert.doesNotMatch(cli.stderr(), RAW, where(cli.stderr()));
  });
});

describe('the log', () => {
  const dir = tempDir('corral-log-controls-');
  after(() => dir.cleanup());

  it('a line holding peer text is one line, no control raw, on stderr and in the log file', () => {
    const file = join(dir.path, 'corral.log');
    const script = `
      import { createLogger } from './src/server/core/log.ts';
      const log = createLogger({ level: 'debug', file: ${JSON.stringify(file)} });
      const evil = process.argv[1];
      log.info('client', evil);
      log.warn(\`registry said: \${evil}\`);
      log.error({ name: evil });
      log.debug(evil);`;
    const r = spawnSync(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', script, `x${CONTROLS}y`],
      {
        cwd: ROOT,
        encoding: 'utf8',
      },
    );
    assert.equal(r.status, 0, r.stderr);
    const lines = r.stderr.trimEnd().split('\n');
    assert.equal(lines.length, 4, r.stderr);
    assert.doesNotMatch(r.stderr, RAW, where(r.stderr));
    assert.match(r.stderr, /\\u009b/);
    const logged = readFileSync(file, 'utf8');
    assert.equal(logged.trimEnd().split('\n').length, 4, logged);
    assert.doesNotMatch(logged, RAW, where(logged));
  });
});

describe('the one escape', () => {
  it('plain text: every such character as \\uXXXX, newlines and tabs included; others untouched', () => {
    const e = escapeTerminalText(`a${CONTROLS}b ✓ é 漢 😀`);
    assert.doesNotMatch(e, RAW_ANY);
    assert.ok(e.startsWith('a\\u0001\\u0002'));
    assert.ok(e.endsWith('\\u2029b ✓ é 漢 😀'));
    assert.equal(escapeTerminalText('plain'), 'plain');
    assert.equal(escapeTerminalLines(`x\u001b[2J\ny\u009b`), 'x\\u001b[2J\ny\\u009b');
  });
  it('JSON: the same value once parsed, at any depth', () => {
    const v = { [`k${CONTROLS}`]: [`v${CONTROLS}`, { deep: CONTROLS }], n: 1 };
    const j = terminalJson(v, 2);
    assert.doesNotMatch(j, RAW);
    assert.deepEqual(JSON.parse(j), v);
    assert.deepEqual(JSON.parse(terminalJson(v)), v);
    assert.doesNotMatch(terminalJson(v), RAW_ANY);
  });
});

describe('a version 1 audit database (before the caps) is still exported, and migrated by the server', () => {
  const dir = tempDir('corral-audit-v1-');
  const db = join(dir.path, 'audit.db');
  after(() => dir.cleanup());

  it('exported as it is, then migrated in place on open with nothing lost', () => {
    const raw = new Database(db);
    raw.exec(MIGRATIONS[0]!);
    raw.pragma('user_version = 1');
    raw
      .prepare(
        `INSERT INTO processes (session_id, process_id, client_name, command, cwd, tty, pid, sandbox_type,
           started_at) VALUES ('s', 'p', ?, 'echo hi', '/tmp', 0, 1, 'none', 1000)`,
      )
      .run(`old\u009bname`);
    raw
      .prepare(`INSERT INTO process_details (process, argv, env_names) VALUES (1, ?, '[]')`)
      .run(JSON.stringify(['echo', 'hi\u202e']));
    raw
      .prepare(
        `INSERT INTO sessions (time, session_id, client_name, event) VALUES (1000, 's', 'old', 'connect')`,
      )
      .run();
    raw.close();

    const before = exportJsonl(db);
    assert.doesNotMatch(before, RAW);
    const lines = before
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.equal(lines.length, 2);
    const p = lines.find((l) => l.type === 'process')!;
    assert.deepEqual(p.argv, ['echo', 'hi\u202e']);
    assert.equal(p.clientName, 'old\u009bname');
    assert.equal(p.truncated, undefined);

    openAuditStore(db).close();
    const migrated = new Database(db, { readonly: true });
    assert.equal(migrated.pragma('user_version', { simple: true }), SCHEMA_VERSION);
    migrated.close();
    assert.equal(exportJsonl(db), before);
  });
});
