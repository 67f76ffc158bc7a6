// The approvals v2 relay of a fleet host (issue 36) against a hostile joined server, the host in a process of its
// own: what the host forwards is exactly the params its own table parsed (never `server`, never another method); the
// server's answers of the wrong shape, too many learning sessions, too wide or too deep are refused (the caller gets
// an error naming the server, a deep one drops the link); its learningChanged notifications are relayed tagged with
// its own id whatever `server` they name, and refused when malformed, too many or too big. The host stays up and
// keeps serving its own agents.
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import type { LearningState } from '../../src/protocol/approvals.js';
import { joinedSocket } from '../helpers/hostileServer.js';
import { hostileFleetRig, joinedRecord } from '../helpers/joinedHost.js';
import { until } from '../helpers/server.js';

const nest = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`;

const session = (workspace: string, proposal: unknown[] = []): LearningState =>
  ({
    workspace,
    startedAt: 1,
    endsAt: 2,
    maxRequests: 10,
    requests: 0,
    active: true,
    proposal,
  }) as LearningState;

const endpoint = (i: number, prefixLength = 8) => ({
  protocol: 'https',
  host: 'h.test',
  port: 443,
  method: 'GET',
  pathPrefix: `/${'p'.repeat(prefixLength - 1)}`,
  hits: i,
});

describe('fleet host: the approvals v2 relay against a hostile joined server', { timeout: 120_000 }, () => {
  const rig = hostileFleetRig({
    'approvals/waitForExit': () => ({ result: { waiting: 'all of them' } }),
    'approvals/learning': () => ({
      result: { learning: Array.from({ length: 65 }, (_, i) => session(`/w${i}`)) },
    }),
    'approvals/repoPolicy': () => ({
      result: {
        file: '/w/.corral/network.json',
        status: 'read',
        sha256: null,
        endpoints: 0,
        ignored: Array.from({ length: 5000 }, () => 'x'),
        problem: null,
      },
    }),
    'approvals/learn': () => ({ result: { learning: session('/w') } }),
    'approvals/learnEnd': () => `{"id":ID,"result":{"rules":${nest(30_000)}}}`,
  });
  before(() => rig.panel.request('approvals/subscribe', {}));

  const server = () => joinedRecord(rig.panel);
  const joined = () => joinedSocket(rig.evil);
  const { err, holds } = rig;

  test('forwarded: exactly the parsed params, less server; answers of the wrong shape or over the bounds refused', async () => {
    await joined();
    const before = (await server()).rejected;
    const w = await err('approvals/waitForExit', { server: 's1', id: 'p-1' });
    assert.equal(w.code, -32603);
    assert.match(
      w.message,
      /^evil: approvals\/waitForExit: the server's answer is not of the expected shape/,
    );
    assert.deepEqual(rig.evil.received.filter((r) => r.method === 'approvals/waitForExit').at(-1)?.params, {
      id: 'p-1',
    });
    // The host's own table refuses what it would not take itself: nothing is sent.
    const sent = rig.evil.received.length;
    assert.equal(
      (await err('approvals/repoAccept', { server: 's1', workspace: '/w', sha256: 'X' })).code,
      -32602,
    );
    assert.equal((await err('approvals/learn', { server: 's1', workspace: 'x'.repeat(5000) })).code, -32602);
    assert.equal(rig.evil.received.length, sent, 'nothing forwarded');
    const l = await err('approvals/learning', { server: 's1' });
    assert.match(l.message, /^evil: its learning sessions are over the fleet's bounds/);
    const r = await err('approvals/repoPolicy', { server: 's1', workspace: '/w' });
    assert.match(r.message, /^evil: approvals\/repoPolicy: the server's answer is not of the expected shape/);
    const learn = await rig.panel.request('approvals/learn', { server: 's1', workspace: '/w' });
    assert.equal((learn as { learning: LearningState }).learning.workspace, '/w');
    assert.deepEqual(rig.evil.received.filter((x) => x.method === 'approvals/learn').at(-1)?.params, {
      workspace: '/w',
      durationMs: 600_000,
      maxRequests: 1000,
    });
    assert.ok((await server()).rejected > before, 'the refused answers are counted');
    await holds('after-answers');
  });

  test('learningChanged: relayed tagged with its own id; malformed, too many or too big refused', async () => {
    await joined();
    const relayed = () => rig.panel.notifications.filter((n) => n.method === 'approvals/learningChanged');
    rig.evil.send({
      method: 'approvals/learningChanged',
      params: { server: 's7', learning: [session('/mine')] },
    });
    await until(() => relayed().length === 1, 10_000, 'the notification relayed');
    assert.equal(
      relayed()[0]!.params.server,
      's1',
      'tagged with the server it came from, not the one it named',
    );
    const before = (await server()).rejected;
    for (const params of [
      { learning: 'x' },
      { learning: [{ ...session('/w'), proposal: [{ hits: 1 }] }] },
      { learning: Array.from({ length: 65 }, (_, i) => session(`/w${i}`)) },
      {
        learning: [
          session(
            '/w',
            Array.from({ length: 257 }, (_, i) => endpoint(i)),
          ),
        ],
      },
      // 40 sessions of 256 endpoints each naming 1000 characters: within every per-field bound, 10 MB in all.
      {
        learning: Array.from({ length: 40 }, (_, s) =>
          session(
            `/w${s}`,
            Array.from({ length: 256 }, (_, i) => endpoint(i, 1000)),
          ),
        ),
      },
    ])
      rig.evil.send({ method: 'approvals/learningChanged', params });
    await until(async () => (await server()).rejected >= before + 5, 20_000, 'each refused');
    assert.equal(relayed().length, 1, 'none of them relayed');
    // Deep: the link is dropped, naming why; the host lives.
    rig.evil.send(`{"method":"approvals/learningChanged","params":{"learning":${nest(30_000)}}}`);
    await until(async () => (await server()).dropped != null, 20_000, 'the link dropped');
    assert.match((await server()).dropped!.reason, /nesting deeper than/);
    await holds('after-notifications');
  });

  test('a deep answer drops the link; the caller gets an error, the host lives', async () => {
    await joined();
    await until(async () => (await server()).state === 'connected', 20_000, 'joined again');
    const before = (await server()).dropped?.at ?? 0;
    const e = await err('approvals/learnEnd', { server: 's1', workspace: '/w', accept: [] });
    assert.notEqual(e.code, 0);
    await until(async () => ((await server()).dropped?.at ?? 0) > before, 20_000, 'the link dropped');
    await holds('after-deep-answer');
  });
});
