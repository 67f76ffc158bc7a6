// A fleet host relays the approvals v2 actions of a joined server's cards and workspaces (issue 36): host A joins a
// real server B (project rules kept in a file); through A's panel, with `server`, a held prompt of B is told to wait
// for its process's exit (the exit denies it), learning mode of a workspace of B is started, notified (tagged with
// B's id), read and ended, and B's repository file is read and accepted — each on B only (A's own state untouched),
// with the params A's table parsed (less `server`). An unknown server is refused naming it; an agent gets nothing.
// On the code before, A answered these calls itself (about its own prompts and workspaces) and dropped B's
// learningChanged notifications as unknown.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type {
  ApprovalPrompt,
  ApprovalsState,
  LearningChangedNotification,
  LearningState,
  RepoPolicyState,
} from '../../src/protocol/approvals.js';
import { askingStart, curlCode } from '../helpers/approvalsCli.js';
import { callError } from '../helpers/client.js';
import { type FleetPair, startFleetPair } from '../helpers/fleetPair.js';
import { tempDir, until } from '../helpers/server.js';

const skip = existsSync('/usr/bin/curl') ? false : 'curl is not installed';

describe('fleet host: approvals v2 on a joined server', { skip, timeout: 60_000 }, () => {
  const tmp = tempDir('corral-fleet-approvals-v2-');
  const work = join(tmp.path, 'project');
  let f: FleetPair;

  before(async () => {
    mkdirSync(join(work, '.git'), { recursive: true });
    mkdirSync(join(work, '.corral'));
    writeFileSync(
      join(work, '.corral', 'network.json'),
      JSON.stringify({ endpoints: [{ host: '127.0.0.1' }] }),
    );
    f = await startFleetPair(tmp.path);
  });

  after(async () => {
    await f?.close();
    tmp.cleanup();
  });

  const err = callError;

  test("wait until the process exits, on a joined server's card: B's prompt waits, its exit denies it", async () => {
    await askingStart(
      f.agentB,
      'held',
      `${curlCode('held', `http://127.0.0.1:${f.origin.port}/x`)}; sleep 30`,
      work,
    );
    await until(
      async () =>
        (await f.panelA.request<ApprovalsState>('approvals/list', {})).pending.some(
          (p) => p.server === 's1' && p.processId === 'held',
        ),
      15_000,
      "B's prompt on A",
    );
    const p = (await f.panelA.request<ApprovalsState>('approvals/list', {})).pending.find(
      (x) => x.server === 's1',
    )!;
    // A's own broker does not know B's prompt: without `server` it is refused as unknown there.
    assert.match((await err(f.panelA, 'approvals/waitForExit', { id: p.id })).message, /unknown or already/);
    assert.deepEqual(await f.panelA.request('approvals/waitForExit', { server: 's1', id: p.id }), {
      waiting: 1,
    });
    const onB = (await f.panelB.request<ApprovalsState>('approvals/list', {})).pending.find(
      (x) => x.id === p.id,
    );
    assert.equal(onB?.waitingForExit, true, 'B holds it until the exit');
    await until(
      () =>
        f.panelA.notifications.some(
          (n) =>
            n.method === 'approvals/requested' &&
            (n.params.prompt as ApprovalPrompt).id === p.id &&
            (n.params.prompt as ApprovalPrompt).waitingForExit === true,
        ),
      10_000,
      'the change relayed to A',
    );
    // The exit (a terminate) denies the held requests: the prompt is resolved on B, and A's panel is told.
    await f.agentB.request('process/terminate', { processId: 'held' });
    await until(
      () =>
        f.panelA.notifications.some(
          (n) => n.method === 'approvals/resolved' && n.params.server === 's1' && n.params.id === p.id,
        ),
      15_000,
      'the end relayed to A',
    );
    assert.ok(
      !(await f.panelB.request<ApprovalsState>('approvals/list', {})).pending.some((x) => x.id === p.id),
    );
    await f.agentB.collect('held', 15_000);
    assert.equal((await err(f.panelA, 'approvals/waitForExit', { server: 's9', id: p.id })).code, -32600);
    assert.match(
      (await err(f.panelA, 'approvals/waitForExit', { server: 's9', id: p.id })).message,
      /unknown server s9/,
    );
  });

  test("learning mode of a joined server's workspace: started, notified tagged with B, read and ended on B only", async () => {
    const started = (await f.panelA.request('approvals/learn', {
      server: 's1',
      workspace: work,
      maxRequests: 5,
    })) as { learning: LearningState };
    assert.equal(started.learning.active, true);
    await until(
      () =>
        f.panelA.notifications.some(
          (n) =>
            n.method === 'approvals/learningChanged' &&
            n.params.server === 's1' &&
            (n.params as LearningChangedNotification).learning.some((l) => l.active),
        ),
      10_000,
      "B's learningChanged relayed, tagged s1",
    );
    const onB = (await f.panelB.request('approvals/learning', {})) as { learning: LearningState[] };
    assert.equal(onB.learning.length, 1, 'B learns');
    const ownA = (await f.panelA.request('approvals/learning', {})) as { learning: LearningState[] };
    assert.deepEqual(ownA.learning, [], "A's own workspaces do not");
    const viaA = (await f.panelA.request('approvals/learning', { server: 's1' })) as {
      learning: LearningState[];
    };
    assert.equal(viaA.learning[0]!.workspace, onB.learning[0]!.workspace);
    const ended = (await f.panelA.request('approvals/learnEnd', {
      server: 's1',
      workspace: work,
      accept: [],
    })) as {
      rules: unknown[];
    };
    assert.deepEqual(ended.rules, []);
    assert.deepEqual(
      ((await f.panelB.request('approvals/learning', {})) as { learning: unknown[] }).learning,
      [],
    );
    // What B received: the params A parsed, without `server`.
    assert.match(
      (await err(f.panelA, 'approvals/learn', { server: 's1', workspace: work, maxRequests: 0 })).message,
      /maxRequests/,
    );
  });

  test("a joined server's repository file: read and accepted on B, A's own acceptance untouched", async () => {
    const state = await f.panelA.request<RepoPolicyState>('approvals/repoPolicy', {
      server: 's1',
      workspace: work,
    });
    assert.equal(state.status, 'read');
    assert.equal(state.acceptance, 'new');
    const stale = await err(f.panelA, 'approvals/repoAccept', {
      server: 's1',
      workspace: work,
      sha256: 'b'.repeat(64),
    });
    assert.equal(stale.code, -32600);
    assert.match(stale.message, /^server-b: sha256: b+ is not the file's hash now/);
    const accepted = await f.panelA.request<RepoPolicyState>('approvals/repoAccept', {
      server: 's1',
      workspace: work,
      sha256: state.sha256!,
    });
    assert.equal(accepted.acceptance, 'accepted');
    const onB = await f.panelB.request<RepoPolicyState>('approvals/repoPolicy', { workspace: work });
    assert.equal(onB.acceptance, 'accepted');
    const ownA = await f.panelA.request<RepoPolicyState>('approvals/repoPolicy', { workspace: work });
    assert.equal(ownA.acceptance, 'new', "A's own acceptance of the same directory is its own");
  });

  test('an agent of A reaches none of it', async () => {
    for (const [m, params] of [
      ['approvals/waitForExit', { server: 's1', id: 'x' }],
      ['approvals/learn', { server: 's1', workspace: work }],
      ['approvals/learnEnd', { server: 's1', workspace: work }],
      ['approvals/repoAccept', { server: 's1', workspace: work, sha256: 'a'.repeat(64) }],
    ] as const)
      assert.equal((await err(f.agentA, m, params)).code, -32600, m);
  });
});
