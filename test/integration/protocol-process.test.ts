// Conformance: handshake gating and the process methods (protocol.md §4, §5; checklist items 6, 9–15, 18–23).
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { b64, type Notification, RpcClient } from '../helpers/client.js';
import { FakeClock } from '../helpers/clock.js';
import { startTestServer, type TestServer, tempDir } from '../helpers/server.js';
import { codex169Start } from '../helpers/startParams.js';

const PATH = '/usr/local/bin:/usr/bin:/bin';
let counter = 0;
const pid = (tag: string) => `${tag}-${++counter}`;

type Client = RpcClient & { sessionId: string };

interface ReadResult {
  chunks: { seq: number; stream: string; chunk: string }[];
  nextSeq: number;
  exited: boolean;
  exitCode: number | null;
  closed: boolean;
  failure: null;
  sandboxDenied: boolean;
}

function startParams(processId: string, argv: string[], extra: Record<string, unknown> = {}) {
  return { processId, argv, cwd: '/tmp', env: { PATH }, tty: false, arg0: null, ...extra };
}

async function start(c: Client, processId: string, argv: string[], extra: Record<string, unknown> = {}) {
  return c.request<{ processId: string; sandboxType: string }>(
    'process/start',
    startParams(processId, argv, extra),
  );
}

async function run(c: Client, argv: string[], extra: Record<string, unknown> = {}) {
  const id = pid('run');
  await start(c, id, argv, extra);
  const events = await c.collect(id);
  const exited = events.find((n) => n.method === 'process/exited');
  return {
    id,
    events,
    exitCode: exited?.params.exitCode as number,
    stdout: c.output(id, 'stdout'),
    stderr: c.output(id, 'stderr'),
  };
}

const sh = (script: string) => ['/bin/sh', '-c', script];

function frameIndex(c: RpcClient, pred: (m: Record<string, unknown>) => boolean): number {
  return c.frames.findIndex((f) => pred(JSON.parse(f) as Record<string, unknown>));
}

describe('protocol handshake gating (§4)', () => {
  let ts: TestServer;
  before(async () => {
    ts = await startTestServer();
  });
  after(() => ts.close());

  it('6: process/fs requests before initialize and before initialized → the -32600 texts; initialize works afterwards', async () => {
    const c = await RpcClient.connect(ts.url);
    try {
      const params = startParams('x', ['true']);
      let e = await c.requestError('process/start', params);
      assert.equal(e.code, -32600);
      assert.equal(e.message, 'client must call initialize before using exec methods');
      e = await c.requestError('process/read', { processId: 'x' });
      assert.equal(e.message, 'client must call initialize before using exec methods');
      e = await c.requestError('fs/readFile', { path: '/etc/hostname' });
      assert.equal(e.code, -32600);
      assert.equal(e.message, 'client must call initialize before using filesystem methods');
      await c.request('initialize', { clientName: 't' });
      e = await c.requestError('process/start', params);
      assert.equal(e.code, -32600);
      assert.equal(e.message, 'client must send initialized before using exec methods');
      e = await c.requestError('fs/getMetadata', { path: '/' });
      assert.equal(e.code, -32600);
      assert.equal(e.message, 'client must send initialized before using filesystem methods');
      c.notify('initialized');
      const r = await c.request<{ processId: string }>('process/start', params);
      assert.equal(r.processId, 'x');
    } finally {
      c.close();
    }
  });

  it('initialize without clientName → -32602 missing field; the connection can still initialize', async () => {
    const c = await RpcClient.connect(ts.url);
    try {
      const e = await c.requestError('initialize', {});
      assert.equal(e.code, -32602);
      assert.equal(e.message, 'missing field `clientName`');
      const r = await c.request<{ sessionId: string }>('initialize', {
        clientName: 't',
        resumeSessionId: null,
      });
      assert.equal(typeof r.sessionId, 'string');
    } finally {
      c.close();
    }
  });
});

describe('protocol process methods (§5)', () => {
  let ts: TestServer;
  let c: Client;
  let dir: { path: string; cleanup(): void };
  before(async () => {
    ts = await startTestServer();
    c = await ts.client();
    dir = tempDir();
  });
  after(async () => {
    await ts.close();
    dir.cleanup();
  });

  it('9: params omitted on process/start → -32602 invalid type: null, expected struct …; missing processId → -32602', async () => {
    let e = await c.requestError('process/start');
    assert.equal(e.code, -32602);
    assert.match(e.message, /^invalid type: null, expected struct \w+/);
    const { processId: _omit, ...rest } = startParams('x', ['true']);
    e = await c.requestError('process/start', rest);
    assert.equal(e.code, -32602);
    assert.equal(e.message, 'missing field `processId`');
    e = await c.requestError('process/start', { ...startParams('x', ['true']), argv: 'true' });
    assert.equal(e.code, -32602);
    assert.match(e.message, /^invalid type: string "true", expected a sequence/);
    e = await c.requestError('process/start', { ...startParams('x', ['true']), env: { A: 1 } });
    assert.equal(e.code, -32602);
    e = await c.requestError('process/read', { processId: 'x', afterSeq: -1 });
    assert.equal(e.code, -32602);
    e = await c.requestError('process/read', null);
    assert.equal(e.code, -32602);
    assert.match(e.message, /^invalid type: null, expected struct/);
  });

  it('unknown params fields are ignored', async () => {
    const r = await run(c, ['true'], {
      someFutureField: { x: 1 },
      metadata: { threadId: 't' },
      writeId: 'w',
    });
    assert.equal(r.exitCode, 0);
  });

  it('10: argv [] → -32602 argv must not be empty; argv [""] → -32603 missing program for pipe spawn', async () => {
    let e = await c.requestError('process/start', startParams('a10', []));
    assert.equal(e.code, -32602);
    assert.equal(e.message, 'argv must not be empty');
    e = await c.requestError('process/start', startParams('a10', ['']));
    assert.equal(e.code, -32603);
    assert.equal(e.message, 'missing program for pipe spawn');
    const r = await start(c, 'a10', ['true']);
    assert.equal(r.processId, 'a10');
  });

  it('11: spawn errors of §5.1 are -32603 with OS texts, and the id is reusable after each', async () => {
    const file = `${dir.path}/plain.txt`;
    writeFileSync(file, 'x');
    const sub = `${dir.path}/subdir`;
    mkdirSync(sub);
    const cases: [Record<string, unknown>, string][] = [
      [startParams('s11', ['/nonexistent/prog']), 'No such file or directory (os error 2)'],
      [startParams('s11', ['no-such-program-corral']), 'No such file or directory (os error 2)'],
      // Looked up in the child's PATH (env.PATH), not the server's.
      [{ ...startParams('s11', ['sh']), env: { PATH: dir.path } }, 'No such file or directory (os error 2)'],
      [
        startParams('s11', ['true'], { cwd: `${dir.path}/missing` }),
        'No such file or directory (os error 2)',
      ],
      [startParams('s11', ['true'], { cwd: file }), 'Not a directory (os error 20)'],
      [startParams('s11', [sub]), 'Permission denied (os error 13)'],
      [startParams('s11', [file]), 'Permission denied (os error 13)'],
    ];
    for (const [params, message] of cases) {
      const e = await c.requestError('process/start', params);
      assert.equal(e.code, -32603, JSON.stringify(params));
      assert.equal(e.message, message, JSON.stringify(params));
    }
    const r = await start(c, 's11', ['true']);
    assert.equal(r.processId, 's11');
    assert.equal(r.sandboxType, 'none');
  });

  it('12: a duplicate processId, live or closed → -32600; the same id on another connection works', async () => {
    await start(c, 'dup-live', ['sleep', '30']);
    let e = await c.requestError('process/start', startParams('dup-live', ['true']));
    assert.equal(e.code, -32600);
    assert.equal(e.message, 'process dup-live already exists');
    await start(c, 'dup-closed', ['true']);
    await c.collect('dup-closed');
    e = await c.requestError('process/start', startParams('dup-closed', ['true']));
    assert.equal(e.code, -32600);
    assert.equal(e.message, 'process dup-closed already exists');
    const other = await ts.client('other');
    await start(other, 'dup-live', ['sh', '-c', 'echo other']);
    await other.collect('dup-live');
    assert.equal(other.output('dup-live'), 'other\n');
    assert.equal(c.notifications.filter((n) => n.params.processId === 'dup-live').length, 0);
    other.close();
    await c.request('process/terminate', { processId: 'dup-live' });
  });

  it('13: two outputs, exited(3), closed; seqs 1..4; the start response precedes output #1', async () => {
    const r = await run(c, sh('printf hi; printf err >&2; exit 3'));
    assert.deepEqual(
      r.events.map((n) => n.method),
      ['process/output', 'process/output', 'process/exited', 'process/closed'],
    );
    assert.deepEqual(
      r.events.map((n) => n.params.seq),
      [1, 2, 3, 4],
    );
    assert.equal(r.exitCode, 3);
    assert.equal(r.stdout, 'hi');
    assert.equal(r.stderr, 'err');
    const exited = r.events[2]!.params;
    // Corral's `usage` member rides along (docs/protocol.md); released clients ignore unknown members.
    assert.deepEqual(Object.keys(exited).sort(), ['exitCode', 'processId', 'sandboxDenied', 'seq', 'usage']);
    assert.equal(exited.sandboxDenied, false);
    assert.match(String((exited.usage as { source?: unknown }).source), /^(cgroup-v1|cgroup-v2|rusage)$/);
    const resp = frameIndex(c, (m) => 'id' in m && (m.result as { processId?: string })?.processId === r.id);
    const first = frameIndex(c, (m) => (m.params as { processId?: string })?.processId === r.id);
    assert.ok(resp >= 0 && first > resp, `response frame ${resp} before first notification ${first}`);
  });

  it('many fast processes at once: start response first, then outputs, exited, closed (10 × 30)', async () => {
    for (let round = 0; round < 10; round++) {
      const ids = Array.from({ length: 30 }, () => pid('order'));
      await Promise.all(ids.map((id) => start(c, id, sh('printf hi; printf err >&2; exit 3'))));
      for (const id of ids) {
        const events = await c.collect(id);
        assert.deepEqual(
          events.map((n) => n.method),
          ['process/output', 'process/output', 'process/exited', 'process/closed'],
          id,
        );
        const resp = frameIndex(
          c,
          (m) => 'id' in m && (m.result as { processId?: string })?.processId === id,
        );
        const first = frameIndex(c, (m) => (m.params as { processId?: string })?.processId === id);
        assert.ok(resp >= 0 && first > resp, `${id}: response ${resp}, first notification ${first}`);
      }
    }
  });

  it('14: read after close: chunks 1..3, nextSeq 4, exitCode 5; maxBytes 0/1/2 → only "a"; afterSeq nextSeq-1 → none', async () => {
    const r = await run(c, sh('printf a; sleep 0.05; printf bb; sleep 0.05; printf ccc; exit 5'));
    const outs = r.events.filter((n) => n.method === 'process/output');
    assert.equal(outs.length, 3, 'three separate chunks');
    let rr = await c.request<ReadResult>('process/read', { processId: r.id, afterSeq: 0 });
    assert.deepEqual(
      rr.chunks.map((ch) => [ch.seq, ch.stream, Buffer.from(ch.chunk, 'base64').toString()]),
      [
        [1, 'stdout', 'a'],
        [2, 'stdout', 'bb'],
        [3, 'stdout', 'ccc'],
      ],
    );
    assert.deepEqual(
      { ...rr, chunks: undefined },
      {
        chunks: undefined,
        nextSeq: 4,
        exited: true,
        exitCode: 5,
        closed: true,
        failure: null,
        sandboxDenied: false,
      },
    );
    for (const maxBytes of [0, 1, 2]) {
      rr = await c.request<ReadResult>('process/read', { processId: r.id, afterSeq: 0, maxBytes });
      assert.equal(rr.chunks.length, 1, `maxBytes ${maxBytes}`);
      assert.equal(Buffer.from(rr.chunks[0]!.chunk, 'base64').toString(), 'a');
      assert.equal(rr.nextSeq, 2);
    }
    rr = await c.request<ReadResult>('process/read', { processId: r.id, afterSeq: 0, maxBytes: 3 });
    assert.equal(rr.chunks.length, 2);
    rr = await c.request<ReadResult>('process/read', { processId: r.id, afterSeq: 1 });
    assert.deepEqual(
      rr.chunks.map((ch) => ch.seq),
      [2, 3],
    );
    rr = await c.request<ReadResult>('process/read', { processId: r.id, afterSeq: 3 });
    assert.deepEqual(rr.chunks, []);
    assert.equal(rr.nextSeq, 6);
    rr = await c.request<ReadResult>('process/read', { processId: r.id });
    assert.equal(rr.chunks.length, 3, 'afterSeq absent means 0');
    const e = await c.requestError('process/read', { processId: 'never-started' });
    assert.equal(e.code, -32600);
    assert.equal(e.message, 'unknown process id never-started');
  });

  it('15: waitMs on a quiet process → an empty reply when waitMs has passed, not before; an exit wakes the read; after close → immediate', async () => {
    // On the server's own clock, moved by the test: the read answers exactly when waitMs has passed, and a read that
    // answers while that clock stands still was woken by the process, not by its timeout.
    const clock = new FakeClock();
    const local = await startTestServer({ clock });
    try {
      const lc = await local.client();
      let answered = false;
      /** When its answer arrives, every request sent before it has been dispatched (a parked read included). */
      const settled = () => lc.request('process/write', { processId: 'none', chunk: '' });
      const quiet = pid('quiet');
      await start(lc, quiet, ['sleep', '30']);
      const read = lc
        .request<ReadResult>('process/read', { processId: quiet, afterSeq: 0, waitMs: 1000 })
        .then((r) => {
          answered = true;
          return r;
        });
      await settled();
      await clock.advance(999);
      await settled();
      assert.equal(answered, false, 'still parked at 999 ms');
      await clock.advance(1);
      const rr = await read;
      assert.deepEqual(rr.chunks, []);
      assert.equal(rr.exited, false);
      await lc.request('process/terminate', { processId: quiet });

      const exits = pid('exits');
      await start(lc, exits, sh('read x; exit 4'), { pipeStdin: true });
      const pending = lc.request<ReadResult>('process/read', {
        processId: exits,
        afterSeq: 0,
        waitMs: 10_000,
      });
      await settled();
      assert.deepEqual(await lc.request('process/write', { processId: exits, chunk: b64('\n') }), {
        status: 'accepted',
      });
      const woken = await pending;
      assert.equal(woken.exited, true);
      assert.equal(woken.exitCode, 4);

      await lc.collect(exits);
      const closed = await lc.request<ReadResult>('process/read', {
        processId: exits,
        afterSeq: 100,
        waitMs: 5000,
      });
      assert.equal(closed.closed, true);
      assert.equal(clock.pending, 0, 'no read is left waiting');
    } finally {
      await local.close();
    }
  });

  it('15: new output wakes a parked read', async () => {
    const id = pid('wake');
    await start(c, id, sh('read x; printf late; sleep 30'), { pipeStdin: true });
    const pending = c.request<ReadResult>('process/read', { processId: id, afterSeq: 0, waitMs: 10_000 });
    await c.request('process/write', { processId: id, chunk: b64('go\n') });
    const rr = await pending;
    assert.equal(Buffer.from(rr.chunks[0]!.chunk, 'base64').toString(), 'late');
    assert.equal(rr.nextSeq, 2);
    await c.request('process/terminate', { processId: id });
  });

  it('18: tty cat echoes hello\\r\\n twice; \\x04 ends cat; a write after close → accepted', async () => {
    const id = pid('tty');
    await start(c, id, ['cat'], { tty: true });
    assert.deepEqual(await c.request('process/write', { processId: id, chunk: b64('hello\n') }), {
      status: 'accepted',
    });
    await c.waitFor(() => c.output(id, 'pty') === 'hello\r\nhello\r\n');
    assert.deepEqual(await c.request('process/write', { processId: id, chunk: b64('\x04') }), {
      status: 'accepted',
    });
    const events = await c.collect(id);
    assert.ok(events.every((n) => n.method !== 'process/output' || n.params.stream === 'pty'));
    assert.equal(events.find((n) => n.method === 'process/exited')?.params.exitCode, 0);
    assert.deepEqual(await c.request('process/write', { processId: id, chunk: b64('more\n') }), {
      status: 'accepted',
    });
  });

  it('18: tty cat ended by \\x04 always reports exit code 0 (30 runs; node-pty alone: 129 in 10-60%)', async () => {
    const codes: number[] = [];
    for (let i = 0; i < 30; i++) {
      const id = pid('ttyexit');
      await start(c, id, ['cat'], { tty: true });
      await c.request('process/write', { processId: id, chunk: b64('hello\n') });
      await c.waitFor(() => c.output(id, 'pty') === 'hello\r\nhello\r\n');
      await c.request('process/write', { processId: id, chunk: b64('\x04') });
      const events = await c.collect(id);
      codes.push(events.find((n) => n.method === 'process/exited')?.params.exitCode as number);
    }
    assert.deepEqual(
      codes.filter((x) => x !== 0),
      [],
    );
  });

  it('tty children get no TERM, COLUMNS or LINES', async () => {
    const id = pid('ttyenv');
    await start(c, id, ['/bin/sh', '-c', `echo "T=$\{TERM-unset} C=$\{COLUMNS-unset} L=$\{LINES-unset}"`], {
      tty: true,
      env: {},
    });
    await c.collect(id);
    assert.equal(c.output(id, 'pty'), 'T=unset C=unset L=unset\r\n');
  });

  it('19: non-tty → stdinClosed; pipeStdin → accepted and delivered; unknown id → unknownProcess; bad base64 → -32602', async () => {
    const closed = pid('nostdin');
    await start(c, closed, ['sleep', '30']);
    assert.deepEqual(await c.request('process/write', { processId: closed, chunk: b64('x') }), {
      status: 'stdinClosed',
    });
    await c.request('process/terminate', { processId: closed });

    const catEof = await run(c, ['cat']);
    assert.equal(catEof.exitCode, 0, 'cat reads EOF at once without pipeStdin');

    const piped = pid('piped');
    await start(c, piped, ['head', '-c', '5'], { pipeStdin: true });
    assert.deepEqual(await c.request('process/write', { processId: piped, chunk: b64('hello world') }), {
      status: 'accepted',
    });
    await c.collect(piped);
    assert.equal(c.output(piped, 'stdout'), 'hello');

    assert.deepEqual(await c.request('process/write', { processId: 'no-such-id', chunk: b64('x') }), {
      status: 'unknownProcess',
    });
    const e = await c.requestError('process/write', { processId: 'no-such-id', chunk: '!!!!' });
    assert.equal(e.code, -32602);
    assert.equal(e.message, 'Invalid symbol 33, offset 0.');
  });

  it('20: terminate a SIGTERM-ignoring shell with a background grandchild → running:true, both die, 137; again → false', async () => {
    const id = pid('term');
    const pidFile = `${dir.path}/gc.pid`;
    await start(c, id, sh(`trap '' TERM; sleep 300 & echo $! > ${pidFile}; echo ready; wait`));
    await c.waitFor(() => c.output(id, 'stdout') === 'ready\n');
    const { readFileSync } = await import('node:fs');
    const { alive, until } = await import('../helpers/server.js');
    const grandchild = Number(readFileSync(pidFile, 'utf8').trim());
    assert.ok(alive(grandchild));
    assert.deepEqual(await c.request('process/terminate', { processId: id }), { running: true });
    const events = await c.collect(id, 10_000);
    await until(() => !alive(grandchild), 10_000, 'grandchild death');
    const tail = events.slice(-2).map((n) => n.method);
    assert.deepEqual(tail, ['process/exited', 'process/closed']);
    assert.equal(events.at(-2)!.params.exitCode, 137);
    assert.deepEqual(await c.request('process/terminate', { processId: id }), { running: false });
    assert.deepEqual(await c.request('process/terminate', { processId: 'unknown-term' }), { running: false });
  });

  it('21: env {FOO:bar} → the child sees only FOO and PWD; arg0 custom → $0 is custom', async () => {
    const r = await run(c, ['/usr/bin/env'], { env: { FOO: 'bar' } });
    assert.equal(r.stdout, 'FOO=bar\n', 'env(1) sees exactly env');
    const r2 = await run(c, ['/bin/sh', '-c', 'env'], { env: { FOO: 'bar' } });
    const names = r2.stdout
      .trim()
      .split('\n')
      .map((l) => l.split('=')[0]);
    assert.deepEqual(names.sort(), ['FOO', 'PWD']);
    const r3 = await run(c, ['/bin/sh', '-c', 'echo $0'], { arg0: 'custom' });
    assert.equal(r3.stdout, 'custom\n');
    const id = pid('arg0tty');
    await start(c, id, ['/bin/sh', '-c', 'echo $0'], { arg0: 'custom', tty: true });
    await c.collect(id);
    assert.equal(c.output(id, 'pty'), 'custom\r\n');
  });

  it('22: envPolicy none + set A + env B → exactly A, B and PWD', async () => {
    const r = await run(c, ['/bin/sh', '-c', 'env'], {
      env: { B: '2' },
      envPolicy: {
        inherit: 'none',
        ignoreDefaultExcludes: false,
        exclude: [],
        set: { A: '1' },
        includeOnly: [],
      },
    });
    const lines = r.stdout.trim().split('\n').sort();
    assert.deepEqual(
      lines.map((l) => l.split('=')[0]),
      ['A', 'B', 'PWD'],
    );
    assert.ok(lines.includes('A=1') && lines.includes('B=2'));
  });

  it('23: cwd as a file:// URI works like the plain path; a relative cwd → -32602', async () => {
    const spaced = `${dir.path}/with space`;
    mkdirSync(spaced);
    const plain = await run(c, ['pwd'], { cwd: spaced });
    const uri = await run(c, ['pwd'], { cwd: `file://${encodeURI(spaced)}` });
    assert.equal(plain.stdout, `${spaced}\n`);
    assert.equal(uri.stdout, plain.stdout);
    const e = await c.requestError('process/start', startParams('rel', ['pwd'], { cwd: 'tmp' }));
    assert.equal(e.code, -32602);
    const e2 = await c.requestError(
      'process/start',
      startParams('rel', ['pwd'], { cwd: 'file://remote.host/tmp' }),
    );
    assert.equal(e2.code, -32602);
    await start(c, 'rel', ['true']);
  });

  it('§5.7 exit codes: exit 300 → 44, kill -9 $$ → 137, kill -TERM $$ → 143, tty terminate → 137', async () => {
    assert.equal((await run(c, sh('exit 300'))).exitCode, 44);
    assert.equal((await run(c, sh('kill -9 $$'))).exitCode, 137);
    assert.equal((await run(c, sh('kill -TERM $$'))).exitCode, 143);
    const id = pid('ttyterm');
    await start(c, id, ['sleep', '30'], { tty: true });
    assert.deepEqual(await c.request('process/terminate', { processId: id }), { running: true });
    const events = await c.collect(id);
    assert.equal(events.find((n) => n.method === 'process/exited')?.params.exitCode, 137);
  });

  it('§5.6 process/signal interrupt: a trap that exits 9 reports 9; unknown id → {}', async () => {
    const id = pid('sigint');
    await start(c, id, sh(`trap 'exit 9' INT; echo ready; while :; do sleep 0.05; done`));
    await c.waitFor(() => c.output(id, 'stdout') === 'ready\n');
    assert.deepEqual(await c.request('process/signal', { processId: id, signal: 'interrupt' }), {});
    const events = await c.collect(id);
    assert.equal(events.find((n) => n.method === 'process/exited')?.params.exitCode, 9);
    assert.deepEqual(await c.request('process/signal', { processId: 'nobody', signal: 'interrupt' }), {});
  });

  it('process/read of a running process returns retained output with nextSeq = last + 1', async () => {
    const id = pid('running');
    await start(c, id, sh('printf one; sleep 30'));
    await c.waitFor((n: Notification) => n.params.processId === id && n.method === 'process/output');
    const rr = await c.request<ReadResult>('process/read', { processId: id });
    assert.equal(rr.exited, false);
    assert.equal(rr.closed, false);
    assert.equal(rr.exitCode, null);
    assert.equal(rr.nextSeq, 2);
    const empty = await c.request<ReadResult>('process/read', { processId: id, afterSeq: 1 });
    assert.deepEqual(empty.chunks, []);
    assert.equal(empty.nextSeq, 2);
    await c.request('process/terminate', { processId: id });
  });
});

describe('request shapes of released clients (codex-clients.md §4, §5)', () => {
  let ts: TestServer;
  let dir: { path: string; cleanup(): void };
  before(async () => {
    ts = await startTestServer();
    dir = tempDir();
  });
  after(async () => {
    await ts.close();
    dir.cleanup();
  });

  it('0.169: the exact process/start body (URI cwd, metadata, envPolicy, sandbox null) → {processId, sandboxType}', async () => {
    const c = await ts.client();
    const id = '26780-e1cd5f23-1807-43de-b77f-059f4caa3f90';
    const body = codex169Start({
      processId: id,
      argv: ['/bin/bash', '-lc', 'echo hello > out.txt && cat out.txt && echo "$CODEX_VERSION $CODEX_CI"'],
      cwd: `file://${dir.path}`,
    });
    const n = c.frames.length;
    c.ws.send(JSON.stringify({ id: 18, method: 'process/start', params: body }));
    await c.waitFor((m) => m.method === 'process/closed' && m.params.processId === id);
    assert.equal(c.frames[n], `{"id":18,"result":{"processId":"${id}","sandboxType":"none"}}`);
    assert.equal(c.output(id, 'stdout'), 'hello\n0.169.0 1\n');
    const w = await c.request('process/write', { processId: id, chunk: b64('x'), writeId: 'w-1' });
    assert.deepEqual(w, { status: 'stdinClosed' });
    c.close();
  });

  it('0.120: plain-path cwd, whole env, no envPolicy → exactly env; read loop with afterSeq = nextSeq - 1', async () => {
    const c = await ts.client();
    await c.request('process/start', {
      processId: '12023',
      argv: ['/bin/bash', '-lc', 'printf one; sleep 0.05; printf two; exit 2'],
      cwd: dir.path,
      env: { PATH, HOME: dir.path, ONLY_THIS: 'yes' },
      tty: false,
      arg0: null,
    });
    let afterSeq = 0;
    let out = '';
    for (;;) {
      const r = await c.request<ReadResult>('process/read', {
        processId: '12023',
        afterSeq,
        maxBytes: 65536,
        waitMs: 2000,
      });
      for (const ch of r.chunks) out += Buffer.from(ch.chunk, 'base64').toString();
      afterSeq = r.nextSeq - 1;
      if (r.closed) {
        assert.equal(r.exitCode, 2);
        break;
      }
    }
    assert.equal(out, 'onetwo');
    c.close();
  });

  it('0.120/0.125 fs bodies with sandboxPolicy/sandbox null', async () => {
    const c = await ts.client();
    const file = `${dir.path}/f.txt`;
    assert.deepEqual(
      await c.request('fs/writeFile', { path: file, dataBase64: b64('x'), sandboxPolicy: null }),
      {},
    );
    assert.deepEqual(
      await c.request('fs/createDirectory', { path: `${dir.path}/d`, recursive: true, sandboxPolicy: null }),
      {},
    );
    const m = await c.request<Record<string, unknown>>('fs/getMetadata', {
      path: `file://${file}`,
      sandbox: null,
    });
    assert.equal(m.isFile, true);
    c.close();
  });
});

describe('protocol per-session live-process limit', () => {
  let ts: TestServer;
  before(async () => {
    ts = await startTestServer({ maxProcessesPerSession: 2 });
  });
  after(() => ts.close());

  it('refuses a start above the limit with -32600, and frees the slot once a process closes', async () => {
    const c = await ts.client();
    await start(c, 'l1', ['sleep', '30']);
    await start(c, 'l2', ['sleep', '30']);
    const e = await c.requestError('process/start', startParams('l3', ['true']));
    assert.equal(e.code, -32600);
    assert.match(e.message, /limit 2/);
    const other = await ts.client('other');
    await start(other, 'l3', ['true']);
    await other.collect('l3');
    await c.request('process/terminate', { processId: 'l1' });
    await c.collect('l1');
    await start(c, 'l3', ['true']);
    await c.request('process/terminate', { processId: 'l2' });
  });
});
