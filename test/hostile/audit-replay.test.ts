/**
 * Replay (issue 37, item 4): output chunks stored with their times (pipes and PTY), `corral audit replay`,
 * `corral audit export --format asciicast`, `audit/replay`; and what a hostile command or caller can do to them:
 * a huge output (bounded per process, the cut marked with what was dropped), a flood of tiny chunks (bounded parts),
 * terminal controls in the recording (escaped unless --raw), malformed arguments and params (named).
 * On the old code (cca01b7) nothing was stored in process_chunks, and none of these commands existed.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { auditMain, isAuditUsageError, verifyCommand } from '../../src/audit/cli.js';
import { MAX_REPLAY_PARTS } from '../../src/audit/replayRecorder.js';
import { DEFAULT_OUTPUT_BYTES } from '../../src/audit/trail.js';
import type { AuditReplayResult } from '../../src/protocol/audit.js';
import { RpcCallError } from '../helpers/client.js';
import { tempDir } from '../helpers/server.js';
import { type AuditedServer, openDb, run, startAuditedServer } from '../integration/audit-helpers.js';

const RAW_CONTROL =
  /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

/** A request's answer or error; 'no answer' when none came in 10 s (a hang is a failure, named, not a test timeout). */
function answer(p: Promise<unknown>): Promise<unknown> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.catch((e: unknown) => e),
    new Promise((done) => {
      timer = setTimeout(() => done('no answer'), 10_000);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** Runs `corral audit …` in-process; its exit code (2: a usage error, as the CLI maps it) and what it wrote. */
async function audit(argv: string[]): Promise<{ code: number; out: Buffer; err: string }> {
  const out: Buffer[] = [];
  let err = '';
  const io = {
    out: { write: (t: string | Uint8Array) => out.push(Buffer.from(t)) > 0 },
    err: {
      write: (t: string) => {
        err += t;
        return true;
      },
    },
  };
  let code: number;
  try {
    code = await auditMain(argv, io as never);
  } catch (e) {
    code = isAuditUsageError(e) ? 2 : 1;
    err += (e as Error).message;
  }
  return { code, out: Buffer.concat(out), err };
}

describe('replay: stored timed output, the CLI, asciicast, audit/replay', () => {
  const dir = tempDir('corral-replay-');
  const db = `${dir.path}/state/audit.db`;
  let ts: AuditedServer;
  let sid: string;
  let livePty: Buffer;
  let livePipes: { stdout: string; stderr: string };
  let panelReplay: AuditReplayResult;
  let badParams: unknown;
  const hostileAnswers: unknown[] = [];
  let hugeAnswer: unknown;
  let stillAnswers: AuditReplayResult;
  const asciicast = (processId: string) =>
    audit(['export', '--db', db, '--format', 'asciicast', '--session', sid, '--process', processId]);
  // Colours, a cursor move up and a rewrite, a clear to end of line, a title (OSC), every C1 control and bidi.
  const PTY_SCRIPT =
    "printf '\\033[31mred\\033[0m\\n'; sleep 0.05; printf 'line2\\n\\033[1A\\033[2Cxx\\033[K\\n'; " +
    "printf '\\033]0;title\\007\\302\\233\\342\\200\\256bidi\\n'";

  before(async () => {
    ts = await startAuditedServer({ dbPath: db });
    const c = await ts.agent();
    sid = ts.publicId(c);
    await c.request('process/start', {
      processId: 'pty',
      argv: ['/bin/sh', '-c', PTY_SCRIPT],
      cwd: '/tmp',
      env: { PATH: '/usr/bin:/bin', TERM: 'xterm' },
      tty: true,
    });
    await c.collect('pty', 20_000);
    livePty = Buffer.concat(
      c.notifications
        .filter((n) => n.method === 'process/output' && n.params.processId === 'pty')
        .map((n) => Buffer.from(n.params.chunk as string, 'base64')),
    );
    await run(c, 'pipes', ['/bin/sh', '-c', 'echo out1; echo err1 >&2; sleep 0.2; echo out2']);
    livePipes = { stdout: c.output('pipes', 'stdout'), stderr: c.output('pipes', 'stderr') };
    // 8 MiB in one go, then a flood of 30 000 one-byte writes.
    await run(c, 'huge', [process.execPath, '-e', 'process.stdout.write(Buffer.alloc(8*1024*1024, 0x41))']);
    await run(c, 'flood', [
      process.execPath,
      '-e',
      'const fs=require("fs");for(let i=0;i<30000;i++){fs.writeSync(1,"z");if(i%50===0){const t=Date.now();while(Date.now()-t<1);}}',
    ]);
    const panel = await ts.panel();
    await ts.audit.trail!.flush();
    panelReplay = (await panel.request('audit/replay', {
      sessionId: sid,
      processId: 'pipes',
    })) as AuditReplayResult;
    badParams = await panel.request('audit/replay', { sessionId: '', processId: 7 }).catch((e) => e);
    let deep: unknown = 'x';
    for (let i = 0; i < 2000; i++) deep = { a: deep };
    const wide = Object.fromEntries(Array.from({ length: 20_000 }, (_, i) => [`k${i}`, i]));
    for (const params of [
      { sessionId: deep, processId: 'pty' },
      [sid, 'pty'],
      { ...wide, sessionId: sid, processId: 7 },
      null,
    ]) {
      hostileAnswers.push(await answer(panel.request('audit/replay', params as never)));
    }
    hugeAnswer = await answer(
      panel.request('audit/replay', { sessionId: 's'.repeat(512 * 1024), processId: 'p'.repeat(512 * 1024) }),
    );
    // The server still answers after all of it.
    stillAnswers = (await panel.request('audit/replay', {
      sessionId: sid,
      processId: 'pipes',
    })) as AuditReplayResult;
    await ts.close();
  });
  after(() => dir.cleanup());

  it('a PTY session is stored as timed chunks whose bytes are the live output, times ascending', () => {
    const d = openDb(db);
    try {
      const rows = d
        .prepare(
          `SELECT c.at, c.stream, c.data FROM process_chunks c JOIN processes p ON p.id = c.process
             WHERE p.process_id = 'pty' ORDER BY c.seq`,
        )
        .all() as { at: number; stream: string; data: Buffer }[];
      assert.ok(rows.length >= 2, `two writes 50 ms apart are two parts: ${rows.length}`);
      assert.ok(rows.every((r) => r.stream === 'pty'));
      for (let i = 1; i < rows.length; i++) assert.ok(rows[i]!.at >= rows[i - 1]!.at);
      assert.deepEqual(Buffer.concat(rows.map((r) => r.data)), livePty);
    } finally {
      d.close();
    }
  });

  it('replay --raw writes the recorded bytes as they were; without --raw no control reaches the terminal', async () => {
    const raw = await audit(['replay', sid, 'pty', '--db', db, '--raw', '--speed', '1000']);
    assert.equal(raw.code, 0, raw.err);
    assert.deepEqual(raw.out, livePty);
    const text = await audit(['replay', sid, 'pty', '--db', db, '--speed', '1000']);
    assert.equal(text.code, 0, text.err);
    const s = text.out.toString();
    assert.doesNotMatch(s, RAW_CONTROL, JSON.stringify(s));
    assert.match(s, /\\u001b\[31mred/);
    assert.match(s, /\\u009b/);
    assert.match(s, /\\u202ebidi/);
  });

  it('replay paces by the recorded times divided by --speed', async () => {
    const t0 = performance.now();
    const r = await audit(['replay', sid, 'pipes', '--db', db, '--speed', '2']);
    const took = performance.now() - t0;
    assert.equal(r.code, 0, r.err);
    assert.ok(took >= 80, `the 200 ms pause at speed 2 took ${took} ms`);
  });

  it('pipes replay as text with times and streams', async () => {
    const r = await audit(['replay', sid, 'pipes', '--db', db, '--max-idle', '0']);
    const lines = r.out.toString().trimEnd().split('\n');
    assert.deepEqual(
      lines.map((l) => l.replace(/^\[\s*[\d.]+s (\w+)\] /, '$1 ')),
      ['stdout out1', 'stderr err1', 'stdout out2'],
    );
    const times = lines.map((l) => Number(/^\[\s*([\d.]+)s/.exec(l)![1]));
    assert.ok(times[2]! - times[1]! >= 0.15, `the 0.2 s pause is in the times: ${times}`);
    assert.equal(livePipes.stdout, 'out1\nout2\n');
  });

  it('asciicast v2: a header, then [time, "o", text] events in time order, the PTY text whole', async () => {
    const r = await asciicast('pty');
    assert.equal(r.code, 0, r.err);
    const s = r.out.toString();
    assert.doesNotMatch(s, RAW_CONTROL, 'the file is safe to cat');
    const lines = s
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l));
    const header = lines[0] as Record<string, unknown>;
    assert.equal(header.version, 2);
    assert.equal(header.width, 80);
    assert.equal(header.height, 24);
    assert.equal(typeof header.timestamp, 'number');
    const events = lines.slice(1) as [number, string, string][];
    assert.ok(events.length >= 2);
    for (const [i, e] of events.entries()) {
      assert.equal(e.length, 3);
      assert.equal(e[1], 'o');
      assert.equal(typeof e[0], 'number');
      if (i > 0) assert.ok(e[0] >= events[i - 1]![0], 'time-ordered');
    }
    assert.equal(events.map((e) => e[2]).join(''), livePty.toString('utf8'));
  });

  it('audit/replay answers the panel with base64 chunks; malformed params are -32602 naming the field', () => {
    assert.equal(panelReplay.tty, false);
    assert.equal(panelReplay.process?.processId, 'pipes');
    assert.deepEqual(
      panelReplay.chunks.map((c) => [c.stream, Buffer.from(c.data, 'base64').toString()]),
      [
        ['stdout', 'out1\n'],
        ['stderr', 'err1\n'],
        ['stdout', 'out2\n'],
      ],
    );
    assert.ok(badParams instanceof RpcCallError, String(badParams));
    assert.equal(badParams.code, -32602);
    assert.match(badParams.message, /sessionId|processId/);
  });

  it('audit/replay with deep, wide, array, null or huge params: a named error or an empty answer, and it still serves', () => {
    // Nested past the message bounds (boundedJson.ts): the connection answers a parse error with id null (it cannot
    // read the id), so this request gets no answer of its own; the connection stays up (below).
    const [deepAnswer, ...rest] = hostileAnswers;
    assert.ok(
      deepAnswer === 'no answer' || (deepAnswer instanceof RpcCallError && deepAnswer.code === -32602),
    );
    for (const a of rest) {
      assert.ok(a instanceof RpcCallError, String(a));
      assert.equal(a.code, -32602, a.message);
      assert.ok(a.message.length < 2000, 'the message does not echo the params');
    }
    if (hugeAnswer instanceof RpcCallError) assert.ok(hugeAnswer.message.length < 2000);
    else assert.equal((hugeAnswer as AuditReplayResult).process, null);
    assert.equal(stillAnswers.chunks.length, 3);
  });

  it('a huge output is stored up to the per-process bound, and the cut says how much was dropped', async () => {
    const r = await asciicast('huge');
    const lines = r.out
      .toString()
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l));
    const events = lines.slice(1) as [number, string, string][];
    const text = events
      .filter((e) => e[1] === 'o')
      .map((e) => e[2])
      .join('');
    // A pipe's replay keeps what its stored output keeps (the first and the last N bytes: 2 N); a terminal's, 1 MiB.
    const bound = 2 * DEFAULT_OUTPUT_BYTES;
    assert.equal(text.length, bound);
    const marker = events.at(-1)!;
    assert.equal(marker[1], 'm');
    assert.match(marker[2], new RegExp(`${8 * 1024 * 1024 - bound} bytes`));
    const replay = await audit(['replay', sid, 'huge', '--db', db, '--speed', '1000000']);
    assert.match(replay.err, /not recorded/);
  });

  it('a flood of tiny chunks is stored whole in at most MAX_REPLAY_PARTS parts', () => {
    const d = openDb(db);
    try {
      const r = d
        .prepare(
          `SELECT count(*) AS n, sum(length(c.data)) AS bytes FROM process_chunks c JOIN processes p ON p.id = c.process
             WHERE p.process_id = 'flood' AND c.stream = 'stdout'`,
        )
        .get() as { n: number; bytes: number };
      assert.ok(r.n <= MAX_REPLAY_PARTS, `${r.n} parts`);
      assert.equal(r.bytes, 30_000);
    } finally {
      d.close();
    }
  });

  it('malformed CLI arguments are usage errors naming the option; an unknown process is named', async () => {
    for (const [argv, what] of [
      [['replay', sid], /SESSION and PROCESS/],
      [['replay', sid, 'pty', 'extra'], /SESSION and PROCESS/],
      [['replay', sid, 'pty', '--speed', '0'], /--speed/],
      [['replay', sid, 'pty', '--speed', 'fast'], /--speed/],
      [['replay', sid, 'pty', '--speed', '1e400'], /--speed/],
      [['replay', sid, 'pty', '--max-idle', '-1'], /--max-idle/],
      [['export', '--format', 'asciicast', '--session', sid], /--session and --process/],
      [['export', '--format', 'asciicast', '--session', sid, '--process', 'pty', '--width', '0'], /--width/],
      [
        [
          'export',
          '--format',
          'asciicast',
          '--session',
          sid,
          '--process',
          'pty',
          '--height',
          '9'.repeat(500),
        ],
        /--height/,
      ],
      [['export', '--format', 'gif'], /--format/],
      [['export', '--process', 'pty'], /--process/],
    ] as const) {
      const r = await audit([...argv, '--db', db]);
      assert.equal(r.code, 2, `${argv.join(' ')}: ${r.err}`);
      assert.match(r.err, what);
      assert.ok(r.err.length < 300, 'the message does not echo a huge value');
    }
    const missing = await audit(['replay', sid, 'no\u001b[2Jsuch', '--db', db]);
    assert.equal(missing.code, 1);
    assert.match(missing.err, /no stored process "no\\u001b\[2Jsuch"/);
  });
  it('the chunks are in the chain: the database verifies, and an edited chunk breaks it', () => {
    const lines: string[] = [];
    const io = { out: { write: (t: string) => lines.push(t) > 0 }, err: { write: () => true } };
    assert.equal(verifyCommand(['--db', db], io as never), 0, lines.join(''));
    const d = new Database(db);
    try {
      d.prepare(
        `UPDATE process_chunks SET data = X'6f757431' WHERE seq = 1 AND process =
           (SELECT id FROM processes WHERE process_id = 'pipes')`,
      ).run();
    } finally {
      d.close();
    }
    lines.length = 0;
    assert.equal(verifyCommand(['--db', db], io as never), 1, lines.join(''));
  });
});
