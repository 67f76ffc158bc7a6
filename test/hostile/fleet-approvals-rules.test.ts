// The project-rules relay of a fleet host (issue 36) against a hostile joined server, the host in a process of its
// own: what the host forwards is exactly the params its own table parsed (never `server`); the server's answers and
// rulesChanged notifications are relayed tagged with its own id whatever `server` they name, and refused when of the
// wrong shape, past MAX_PROJECT_RULES, with a 1 MiB note or workspace, or over the relay's byte bound; 100 000 rules
// (past the link's frame bound) or a deep one close or drop the link. The host stays up and keeps serving its own agents.
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import WebSocket from 'ws';
import { MAX_RELAYED_RULES_BYTES } from '../../src/fleet/fleet.js';
import type { ApprovalRule } from '../../src/protocol/approvals.js';
import { joinedSocket } from '../helpers/hostileServer.js';
import { hostileFleetRig, joinedRecord } from '../helpers/joinedHost.js';
import { until } from '../helpers/server.js';

const nest = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`;

const rule = (i: number, over: Partial<ApprovalRule> = {}) => ({
  server: 's7',
  id: `r${i}`,
  workspace: '/w',
  decision: 'allow',
  protocol: 'http',
  host: 'h.test',
  port: 80,
  method: null,
  origin: 'panel',
  createdBy: { kind: 'panel', credential: 'c', clientName: null },
  createdAt: 1,
  promptId: null,
  enabled: true,
  note: null,
  hits: 0,
  lastHitAt: null,
  ...over,
});
const many = (n: number, over: Partial<ApprovalRule> = {}) =>
  Array.from({ length: n }, (_, i) => rule(i, over));

/** What the hostile server answers to approvals/rules, by test (the host also asks at each (re)connection). */
let rulesAnswer: () => string | { result: unknown } = () => ({
  result: { rules: [rule(1)], decisions: [], store: '/x', problem: null },
});

describe('fleet host: the project-rules relay against a hostile joined server', { timeout: 120_000 }, () => {
  const rig = hostileFleetRig({
    'approvals/rules': () => rulesAnswer(),
    'approvals/ruleUpdate': (p) =>
      (p as { note?: string }).note === 'deep'
        ? `{"id":ID,"result":{"rule":${nest(30_000)}}}`
        : { result: { rule: { ...rule(1), enabled: 'no' } } },
    'approvals/revoke': () => ({ result: { revoked: true } }),
  });
  before(() => rig.panel.request('approvals/subscribe', {}));

  const server = () => joinedRecord(rig.panel);
  const { err, holds } = rig;
  const relayed = () => rig.panel.notifications.filter((n) => n.method === 'approvals/rulesChanged');
  const lastForwarded = (method: string) =>
    rig.evil.received.filter((r) => r.method === method).at(-1)?.params;

  test('its rules in answers: tagged with its own id; over the bounds refused; deep drops the link', async () => {
    await joinedSocket(rig.evil);
    const listed = (await rig.panel.request('approvals/rules', { server: 's1' })) as {
      rules: ApprovalRule[];
    };
    assert.equal(listed.rules[0]!.server, 's1');
    assert.deepEqual(lastForwarded('approvals/rules'), {}, 'forwarded less server');
    const before = (await server()).rejected;
    const cases: [string, () => unknown, RegExp][] = [
      [
        'wrong shape',
        () => ({ rules: 'x', decisions: [], store: null, problem: null }),
        /not of the expected shape/,
      ],
      [
        '10 001 rules',
        () => ({ rules: many(10_001), decisions: [], store: null, problem: null }),
        /expected shape/,
      ],
      [
        'a 1 MiB note',
        () => ({
          rules: [rule(1, { note: 'n'.repeat(1 << 20) })],
          decisions: [],
          store: null,
          problem: null,
        }),
        /expected shape/,
      ],
      [
        'a 1 MiB workspace',
        () => ({
          rules: [rule(1, { workspace: `/${'w'.repeat(1 << 20)}` })],
          decisions: [],
          store: null,
          problem: null,
        }),
        /expected shape/,
      ],
      // 8000 rules of 1000-character notes: each within its bound, over the relay's bytes in all.
      [
        'over the bytes',
        () => ({ rules: many(8000, { note: 'n'.repeat(1000) }), decisions: [], store: null, problem: null }),
        /its project rules are over the fleet's bounds/,
      ],
    ];
    for (const [what, answer, why] of cases) {
      rulesAnswer = () => ({ result: answer() });
      const e = await err('approvals/rules', { server: 's1' });
      assert.equal(e.code, -32603, what);
      assert.match(e.message, /^evil: /, what);
      assert.match(e.message, why, what);
    }
    assert.ok(JSON.stringify(many(8000, { note: 'n'.repeat(1000) })).length > MAX_RELAYED_RULES_BYTES);
    assert.ok((await server()).rejected >= before + cases.length, 'each refused answer counted');
    // ruleUpdate: exactly the parsed params, less server; its answer held to the shape; a note over the bound never sent.
    const u = await err('approvals/ruleUpdate', { server: 's1', id: 'r1', enabled: false, note: 'x' });
    assert.match(u.message, /^evil: approvals\/ruleUpdate: the server's answer is not of the expected shape/);
    assert.deepEqual(lastForwarded('approvals/ruleUpdate'), { id: 'r1', enabled: false, note: 'x' });
    const sent = rig.evil.received.length;
    assert.equal(
      (await err('approvals/ruleUpdate', { server: 's1', id: 'r1', note: 'n'.repeat(1 << 20) })).code,
      -32602,
    );
    assert.equal((await err('approvals/ruleUpdate', { server: 's1', id: 'x'.repeat(201) })).code, -32602);
    assert.equal(rig.evil.received.length, sent, 'nothing forwarded');
    assert.deepEqual(await rig.panel.request('approvals/revoke', { server: 's1', id: 'r1' }), {
      revoked: true,
    });
    assert.deepEqual(lastForwarded('approvals/revoke'), { id: 'r1' });
    // A deep answer drops the link; the caller gets an error.
    const drops = (await server()).dropped?.at ?? 0;
    rulesAnswer = () => `{"id":ID,"result":{"rules":${nest(30_000)}}}`;
    assert.notEqual((await err('approvals/rules', { server: 's1' })).code, 0);
    await until(async () => ((await server()).dropped?.at ?? 0) > drops, 20_000, 'the link dropped');
    assert.match((await server()).dropped!.reason, /nesting deeper than/);
    rulesAnswer = () => ({ result: { rules: [rule(1)], decisions: [], store: null, problem: null } });
    await holds('after-rules-answers');
  });

  test('rulesChanged: relayed tagged with its own id; malformed, too many, too big refused; deep drops the link', async () => {
    // At each (re)connection the host relays its rules, tagged with its own id, not the one they name.
    await until(async () => (await server()).state === 'connected', 20_000, 'joined again');
    const ws = await joinedSocket(rig.evil);
    await until(() => relayed().length > 0, 10_000, 'its rules relayed at reconnection');
    assert.deepEqual(relayed().at(-1)!.params, { server: 's1', rules: [{ ...rule(1), server: 's1' }] });
    const n0 = relayed().length;
    rig.evil.send({ method: 'approvals/rulesChanged', params: { server: 's7', rules: [rule(2)] } });
    await until(
      () => relayed().some((n, i) => i >= n0 && (n.params.rules as ApprovalRule[])[0]?.id === 'r2'),
      10_000,
      'the notification relayed',
    );
    assert.equal(relayed().at(-1)!.params.server, 's1');
    assert.equal((relayed().at(-1)!.params.rules as ApprovalRule[])[0]!.server, 's1');
    // At the bound (MAX_PROJECT_RULES rules): relayed whole.
    rig.evil.send({ method: 'approvals/rulesChanged', params: { rules: many(10_000) } });
    await until(
      () => (relayed().at(-1)!.params.rules as unknown[]).length === 10_000,
      10_000,
      '10 000 rules relayed',
    );
    const n1 = relayed().length;
    const before = (await server()).rejected;
    const bad = [
      { rules: 'x' },
      { rules: [{ id: 'r' }] },
      { rules: many(10_001) },
      { rules: [rule(1, { note: 'n'.repeat(1 << 20) })] },
      { rules: [rule(1, { host: 'h'.repeat(256) })] },
      { rules: many(8000, { note: 'n'.repeat(1000) }) },
    ];
    for (const params of bad) rig.evil.send({ method: 'approvals/rulesChanged', params });
    await until(async () => (await server()).rejected >= before + bad.length, 20_000, 'each refused');
    assert.equal(relayed().length, n1, 'none of them relayed');
    // 100 000 rules (23 MB): past the link's frame bound, the connection is closed; never relayed.
    rig.evil.send({ method: 'approvals/rulesChanged', params: { rules: many(100_000) } });
    await until(() => ws.readyState === WebSocket.CLOSED, 20_000, 'the link closed');
    // Deep: the link is dropped, naming why.
    await until(async () => (await server()).state === 'connected', 20_000, 'joined again');
    await joinedSocket(rig.evil);
    const drops = (await server()).dropped?.at ?? 0;
    rig.evil.send(`{"method":"approvals/rulesChanged","params":{"rules":${nest(30_000)}}}`);
    await until(async () => ((await server()).dropped?.at ?? 0) > drops, 20_000, 'the link dropped');
    // What was relayed since: only its list at each reconnection (one rule).
    assert.deepEqual(
      relayed()
        .slice(n1)
        .map((n) => (n.params.rules as ApprovalRule[]).map((r) => r.id)),
      relayed()
        .slice(n1)
        .map(() => ['r1']),
      'none of them relayed',
    );
    await holds('after-rules-notifications');
  });
});
