// Approvals v2, the parts left (issue 36): learning mode said in process/start's result and notified to the panel;
// "wait until the process exits" (no countdown, the exit denies, nothing stored); a repository file's state against
// the hash the user last accepted, stored beside the project rules and kept across a reopen of that store.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, realpathSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, describe, test } from 'node:test';
import { openRuleStore } from '../../src/app/approvalRuleStore.js';
import type {
  LearningChangedNotification,
  RepoPolicyState,
  RulesResult,
} from '../../src/protocol/approvals.js';
import type { StartResult } from '../../src/protocol/exec.js';
import { silentLogger } from '../../src/server/core/log.js';
import {
  approvalsRig,
  askingNetwork,
  askingStart,
  curlCode,
  runApprovalsCli,
} from '../helpers/approvalsCli.js';
import { until } from '../helpers/server.js';

const skip = existsSync('/usr/bin/curl') ? false : 'curl is not installed';

describe('approvals v2: learning shown, wait until exit, the repository file accepted', { skip }, () => {
  const rig = approvalsRig('corral-approvals-rest-');
  const { open, pendingOf, stateHome, rulesFile } = rig;
  const work = join(rig.tmp.path, 'project');
  before(() => mkdirSync(join(work, '.git'), { recursive: true }));
  const url = (h: string, path: string) => `http://${h}:${rig.origin.port}${path}`;

  test("learning mode is said in process/start's result and notified to the panel", async () => {
    const agent = await open(rig.host.tokens.agent, 'learn-agent');
    const panel = await open(rig.host.tokens.panel, 'learn-panel');
    await panel.request('approvals/subscribe', {});
    const before = await askingStart(agent, 'before', 'true', work);
    assert.equal((before as StartResult).warnings, undefined, 'not learning: nothing said');
    await panel.request('approvals/learn', { workspace: work, maxRequests: 10 });
    await until(
      () => panel.notifications.some((n) => n.method === 'approvals/learningChanged'),
      10_000,
      'the learning notification',
    );
    const r = (await askingStart(
      agent,
      'learning',
      curlCode('seen', url('127.0.0.1', '/v1/x')),
      join(work),
    )) as StartResult;
    assert.ok(
      r.warnings?.some((w) =>
        new RegExp(`^learning mode is on for ${realpathSync(work)} until .* or 10 more requests`).test(w),
      ),
      JSON.stringify(r.warnings),
    );
    await agent.collect('learning', 30_000);
    assert.match(agent.output('learning', 'stdout'), /seen=200/);
    // The new endpoint is notified (the panel's proposal), with its path prefix.
    await until(
      () =>
        panel.notifications.some(
          (n) =>
            n.method === 'approvals/learningChanged' &&
            (n.params as LearningChangedNotification).learning[0]?.proposal.length === 1,
        ),
      10_000,
      'the proposal notified',
    );
    const last = panel.notifications.filter((n) => n.method === 'approvals/learningChanged').at(-1)!
      .params as LearningChangedNotification;
    assert.deepEqual(
      last.learning[0]!.proposal.map((e) => [e.host, e.pathPrefix, e.hits]),
      [['127.0.0.1', '/v1', 1]],
    );
    // A process that does not ask for approvals is told nothing, even in that workspace.
    const plain = (await agent.request('process/start', {
      processId: 'plain',
      argv: ['/bin/true'],
      cwd: work,
      env: {},
      tty: false,
      arg0: null,
    })) as StartResult;
    assert.equal(plain.warnings, undefined);
    await panel.request('approvals/learnEnd', { workspace: work });
    const after = (await askingStart(agent, 'after', 'true', work)) as StartResult;
    assert.equal(after.warnings, undefined, 'learning ended: nothing said');
  });

  test('wait until the process exits: no countdown, the exit denies, nothing stored', async () => {
    const agent = await open(rig.host.tokens.agent, 'wait-agent');
    const panel = await open(rig.host.tokens.panel, 'wait-panel');
    await panel.request('approvals/subscribe', {});
    // A short timeout: the waited prompt outlives it; the other prompt of the same process times out meanwhile.
    const network = {
      config: { network: { ...askingNetwork().config.network, approval_timeout_ms: 1500 } },
    };
    const script = `${curlCode('waited', url('127.0.0.2', '/w'))} & read line; ${curlCode('timed', url('127.0.0.3', '/t'))}; read line2`;
    await agent.request('process/start', {
      processId: 'waiter',
      argv: ['/bin/sh', '-c', script],
      cwd: work,
      env: { PATH: '/usr/bin:/bin' },
      tty: false,
      pipeStdin: true,
      arg0: null,
      managedNetwork: network,
    });
    await until(async () => (await pendingOf(panel, 'waiter')).length === 1, 30_000, 'the prompt');
    const [p] = await pendingOf(panel, 'waiter');
    assert.deepEqual(await panel.request('approvals/waitForExit', { id: p!.id }), { waiting: 1 });
    const [shown] = await pendingOf(panel, 'waiter');
    assert.equal(shown!.waitingForExit, true);
    // Holding a waiting prompt changes nothing (there is no countdown to pause).
    assert.deepEqual(
      (await panel.request<{ pausedLeftMs: number | null }>('approvals/hold', { id: p!.id, holding: true }))
        .pausedLeftMs,
      null,
    );
    // Another request of the process prompts and times out (1.5 s); the waited one is still held after it.
    await agent.request('process/write', {
      processId: 'waiter',
      chunk: Buffer.from('go\n').toString('base64'),
    });
    await until(
      () =>
        panel.notifications.some(
          (n) =>
            n.method === 'approvals/resolved' &&
            (n.params as { outcome: string; id: string }).outcome === 'timeout' &&
            (n.params as { id: string }).id !== p!.id,
        ),
      30_000,
      'the other prompt timed out',
    );
    await until(() => /timed=403/.test(agent.output('waiter', 'stdout')), 30_000, 'the timed-out request');
    assert.equal(p!.expiresAt < Date.now(), true, 'past its own countdown');
    const still = await pendingOf(panel, 'waiter');
    assert.deepEqual(
      still.map((x) => [x.id, x.waiting]),
      [[p!.id, 1]],
      'the waited request is still held',
    );
    // The process exits (its last read ends): the waited request is denied, its receipt says why.
    const decisions: string[] = [];
    const off = rig.host.server.networkEvents.on('audit', (e) => decisions.push(JSON.stringify(e)));
    await agent.request('process/write', {
      processId: 'waiter',
      chunk: Buffer.from('bye\n').toString('base64'),
    });
    await agent.collect('waiter', 30_000);
    assert.match(agent.output('waiter', 'stdout'), /waited=403/, 'the waited request was refused');
    await until(() => decisions.some((d) => d.includes('wait_for_exit')), 30_000, 'the denial recorded');
    off();
    const denial = JSON.parse(decisions.find((d) => d.includes('wait_for_exit'))!) as Record<string, unknown>;
    assert.equal(JSON.stringify(denial).includes('"deny"'), true, JSON.stringify(denial));
    assert.ok(
      panel.notifications.some(
        (n) =>
          n.method === 'approvals/resolved' &&
          (n.params as { id: string; outcome: string }).id === p!.id &&
          (n.params as { outcome: string }).outcome === 'cancelled',
      ),
    );
    const rules = await panel.request<RulesResult>('approvals/rules', {});
    assert.deepEqual(rules.rules, [], 'no rule stored');
    assert.deepEqual(rules.decisions, [], 'nothing remembered');
  });

  test('the repository file: new, accepted (by hash, from the CLI), changed; stored beside the rules', async () => {
    const panel = await open(rig.host.tokens.panel, 'repo-panel');
    const file = join(work, '.corral', 'network.json');
    mkdirSync(join(work, '.corral'), { recursive: true });
    writeFileSync(file, JSON.stringify({ endpoints: [{ host: '127.0.0.2' }] }));
    const fresh = await panel.request<RepoPolicyState>('approvals/repoPolicy', { workspace: work });
    assert.equal(fresh.acceptance, 'new');
    assert.match(fresh.sha256 ?? '', /^[0-9a-f]{64}$/);
    // From the CLI (the panel credential through the state file): shown, then accepted.
    const shown = await runApprovalsCli(['repo', work], stateHome);
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, new RegExp(`new.*${fresh.sha256}`));
    const accepted = await runApprovalsCli(['accept-repo', work, '--sha256', fresh.sha256!], stateHome);
    assert.equal(accepted.code, 0, accepted.stderr);
    assert.match(accepted.stdout, /accepted/);
    const now = await panel.request<RepoPolicyState>('approvals/repoPolicy', { workspace: work });
    assert.equal(now.acceptance, 'accepted');
    assert.equal(now.acceptedSha256, fresh.sha256);
    assert.match(now.acceptedBy ?? '', /panel-token/);
    // Kept beside the rules: the store read afresh has it.
    const store = openRuleStore(rulesFile, silentLogger);
    assert.deepEqual(
      store.loadRepoAcceptances?.().map((a) => [a.workspace, a.sha256]),
      [[realpathSync(work), fresh.sha256]],
    );
    // Changed by the repository: shown as changed; accepting the old hash is refused, naming the field.
    writeFileSync(file, JSON.stringify({ endpoints: [{ host: '127.0.0.2' }, { host: '127.0.0.3' }] }));
    const changed = await panel.request<RepoPolicyState>('approvals/repoPolicy', { workspace: work });
    assert.equal(changed.acceptance, 'changed');
    assert.equal(changed.acceptedSha256, fresh.sha256);
    const stale = await runApprovalsCli(['accept-repo', work, '--sha256', fresh.sha256!], stateHome);
    assert.equal(stale.code, 2);
    assert.match(stale.stderr, /sha256: .* is not the file's hash now/);
    await panel.request('approvals/repoAccept', { workspace: work, sha256: changed.sha256 });
    assert.equal(
      (await panel.request<RepoPolicyState>('approvals/repoPolicy', { workspace: work })).acceptance,
      'accepted',
    );
  });
});
