// approvals/hold (issue 36, item 3) fed hostile input: malformed params (wrong types, huge and unknown ids, extra
// nesting), an agent trying to pause its own prompt, and a panel that holds a card and goes away: the prompt still
// fails closed at its bound (MAX_HELD_PROMPT_MS), on the server's clock. Fails on cca01b7 (no approvals/hold).
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { type ApprovalsState, MAX_HELD_PROMPT_MS } from '../../src/protocol/approvals.js';
import { askingNetwork, curlCode } from '../helpers/approvalsCli.js';
import { RpcCallError } from '../helpers/client.js';
import { FakeClock } from '../helpers/clock.js';
import { shellStart } from '../helpers/registry-contract.js';
import { startTestServer, type TestServer, until } from '../helpers/server.js';
import { loopbackOnlyDialer, startOrigin, stubResolver } from '../integration/network-helpers.js';

describe('approvals/hold: hostile input and a holder that goes away', {
  skip: existsSync('/usr/bin/curl') ? false : 'curl is not installed',
}, () => {
  const clock = new FakeClock();
  const offMachine: string[] = [];
  let ts: TestServer;
  let origin: Awaited<ReturnType<typeof startOrigin>>;

  before(async () => {
    origin = await startOrigin();
    ts = await startTestServer({
      tokens: true,
      clock,
      launcher: { resolver: stubResolver, dialer: loopbackOnlyDialer(offMachine) },
      approvals: { timeoutMs: 20_000 },
    });
  });
  after(async () => {
    await ts?.close();
    await origin?.close();
    assert.deepEqual(offMachine, []);
  });

  test('malformed params are -32602 naming the field; unknown ids -32600; an agent cannot hold', async () => {
    const panel = await ts.panel();
    const bad: [unknown, RegExp][] = [
      [{}, /id/],
      [{ id: 'x' }, /holding/],
      [{ id: 'x', holding: 'yes' }, /holding/],
      [{ id: 42, holding: true }, /id/],
      [{ id: 'x'.repeat(1_000_000), holding: true }, /id/],
      [{ id: '', holding: true }, /id/],
      [{ id: { deep: [[[[[[[[[[]]]]]]]]]] }, holding: true }, /id/],
      [[], /./],
    ];
    for (const [params, field] of bad) {
      const e = await panel.request('approvals/hold', params).then(
        () => null,
        (x: RpcCallError) => x,
      );
      assert.ok(e instanceof RpcCallError, JSON.stringify(params).slice(0, 60));
      assert.equal(e.code, -32602);
      assert.match(e.message, field);
      assert.ok(e.message.length < 2000);
    }
    const unknown = await panel.request('approvals/hold', { id: 'no-such', holding: true }).catch((x) => x);
    assert.equal((unknown as RpcCallError).code, -32600);
    assert.match((unknown as RpcCallError).message, /unknown or already resolved approval id no-such/);
    const agent = await ts.client('agent');
    const refused = await agent.request('approvals/hold', { id: 'no-such', holding: true }).catch((x) => x);
    assert.equal((refused as RpcCallError).code, -32600);
  });

  test('a panel that holds a card and disconnects: the prompt fails closed at its bound, never later', async () => {
    const agent = await ts.client('agent');
    const panel = await ts.panel('holder');
    const observer = await ts.panel('observer');
    await agent.request('process/start', {
      ...shellStart('held', curlCode('held', `http://127.0.0.1:${origin.port}/held`), '/tmp'),
      managedNetwork: askingNetwork(),
    });
    const find = async () =>
      (await observer.request<ApprovalsState>('approvals/list', {})).pending.find(
        (p) => p.processId === 'held',
      );
    await until(async () => (await find()) !== undefined, 30_000, 'the prompt');
    const p = (await find())!;
    // Held again and again: idempotent, the bound stays where it was.
    for (let i = 0; i < 50; i++) await panel.request('approvals/hold', { id: p.id, holding: true });
    const held = (await find())!;
    assert.equal(held.expiresAt, p.requestedAt + MAX_HELD_PROMPT_MS);
    assert.equal(held.pausedLeftMs, 20_000);
    panel.close();
    // Past its own timeout it still waits (held)...
    await clock.advance(25_000);
    assert.ok(await find(), 'still held past its own timeout');
    // ...and fails closed at the bound.
    await clock.advance(MAX_HELD_PROMPT_MS - 25_000);
    await until(async () => (await find()) === undefined, 10_000, 'timed out at the bound');
    await agent.collect('held', 30_000);
    assert.match(agent.output('held', 'stdout'), /held=403/);
    const audit = (await observer.request<ApprovalsState>('approvals/list', {})).audit;
    assert.ok(audit.some((e) => e.promptId === p.id && e.kind === 'timeout'));
  });
});
