// A fleet host (issue 19 item 1) over real sockets: host A joins servers B and C by URL and each one's panel token;
// A's panel sees their processes, network decisions and approval prompts tagged with their server, and acts on them
// (terminate, stdin, output, approve) through A with that server's credential only. B going away and coming back
// is seen, its rows kept (stale). A hostile joined server can only fill its own bounded rows: malformed, oversized
// or unrequested messages are refused, its requests to the host are answered with an error, and ids that collide
// with the host's own never reach the host's processes.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { type Host, startHost } from '../../src/app/host.js';
import type { Dialer } from '../../src/network/dial.js';
import { defaultDialer } from '../../src/network/proxy.js';
import type { ApprovalPrompt } from '../../src/protocol/approvals.js';
import type { MonitorProcess, MonitorServer } from '../../src/protocol/monitor.js';
import { askingNetwork, curlCode } from '../helpers/approvalsCli.js';
import { b64, type Notification, RpcClient } from '../helpers/client.js';
import { startHostileServer } from '../helpers/hostileServer.js';
import { monitorProcess, wirePrompt } from '../helpers/monitorRows.js';
import { shellStart } from '../helpers/registry-contract.js';
import { startTestServer, until } from '../helpers/server.js';
import { startOrigin, stubResolver } from './network-helpers.js';

type Client = RpcClient & { sessionId: string };

const procs = (n: Notification): MonitorProcess[] =>
  n.method === 'monitor/batch' ? ((n.params.processes as MonitorProcess[] | undefined) ?? []) : [];
const servers = (n: Notification): MonitorServer[] =>
  n.method === 'monitor/batch' ? ((n.params.servers as MonitorServer[] | undefined) ?? []) : [];

async function waitProcess(c: RpcClient, pred: (p: MonitorProcess) => boolean, timeoutMs = 15_000) {
  const n = await c.waitFor((x) => procs(x).some(pred), timeoutMs);
  return procs(n).find(pred)!;
}

/** The latest record of server `id` the panel was told, once it satisfies `pred`. */
async function waitServer(
  panel: RpcClient,
  id: string,
  pred: (s: MonitorServer) => boolean,
  timeoutMs = 15_000,
) {
  const latest = () => {
    let last: MonitorServer | undefined;
    for (const n of panel.notifications) for (const s of servers(n)) if (s.id === id) last = s;
    return last;
  };
  await until(
    () => {
      const s = latest();
      return s !== undefined && pred(s);
    },
    timeoutMs,
    `server ${id}`,
  );
  return latest()!;
}

const panelOf = async (h: Host, name = 'panel'): Promise<Client> =>
  RpcClient.open(`${h.listener.url}/?token=${encodeURIComponent(h.tokens.panel)}`, name);
const agentOf = (h: Host, name: string): Promise<Client> => RpcClient.open(h.execUrl, name);

const CURL = '/usr/bin/curl';

describe('fleet host: joined servers in one monitor', () => {
  let b: Host;
  let c: Host;
  let a: Host;
  let panel: Client;
  let origin: Awaited<ReturnType<typeof startOrigin>>;

  before(async () => {
    origin = await startOrigin();
    const dialer: Dialer = (t) =>
      /^127\./.test(t.host)
        ? defaultDialer(t)
        : Promise.reject(new Error('non-loopback dial refused by the test'));
    b = await startHost({ server: { launcher: { resolver: stubResolver, dialer } }, resumeGraceMs: 60_000 });
    c = await startHost({ resumeGraceMs: 60_000 });
    a = await startHost({
      join: [
        { url: `${b.listener.url}/?token=${encodeURIComponent(b.tokens.panel)}`, name: 'server-b' },
        { url: c.listener.url, token: c.tokens.panel, name: 'server-c' },
      ],
      fleet: { backoffMs: [50, 400] },
    });
    panel = await panelOf(a);
    await panel.request('monitor/subscribe', { output: 'followed' });
  });

  after(async () => {
    panel?.close();
    await a?.shutdown();
    await b?.shutdown();
    await c?.shutdown();
    await origin?.close();
  });

  test('the joined servers are listed and connected; their processes arrive tagged with their server', async () => {
    const snap = (await panel.request('fleet/list', {})) as { servers: MonitorServer[] };
    assert.deepEqual(
      snap.servers.map((s) => [s.id, s.name, s.url]),
      [
        ['s1', 'server-b', `${b.listener.url}/`],
        ['s2', 'server-c', `${c.listener.url}/`],
      ],
    );
    for (const s of snap.servers)
      assert.ok(!JSON.stringify(s).includes('token'), 'no credential in the list');
    await waitServer(panel, 's1', (s) => s.state === 'connected');
    await waitServer(panel, 's2', (s) => s.state === 'connected' && s.ready === true);
    const onB = await agentOf(b, 'agent-on-b');
    const onC = await agentOf(c, 'agent-on-c');
    // The same process id on both servers: two rows, each with its server.
    for (const agent of [onB, onC]) {
      await agent.request('process/start', {
        processId: 'same-id',
        argv: ['/bin/sh', '-c', 'echo started; exec cat'],
        cwd: '/tmp',
        env: {},
        tty: false,
        pipeStdin: true,
      });
    }
    const rowB = await waitProcess(panel, (p) => p.processId === 'same-id' && p.server === 's1');
    const rowC = await waitProcess(panel, (p) => p.processId === 'same-id' && p.server === 's2');
    assert.equal(rowB.clientName, 'agent-on-b');
    assert.equal(rowC.clientName, 'agent-on-c');

    // Output of a joined server's process, followed through A (its tail with the answer, then live).
    const f = (await panel.request('monitor/follow', {
      server: 's1',
      sessionId: rowB.sessionId,
      processId: 'same-id',
      follow: true,
    })) as { chunks: { chunk: string }[] };
    await until(
      async () =>
        f.chunks.map((x) => Buffer.from(x.chunk, 'base64').toString()).join('') === 'started\n' ||
        panel.notifications.some((n) => n.method === 'monitor/output' && n.params.server === 's1'),
      5000,
      'tail',
    );
    // stdin through A reaches B's process only.
    assert.deepEqual(
      await panel.request('monitor/write', {
        server: 's1',
        sessionId: rowB.sessionId,
        processId: 'same-id',
        chunk: b64('via-the-fleet\n'),
      }),
      { status: 'accepted' },
    );
    await onB.waitFor(
      (n) => n.method === 'process/output' && onB.output('same-id').includes('via-the-fleet'),
    );
    const live = await panel.waitFor(
      (n) =>
        n.method === 'monitor/output' &&
        n.params.server === 's1' &&
        Buffer.from(n.params.chunk as string, 'base64')
          .toString()
          .includes('via-the-fleet'),
    );
    assert.equal(live.params.sessionId, rowB.sessionId);
    assert.equal(onC.output('same-id'), 'started\n', 'nothing reached C’s process of the same id');

    // Terminate through A: B's process dies, C's of the same id does not.
    assert.deepEqual(
      await panel.request('monitor/terminate', {
        server: 's1',
        sessionId: rowB.sessionId,
        processId: 'same-id',
      }),
      { running: true },
    );
    const exited = await onB.waitFor(
      (n) => n.method === 'process/exited' && n.params.processId === 'same-id',
    );
    assert.equal(exited.params.exitCode, 137);
    await waitProcess(panel, (p) => p.server === 's1' && p.processId === 'same-id' && p.state === 'closed');
    assert.equal(
      c.server.sessionByResumeKey(onC.sessionId)!.get('same-id')!.state,
      'running',
      'C’s process of the same id runs on',
    );
    // An unknown server is an error; the host's own processes are not reachable under another server's name.
    const e = await panel.requestError('monitor/terminate', { server: 's9', sessionId: 'x', processId: 'y' });
    assert.equal(e.code, -32600);
    assert.match(e.message, /unknown server s9/);
    onB.close();
    onC.close();
  });

  test('an approval prompt of a joined server is shown through the host and decided there', {
    skip: !existsSync(CURL),
  }, async () => {
    const sub = (await panel.request('approvals/subscribe', {})) as { pending: ApprovalPrompt[] };
    assert.deepEqual(sub.pending, []);
    const agent = await agentOf(b, 'asker');
    await agent.request('process/start', {
      ...shellStart('curl-ask', curlCode('code', `http://127.0.0.1:${origin.port}/ok`), '/tmp'),
      managedNetwork: askingNetwork(),
    });
    const asked = await panel.waitFor((n) => n.method === 'approvals/requested');
    const prompt = asked.params.prompt as ApprovalPrompt;
    assert.equal(prompt.server, 's1');
    assert.equal(prompt.processId, 'curl-ask');
    // Decided on A for B: B releases the request.
    const r = (await panel.request('approvals/decide', {
      server: 's1',
      id: prompt.id,
      decision: 'allowOnce',
    })) as {
      released: number;
    };
    assert.equal(r.released, 1);
    await agent.collect('curl-ask', 20_000);
    assert.equal(agent.output('curl-ask', 'stdout'), 'code=200\n');
    await panel.waitFor((n) => n.method === 'approvals/resolved' && n.params.server === 's1');
    // The audit of B's proxy shows up in A's feed, tagged.
    await panel.waitFor(
      (n) =>
        n.method === 'monitor/batch' &&
        ((n.params.audit as { server?: string; processId: string }[] | undefined) ?? []).some(
          (x) => x.server === 's1' && x.processId === 'curl-ask',
        ),
    );
    agent.close();
  });

  test('a server that goes away is shown down, its rows stale, and rejoined when it is back', async () => {
    const agent = await agentOf(c, 'agent-c2');
    await agent.request('process/start', {
      processId: 'long',
      argv: ['/bin/sleep', '300'],
      cwd: '/tmp',
      env: {},
      tty: false,
    });
    await waitProcess(panel, (p) => p.server === 's2' && p.processId === 'long' && p.state === 'running');
    const port = c.listener.port;
    agent.close();
    await c.shutdown();
    const down = await waitServer(panel, 's2', (s) => s.state === 'disconnected');
    assert.ok(down.lastError);
    // Its retries keep it down: a later retry scheduled means an attempt came between, and the state has not changed
    // since the drop (it was never `connecting` again: the state says whether the server can be reached).
    const later = await waitServer(panel, 's2', (s) => s.retryAt !== null && s.retryAt !== down.retryAt);
    assert.equal(later.state, 'disconnected');
    assert.equal(later.since, down.since);
    // The rows stay (the snapshot of a new subscriber has them).
    const p2 = await panelOf(a, 'panel-2');
    const snap = (await p2.request('monitor/subscribe', {})) as {
      processes: MonitorProcess[];
      servers: MonitorServer[];
    };
    assert.ok(snap.processes.some((p) => p.server === 's2' && p.processId === 'long'));
    assert.equal(snap.servers.find((s) => s.id === 's2')?.state, 'disconnected');
    p2.close();
    // A new server on the same address (the same credential): rejoined with backoff; the old rows are stale.
    c = await startHost({ port, tokens: { panel: c.tokens.panel, agent: c.tokens.agent } });
    await waitServer(panel, 's2', (s) => s.state === 'connected', 20_000);
    await waitProcess(panel, (p) => p.server === 's2' && p.processId === 'long' && p.stale === true);
    const again = await agentOf(c, 'agent-c3');
    await again.request('process/start', {
      processId: 'fresh',
      argv: ['/bin/true'],
      cwd: '/tmp',
      env: {},
      tty: false,
    });
    const fresh = await waitProcess(
      panel,
      (p) => p.server === 's2' && p.processId === 'fresh' && p.state === 'closed',
    );
    assert.notEqual(fresh.stale, true);
    again.close();
  });

  test('an agent of the host cannot join, list or leave servers', async () => {
    const agent = await agentOf(a, 'not-a-panel');
    for (const [m, p] of [
      ['fleet/join', { url: 'ws://127.0.0.1:1/', token: 'x' }],
      ['fleet/list', {}],
      ['fleet/leave', { server: 's1' }],
    ] as const) {
      const e = await agent.requestError(m, p);
      assert.equal(e.code, -32600, m);
      assert.match(e.message, /panel/);
    }
    agent.close();
  });

  test('fleet/join checks what it is given, naming the field', async () => {
    const bad = async (params: unknown) => (await panel.requestError('fleet/join', params)).message;
    assert.match(await bad({ url: 'ftp://127.0.0.1/', token: 't' }), /ws:\/\/, wss:\/\//);
    assert.match(await bad({ url: 'ws://127.0.0.1:1/' }), /panel credential is missing/);
    assert.match(await bad({ url: 'ws://127.0.0.1:1/', token: 't', headers: { Upgrade: 'x' } }), /headers/);
    assert.match(
      await bad({ url: 'ws://127.0.0.1:1/', token: 't', headers: { 'X-A': 'a\r\nB: c' } }),
      /headers/,
    );
    // A server joined already (the same URL, credential aside, and the same upgrade headers) would be mirrored twice.
    assert.match(
      await bad({ url: `${c.listener.url}/?token=other`, token: c.tokens.panel }),
      /is joined already, as s\d+ \(server-c\)/,
    );
    const listed = (await panel.request('fleet/list', {})) as { servers: MonitorServer[] };
    assert.equal(listed.servers.filter((s) => s.name === 'server-c').length, 1);
  });
});

const row = (over: Partial<MonitorProcess> & { sessionId: string; processId: string }) =>
  monitorProcess({
    clientName: 'evil',
    argv: ['/bin/sh'],
    cwd: '/',
    envKeys: [],
    startedAt: Date.now(),
    ...over,
  });

describe('fleet host: a hostile joined server', () => {
  let a: Host;
  let evil: Awaited<ReturnType<typeof startHostileServer>>;
  let other: Host;
  let panel: Client;
  let local: Client;
  let localSessionId: string;

  before(async () => {
    evil = await startHostileServer();
    other = await startHost({});
    a = await startHost({
      join: [
        { url: evil.url, token: 'token-for-the-evil-server', name: 'evil' },
        { url: other.listener.url, token: other.tokens.panel, name: 'other' },
      ],
      // Longer than a batch (50 ms): a drop is seen before the reconnection replaces it.
      fleet: { backoffMs: [300, 1000] },
    });
    panel = await panelOf(a);
    await panel.request('monitor/subscribe', {});
    await waitServer(panel, 's1', (s) => s.state === 'connected');
    local = await agentOf(a, 'local-agent');
    await local.request('process/start', {
      processId: 'victim',
      argv: ['/bin/sleep', '300'],
      cwd: '/tmp',
      env: {},
      tty: false,
    });
    const victim = await waitProcess(panel, (p) => p.processId === 'victim' && (p.server ?? '') === '');
    localSessionId = victim.sessionId;
  });

  after(async () => {
    local?.close();
    panel?.close();
    await a?.shutdown();
    await other?.shutdown();
    await evil?.close();
  });

  const victimAlive = () => a.server.sessionByResumeKey(local.sessionId)?.get('victim')?.state === 'running';

  test('each server gets its own credential, never another’s', async () => {
    await waitServer(panel, 's2', (s) => s.state === 'connected');
    assert.deepEqual(evil.tokens, ['token-for-the-evil-server']);
    assert.ok(!evil.tokens.includes(other.tokens.panel));
  });

  test('rows claiming the host’s ids or another server are its own; actions on them go to it alone', async () => {
    evil.send({
      method: 'monitor/batch',
      params: {
        processes: [
          row({ sessionId: localSessionId, processId: 'victim', server: '' }),
          row({ sessionId: 'x', processId: 'posing', server: 's2' }),
          row({ sessionId: 'x', processId: 'html', argv: ['<img src=x onerror=alert(1)>'] }),
        ],
      },
    });
    const fake = await waitProcess(panel, (p) => p.processId === 'victim' && p.server === 's1');
    assert.equal(fake.sessionId, localSessionId);
    await waitProcess(panel, (p) => p.processId === 'posing' && p.server === 's1');
    // Terminate the evil server's "victim": it is asked, the host's own victim lives.
    await panel.request('monitor/terminate', {
      server: 's1',
      sessionId: localSessionId,
      processId: 'victim',
    });
    assert.ok(evil.received.some((m) => m.method === 'monitor/terminate'));
    assert.ok(victimAlive());
    // Its answer cannot be of another shape than the method's.
    evil.send('not json');
  });

  test('its requests to the host are refused; malformed, binary and unrequested messages are counted and dropped', async () => {
    const before = (await panel.request('fleet/list', {})) as { servers: MonitorServer[] };
    const rejected0 = before.servers.find((s) => s.id === 's1')!.rejected;
    const replies: unknown[] = [];
    evil.sockets[0]!.on('message', (d) => {
      const m = JSON.parse(d.toString()) as { id?: number; error?: unknown };
      if (m.id === 99 || m.id === 100) replies.push(m);
    });
    evil.send({
      id: 99,
      method: 'monitor/terminate',
      params: { sessionId: localSessionId, processId: 'victim' },
    });
    evil.send({ id: 100, method: 'fleet/join', params: { url: 'ws://127.0.0.1:1/', token: 'x' } });
    evil.send({ method: 'monitor/batch', params: { processes: [{ processId: 42 }] } });
    evil.send({
      method: 'monitor/output',
      params: { sessionId: 'x', processId: 'html', seq: 1, stream: 'stdout', chunk: 'aGk=' },
    });
    evil.send({ method: 'host/whatever', params: {} });
    for (const s of evil.sockets) s.send(Buffer.from([1, 2, 3]), { binary: true });
    await until(() => replies.length === 2, 5000, 'replies');
    for (const r of replies) assert.equal((r as { error: { code: number } }).error.code, -32601);
    assert.ok(victimAlive(), 'the host’s process was not touched');
    assert.equal(((await panel.request('fleet/list', {})) as { servers: MonitorServer[] }).servers.length, 2);
    const after = await waitServer(panel, 's1', (s) => s.rejected >= rejected0 + 6);
    assert.equal(after.state, 'connected', 'a misbehaving server stays joined (its messages are dropped)');
    assert.ok(
      !panel.notifications.some((n) => n.method === 'monitor/output' && n.params.processId === 'html'),
    );
  });

  test('an approval prompt from it is decided on it alone', async () => {
    await panel.request('approvals/subscribe', {});
    evil.send({
      method: 'approvals/requested',
      params: {
        prompt: wirePrompt({ processId: 'html', clientName: 'evil', server: '' }),
      },
    });
    const n = await panel.waitFor((x) => x.method === 'approvals/requested');
    assert.equal((n.params.prompt as ApprovalPrompt).server, 's1');
    const r = await panel.request('approvals/decide', { server: 's1', id: 'p1', decision: 'allowOnce' });
    assert.deepEqual(r, { released: 7 });
    assert.ok(evil.received.some((m) => m.method === 'approvals/decide'));
    // Without `server`, the id is the host's own (unknown there).
    const own = await panel.requestError('approvals/decide', { id: 'p1', decision: 'allowOnce' });
    assert.equal(own.code, -32600);
  });

  test('a message over the size limit drops the link (refused from its header); it is rejoined with backoff', async () => {
    const from = panel.notifications.length;
    evil.send(`{"method":"monitor/batch","params":{"processes":[],"pad":"${'x'.repeat(17 * 1024 * 1024)}"}}`);
    // (The reconnection is quick: look at every record since, not only the latest.)
    const n = await panel.waitFor(
      (x) =>
        panel.notifications.indexOf(x) >= from &&
        servers(x).some((s) => s.id === 's1' && s.state === 'disconnected'),
    );
    const down = servers(n).find((s) => s.id === 's1')!;
    assert.match(down.lastError ?? '', /payload|1009/i);
    await waitServer(panel, 's1', (s) => s.state === 'connected', 20_000);
    assert.ok(victimAlive());
  });
});

describe('a server that watches no other', () => {
  test('an approval call naming a server is refused, never applied to its own prompts', async () => {
    const t = await startTestServer({ tokens: true });
    const panel = await t.panel();
    try {
      for (const [method, params] of [
        ['approvals/decide', { server: 's1', id: 'p1', decision: 'allowOnce' }],
        ['approvals/revoke', { server: 's1', id: 'd1' }],
        ['approvals/export', { server: 's1' }],
      ] as const) {
        const e = await panel.requestError(method, params);
        assert.equal(e.code, -32600, `${method}: ${e.message}`);
        assert.match(e.message, /unknown server s1/, method);
      }
    } finally {
      panel.close();
      await t.close();
    }
  });
});
