// Decision receipts (issue 37, item 2): every network decision row names what decided it (the rule's id and its
// origin), and a prompt, its answer and the requests it decided share one correlation id (the prompt's id). Real
// server, real proxy, real curl to a loopback origin; the database is read back with audit/query and the chain is
// checked with `corral audit verify` at the end.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { openRuleStore } from '../../src/app/approvalRuleStore.js';
import type { ApprovalPrompt } from '../../src/protocol/approvals.js';
import type { AuditApprovalItem, AuditNetworkItem, AuditQueryResult } from '../../src/protocol/audit.js';
import { silentLogger } from '../../src/server/core/log.js';
import { CORRAL_BIN } from '../helpers/cli.js';
import type { RpcClient } from '../helpers/client.js';
import { tempDir } from '../helpers/server.js';
import { type AuditedServer, asking, run, startAuditedServer } from './audit-helpers.js';
import { startOrigin, stubResolver } from './network-helpers.js';

const CURL = '/usr/bin/curl';
const ROOT = join(import.meta.dirname, '..', '..');
const curl = (tag: string, host: string, port: number) =>
  `curl --noproxy '' -s -o /dev/null -w '${tag}=%{http_code}\\n' http://${host}:${port}/${tag}`;

describe('decision receipts', { skip: !existsSync(CURL) && 'no curl' }, () => {
  const dir = tempDir('corral-receipts-');
  const dbPath = join(dir.path, 'state', 'audit.db');
  let as: AuditedServer;
  let panel: RpcClient & { sessionId: string };
  let origin: Awaited<ReturnType<typeof startOrigin>>;

  before(async () => {
    origin = await startOrigin();
    as = await startAuditedServer(
      { dbPath, outputBytes: 1024 },
      {
        launcher: { resolver: stubResolver },
        approvals: { timeoutMs: 10_000, rules: openRuleStore(join(dir.path, 'rules.db'), silentLogger) },
      },
    );
    panel = await as.panel();
    await panel.request('approvals/subscribe', {});
  });
  after(async () => {
    await as?.close();
    await origin?.close();
    dir.cleanup();
  });

  const network = async (processId: string) => {
    await as.audit.trail!.flush();
    const r = await panel.request<AuditQueryResult>('audit/query', { type: 'network', limit: 500 });
    return (r.items as AuditNetworkItem[]).filter((i) => i.processId === processId);
  };
  const approvals = async (promptId: string) => {
    const r = await panel.request<AuditQueryResult>('audit/query', { type: 'approval', limit: 500 });
    return (r.items as AuditApprovalItem[]).filter((i) => i.promptId === promptId);
  };
  const receipt = (n: AuditNetworkItem | undefined) => [n?.decision, n?.ruleOrigin, n?.ruleId];

  test('the configured lists: the allow entry and the deny entry that matched, by pattern', async () => {
    const agent = await as.agent('lists');
    const P = origin.port;
    await run(
      agent,
      'lists',
      ['/bin/sh', '-c', `${curl('a', 'localhost', P)}; ${curl('d', 'x.denied.test', 80)}`],
      {
        managedNetwork: {
          config: {
            network: {
              enabled: true,
              domains: { localhost: 'allow', 'other.test': 'allow', '*.denied.test': 'deny' },
            },
          },
        },
      },
    );
    assert.match(agent.output('lists'), /a=200[\s\S]*d=403/);
    const rows = await network('lists');
    const byHost = new Map(rows.map((n) => [n.host, n]));
    assert.deepEqual(receipt(byHost.get('localhost')), ['allow', 'config', 'allow:localhost']);
    assert.deepEqual(receipt(byHost.get('x.denied.test')), ['deny', 'config', 'deny:*.denied.test']);
    assert.equal(byHost.get('localhost')!.correlationId, null);
    agent.close();
  });

  test('a panel answer, then its remembered decision; a timeout: each names its origin and shares the prompt id', async () => {
    const agent = await as.agent('asker');
    const P = origin.port;
    const requested = panel.waitFor((n) => n.method === 'approvals/requested');
    const started = run(
      agent,
      'ask',
      ['/bin/sh', '-c', `${curl('x', '127.0.0.1', P)}; ${curl('y', '127.0.0.1', P)}`],
      {
        managedNetwork: asking(10_000),
      },
    );
    const prompt = (await requested).params.prompt as ApprovalPrompt;
    await panel.request('approvals/decide', { id: prompt.id, decision: 'allowSession' });
    await started;
    assert.match(agent.output('ask'), /x=200[\s\S]*y=200/);
    const rows = await network('ask');
    assert.equal(rows.length, 2, JSON.stringify(rows));
    const [answered, followed] = rows.sort((a, b) => a.id - b.id);
    // The held request: the panel's answer (the remembered decision's id), tied to the prompt.
    assert.deepEqual(
      [answered!.decision, answered!.ruleOrigin, answered!.correlationId],
      ['allow', 'panel', prompt.id],
    );
    // The next one: the remembered decision (same id), tied to the prompt it came from.
    assert.deepEqual(
      [followed!.decision, followed!.ruleOrigin, followed!.correlationId],
      ['allow', 'session', prompt.id],
    );
    assert.equal(followed!.ruleId, answered!.ruleId);
    assert.match(answered!.ruleId ?? '', /^[0-9a-f-]{36}$/);
    // Linked both ways: audit/query by the correlation id gives the prompt's rows and the requests it decided.
    const linked = async (type: 'network' | 'approval') =>
      (await panel.request<AuditQueryResult>('audit/query', { type, correlationId: prompt.id })).items.map(
        (i) => i.id,
      );
    assert.deepEqual((await linked('network')).sort(), rows.map((n) => n.id).sort());
    assert.equal((await linked('approval')).length, 2);
    const trail = await approvals(prompt.id);
    assert.deepEqual(trail.map((a) => [a.kind, a.correlationId]).sort(), [
      ['decided', prompt.id],
      ['requested', prompt.id],
    ]);

    await run(agent, 'late', ['/bin/sh', '-c', curl('z', '127.0.0.1', 9)], { managedNetwork: asking(300) });
    const [timedOut] = await network('late');
    const r = await panel.request<AuditQueryResult>('audit/query', { type: 'approval', limit: 500 });
    const late = { id: (r.items as AuditApprovalItem[]).find((i) => i.processId === 'late')!.promptId! };
    assert.deepEqual(
      [timedOut?.decision, timedOut?.ruleOrigin, timedOut?.ruleId, timedOut?.correlationId],
      ['ask', 'timeout', 'timeout', late.id],
    );
    assert.deepEqual(
      (await approvals(late.id)).map((a) => a.correlationId),
      [late.id, late.id],
    );
    agent.close();
  });

  test("the process's own client (its harness) answers: origin harness, tied to the prompt", async () => {
    const agent = await as.client('harness', { capabilities: { networkApprovals: true } });
    agent.onRequest = () => ({ decision: { type: 'allow', scope: 'once' } });
    await run(agent, 'self', ['/bin/sh', '-c', curl('h', '127.0.0.1', origin.port)], {
      managedNetwork: asking(10_000),
    });
    assert.match(agent.output('self'), /h=200/);
    const [row] = await network('self');
    assert.deepEqual([row?.decision, row?.ruleOrigin, row?.ruleId], ['allow', 'harness', 'allowOnce']);
    assert.deepEqual((await approvals(row!.correlationId!)).map((a) => [a.kind, a.processId]).sort(), [
      ['decided', 'self'],
      ['requested', 'self'],
    ]);
    agent.close();
  });

  test('learning mode, then the project rule it proposed: origin learning, then project with the rule id', async () => {
    const agent = await as.agent('learner');
    const ws = join(dir.path, 'ws');
    mkdirSync(join(ws, '.git'), { recursive: true });
    await panel.request('approvals/learn', { workspace: ws, maxRequests: 10 });
    const P = origin.port;
    await run(agent, 'learn', ['/bin/sh', '-c', curl('l', '127.0.0.1', P)], {
      cwd: ws,
      managedNetwork: asking(10_000),
    });
    assert.match(agent.output('learn'), /l=200/);
    const [learned] = await network('learn');
    assert.deepEqual(receipt(learned), ['allow', 'learning', 'learning']);
    const state = (
      await panel.request<{ learning: { proposal: Record<string, unknown>[] }[] }>('approvals/learning', {
        workspace: ws,
      })
    ).learning[0]!;
    const accepted = await panel.request<{ rules: { id: string }[] }>('approvals/learnEnd', {
      workspace: ws,
      accept: state.proposal.map(({ hits: _h, ...e }) => e),
    });
    assert.equal(accepted.rules.length, 1);
    // The same path (/l): a learned rule holds the path's first segment (issue 36, item 7).
    await run(agent, 'ruled', ['/bin/sh', '-c', curl('l', '127.0.0.1', P)], {
      cwd: ws,
      managedNetwork: asking(10_000),
    });
    assert.match(agent.output('ruled'), /l=200/);
    const [ruled] = await network('ruled');
    assert.deepEqual(receipt(ruled), ['allow', 'project', accepted.rules[0]!.id]);
    agent.close();
  });

  test('the chain still verifies with the receipts in it (corral audit verify)', async () => {
    await as.audit.trail!.flush();
    const r = spawnSync(process.execPath, [CORRAL_BIN, 'audit', 'verify', '--db', dbPath], {
      cwd: ROOT,
      encoding: 'utf8',
    });
    assert.equal(r.status, 0, r.stderr + r.stdout);
    assert.match(r.stdout, /the chain holds/);
  });
});
