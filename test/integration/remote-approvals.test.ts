// Approvals decided by the harness (issue 18 item 3): a client that declares `initialize {capabilities:
// {networkApprovals: true}}` gets a server → client `network/policyRequest` for the prompts of its OWN processes and
// decides them, alongside the panel (first answer wins, audited with who decided, silence fails closed). Real
// processes (curl through the managed proxy) and real sockets on loopback.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import type {
  ApprovalAuditEvent,
  ApprovalPrompt,
  ApprovalsState,
  NetworkPolicyRequestParams,
} from '../../src/protocol/approvals.js';
import { type ApprovalsFixture, startApprovalsFixture } from '../helpers/approvals.js';
import type { Notification, RpcClient } from '../helpers/client.js';
import { shellStart } from '../helpers/registry-contract.js';
import { type TestServer, until } from '../helpers/server.js';
import type { startOrigin } from './network-helpers.js';

const skip = existsSync('/usr/bin/curl') ? false : 'curl is not installed';
type Client = RpcClient & { sessionId: string };

/** A managed network whose allowlist misses ask (loopback governed by the allowlist alone). */
const askingNetwork = (timeoutMs?: number) => ({
  config: {
    network: {
      enabled: true,
      allow_local_binding: true,
      hard_deny_allowlist_misses: false,
      ...(timeoutMs ? { approval_timeout_ms: timeoutMs } : {}),
    },
  },
});

const isPolicyRequest = (n: Notification) => n.method === 'network/policyRequest' && n.id !== undefined;

describe('network approvals decided by the process own client (network/policyRequest)', { skip }, () => {
  let ts: TestServer;
  let origin: Awaited<ReturnType<typeof startOrigin>>;
  let panel: Client;
  const get = (label: string, path: string) =>
    `curl --noproxy '' -s -o /dev/null -w '${label}=%{http_code}\\n' http://127.0.0.1:${origin.port}${path}`;
  /** An agent that answers approvals (its handler is set per test). */
  const harness = (name = 'harness') => ts.client(name, { capabilities: { networkApprovals: true } });

  let fx: ApprovalsFixture;
  before(async () => {
    fx = await startApprovalsFixture();
    ({ ts, origin, panel } = fx);
  });

  after(() => fx?.close());

  async function run(agent: Client, processId: string, script: string, network = askingNetwork()) {
    await agent.request('process/start', {
      ...shellStart(processId, script, '/tmp'),
      managedNetwork: network,
    });
  }

  async function decidedEvent(promptId: string): Promise<ApprovalAuditEvent> {
    let found: ApprovalAuditEvent | undefined;
    await until(async () => {
      const st = await panel.request<ApprovalsState>('approvals/list', {});
      found = st.audit.find((e) => e.kind === 'decided' && e.promptId === promptId);
      return found !== undefined;
    });
    return found!;
  }

  test('the client gets the prompt of its own process and allows it once; the audit says it decided', async () => {
    const agent = await harness('codex-harness');
    const asked: NetworkPolicyRequestParams[] = [];
    agent.onRequest = (method, params) => {
      assert.equal(method, 'network/policyRequest');
      asked.push(params as unknown as NetworkPolicyRequestParams);
      return { decision: { type: 'allow' } };
    };
    try {
      await run(agent, 'allowed', get('first', '/harness-allowed'));
      await agent.collect('allowed');
      assert.match(agent.output('allowed'), /^first=200$/m);
      assert.equal(asked.length, 1);
      const q = asked[0]!;
      assert.equal(q.processId, 'allowed');
      assert.deepEqual(q.request, { protocol: 'http', host: '127.0.0.1', port: origin.port, method: 'GET' });
      assert.deepEqual(q.command.slice(0, 2), ['/bin/sh', '-c']);
      assert.ok(q.expiresAt > Date.now() - 60_000 && q.timeoutMs === 15_000);
      // The panel was asked at the same time, and sees who decided.
      const shown = await panel.waitFor(
        (n) => n.method === 'approvals/requested' && (n.params.prompt as ApprovalPrompt).id === q.promptId,
      );
      assert.equal((shown.params.prompt as ApprovalPrompt).processId, 'allowed');
      const ev = await decidedEvent(q.promptId);
      assert.equal(ev.decision, 'allowOnce');
      assert.deepEqual(ev.decidedBy, {
        kind: 'client',
        credential: 'agent-token',
        clientName: 'codex-harness',
      });
      assert.ok(origin.requests.some((r) => r.url === '/harness-allowed'));
    } finally {
      agent.close();
    }
  });

  test('deny from the client blocks (403) and is remembered for the session: no second question', async () => {
    const agent = await harness();
    let asked = 0;
    agent.onRequest = () => {
      asked++;
      return { decision: { type: 'deny', reason: 'not on my list' } };
    };
    try {
      await run(agent, 'denied', `${get('one', '/harness-denied-1')}; ${get('two', '/harness-denied-1')}`);
      await agent.collect('denied');
      assert.match(agent.output('denied'), /^one=403$/m);
      assert.match(agent.output('denied'), /^two=403$/m);
      assert.equal(asked, 1, 'the remembered deny answered the second request');
      assert.ok(!origin.requests.some((r) => r.url === '/harness-denied-1'));
    } finally {
      agent.close();
    }
  });

  test('allow for the session covers the session’s next process without asking again', async () => {
    const agent = await harness();
    let asked = 0;
    agent.onRequest = () => {
      asked++;
      return { decision: { type: 'allow', scope: 'session' } };
    };
    try {
      await run(agent, 's1', get('s1', '/harness-session-1'));
      await agent.collect('s1');
      await run(agent, 's2', get('s2', '/harness-session-2'));
      await agent.collect('s2');
      assert.match(agent.output('s1'), /^s1=200$/m);
      assert.match(agent.output('s2'), /^s2=200$/m);
      assert.equal(asked, 1);
    } finally {
      agent.close();
    }
  });

  test("another session's client is never asked, and cannot answer a request it was not sent", async () => {
    const a = await harness('a');
    const b = await harness('b');
    const bAsked: unknown[] = [];
    b.onRequest = (_m, p) => {
      bAsked.push(p);
      return { decision: { type: 'allow', scope: 'session' } };
    };
    // A declared but stays silent: the prompt waits for the panel.
    try {
      await run(a, 'quiet', get('quiet', '/harness-other-session'));
      const req = await a.waitFor(isPolicyRequest);
      const promptId = (req.params as unknown as NetworkPolicyRequestParams).promptId;
      // B forges A's answer on its own connection: the id was never sent to B, which is a protocol violation.
      b.send({ id: req.id, result: { decision: { type: 'allow', scope: 'session' } } });
      assert.equal(await b.waitClose(), 1002);
      // B (an agent) cannot use the panel's method either (checked before B was closed in other tests; here as A).
      const err = await a.requestError('approvals/decide', { id: promptId, decision: 'allowSession' });
      assert.equal(err.code, -32600);
      const st = await panel.request<ApprovalsState>('approvals/list', {});
      assert.ok(
        st.pending.some((p) => p.id === promptId),
        'still pending after the forged answer',
      );
      await panel.request('approvals/decide', { id: promptId, decision: 'deny' });
      await a.collect('quiet');
      assert.match(a.output('quiet'), /^quiet=403$/m);
      assert.deepEqual(bAsked, []);
      const ev = await decidedEvent(promptId);
      assert.equal(ev.decidedBy?.kind, 'panel');
      assert.equal(ev.decidedBy?.credential, 'panel-token');
    } finally {
      a.close();
      b.close();
    }
  });

  test('first answer wins: the panel answers first, the client’s later allow changes nothing', async () => {
    const agent = await harness();
    let release: (() => void) | null = null;
    agent.onRequest = () =>
      new Promise((resolve) => {
        release = () => resolve({ decision: { type: 'allow', scope: 'session' } });
      });
    try {
      await run(agent, 'race', get('race', '/harness-race'));
      const req = await agent.waitFor(isPolicyRequest);
      const promptId = (req.params as unknown as NetworkPolicyRequestParams).promptId;
      await panel.request('approvals/decide', { id: promptId, decision: 'deny' });
      await agent.collect('race');
      release!();
      // The answer is handled before the next message on the same connection: after this round trip it has been.
      await agent.request('process/read', { processId: 'race', afterSeq: 0 });
      const st = await panel.request<ApprovalsState>('approvals/list', {});
      assert.match(agent.output('race'), /^race=403$/m);
      const decided = st.audit.filter((e) => e.promptId === promptId && e.kind === 'decided');
      assert.equal(decided.length, 1);
      assert.equal(decided[0]!.decidedBy?.kind, 'panel');
      // The late allow for the session was not remembered.
      assert.ok(!st.decisions.some((d) => d.promptId === promptId && d.decision === 'allow'));
    } finally {
      agent.close();
    }
  });

  test('"ask" leaves it to the panel; silence from both fails closed at the timeout', async () => {
    const agent = await harness();
    agent.onRequest = () => ({ decision: { type: 'ask', reason: 'let a person decide' } });
    try {
      await run(agent, 'ask', get('ask', '/harness-ask'));
      const req = await agent.waitFor(isPolicyRequest);
      const promptId = (req.params as unknown as NetworkPolicyRequestParams).promptId;
      await panel.request('approvals/decide', { id: promptId, decision: 'allowOnce' });
      await agent.collect('ask');
      assert.match(agent.output('ask'), /^ask=200$/m);
      assert.equal((await decidedEvent(promptId)).decidedBy?.kind, 'panel');

      agent.onRequest = null; // declared, but never answers
      const started = Date.now();
      await run(agent, 'silent', get('silent', '/harness-silent'), askingNetwork(1500));
      await agent.collect('silent', 15_000);
      assert.match(agent.output('silent'), /^silent=403$/m);
      assert.ok(Date.now() - started >= 1400, 'failed closed only at the timeout');
      const st = await panel.request<ApprovalsState>('approvals/list', {});
      assert.ok(st.audit.some((e) => e.kind === 'timeout' && e.processId === 'silent'));
      assert.ok(!origin.requests.some((r) => r.url === '/harness-silent'));
    } finally {
      agent.close();
    }
  });

  test('a client that did not declare networkApprovals is never sent a request', async () => {
    const agent = await ts.client('plain');
    try {
      await run(agent, 'plain', get('plain', '/harness-plain'), askingNetwork(1000));
      await agent.collect('plain', 15_000);
      assert.match(agent.output('plain'), /^plain=403$/m);
      assert.equal(agent.notifications.filter(isPolicyRequest).length, 0);
    } finally {
      agent.close();
    }
  });
});
