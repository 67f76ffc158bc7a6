import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { NetworkEvents } from '../../src/network/events.js';
import { REDACTED, redact } from '../../src/protocol/monitor.js';
import type { Transport } from '../../src/rpc/connection.js';
import { NOT_PRIVILEGED } from '../../src/server/core/dispatch.js';
import type { Monitor } from '../../src/server/monitor/monitor.js';
import { sandboxBadge } from '../../src/server/monitor/monitorDescribe.js';
import { servePanel } from '../../src/server/monitor/panel.js';
import { parseTarget } from '../../src/server/monitor/policyDebugger.js';
import { b64, type Notification, type RpcClient } from '../helpers/client.js';
import { shellStart } from '../helpers/registry-contract.js';
import { startTestServer, type TestServer, until } from '../helpers/server.js';

type Proc = { processId: string; state: string; exitCode: number | null; bytesOut: number };

/** The processes of a monitor/batch notification (none for anything else). */
const procs = (n: Notification): Proc[] =>
  n.method === 'monitor/batch' ? ((n.params.processes as Proc[] | undefined) ?? []) : [];

/** Waits for a batch that carries a process matching `pred`; returns that process. */
async function waitProcess(c: RpcClient, pred: (p: Proc) => boolean, timeoutMs?: number): Promise<Proc> {
  const n = await c.waitFor((x) => procs(x).some(pred), timeoutMs);
  return procs(n).find(pred)!;
}

describe('monitor feed', () => {
  let ts: TestServer;
  let monitor: Monitor;
  let bus: NetworkEvents;

  before(async () => {
    ts = await startTestServer({ tokens: true });
    monitor = servePanel(ts.server, { resumeGraceMs: 0, resolver: async () => ['127.0.0.1'] });
    bus = new NetworkEvents();
    monitor.attachNetwork(bus);
  });
  after(async () => {
    monitor.dispose();
    await ts.close();
  });

  test('an unprivileged connection gets -32600 with a clear message', async () => {
    // A server without a token: connections are not privileged.
    const open = await startTestServer();
    const m = servePanel(open.server);
    try {
      const c = await open.client('agent');
      for (const method of ['monitor/subscribe', 'monitor/terminate', 'policy/preview', 'policy/checkUrl']) {
        const e = await c.requestError(method, {
          sessionId: 'x',
          processId: 'y',
          sandbox: null,
          config: {},
          target: 'a',
        });
        assert.equal(e.code, -32600, method);
        assert.equal(e.message, NOT_PRIVILEGED);
      }
    } finally {
      m.dispose();
      await open.close();
    }
  });

  test('snapshot, then live processes and output of every session; env values never sent', async () => {
    const panel = await ts.panel();
    const agent = await ts.client('codex-agent');
    await agent.request('process/start', {
      ...shellStart('before', 'echo early', '/tmp'),
      env: { PATH: '/usr/bin:/bin', SECRET_THING: 'hunter2-value-xyz' },
      metadata: { threadId: 't-1', apiKey: 'sk-should-not-leak' },
    });
    await agent.collect('before');
    const snap = (await panel.request('monitor/subscribe', {})) as {
      processes: {
        processId: string;
        clientName: string;
        envKeys: string[];
        state: string;
        metadata: unknown;
      }[];
      sessions: { sessionId: string; self: boolean }[];
    };
    const early = snap.processes.find((p) => p.processId === 'before');
    assert.ok(early, 'snapshot lists the other session’s process');
    assert.equal(early.clientName, 'codex-agent');
    assert.equal(early.state, 'closed');
    assert.deepEqual(early.envKeys, ['PATH', 'SECRET_THING']);
    assert.deepEqual(early.metadata, { threadId: 't-1', apiKey: REDACTED });
    assert.ok(snap.sessions.some((s) => s.sessionId === ts.sessionOf(panel).id && s.self));

    await agent.request('process/start', {
      ...shellStart('live', 'echo out-line; echo err-line >&2', '/tmp'),
      env: { PATH: '/usr/bin:/bin', TOKEN_X: 'hunter2-value-xyz' },
    });
    const closed = await waitProcess(panel, (p) => p.processId === 'live' && p.state === 'closed');
    assert.equal(closed.exitCode, 0);
    await panel.waitFor(
      (n) => n.method === 'monitor/output' && n.params.processId === 'live' && n.params.stream === 'stderr',
    );
    const out = panel.notifications
      .filter((n) => n.method === 'monitor/output' && n.params.processId === 'live')
      .map((n) => `${n.params.stream}:${Buffer.from(n.params.chunk as string, 'base64').toString()}`)
      .sort();
    assert.deepEqual(out, ['stderr:err-line\n', 'stdout:out-line\n']);
    assert.equal(
      panel.notifications.filter((n) => n.method === 'process/output').length,
      0,
      'not the panel’s own process',
    );
    for (const f of panel.frames)
      assert.ok(!f.includes('hunter2-value-xyz'), `env value leaked: ${f.slice(0, 200)}`);
    for (const f of panel.frames) assert.ok(!f.includes('sk-should-not-leak'), 'secret metadata leaked');

    // Retained output of another session's process can be read back.
    const read = (await panel.request('monitor/read', {
      sessionId: ts.sessionOf(agent).id,
      processId: 'live',
    })) as {
      chunks: { chunk: string }[];
    };
    assert.equal(read.chunks.length, 2);
    panel.close();
    agent.close();
  });

  test('followed mode: output only for followed processes; byte counts refresh while running', async () => {
    const panel = await ts.panel();
    const agent = await ts.client('agent-f');
    await panel.request('monitor/subscribe', { output: 'followed' });
    await agent.request('process/start', {
      ...shellStart('chatty', 'while :; do echo tick; sleep 0.05; done', '/tmp'),
      env: {},
    });
    // No output stream yet, but the running process's byte count is refreshed (about once a second).
    const grown = await waitProcess(
      panel,
      (p) => p.processId === 'chatty' && p.state === 'running' && p.bytesOut > 0,
      5000,
    );
    assert.ok(grown);
    assert.equal(panel.notifications.filter((n) => n.method === 'monitor/output').length, 0);
    await panel.request('monitor/follow', {
      sessionId: ts.sessionOf(agent).id,
      processId: 'chatty',
      follow: true,
    });
    await panel.waitFor((n) => n.method === 'monitor/output' && n.params.processId === 'chatty');
    await panel.request('monitor/follow', {
      sessionId: ts.sessionOf(agent).id,
      processId: 'chatty',
      follow: false,
    });
    const count = panel.notifications.filter((n) => n.method === 'monitor/output').length;
    await panel.request('monitor/terminate', { sessionId: ts.sessionOf(agent).id, processId: 'chatty' });
    await agent.collect('chatty');
    // Round trip after the close: nothing more was streamed once unfollowed (at most what was in flight).
    await panel.request('monitor/read', {
      sessionId: ts.sessionOf(agent).id,
      processId: 'chatty',
      afterSeq: 0,
    });
    assert.ok(panel.notifications.filter((n) => n.method === 'monitor/output').length <= count + 1);
    const e = await agent.requestError('monitor/follow', { sessionId: 'x', processId: 'y', follow: true });
    assert.equal(e.code, -32600);
    panel.close();
    agent.close();
  });

  test('monitor/terminate and monitor/write act on another client’s processes', async () => {
    const panel = await ts.panel();
    const agent = await ts.client('agent-2');
    await panel.request('monitor/subscribe', {});
    await agent.request('process/start', {
      processId: 'cat',
      argv: ['/bin/cat'],
      cwd: '/tmp',
      env: {},
      tty: false,
      pipeStdin: true,
    });
    await agent.request('process/start', {
      ...shellStart('sleeper', 'trap "" TERM; sleep 300', '/tmp'),
      env: {},
    });
    const w = await panel.request('monitor/write', {
      sessionId: ts.sessionOf(agent).id,
      processId: 'cat',
      chunk: b64('via-panel\n'),
    });
    assert.deepEqual(w, { status: 'accepted' });
    await agent.waitFor((n) => n.method === 'process/output' && n.params.processId === 'cat');
    assert.equal(agent.output('cat'), 'via-panel\n');
    const bad = await panel.requestError('monitor/write', {
      sessionId: ts.sessionOf(agent).id,
      processId: 'cat',
      chunk: '!!',
    });
    assert.equal(bad.code, -32602);
    assert.deepEqual(
      await panel.request('monitor/write', {
        sessionId: ts.sessionOf(agent).id,
        processId: 'nope',
        chunk: b64('x'),
      }),
      { status: 'unknownProcess' },
    );

    const t = await panel.request('monitor/terminate', {
      sessionId: ts.sessionOf(agent).id,
      processId: 'sleeper',
    });
    assert.deepEqual(t, { running: true });
    const exited = await agent.waitFor(
      (n) => n.method === 'process/exited' && n.params.processId === 'sleeper',
    );
    assert.equal(exited.params.exitCode, 137);
    await agent.collect('sleeper');
    assert.deepEqual(
      await panel.request('monitor/terminate', { sessionId: ts.sessionOf(agent).id, processId: 'sleeper' }),
      {
        running: false,
      },
    );
    assert.deepEqual(await panel.request('monitor/terminate', { sessionId: 'no-such', processId: 'x' }), {
      running: false,
    });
    panel.close();
    agent.close();
  });

  test('network events: blocked and audit, tagged with the process; counts per host', async () => {
    const panel = await ts.panel();
    const snap = (await panel.request('monitor/subscribe', {})) as { networkWired: boolean };
    assert.equal(snap.networkWired, true);
    bus.emit('blocked', {
      processId: 'p-net',
      sessionId: 's-1',
      record: {
        host: '127.0.0.9',
        reason: 'not_allowed_local',
        client: '127.0.0.1:5555',
        method: 'GET',
        mode: null,
        protocol: 'http',
        decision: 'deny',
        source: 'baseline_policy',
        port: 8080,
        timestamp: 1795964130,
      },
      blocked_total: 1,
    });
    bus.emit('audit', {
      processId: 'p-net',
      'event.name': 'codex.network_proxy.policy_decision',
      'event.timestamp': '2026-11-29T10:00:00.000Z',
      'conversation.id': 'conv-1',
      'user.email': 'a@b.c',
      'network.policy.scope': 'domain',
      'network.policy.decision': 'allow',
      'network.policy.source': 'baseline_policy',
      'network.policy.reason': 'allow',
      'network.transport.protocol': 'http',
      'server.address': 'localhost',
      'server.port': 8080,
      'http.request.method': 'GET',
      'client.address': '127.0.0.1:5556',
      'network.policy.override': false,
    });
    const inBatch = (what: 'blocked' | 'audit') => (n: Notification) =>
      n.method === 'monitor/batch' && ((n.params[what] as unknown[] | undefined)?.length ?? 0) > 0;
    const b = await panel.waitFor(inBatch('blocked'));
    assert.deepEqual(
      { ...((b.params.blocked as object[])[0] as object), id: 0 },
      {
        id: 0,
        processId: 'p-net',
        sessionId: 's-1',
        host: '127.0.0.9',
        port: 8080,
        reason: 'not_allowed_local',
        method: 'GET',
        protocol: 'http',
        mode: null,
        decision: 'deny',
        source: 'baseline_policy',
        client: '127.0.0.1:5555',
        timestamp: 1795964130,
        blockedTotal: 1,
      },
    );
    const a = await panel.waitFor(inBatch('audit'));
    assert.deepEqual(((a.params.audit as object[])[0] as { metadata: unknown }).metadata, {
      'conversation.id': 'conv-1',
      'user.email': 'a@b.c',
    });
    const again = (await panel.request('monitor/subscribe', {})) as {
      blocked: unknown[];
      audit: unknown[];
      hosts: { host: string; allowed: number; blocked: number }[];
    };
    assert.equal(again.blocked.length, 1);
    assert.equal(again.audit.length, 1);
    assert.deepEqual(
      again.hosts.sort((x, y) => x.host.localeCompare(y.host)),
      [
        { host: '127.0.0.9', allowed: 0, blocked: 1 },
        { host: 'localhost', allowed: 1, blocked: 0 },
      ],
    );
    panel.close();
  });

  test('policy/preview reports validation errors by field; policy/checkUrl decides with a reason', async () => {
    const panel = await ts.panel();
    const bad = (await panel.request('policy/preview', {
      sandbox: { sandbox: 'linux-seccmp', policy: { type: 'read-only' } },
    })) as { valid: boolean; errors: { path: string; message: string }[]; shape: string };
    assert.equal(bad.valid, false);
    assert.equal(bad.shape, 'seed');
    const paths = bad.errors.map((e) => e.path);
    assert.ok(paths.includes('sandbox.sandbox'), paths.join(','));
    assert.ok(paths.includes('sandbox.fileSystemPolicy'), paths.join(','));
    const none = (await panel.request('policy/preview', { sandbox: null })) as {
      valid: boolean;
      sandboxType: string;
    };
    assert.equal(none.valid, true);
    assert.equal(none.sandboxType, 'none');

    const config = {
      config: {
        network: { enabled: true, mode: 'limited', domains: { localhost: 'allow', 'allowed.test': 'allow' } },
      },
    };
    const check = async (target: string, method?: string) =>
      (await panel.request('policy/checkUrl', { config, target, method })) as {
        valid: boolean;
        decision: string | null;
        reason: string | null;
        host: string;
        port: number;
      };
    let r = await check('http://localhost:8080/x');
    assert.deepEqual([r.decision, r.reason, r.host, r.port], ['allow', 'allow', 'localhost', 8080]);
    r = await check('127.0.0.2:9000');
    assert.deepEqual([r.decision, r.reason], ['deny', 'not_allowed_local']);
    r = await check('http://localhost:8080/x', 'POST');
    assert.deepEqual([r.decision, r.reason], ['deny', 'method_not_allowed']);
    r = await check('https://localhost/');
    assert.deepEqual([r.decision, r.reason], ['deny', 'mitm_required']);
    const mitm = (await panel.request('policy/checkUrl', {
      config: { network: { enabled: true, mode: 'limited', mitm: true, domains: { localhost: 'allow' } } },
      target: 'https://localhost/',
    })) as { decision: string; reason: string; warnings: string[] };
    // With mitm the tunnel is admitted and intercepted (issue 34): its requests are decided inside.
    assert.deepEqual([mitm.decision, mitm.reason], ['allow', 'allow']);
    assert.doesNotMatch(mitm.warnings.join(' '), /mitm/);
    r = await check('http://not-listed.test/');
    assert.deepEqual([r.decision, r.reason], ['deny', 'not_allowed']);
    // An allowlisted name is resolved once (injected resolver: 127.0.0.1) and the answer is checked.
    r = await check('http://allowed.test/');
    assert.deepEqual([r.decision, r.reason], ['deny', 'not_allowed_local']);
    const invalid = (await panel.request('policy/checkUrl', {
      config: { config: { network: { enabled: 'yes', mode: 'half' } } },
      target: 'localhost:1',
    })) as { valid: boolean; errors: { path: string }[] };
    assert.equal(invalid.valid, false);
    assert.deepEqual(invalid.errors.map((e) => e.path).sort(), [
      'config.config.network.enabled',
      'config.config.network.mode',
    ]);
    panel.close();
  });

  /** A privileged connection whose transport never reports its writes as done: a panel whose socket is stuck. */
  function stuckPanel(t: TestServer) {
    const held: (() => void)[] = [];
    const frames: string[] = [];
    const stuck: Transport = {
      peer: 'stuck',
      write(messages, onWritten) {
        for (const m of messages) frames.push(m.toString());
        held.push(onWritten);
      },
      close() {},
    };
    const conn = t.server.connect(stuck, { role: 'panel', credential: 'test' });
    conn.receive(JSON.stringify({ id: 1, method: 'initialize', params: { clientName: 'slow-panel' } }));
    conn.receive(JSON.stringify({ method: 'initialized' }));
    conn.receive(JSON.stringify({ id: 2, method: 'monitor/subscribe', params: {} }));
    return {
      frames,
      drain: () => {
        for (const f of held.splice(0)) f();
      },
    };
  }

  test('a subscriber that stops reading has bounded memory; drops are counted and reported', async () => {
    const small = await startTestServer();
    const m = servePanel(small.server, { highWaterBytes: 64 * 1024 });
    const { frames, drain } = stuckPanel(small);
    const agent = await small.client('loud');
    try {
      await agent.request('process/start', {
        processId: 'loud',
        argv: ['/bin/sh', '-c', 'head -c 4000000 /dev/zero'],
        cwd: '/tmp',
        env: { PATH: '/usr/bin:/bin' },
        tty: false,
      });
      await agent.collect('loud', 20_000);
      await until(() => m.queuedBytes() > 0, 5000, 'frames');
      // 4 MB of output (~5.3 MB of base64) was written; the subscriber was sent no more than what one batch may
      // carry past the high-water mark (64 KiB of a process's output, base64, plus the batch itself).
      assert.ok(m.queuedBytes() <= 64 * 1024 + 96 * 1024, `queued ${m.queuedBytes()}`);
      const outputFrames = frames.filter((f) => f.startsWith('{"method":"monitor/output"')).length;
      assert.ok(outputFrames < 20, `sent ${outputFrames} output frames`);
      // Drain: the latest process state and the drop counts arrive.
      drain();
      await until(
        () => frames.some((f) => f.startsWith('{"method":"monitor/batch"') && f.includes('"dropped"')),
        5000,
        'dropped after draining',
      );
      const dropped = frames.find(
        (f) => f.startsWith('{"method":"monitor/batch"') && f.includes('"dropped"'),
      )!;
      // Counted in chunks, whose size depends on how the server read the pipe (fewer, larger reads on a busy
      // machine): at least one, since the output frames sent carry less than the 4 MB written.
      const sent = frames
        .filter((f) => f.startsWith('{"method":"monitor/output"'))
        .reduce((n, f) => n + Buffer.from(JSON.parse(f).params.chunk as string, 'base64').length, 0);
      assert.ok(sent < 4_000_000, `sent ${sent} bytes of output`);
      assert.ok((JSON.parse(dropped).params.dropped.output as number) >= 1, dropped.slice(0, 300));
      await until(
        () =>
          frames.some(
            (f) =>
              f.startsWith('{"method":"monitor/batch"') && /"processId":"loud"[^}]*"state":"closed"/.test(f),
          ),
        5000,
        'final state delivered after the drain',
      );
    } finally {
      agent.close();
      m.dispose();
      await small.close();
    }
  });

  test('a subscriber that falls too far behind is dropped to a resync: bounded queue, then a fresh snapshot', async () => {
    const small = await startTestServer();
    const m = servePanel(small.server, { highWaterBytes: 16 * 1024, maxDirty: 50, batchMs: 5 });
    const { frames, drain } = stuckPanel(small);
    const agent = await small.client('many');
    try {
      // Fill the stuck subscriber's transport with one big first batch, then keep changing processes.
      for (let i = 0; i < 300; i++) {
        await agent.request('process/start', {
          processId: `p${i}`,
          argv: ['/bin/true'],
          cwd: '/tmp',
          env: {},
          tty: false,
        });
      }
      for (let i = 0; i < 300; i++) await agent.collect(`p${i}`);
      // What is queued for it stays under the cap (not one entry per event), and nothing new was sent.
      assert.ok(m.queuedEntries() <= 51, `queued entries ${m.queuedEntries()}`);
      const sent = frames.length;
      drain();
      await until(() => frames.some((f) => f.startsWith('{"method":"monitor/resync"')), 5000, 'resync');
      assert.ok(frames.length > sent);
      const resync = JSON.parse(frames.find((f) => f.startsWith('{"method":"monitor/resync"'))!).params as {
        processes: { processId: string; state: string }[];
        pendingProcesses: number;
      };
      // The fresh snapshot has every process in its final state (newest first; here all in the first page).
      assert.equal(resync.pendingProcesses, 0);
      const seen = resync.processes.filter((p) => p.processId.startsWith('p'));
      assert.equal(seen.length, 300);
      assert.ok(seen.every((p) => p.state === 'closed'));
    } finally {
      agent.close();
      m.dispose();
      await small.close();
    }
  });

  test('a snapshot of more processes than a page is paged in after the answer', async () => {
    const small = await startTestServer({ tokens: true });
    // Pages of 100 (the server's are 2000): the same paging with a tenth of the processes to start.
    const m = servePanel(small.server, { batchMs: 5, snapshotPage: 100 });
    const agent = await small.client('pages');
    try {
      const total = 250;
      const ids = Array.from({ length: total }, (_, i) => `q${i}`);
      for (let i = 0; i < total; i += 50) {
        const chunk = ids.slice(i, i + 50);
        await Promise.all(
          chunk.map((processId) =>
            agent.request('process/start', {
              processId,
              argv: ['/bin/true'],
              cwd: '/tmp',
              env: {},
              tty: false,
            }),
          ),
        );
        for (const id of chunk) await agent.collect(id);
      }
      const panel = await small.panel();
      const snap = (await panel.request('monitor/subscribe', {})) as {
        processes: { processId: string; startedAt: number }[];
        pendingProcesses: number;
      };
      assert.equal(snap.processes.length + snap.pendingProcesses, total);
      assert.ok(snap.processes.length <= 100 && snap.pendingProcesses > 0);
      // Newest first: the first page holds the latest processes.
      assert.ok(snap.processes[0]!.startedAt >= snap.processes[snap.processes.length - 1]!.startedAt);
      const last = await panel.waitFor(
        (n) => n.method === 'monitor/batch' && (n.params.snapshotRemaining as number | undefined) === 0,
      );
      assert.ok(last);
      const got = new Set(snap.processes.map((p) => p.processId));
      for (const n of panel.notifications) {
        assert.ok(procs(n).length <= 100, `a batch of ${procs(n).length} processes, over the page`);
        for (const p of procs(n)) got.add(p.processId);
      }
      assert.equal([...got].filter((id) => id.startsWith('q')).length, total);
      panel.close();
    } finally {
      agent.close();
      m.dispose();
      await small.close();
    }
  });
});

describe('monitor helpers', () => {
  test('sandbox badge', () => {
    assert.equal(sandboxBadge('linuxSeccomp', ['/bin/sh']), 'linux-seccomp');
    assert.equal(sandboxBadge('macosSeatbelt', ['/bin/sh']), 'macos-seatbelt');
    assert.equal(
      sandboxBadge('none', ['/home/a/.codex/tmp/arg0/codex-arg0x/codex-linux-sandbox', '--']),
      'client-wrapped',
    );
    assert.equal(sandboxBadge('none', ['codex-linux-sandbox']), 'client-wrapped');
    assert.equal(sandboxBadge('none', ['/bin/codex-linux-sandbox-not']), 'none');
  });

  test('redact keeps env names and hides values and secret-looking fields', () => {
    assert.deepEqual(
      redact({
        env: { A: '1', B: '2' },
        nested: { apiToken: 'x', ok: 'y', list: [{ password: 'p' }] },
        n: 3,
      }),
      {
        env: { A: REDACTED, B: REDACTED },
        nested: { apiToken: REDACTED, ok: 'y', list: [{ password: REDACTED }] },
        n: 3,
      },
    );
  });

  test('parseTarget', () => {
    assert.deepEqual(parseTarget('https://h.test/p?q'), { scheme: 'https', host: 'h.test', port: 443 });
    assert.deepEqual(parseTarget('http://[::1]:81/'), { scheme: 'http', host: '::1', port: 81 });
    assert.deepEqual(parseTarget('h.test:443'), { scheme: 'https', host: 'h.test', port: 443 });
    assert.deepEqual(parseTarget('[::1]:80'), { scheme: 'http', host: '::1', port: 80 });
    assert.equal(parseTarget('h:99999'), null);
    assert.equal(parseTarget(''), null);
  });
});
