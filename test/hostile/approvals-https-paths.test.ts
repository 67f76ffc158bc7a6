// Endpoint rules inside intercepted TLS (issue 36, item 7, the HTTPS half): a real host whose managed network
// intercepts TLS (limited mode, `mitm: true`) in front of a loopback HTTPS origin; curl (--path-as-is) through it.
// Every request inside the tunnel goes through the one admission with protocol https, its method and path: the
// prompt shows them; a project rule `allow https 127.0.0.1:PORT GET /api` holds /api and below, never /apix nor a
// spelling that leaves it (the battery approvals-endpoints uses for plain HTTP); a `/admin` deny covers every
// spelling of /admin and every unreadable path; learning proposes method and path; each inner decision is an audit
// event with its receipt. On the code before (36cbb0b), the CONNECT was the only question: its prompt had no path,
// and a rule made from it covered the whole host.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { ApprovalPrompt, LearningState, RulesResult } from '../../src/protocol/approvals.js';
import type { NetworkAuditEvent } from '../../src/protocol/network.js';
import { approvalsRig, askingStart } from '../helpers/approvalsCli.js';
import { ADMIN_SPELLINGS, API_SPELLINGS, runDenyingPrompts } from '../helpers/approvalsRun.js';
import { RpcClient } from '../helpers/client.js';
import { until } from '../helpers/server.js';
import { startTlsOrigin, type TlsOrigin } from '../helpers/tlsOrigin.js';

const skip = existsSync('/usr/bin/curl') ? false : 'curl is not installed';

/** Asking for approvals, in limited mode with TLS interception: every CONNECT is terminated by the proxy. */
const intercepting = {
  config: {
    network: {
      enabled: true,
      allow_local_binding: true,
      hard_deny_allowlist_misses: false,
      mode: 'limited',
      mitm: true,
      domains: {},
    },
  },
};

describe('endpoint rules inside intercepted TLS', { skip, timeout: 240_000 }, () => {
  const rig = approvalsRig('corral-approvals-https-');
  const { open, pendingOf } = rig;
  const work = join(rig.tmp.path, 'project');
  let origin: TlsOrigin;
  const audits: NetworkAuditEvent[] = [];
  before(async () => {
    mkdirSync(join(work, '.git'), { recursive: true });
    origin = await startTlsOrigin(rig.tmp.path);
    // The server trusts the origin's CA as if started with SSL_CERT_FILE naming it (read at the first interception).
    process.env.SSL_CERT_FILE = origin.caPath;
    rig.host.server.networkEvents.on('audit', (e) => audits.push(e));
  });
  after(() => origin.close());

  // curl trusts the proxy's CA through the SSL_CERT_FILE the managed network gives the command.
  const curl = (label: string, path: string) =>
    `curl --noproxy '' --path-as-is -s -m 20 -o /dev/null -w '${label}=%{http_code}\\n' 'https://127.0.0.1:${origin.port}${path}'`;
  const start = (agent: RpcClient, id: string, script: string) =>
    askingStart(agent, id, `unset NO_PROXY no_proxy; ${script}`, work, intercepting);

  /** Runs `requests` one after another, answering each prompt denyOnce; the status per label, the prompts. */
  async function run(
    agent: RpcClient,
    panel: RpcClient,
    id: string,
    requests: [string, string][],
  ): Promise<{ codes: Map<string, string>; prompts: ApprovalPrompt[] }> {
    return runDenyingPrompts(agent, panel, pendingOf, id, () =>
      start(agent, id, requests.map(([l, p]) => curl(l, p)).join('; ')),
    );
  }

  /** The one prompt of `id`, once it is there. */
  async function onePrompt(panel: RpcClient, id: string): Promise<ApprovalPrompt> {
    await until(async () => (await pendingOf(panel, id)).length === 1, 30_000, 'the prompt');
    return (await pendingOf(panel, id))[0]!;
  }

  test('the prompt shows method and path; an allow for /api holds /api and below, never /apix nor a spelling that leaves it', async () => {
    const agent = await open(rig.host.tokens.agent, 'https-agent');
    const panel = await open(rig.host.tokens.panel, 'https-panel');
    await start(agent, 'make', curl('make', '/api/v1/x?token=1'));
    const p = await onePrompt(panel, 'make');
    assert.equal(p.protocol, 'https', 'the request inside the tunnel is asked about, not the CONNECT');
    assert.equal(p.method, 'GET');
    assert.equal(p.path, '/api/v1/x', 'the prompt shows the normalised path, no query');
    await panel.request('approvals/decide', { id: p.id, decision: 'allowProject', pathPrefix: '/api' });
    await agent.collect('make', 30_000);
    assert.match(agent.output('make', 'stdout'), /make=200/);
    const [rule] = (await panel.request<RulesResult>('approvals/rules', { workspace: work })).rules;
    assert.deepEqual([rule!.protocol, rule!.method, rule!.pathPrefix], ['https', 'GET', '/api']);

    const seenBefore = origin.seen.length;
    const { codes, prompts } = await run(agent, panel, 'variants', [
      ...API_SPELLINGS.within,
      ...API_SPELLINGS.outside,
    ]);
    for (const [ok] of API_SPELLINGS.within) assert.equal(codes.get(ok), '200', `${ok} is within /api`);
    for (const [no] of API_SPELLINGS.outside)
      assert.equal(codes.get(no), '403', `${no} must not pass the /api allow`);
    const reached = origin.seen.slice(seenBefore).map((s) => s.url);
    assert.equal(reached.length, 5, `only the five within /api reached the origin: ${reached.join(' ')}`);
    const paths = prompts.map((x) => x.path ?? null);
    assert.ok(prompts.every((x) => x.protocol === 'https' && x.method === 'GET'));
    assert.ok(paths.includes('/apix'));
    assert.ok(paths.includes('/admin'), 'the dot-dot spellings are asked about as /admin');
    assert.ok(paths.includes(null), 'an unreadable path is asked about as such');
    // Each inner decision is an audit event with its receipt: the rule for the allowed ones.
    const inner = audits.filter((e) => e['network.transport.protocol'] === 'https');
    const byRule = inner.filter(
      (e) => e['network.policy.decision'] === 'allow' && e['network.policy.rule_id'] === rule!.id,
    );
    assert.ok(byRule.length >= 5, `the rule's allows are audited with its id (${byRule.length})`);
    assert.ok(
      inner.some((e) => e['url.path'] === '/apix' && e['network.policy.decision'] !== 'allow'),
      'the refusal of /apix is audited',
    );
    await panel.request('approvals/revoke', { id: rule!.id });
  });

  test('a deny for /admin covers every spelling of it, and every unreadable path; /adminx is asked', async () => {
    const agent = await open(rig.host.tokens.agent, 'https-deny-agent');
    const panel = await open(rig.host.tokens.panel, 'https-deny-panel');
    await start(agent, 'mk', curl('mk', '/admin/panel'));
    const p = await onePrompt(panel, 'mk');
    assert.equal(p.path, '/admin/panel');
    await panel.request('approvals/decide', { id: p.id, decision: 'denyProject' });
    await agent.collect('mk', 30_000);
    assert.match(agent.output('mk', 'stdout'), /mk=403/);
    const [rule] = (await panel.request<RulesResult>('approvals/rules', { workspace: work })).rules;
    assert.deepEqual([rule!.protocol, rule!.pathPrefix], ['https', '/admin'], 'the first segment by default');
    const seenBefore = origin.seen.length;
    const { codes, prompts } = await run(agent, panel, 'deny-variants', [
      ...ADMIN_SPELLINGS.denied,
      ADMIN_SPELLINGS.neighbour,
    ]);
    for (const [k] of ADMIN_SPELLINGS.denied) assert.equal(codes.get(k), '403', `${k} is denied by the rule`);
    assert.deepEqual(
      prompts.map((x) => x.path),
      ['/adminx'],
      'only /adminx was asked',
    );
    assert.equal(origin.seen.length, seenBefore, 'nothing reached the origin');
    const denials = audits.filter(
      (e) => e['network.transport.protocol'] === 'https' && e['network.policy.rule_id'] === rule!.id,
    );
    assert.ok(denials.length >= 9, `each denial is audited with the rule's id (${denials.length})`);
    await panel.request('approvals/revoke', { id: rule!.id });
  });

  test('a project answer releases only the held requests it matches: a /admin request held on a card for /api is asked again', async () => {
    const agent = await open(rig.host.tokens.agent, 'https-held-agent');
    const panel = await open(rig.host.tokens.panel, 'https-held-panel');
    const flag = join(rig.tmp.path, 'second-request');
    // The second request is made once the first is held (the test creates the file), on the same prompt.
    await start(
      agent,
      'held',
      `${curl('api', '/api/a')} & while [ ! -e '${flag}' ]; do sleep 0.05; done; ${curl('admin', '/admin/b')} & wait`,
    );
    const first = await onePrompt(panel, 'held');
    assert.equal(first.path, '/api/a');
    writeFileSync(flag, '');
    await until(
      async () => (await pendingOf(panel, 'held'))[0]?.waiting === 2,
      30_000,
      'both requests held on the one prompt',
    );
    await panel.request('approvals/decide', { id: first.id, decision: 'allowProject', pathPrefix: '/api' });
    await until(
      async () => (await pendingOf(panel, 'held')).some((p) => p.path === '/admin/b'),
      30_000,
      'the /admin request asked about on its own',
    );
    const again = (await pendingOf(panel, 'held')).find((p) => p.path === '/admin/b')!;
    await panel.request('approvals/decide', { id: again.id, decision: 'denyOnce' });
    await agent.collect('held', 30_000);
    const out = agent.output('held', 'stdout');
    assert.match(out, /api=200/);
    assert.match(out, /admin=403/, 'the /api rule did not release the /admin request');
    const rules = (await panel.request<RulesResult>('approvals/rules', { workspace: work })).rules;
    for (const r of rules) await panel.request('approvals/revoke', { id: r.id });
  });

  test("the process's own client is asked as Codex's protocols know it: the tunnel (https_connect), with the method", async () => {
    const url = `${rig.host.listener.url}/?token=${encodeURIComponent(rig.host.tokens.agent)}`;
    const harness = await RpcClient.open(url, 'https-harness', { capabilities: { networkApprovals: true } });
    rig.clients.push(harness);
    const asked: Record<string, unknown>[] = [];
    harness.onRequest = (method, params) => {
      if (method === 'network/policyRequest') asked.push(params.request as Record<string, unknown>);
      return { decision: { type: 'allow' } };
    };
    await start(harness, 'own', curl('own', '/own/x'));
    await harness.collect('own', 30_000);
    assert.match(harness.output('own', 'stdout'), /own=200/);
    assert.deepEqual(asked, [
      { protocol: 'https_connect', host: '127.0.0.1', port: origin.port, method: 'GET' },
    ]);
  });

  test('learning proposes what it saw inside the tunnel: protocol https, method and path prefix', async () => {
    const agent = await open(rig.host.tokens.agent, 'https-learn-agent');
    const panel = await open(rig.host.tokens.panel, 'https-learn-panel');
    await panel.request('approvals/learn', { workspace: work, maxRequests: 10 });
    await start(agent, 'learn', [curl('a', '/l/one'), curl('b', '/l/two?x=1'), curl('c', '/m')].join('; '));
    await agent.collect('learn', 60_000);
    assert.match(agent.output('learn', 'stdout'), /a=200\nb=200\nc=200/);
    const state = await panel.request<{ learning: LearningState[] }>('approvals/learning', {});
    const proposal = state.learning.find((l) => l.workspace.endsWith('project'))!.proposal;
    assert.deepEqual(proposal.map((e) => [e.protocol, e.method, e.pathPrefix, e.hits]).sort(), [
      ['https', 'GET', '/l', 2],
      ['https', 'GET', '/m', 1],
    ]);
    await panel.request('approvals/learnEnd', { workspace: work, accept: [] });
  });
});
