// Issue 13 items 2 and 3: in `corral serve`, agents are not the panel. Each attack an agent holding the printed agent
// URL made before: watch another agent's session, write its stdin, kill its processes, kill its session, resume its
// detached session, read host/info, see and answer approval prompts. And the panel's HTTP server: a DNS-rebinding
// page (a foreign Host) gets nothing; the page carrying the token has the usual headers.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type Cli, DIST, startCli } from '../helpers/cli.js';
import { b64, RpcClient } from '../helpers/client.js';
import { httpFetch, upgradeStatus } from '../helpers/http.js';
import { alive } from '../helpers/server.js';

const PATH = '/usr/local/bin:/usr/bin:/bin';
const built = existsSync(join(DIST, 'cli.js')) && existsSync(join(DIST, 'renderer', 'index.html'));

interface Snapshot {
  processes: { sessionId: string; processId: string; pid: number; state: string }[];
  sessions: { sessionId: string; clientName: string; attached: boolean; self: boolean }[];
}

describe('corral serve: the agent token is not the panel', {
  skip: built ? false : 'run `npm run build`',
}, () => {
  let cli: Cli;
  let agentUrl: string;
  let panelUrl: string;
  let panelWs: string;
  before(async () => {
    cli = await startCli(['serve', '--resume-grace-ms', '30000']);
    agentUrl = /^exec-server: (\S+)$/.exec(cli.url!)![1]!;
    panelUrl = /^panel: (\S+)$/.exec((await cli.lines.next()).value as string)![1]!;
    const panelToken = new URL(panelUrl).hash.replace('#token=', '');
    panelWs = `${agentUrl.replace(/\/\?.*$/, '')}/?token=${panelToken}`;
  });
  after(() => cli?.stop());

  it('two different tokens: the agent URL and the panel URL do not share one', () => {
    assert.notEqual(new URL(agentUrl).searchParams.get('token'), new URL(panelWs).searchParams.get('token'));
  });

  it("an agent cannot watch, write to, kill or take over another agent's session", async () => {
    const victim = await RpcClient.open(agentUrl, 'victim');
    const attacker = await RpcClient.open(agentUrl, 'attacker');
    const panel = await RpcClient.open(panelWs, 'corral-panel');
    try {
      await victim.request('process/start', {
        processId: 'cat',
        argv: ['/bin/cat'],
        cwd: '/tmp',
        env: { PATH },
        tty: false,
        pipeStdin: true,
      });
      // The panel sees it (and the victim's public session id, which the attacker could learn from a screen or log).
      const snap = await panel.request<Snapshot>('monitor/subscribe', {});
      const proc = snap.processes.find((p) => p.processId === 'cat')!;
      assert.ok(proc && alive(proc.pid));
      const ref = { sessionId: proc.sessionId, processId: 'cat' };

      for (const [method, params] of [
        ['monitor/subscribe', {}],
        ['monitor/follow', { ...ref, follow: true }],
        ['monitor/read', ref],
        ['monitor/write', { ...ref, chunk: b64('owned\n') }],
        ['monitor/terminate', ref],
        ['monitor/killSession', { sessionId: proc.sessionId }],
        ['policy/checkUrl', { config: {}, target: 'https://example.com' }],
        ['host/info', {}],
      ] as const) {
        const e = await attacker.requestError(method, params);
        assert.equal(e.code, -32600, method);
        assert.match(e.message, /panel/, method);
      }
      // Its own session does not contain the victim's process.
      assert.deepEqual(
        await attacker.request('process/write', { processId: 'cat', chunk: b64('x'), writeId: 'w' }),
        { status: 'unknownProcess' },
      );
      assert.ok(alive(proc.pid), 'the victim process survived');
      assert.equal(victim.output('cat'), '', 'nothing was written to the victim');

      // The victim detaches; neither the public session id nor the panel's credential resumes it.
      victim.close();
      await panel.waitFor(
        (n) =>
          n.method === 'monitor/batch' &&
          ((n.params.sessions ?? []) as { kind: string; session: { sessionId: string } }[]).some(
            (c) => c.session.sessionId === proc.sessionId && c.kind === 'detached',
          ),
      );
      const thief = await RpcClient.connect(agentUrl);
      const stolen = await thief.requestError('initialize', {
        clientName: 'thief',
        resumeSessionId: proc.sessionId,
      });
      assert.equal(stolen.code, -32600);
      assert.equal(stolen.message, `unknown session id ${proc.sessionId}`);
      thief.close();
      const asPanel = await RpcClient.connect(panelWs);
      const e = await asPanel.requestError('initialize', {
        clientName: 'panel',
        resumeSessionId: victim.sessionId,
      });
      assert.equal(
        e.message,
        `unknown session id ${victim.sessionId}`,
        'a session is bound to its credential',
      );
      asPanel.close();
      // The victim itself (its resume key, its credential) gets its session back.
      const back = await RpcClient.connect(agentUrl);
      const r = await back.request<{ sessionId: string }>('initialize', {
        clientName: 'victim',
        resumeSessionId: victim.sessionId,
      });
      assert.equal(r.sessionId, victim.sessionId);
      back.notify('initialized', {});
      assert.deepEqual(
        await back.request('process/write', { processId: 'cat', chunk: b64('mine\n'), writeId: 'w' }),
        {
          status: 'accepted',
        },
      );
      await back.request('process/terminate', { processId: 'cat' });
      back.close();
    } finally {
      victim.close();
      attacker.close();
      panel.close();
    }
  });

  it('an agent can neither see nor decide approval prompts; the panel token can', async () => {
    const agent = await RpcClient.open(agentUrl, 'agent');
    const panel = await RpcClient.open(panelWs, 'corral-panel');
    try {
      for (const [method, params] of [
        ['approvals/subscribe', {}],
        ['approvals/list', {}],
        ['approvals/decide', { id: 'any', decision: 'allowOnce' }],
        ['approvals/revoke', { id: 'any' }],
        ['approvals/export', {}],
      ] as const) {
        const e = await agent.requestError(method, params);
        assert.equal(e.code, -32600, method);
        assert.match(e.message, /panel connection/, method);
      }
      const sub = await panel.request<{ pending: unknown[] }>('approvals/subscribe', {});
      assert.deepEqual(sub.pending, []);
      const info = await panel.request<{ execUrl: string }>('host/info', {});
      assert.equal(info.execUrl, agentUrl);
    } finally {
      agent.close();
      panel.close();
    }
  });

  it('a foreign Host gets 421 (DNS rebinding); the panel page has CSP, nosniff, no-store, no-referrer', async () => {
    const page = panelUrl.replace(/#.*/, '');
    const port = new URL(page).port;
    for (const host of [`rebind.example:${port}`, `127.0.0.1.nip.example:${port}`, `localhost.:${port}`]) {
      const r = await httpFetch(page, { host });
      assert.equal(r.status, 421, host);
      assert.doesNotMatch(r.body, /app\.js/, host);
    }
    assert.equal(await upgradeStatus(panelWs, { headers: { host: `rebind.example:${port}` } }), 421);
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`]) {
      const ok = await httpFetch(page, { host });
      assert.equal(ok.status, 200, host);
      assert.match(ok.headers['content-security-policy'] as string, /frame-ancestors 'none'/);
      assert.match(ok.headers['content-security-policy'] as string, /default-src 'none'/);
      assert.equal(ok.headers['x-content-type-options'], 'nosniff');
      assert.equal(ok.headers['cache-control'], 'no-store');
      assert.equal(ok.headers['referrer-policy'], 'no-referrer');
    }
    // A page of another origin cannot open the WebSocket, even with the panel token.
    assert.equal(await upgradeStatus(panelWs, { origin: 'http://evil.example' }), 403);
  });
});
