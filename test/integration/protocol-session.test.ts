// Conformance: sessions, disconnect, resume and the grace period (protocol.md §8; checklist item 26).
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { RpcClient } from '../helpers/client.js';
import { FakeClock } from '../helpers/clock.js';
import { alive, startTestServer, type TestServer, tempDir, until } from '../helpers/server.js';
import { startParams as params } from '../helpers/startParams.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');

/** Starts `sh` with a background grandchild; returns the child's and the grandchild's OS pids. */
async function startFamily(c: RpcClient, processId: string, tty = false): Promise<[number, number]> {
  await c.request(
    'process/start',
    params(processId, ['/bin/sh', '-c', 'sleep 300 & echo "$$ $!"; sleep 300'], { tty }),
  );
  const n = await c.waitFor((m) => m.method === 'process/output' && m.params.processId === processId);
  const text = Buffer.from(n.params.chunk as string, 'base64')
    .toString()
    .trim();
  const [child, grandchild] = text.split(/\s+/).map(Number) as [number, number];
  assert.ok(alive(child) && alive(grandchild));
  return [child, grandchild];
}

describe('protocol sessions: resumeGraceMs 0 (§8)', () => {
  let ts: TestServer;
  // The server's time stands still: whatever happens at close happens without a timer.
  const clock = new FakeClock();
  before(async () => {
    ts = await startTestServer({ resumeGraceMs: 0, clock });
  });
  after(() => ts.close());

  it('26: closing the socket kills a running sleep 300 and its grandchild at once, no timer involved (pipes and tty)', async () => {
    const c = await ts.client();
    const [child, grandchild] = await startFamily(c, 'fam');
    const [tchild, tgrandchild] = await startFamily(c, 'tfam', true);
    c.close();
    await until(() => ts.server.sessions.size === 0, 10_000, 'the session to be forgotten');
    await until(() => ![child, grandchild, tchild, tgrandchild].some(alive), 10_000, 'the family to die');
    assert.equal(clock.pending, 0, 'no grace timer was set');
  });

  it('a resume of a session that was killed at close → -32600 unknown session id', async () => {
    const c = await ts.client();
    const id = c.sessionId;
    c.close();
    await c.waitClose();
    await until(() => !ts.server.sessionByResumeKey(id), 1000, 'session forgotten');
    const d = await RpcClient.connect(ts.url);
    const e = await d.requestError('initialize', { clientName: 't', resumeSessionId: id });
    assert.equal(e.code, -32600);
    assert.equal(e.message, `unknown session id ${id}`);
    const e2 = await d.requestError('initialize', { clientName: 't', resumeSessionId: 'no-such-session' });
    assert.equal(e2.message, 'unknown session id no-such-session');
    const r = await d.request<{ sessionId: string }>('initialize', { clientName: 't' });
    assert.notEqual(r.sessionId, id);
    d.close();
  });
});

describe('protocol sessions: default grace period (10 s)', () => {
  let ts: TestServer;
  const clock = new FakeClock();
  before(async () => {
    ts = await startTestServer({ resumeGraceMs: undefined, clock });
  });
  after(() => ts.close());

  it('26: with the default grace the child and grandchild are killed 10 s after the close, not a moment before', async () => {
    const c = await ts.client();
    const session = ts.sessionOf(c);
    const [child, grandchild] = await startFamily(c, 'fam');
    c.close();
    await until(() => session.conn === null, 10_000, 'the session to be detached');
    await clock.advance(9_999);
    assert.equal(ts.server.sessionByResumeKey(c.sessionId), session, 'kept until the grace period is over');
    assert.ok(alive(child) && alive(grandchild));
    await clock.advance(1);
    assert.equal(ts.server.sessionByResumeKey(c.sessionId), undefined, 'expired at 10 s');
    await until(() => !alive(child) && !alive(grandchild), 10_000, 'the family to die');
  });
});

describe('protocol sessions: resume within the grace period', () => {
  let ts: TestServer;
  let dir: { path: string; cleanup(): void };
  // The grace period passes only when a test moves this clock: a resume is never raced against it.
  const clock = new FakeClock();
  before(async () => {
    ts = await startTestServer({ resumeGraceMs: 1500, clock });
    dir = tempDir();
  });
  after(async () => {
    await ts.close();
    dir.cleanup();
  });

  it('26: resume re-attaches, replays missed notifications in seq order, and later events arrive live', async () => {
    const a = await ts.client('a');
    const sid = a.sessionId;
    const trigger = `${dir.path}/go`;
    const script = `while [ ! -e ${trigger} ]; do sleep 0.02; done; printf one; printf two >&2; exit 7`;
    await a.request('process/start', params('p', ['/bin/sh', '-c', script]));
    await a.request(
      'process/start',
      params('live', ['/bin/sh', '-c', 'echo ready; read x; echo "got $x"'], { pipeStdin: true }),
    );
    await a.waitFor((n) => n.params.processId === 'live' && n.method === 'process/output');
    // While attached, already-delivered notifications are not replayed later.
    const seenLive = a.notifications.filter((n) => n.params.processId === 'live').length;
    assert.equal(seenLive, 1);
    a.close();
    await a.waitClose();
    await until(() => ts.server.sessionByResumeKey(sid)?.conn === null, 1000, 'detached');
    writeFileSync(trigger, '');
    const proc = () => ts.server.sessionByResumeKey(sid)?.get('p');
    await until(() => proc()?.state === 'closed', 2000, 'p to close while detached');
    const missed = a.notifications.filter((n) => n.params.processId === 'p');
    assert.equal(missed.length, 0, 'nothing reached the closed socket');

    const b = await RpcClient.connect(ts.url);
    const r = await b.request<{ sessionId: string }>('initialize', { clientName: 'b', resumeSessionId: sid });
    assert.equal(r.sessionId, sid);
    b.notify('initialized');
    const events = await b.collect('p');
    assert.deepEqual(
      events.map((n) => n.params.seq),
      [1, 2, 3, 4],
    );
    assert.deepEqual(
      events.map((n) => n.method),
      ['process/output', 'process/output', 'process/exited', 'process/closed'],
    );
    assert.equal(events[2]!.params.exitCode, 7);
    assert.equal(b.output('p', 'stdout'), 'one');
    assert.equal(b.output('p', 'stderr'), 'two');
    assert.equal(
      b.notifications.filter((n) => n.params.processId === 'live').length,
      0,
      'notifications delivered before the disconnect are not replayed',
    );
    // The resume response comes before the replayed notifications.
    const respIdx = b.frames.findIndex((f) => f.includes(`"sessionId":"${sid}"`));
    const firstIdx = b.frames.findIndex((f) => f.includes('"process/output"'));
    assert.ok(respIdx >= 0 && respIdx < firstIdx);

    const rr = await b.request<{ chunks: unknown[]; closed: boolean }>('process/read', {
      processId: 'p',
      afterSeq: 0,
    });
    assert.equal(rr.chunks.length, 2);
    assert.equal(rr.closed, true);
    await b.request('process/write', { processId: 'live', chunk: b64('x\n') });
    await b.collect('live');
    assert.equal(b.output('live'), 'got x\n');
    b.close();
  });

  it('resuming a session that is still attached → -32600 already attached', async () => {
    const a = await ts.client('a');
    const b = await RpcClient.connect(ts.url);
    const e = await b.requestError('initialize', { clientName: 'b', resumeSessionId: a.sessionId });
    assert.equal(e.code, -32600);
    assert.equal(e.message, `session ${a.sessionId} is already attached to another connection`);
    const r = await b.request<{ sessionId: string }>('initialize', { clientName: 'b' });
    assert.notEqual(r.sessionId, a.sessionId);
    a.close();
    b.close();
  });

  it('26: after the grace period the processes are dead and resume → -32600 unknown session id', async () => {
    const a = await ts.client('a');
    const sid = a.sessionId;
    const [child, grandchild] = await startFamily(a, 'fam');
    a.close();
    await until(() => ts.server.sessionByResumeKey(sid)?.conn === null, 10_000, 'detached');
    await clock.advance(1499);
    assert.ok(ts.server.sessionByResumeKey(sid), 'not before the grace period');
    assert.ok(alive(child) && alive(grandchild));
    await clock.advance(1);
    assert.equal(ts.server.sessionByResumeKey(sid), undefined, 'session forgotten');
    await until(() => !alive(child) && !alive(grandchild), 10_000, 'the family to die');
    const b = await RpcClient.connect(ts.url);
    const e = await b.requestError('initialize', { clientName: 'b', resumeSessionId: sid });
    assert.equal(e.code, -32600);
    assert.equal(e.message, `unknown session id ${sid}`);
    b.close();
  });

  it('a resumed connection can start new ids, and old ids stay taken', async () => {
    const a = await ts.client('a');
    const sid = a.sessionId;
    await a.request('process/start', params('old', ['true']));
    await a.collect('old');
    a.close();
    await a.waitClose();
    await until(() => ts.server.sessionByResumeKey(sid)?.conn === null, 1000, 'detached');
    const b = await RpcClient.connect(ts.url);
    await b.request('initialize', { clientName: 'b', resumeSessionId: sid });
    b.notify('initialized');
    const e = await b.requestError('process/start', params('old', ['true']));
    assert.equal(e.message, 'process old already exists');
    await b.request('process/start', params('new', ['true']));
    await b.collect('new');
    b.close();
  });
});

describe('protocol sessions: a start still being prepared when the session expires', () => {
  it('is not spawned into the forgotten session (no orphan), and its launch is cleaned up', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    let cleaned!: () => void;
    const cleanedUp = new Promise<void>((r) => {
      cleaned = r;
    });
    let prepared!: () => void;
    const preparing = new Promise<void>((r) => {
      prepared = r;
    });
    const ts = await startTestServer({
      resumeGraceMs: 0,
      preparer: {
        async prepare(_params, spec) {
          prepared();
          await gate;
          return { spec, sandboxType: 'none', cleanup: cleaned };
        },
        classify: () => false,
      },
    });
    const dir = tempDir();
    try {
      const c = await ts.client();
      const marker = `${dir.path}/spawned`;
      const started = c.request(
        'process/start',
        params('slow', ['/bin/sh', '-c', `echo $$ > ${marker}; sleep 300`]),
      );
      started.catch(() => {});
      await preparing;
      c.close();
      await c.waitClose();
      await until(() => !ts.server.sessionByResumeKey(c.sessionId), 1000, 'the session to expire');
      release();
      let timer: NodeJS.Timeout | undefined;
      const outcome = await Promise.race([
        cleanedUp.then(() => 'cleaned'),
        new Promise<string>((r) => {
          timer = setTimeout(() => r('not cleaned up within 3 s'), 3000);
        }),
      ]);
      clearTimeout(timer);
      const { existsSync, readFileSync } = await import('node:fs');
      if (existsSync(marker)) {
        const pid = Number(readFileSync(marker, 'utf8').trim());
        if (alive(pid)) process.kill(-pid, 'SIGKILL');
        assert.fail(`the start went ahead after the session expired (pid ${pid}, ${outcome})`);
      }
      assert.equal(outcome, 'cleaned');
      assert.deepEqual([...ts.server.allProcesses()], []);
    } finally {
      await ts.close();
      dir.cleanup();
    }
  });
});
