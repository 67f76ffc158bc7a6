// A fleet host relays the project rules of a joined server (issue 36): host A joins a real server B, each with a
// project rule of its own made from a prompt. Through A's panel, with `server`, B's rules are listed tagged with B's
// id, and B's rule is disabled, noted and revoked — each on B only, A's own rule untouched; B's rulesChanged
// notifications reach A's panel tagged with B's id. An unknown server is refused naming it; an agent gets nothing.
// On the code before, A answered these calls itself (its own rules: B's rule id was unknown there) and counted B's
// rulesChanged as a rejected notification.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { ApprovalRule, ApprovalsState, RulesResult } from '../../src/protocol/approvals.js';
import { askingStart, curlCode } from '../helpers/approvalsCli.js';
import { callError, type RpcClient } from '../helpers/client.js';
import { type FleetPair, startFleetPair } from '../helpers/fleetPair.js';
import { tempDir, until } from '../helpers/server.js';

type Client = RpcClient & { sessionId: string };
const skip = existsSync('/usr/bin/curl') ? false : 'curl is not installed';

describe('fleet host: the project rules of a joined server', { skip, timeout: 60_000 }, () => {
  const tmp = tempDir('corral-fleet-approvals-rules-');
  const work = join(tmp.path, 'project');
  let f: FleetPair;
  let ruleA: ApprovalRule;
  let ruleB: ApprovalRule;

  const rulesOf = async (c: RpcClient, params: unknown = {}) =>
    (await c.request<RulesResult>('approvals/rules', params)).rules;
  /** A rule made on `panel`'s server by allowing a prompt of `agent`'s process for the project. */
  const makeRule = async (agent: Client, panel: RpcClient, processId: string, path: string) => {
    await askingStart(
      agent,
      processId,
      curlCode(processId, `http://127.0.0.1:${f.origin.port}${path}`),
      work,
    );
    let id = '';
    await until(
      async () => {
        const p = (await panel.request<ApprovalsState>('approvals/list', {})).pending.find(
          (x) => x.processId === processId && !x.server,
        );
        id = p?.id ?? '';
        return p !== undefined;
      },
      15_000,
      `the prompt of ${processId}`,
    );
    await panel.request('approvals/decide', { id, decision: 'allowProject' });
    await agent.collect(processId, 15_000);
    return (await rulesOf(panel)).find((r) => r.promptId === id)!;
  };
  const err = callError;

  before(async () => {
    mkdirSync(join(work, '.git'), { recursive: true });
    f = await startFleetPair(tmp.path);
    [ruleA, ruleB] = await Promise.all([
      makeRule(f.agentA, f.panelA, 'on-a', '/a/x'),
      makeRule(f.agentB, f.panelB, 'on-b', '/b/x'),
    ]);
  });

  after(async () => {
    await f?.close();
    tmp.cleanup();
  });

  /** The last `approvals/rulesChanged` A's panel was sent about B. */
  const relayedOfB = () =>
    f.panelA.notifications
      .filter((n) => n.method === 'approvals/rulesChanged' && n.params.server === 's1')
      .at(-1)?.params.rules as ApprovalRule[] | undefined;

  test("B's rules listed through A, tagged with B's id; A's own list is A's", async () => {
    assert.equal(ruleB.pathPrefix, '/b');
    const viaA = await rulesOf(f.panelA, { server: 's1' });
    assert.deepEqual(
      viaA.map((r) => [r.server, r.id, r.host, r.pathPrefix]),
      [['s1', ruleB.id, '127.0.0.1', '/b']],
    );
    assert.deepEqual(
      (await rulesOf(f.panelA)).map((r) => [r.server, r.id]),
      [[undefined, ruleA.id]],
      "A's own rules: only A's, untagged",
    );
    await until(
      () => relayedOfB()?.some((r) => r.id === ruleB.id) === true,
      10_000,
      "B's rulesChanged relayed",
    );
    assert.equal(relayedOfB()![0]!.server, 's1');
  });

  test("disabled and noted through A: on B only, A's own rule untouched", async () => {
    // Without `server` A looks in its own rules: B's id is not there.
    const own = await err(f.panelA, 'approvals/ruleUpdate', { id: ruleB.id, enabled: false });
    assert.equal(own.code, -32600);
    assert.match(own.message, /unknown rule/);
    const r = await f.panelA.request<{ rule: ApprovalRule }>('approvals/ruleUpdate', {
      server: 's1',
      id: ruleB.id,
      enabled: false,
      note: 'set through A',
    });
    assert.deepEqual([r.rule.server, r.rule.enabled, r.rule.note], ['s1', false, 'set through A']);
    const onB = (await rulesOf(f.panelB)).find((x) => x.id === ruleB.id)!;
    assert.deepEqual([onB.enabled, onB.note], [false, 'set through A']);
    const onA = (await rulesOf(f.panelA)).find((x) => x.id === ruleA.id)!;
    assert.deepEqual([onA.enabled, onA.note], [true, null], "A's own rule untouched");
    await until(
      () => relayedOfB()?.find((x) => x.id === ruleB.id)?.note === 'set through A',
      10_000,
      'the change relayed to A',
    );
    // A's table checks the params before anything is forwarded.
    assert.equal(
      (await err(f.panelA, 'approvals/ruleUpdate', { server: 's1', id: ruleB.id, note: 'n'.repeat(1001) }))
        .code,
      -32602,
    );
  });

  test("revoked through A: gone from B, A's own rule kept", async () => {
    assert.deepEqual(await f.panelA.request('approvals/revoke', { server: 's1', id: ruleB.id }), {
      revoked: true,
    });
    assert.deepEqual(await rulesOf(f.panelB), []);
    assert.deepEqual(
      (await rulesOf(f.panelA)).map((r) => r.id),
      [ruleA.id],
    );
    await until(() => relayedOfB()?.length === 0, 10_000, 'the empty list relayed');
  });

  test('an unknown server is refused naming it; an agent of A reaches none of it', async () => {
    for (const [m, params] of [
      ['approvals/rules', { server: 's9' }],
      ['approvals/ruleUpdate', { server: 's9', id: ruleA.id, enabled: false }],
      ['approvals/revoke', { server: 's9', id: ruleA.id }],
    ] as const) {
      const e = await err(f.panelA, m, params);
      assert.equal(e.code, -32600, m);
      assert.match(e.message, /unknown server s9/, m);
      assert.equal((await err(f.agentA, m, { ...params, server: 's1' })).code, -32600, `${m} from an agent`);
    }
    assert.equal((await rulesOf(f.panelA))[0]!.enabled, true, "A's rule still as it was");
  });
});
