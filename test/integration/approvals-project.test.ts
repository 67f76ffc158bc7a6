// Approvals v2 (issue 36, items 1 and 4) through real sockets and real processes: prompts grouped per (process, host),
// a project rule made from `corral approvals` that applies to a later session of the same workspace after a restart
// of the host (same rule file) and not to another workspace, and revoking it bringing the prompt back.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Host } from '../../src/app/host.js';
import { localStatePath } from '../../src/app/localState.js';
import type {
  ApprovalPrompt,
  ApprovalRule,
  ApprovalsState,
  LearningState,
  RulesResult,
} from '../../src/protocol/approvals.js';
import {
  askingNetwork,
  askingStart,
  closeApprovalsRig,
  curlCode,
  runApprovalsCli,
  startRulesHost,
} from '../helpers/approvalsCli.js';
import { RpcClient } from '../helpers/client.js';
import { tempDir, until } from '../helpers/server.js';
import { startOrigin } from './network-helpers.js';

const CURL = '/usr/bin/curl';
const skip = existsSync(CURL) ? false : 'curl is not installed';

type Client = RpcClient & { sessionId: string };

describe('approvals v2: grouped prompts, project rules, the CLI', { skip }, () => {
  const tmp = tempDir('corral-approvals-v2-');
  const stateHome = join(tmp.path, 'state');
  const rulesFile = join(tmp.path, 'rules', 'approval-rules.db');
  const offMachine: string[] = [];
  let origin: Awaited<ReturnType<typeof startOrigin>>;
  let host: Host;
  const clients: RpcClient[] = [];
  /** Two workspaces: git top-levels with a subdirectory each. */
  const wsA = join(tmp.path, 'project-a');
  const wsB = join(tmp.path, 'project-b');

  before(async () => {
    for (const w of [wsA, wsB]) {
      mkdirSync(join(w, '.git'), { recursive: true });
      mkdirSync(join(w, 'src'), { recursive: true });
    }
    origin = await startOrigin();
    host = await startRulesHost(stateHome, rulesFile, offMachine);
  });

  after(() => closeApprovalsRig({ clients, host, origin, tmp, offMachine }));

  const open = async (h: Host, token: string, name: string): Promise<Client> => {
    const c = await RpcClient.open(`${h.listener.url}/?token=${encodeURIComponent(token)}`, name);
    clients.push(c);
    return c;
  };
  const start = askingStart;
  const curl = (label: string, hostName: string, path: string) =>
    curlCode(label, `http://${hostName}:${origin.port}${path}`);
  const pendingOf = async (panel: Client, processId: string) =>
    (await panel.request<ApprovalsState>('approvals/list', {})).pending.filter(
      (p) => p.processId === processId,
    );

  test('50 requests to one host from one process make one card counting 50; 5 hosts make 5 cards', async () => {
    const agent = await open(host, host.tokens.agent, 'grouping');
    const panel = await open(host, host.tokens.panel, 'panel');
    const fifty = Array.from({ length: 50 }, (_, i) => `${curl(`r${i}`, '127.0.0.1', `/g${i}`)} &`).join(' ');
    await start(agent, 'fifty', `${fifty} wait`, wsA);
    await until(
      async () => (await pendingOf(panel, 'fifty'))[0]?.waiting === 50,
      30_000,
      '50 requests held on one card',
    );
    const one = await pendingOf(panel, 'fifty');
    assert.equal(one.length, 1, 'one card');
    assert.equal(one[0]!.waiting, 50);
    assert.equal(one[0]!.workspace, realpathSync(wsA));
    const five = [2, 3, 4, 5, 6].map((n) => `${curl(`h${n}`, `127.0.0.${n}`, '/five')} &`).join(' ');
    await start(agent, 'five', `${five} wait`, wsA);
    await until(async () => (await pendingOf(panel, 'five')).length === 5, 30_000, '5 cards');
    const cards = await pendingOf(panel, 'five');
    assert.deepEqual(
      cards.map((p) => p.host).sort(),
      [2, 3, 4, 5, 6].map((n) => `127.0.0.${n}`),
    );
    assert.ok(cards.every((p) => p.waiting === 1));
    // Denied once each, from the CLI: the requests fail closed and nothing is stored.
    for (const p of [...one, ...cards]) {
      const r = await runApprovalsCli(['deny', p.id], stateHome);
      assert.equal(r.code, 0, r.stderr);
    }
    await agent.collect('fifty', 30_000);
    await agent.collect('five', 30_000);
    assert.equal(agent.output('fifty', 'stdout').match(/=403/g)?.length, 50);
    assert.equal(agent.output('five', 'stdout').match(/=403/g)?.length, 5);
    const rules = await panel.request<RulesResult>('approvals/rules', {});
    assert.deepEqual(rules.rules, []);
    assert.deepEqual(rules.decisions, []);
  });

  test('a project rule made from the CLI applies after a restart in the same workspace, not another; revoke brings the prompt back', async () => {
    let agent = await open(host, host.tokens.agent, 'agent-1');
    // A project rule matches the prompt's path's first segment (issue 36, item 7): /v1 here.
    await start(agent, 'first', curl('first', '127.0.0.1', '/v1/first'), join(wsA, 'src'));
    let panel = await open(host, host.tokens.panel, 'panel');
    await until(async () => (await pendingOf(panel, 'first')).length === 1, 30_000, 'the prompt');
    // The CLI sees it (from the state file), and answers it for the project.
    const listed = await runApprovalsCli(['list', '--json'], stateHome);
    assert.equal(listed.code, 0, listed.stderr);
    const prompt = (JSON.parse(listed.stdout) as { pending: ApprovalPrompt[] }).pending.find(
      (p) => p.processId === 'first',
    )!;
    assert.equal(prompt.workspace, realpathSync(wsA));
    const human = await runApprovalsCli(['list'], stateHome);
    assert.match(
      human.stdout,
      new RegExp(`${prompt.id}  http 127\\.0\\.0\\.1:${origin.port} GET /v1/first  waiting 1`),
    );
    assert.match(human.stdout, new RegExp(`workspace ${realpathSync(wsA)}`));
    const allowed = await runApprovalsCli(['allow', prompt.id, '--scope', 'project'], stateHome);
    assert.equal(allowed.code, 0, allowed.stderr);
    assert.match(allowed.stdout, /allowProject: released 1 held request/);
    await agent.collect('first', 30_000);
    assert.match(agent.output('first', 'stdout'), /first=200/);

    // Restart: the state file goes with the host; the new host reads the same rule file.
    const statePath = localStatePath({ XDG_STATE_HOME: stateHome });
    assert.ok(existsSync(statePath));
    await host.shutdown();
    assert.equal(existsSync(statePath), false, 'the state file is removed at exit');
    const gone = await runApprovalsCli(['list'], stateHome);
    assert.equal(gone.code, 1);
    assert.match(gone.stderr, /no local Corral host is running/);
    assert.equal(gone.stdout, '');
    host = await startRulesHost(stateHome, rulesFile, offMachine);
    agent = await open(host, host.tokens.agent, 'agent-2');
    panel = await open(host, host.tokens.panel, 'panel-2');
    await panel.request('approvals/subscribe', {});

    // Same workspace (another directory in it): no prompt, allowed.
    await start(agent, 'again', curl('again', '127.0.0.1', '/v1/again'), wsA);
    await agent.collect('again', 30_000);
    assert.match(agent.output('again', 'stdout'), /again=200/);
    assert.equal(panel.notifications.filter((n) => n.method === 'approvals/requested').length, 0);
    // Another workspace: asked.
    await start(agent, 'other', curl('other', '127.0.0.1', '/other'), wsB);
    const [other] = await (async () => {
      await until(async () => (await pendingOf(panel, 'other')).length === 1, 30_000, 'the other prompt');
      return pendingOf(panel, 'other');
    })();
    assert.equal(other!.workspace, realpathSync(wsB));
    assert.equal((await runApprovalsCli(['deny', other!.id], stateHome)).code, 0);
    await agent.collect('other', 30_000);
    assert.match(agent.output('other', 'stdout'), /other=403/);

    // The rule, as the CLI lists it: exactly what was asked, who made it, its hits.
    const rules = await runApprovalsCli(['rules', '--json'], stateHome);
    assert.equal(rules.code, 0, rules.stderr);
    const r = JSON.parse(rules.stdout) as RulesResult;
    assert.equal(r.store, rulesFile);
    assert.equal(r.rules.length, 1);
    const rule = r.rules[0]!;
    assert.deepEqual(
      {
        workspace: rule.workspace,
        decision: rule.decision,
        protocol: rule.protocol,
        host: rule.host,
        port: rule.port,
        method: rule.method,
        pathPrefix: rule.pathPrefix,
        origin: rule.origin,
        enabled: rule.enabled,
        hits: rule.hits,
      },
      {
        workspace: realpathSync(wsA),
        decision: 'allow',
        protocol: 'http',
        host: '127.0.0.1',
        port: origin.port,
        method: 'GET',
        pathPrefix: '/v1',
        origin: 'cli',
        enabled: true,
        hits: 1,
      },
    );
    assert.equal(rule.createdBy.credential, 'panel-token');

    // Revoked from the CLI: the prompt is back in that workspace.
    const revoked = await runApprovalsCli(['revoke', rule.id], stateHome);
    assert.equal(revoked.code, 0, revoked.stderr);
    await start(agent, 'after', curl('after', '127.0.0.1', '/v1/after'), wsA);
    await until(async () => (await pendingOf(panel, 'after')).length === 1, 30_000, 'the prompt is back');
    const [back] = await pendingOf(panel, 'after');
    await panel.request('approvals/decide', { id: back!.id, decision: 'denyOnce' });
    await agent.collect('after', 30_000);
    assert.match(agent.output('after', 'stdout'), /after=403/);
    assert.deepEqual((await panel.request<RulesResult>('approvals/rules', {})).rules, []);
  });

  test('learning mode: 20 requests to 3 hosts make a proposal of exactly those 3; accepting it makes 3 project rules', async () => {
    const agent = await open(host, host.tokens.agent, 'learner');
    const panel = await open(host, host.tokens.panel, 'panel-learn');
    const learn = join(tmp.path, 'learned');
    mkdirSync(join(learn, '.git'), { recursive: true });
    const started = await panel.request<{ learning: LearningState }>('approvals/learn', {
      workspace: learn,
      maxRequests: 100,
    });
    assert.equal(started.learning.active, true);
    assert.equal(started.learning.workspace, realpathSync(learn));
    const hosts = ['127.0.0.2', '127.0.0.3', '127.0.0.4'];
    const script = Array.from({ length: 20 }, (_, i) => curl(`l${i}`, hosts[i % 3]!, `/l/${i}`)).join('; ');
    await start(agent, 'learning', script, learn);
    await agent.collect('learning', 60_000);
    assert.equal(
      panel.notifications.filter((n) => n.method === 'approvals/requested').length,
      0,
      'no prompt',
    );
    const [state] = (
      await panel.request<{ learning: LearningState[] }>('approvals/learning', { workspace: learn })
    ).learning;
    assert.equal(state!.requests, 20);
    // Each with its path prefix (the first segment), issue 36 item 7.
    assert.deepEqual(
      state!.proposal.map((e) => [e.protocol, e.host, e.port, e.method, e.pathPrefix, e.hits]).sort(),
      [
        ['http', '127.0.0.2', origin.port, 'GET', '/l', 7],
        ['http', '127.0.0.3', origin.port, 'GET', '/l', 7],
        ['http', '127.0.0.4', origin.port, 'GET', '/l', 6],
      ],
    );
    const accepted = await panel.request<{ rules: ApprovalRule[] }>('approvals/learnEnd', {
      workspace: learn,
      accept: state!.proposal.map(({ hits: _h, ...e }) => e),
    });
    assert.equal(accepted.rules.length, 3);
    const rules = (await panel.request<RulesResult>('approvals/rules', { workspace: learn })).rules;
    assert.deepEqual(rules.map((r) => r.host).sort(), hosts);
    assert.ok(rules.every((r) => r.decision === 'allow' && r.method === 'GET' && r.port === origin.port));
    assert.deepEqual(
      (await panel.request<{ learning: LearningState[] }>('approvals/learning', {})).learning,
      [],
    );
    for (const r of rules) await panel.request('approvals/revoke', { id: r.id });
  });

  test("an allow rule that a process's deny list overrides is flagged as a contradiction (the deny wins)", async () => {
    const agent = await open(host, host.tokens.agent, 'agent-3');
    const panel = await open(host, host.tokens.panel, 'panel-3');
    await start(agent, 'make', curl('make', '127.0.0.1', '/make'), wsB);
    await until(async () => (await pendingOf(panel, 'make')).length === 1, 30_000, 'the prompt');
    const [p] = await pendingOf(panel, 'make');
    await panel.request('approvals/decide', { id: p!.id, decision: 'allowProject' });
    await agent.collect('make', 30_000);
    assert.equal(
      (await panel.request<RulesResult>('approvals/rules', {})).rules[0]!.contradiction ?? null,
      null,
    );
    await askingStart(
      agent,
      'denying',
      curl('denying', '127.0.0.1', '/denying'),
      wsB,
      askingNetwork({ '127.0.0.*': 'deny' }),
    );
    await agent.collect('denying', 30_000);
    assert.match(agent.output('denying', 'stdout'), /denying=403/, 'the deny list wins over the rule');
    const [rule] = (await panel.request<RulesResult>('approvals/rules', {})).rules;
    assert.match(rule!.contradiction ?? '', /process denying .* denies 127\.0\.0\.1: its deny list wins/);
    assert.equal(rule!.hits, 0, 'the rule did not answer');
    await panel.request('approvals/revoke', { id: rule!.id });
  });
});
