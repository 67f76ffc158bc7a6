// Every inbound JSON parser against deep, wide, huge and malformed JSON (issue 30 item 3): the agent and panel
// WebSockets, stdio, the app's IPC, the fleet link (a hostile joined server), the remote-executor link (a hostile
// harness through the relay), the registry's answers, and the approvals methods over the panel. After each batch the
// server is alive, still starts and reads a process, and stayed under a memory ceiling; payloads nested past the
// bound are answered naming it (or drop the link, naming it).
import assert from 'node:assert/strict';
import { EventEmitter, once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import WebSocket from 'ws';
import { startHost } from '../../src/app/host.js';
import { IPC_CHANNEL, IPC_CONTROL } from '../../src/protocol/client.js';
import { MAX_MESSAGE_BYTES } from '../../src/protocol/methods.js';
import type { MonitorServer } from '../../src/protocol/monitor.js';
import { noAuth } from '../../src/remote/auth.js';
import { startDirectExecutor } from '../../src/remote/direct.js';
import { RegistryClient, RegistryError } from '../../src/remote/registry.js';
import type { IpcEventLike, IpcMainLike, IpcSenderLike } from '../../src/rpc/ipcTransport.js';
import { ExecServer } from '../../src/server/execServer.js';
import { type Cli, startCli } from '../helpers/cli.js';
import { RpcClient } from '../helpers/client.js';
import {
  assertBoundsNamed,
  feed,
  hostileCorpus,
  type Peer,
  rssOf,
  stillServes,
  wrongTypes,
} from '../helpers/hostileJson.js';
import { type HostileServer, startHostileServer } from '../helpers/hostileServer.js';
import { startHostJoining } from '../helpers/joinedHost.js';
import { emptySnapshot, monitorProcess } from '../helpers/monitorRows.js';
import { startFakeRegistry } from '../helpers/registry.js';
import { shellStart } from '../helpers/registry-contract.js';
import { until } from '../helpers/server.js';

const MiB = 1024 * 1024;
/** The host's resident memory after all of it (a host at rest is some 100–150 MiB). */
const RSS_CEILING = 400 * MiB;

const AGENT_METHODS = {
  'process/start': shellStart('fuzz', 'true', '/tmp'),
  'process/read': { processId: 'fuzz', afterSeq: 0, maxBytes: 10, waitMs: 0 },
  'process/write': { processId: 'fuzz', chunk: 'eA==' },
  'process/terminate': { processId: 'fuzz' },
  'fs/getMetadata': { path: '/tmp' },
};
const PANEL_METHODS = {
  'approvals/decide': { id: 'no-such', decision: 'allow', server: null },
  'approvals/revoke': { id: 'no-such' },
  'approvals/export': { sessionId: null },
  'approvals/list': {},
  'monitor/read': { sessionId: 's', processId: 'p', afterSeq: 0 },
  'monitor/terminate': { sessionId: 's', processId: 'p' },
  'monitor/follow': { sessionId: 's', processId: 'p', follow: true },
  'fleet/leave': { server: 'none' },
};

/** A WebSocket peer (initialized first when `init`). */
async function wsPeer(url: string, init = true): Promise<Peer> {
  const ws = new WebSocket(url, { perMessageDeflate: false, maxPayload: 256 * MiB });
  const frames: string[] = [];
  let closed = false;
  ws.on('message', (d) => frames.push(d.toString()));
  ws.on('close', () => {
    closed = true;
  });
  ws.on('error', () => {
    closed = true;
  });
  await once(ws, 'open');
  const peer: Peer = {
    send: (d) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(d, { binary: false });
    },
    frames,
    get closed() {
      return closed;
    },
    close: () => ws.close(),
  };
  if (init) {
    peer.send('{"id":"init","method":"initialize","params":{"clientName":"fuzz"}}');
    await until(() => frames.some((f) => f.includes('"init"')) || closed, 10_000, 'initialize');
    peer.send('{"method":"initialized","params":{}}');
  }
  return peer;
}

describe('inbound JSON parsers under hostile input', () => {
  let evil: HostileServer;
  let host: Cli;
  let info: { url: string; agent: string; panel: string };
  let agent: RpcClient & { sessionId: string };

  before(async () => {
    evil = await startHostileServer();
    ({ host, info } = await startHostJoining(evil));
    agent = await RpcClient.open(`${info.url}/?token=${info.agent}`, 'local-agent');
    await stillServes(agent, 'before');
  });

  after(async () => {
    agent?.close();
    await host?.stop();
    await evil?.close();
  });

  /** The host process is alive, its agent's session still starts and reads a process, and its RSS is bounded. */
  const hostHolds = async (word: string) => {
    assert.equal(host.proc.exitCode, null, `the host exited: ${host.stderr().slice(-2000)}`);
    await stillServes(agent, word);
    const rss = rssOf(host.proc.pid!);
    assert.ok(rss < RSS_CEILING, `host RSS ${Math.round(rss / MiB)} MiB`);
  };

  test('agent WebSocket', async () => {
    const fed = await feed(() => wsPeer(`${info.url}/?token=${info.agent}`), hostileCorpus(AGENT_METHODS));
    assertBoundsNamed(fed);
    // Past the size cap: closed 1009, nothing buffered.
    const big = await wsPeer(`${info.url}/?token=${info.agent}`);
    big.send(`{"id":1,"method":"initialize","params":{"clientName":"${'x'.repeat(MAX_MESSAGE_BYTES)}"}}`);
    await until(() => big.closed, 20_000, 'the over-size message closes');
    await hostHolds('agent-ws');
  });

  test('panel WebSocket, approvals included', async () => {
    const fed = await feed(
      () => wsPeer(`${info.url}/?token=${info.panel}`),
      hostileCorpus({ ...PANEL_METHODS, ...AGENT_METHODS }),
    );
    assertBoundsNamed(fed);
    const decide = fed.find((f) => f.name === 'approvals/decide decision="x"');
    assert.match(decide!.answers.join(' '), /-32602/);
    await hostHolds('panel-ws');
  });

  test('fleet link: a joined server sending all of it', async () => {
    const row = monitorProcess({ processId: 'ok', sessionId: 's' });
    const corpus = [
      ...hostileCorpus({}),
      ...wrongTypes('monitor/batch', { processes: [row], sessions: [], blocked: [], audit: [] }, true),
      ...wrongTypes('monitor/resync', emptySnapshot(), true),
      ...wrongTypes(
        'monitor/output',
        { sessionId: 's', processId: 'ok', seq: 1, stream: 'stdout', chunk: 'eA==' },
        true,
      ),
      ...wrongTypes('approvals/resolved', { id: 'x', outcome: 'allowed', released: 1, resolvedAt: 1 }, true),
      ...wrongTypes('approvals/decisions', { decisions: [] }, true),
      ...Object.keys(row).map((field) => ({
        name: `monitor/batch row ${field}=deep`,
        data: JSON.stringify({
          method: 'monitor/batch',
          params: { processes: [{ ...row, [field]: { a: [[[[[[[[[[[[[[[{}]]]]]]]]]]]]]]] } }] },
        }),
      })),
    ];
    const peer = async (): Promise<Peer> => {
      // The host (re)connects and subscribes: that connection is the peer.
      await until(
        () => evil.sockets.some((s) => s.readyState === WebSocket.OPEN && evil.framesOf(s).length >= 2),
        20_000,
        'the host joined',
      );
      const ws = evil.sockets.filter((s) => s.readyState === WebSocket.OPEN).at(-1)!;
      return {
        send: (d) => {
          if (ws.readyState === WebSocket.OPEN) ws.send(d, { binary: false });
        },
        frames: evil.framesOf(ws),
        get closed() {
          return ws.readyState !== WebSocket.OPEN;
        },
      };
    };
    const fed = await feed(peer, corpus);
    // What broke a bound dropped the link, naming it; the Servers view has the reason.
    for (const f of fed.filter((x) => /100k nested/.test(x.name))) assert.ok(f.closed, f.name);
    const panel = await RpcClient.open(`${info.url}/?token=${info.panel}`, 'panel');
    const { servers } = (await panel.request('fleet/list', {})) as { servers: MonitorServer[] };
    panel.close();
    assert.ok(servers[0]!.dropped, 'the link was dropped');
    assert.ok(servers[0]!.rejected > 0, 'malformed messages were counted');
    await hostHolds('fleet-link');
  });

  test('stdio', async () => {
    // A protocol violation ends a stdio server (its one connection closed): each is started again, and each must
    // have ended cleanly (exit 0), never by a crash.
    const clis: Cli[] = [];
    const open = async (): Promise<Peer & { cli: Cli }> => {
      const cli = await startCli(['exec-server', '--listen', 'stdio', '--no-audit'], { stdio: true });
      clis.push(cli);
      const frames: string[] = [];
      void (async () => {
        for await (const line of cli.lines) frames.push(line);
      })();
      cli.proc.stdin.on('error', () => {}); // EPIPE once it has ended
      let exited = false;
      void cli.exited.then(() => {
        exited = true;
      });
      const peer = {
        cli,
        send: (d: string | Buffer) => {
          if (!exited) cli.proc.stdin.write(Buffer.concat([Buffer.from(d), Buffer.from('\n')]));
        },
        frames,
        get closed() {
          return exited;
        },
      };
      peer.send('{"id":"init","method":"initialize","params":{"clientName":"fuzz"}}');
      peer.send('{"method":"initialized","params":{}}');
      return peer;
    };
    try {
      const fed = await feed(open, hostileCorpus(AGENT_METHODS));
      assertBoundsNamed(fed);
      for (const c of clis.slice(0, -1)) {
        const { code, signal } = await c.exited;
        assert.deepEqual({ code, signal }, { code: 0, signal: null }, c.stderr());
      }
      const peer = await open();
      const { cli, frames } = peer;
      // Still serves: a process started and read to its end.
      peer.send(
        JSON.stringify({
          id: 'start',
          method: 'process/start',
          params: shellStart('io', 'echo stdio-ok', '/tmp'),
        }),
      );
      await until(() => frames.some((f) => f.includes('"start"')), 10_000, 'started');
      const ok = Buffer.from('stdio-ok').toString('base64').slice(0, 8);
      await until(
        async () => {
          peer.send(
            '{"id":"read","method":"process/read","params":{"processId":"io","afterSeq":0,"waitMs":0}}',
          );
          await new Promise((r) => setTimeout(r, 20));
          return frames.some((f) => f.includes('"read"') && f.includes(ok));
        },
        10_000,
        'the output read back',
      );
      const rss = rssOf(cli.proc.pid!);
      assert.ok(rss < RSS_CEILING, `stdio server RSS ${Math.round(rss / MiB)} MiB`);
      // A line past the size cap, never ended: the connection closes, the buffer does not grow.
      const chunk = Buffer.alloc(MiB, 0x61);
      for (let i = 0; i < 20 && !peer.closed; i++) cli.proc.stdin.write(chunk);
      const { code, signal } = await cli.exited;
      assert.deepEqual({ code, signal }, { code: 0, signal: null }, cli.stderr());
      assert.doesNotMatch(cli.stderr(), /RangeError|heap/i);
    } finally {
      for (const c of clis) await c.stop();
    }
  });

  test('IPC (the app window), without Electron', async () => {
    const inproc = await startHost({ audit: null });
    try {
      const ipcMain = new EventEmitter();
      let current: { frames: string[]; closed: boolean } = { frames: [], closed: false };
      const sender: IpcSenderLike = {
        id: 77,
        send(channel: string, ...args: unknown[]) {
          if (channel === IPC_CHANNEL) current.frames.push(args[0] as string);
          else if (channel === IPC_CONTROL && (args[0] as { type?: string }).type === 'closed')
            current.closed = true;
        },
        isDestroyed: () => false,
        once: () => undefined,
      };
      const event: IpcEventLike = { sender };
      inproc.serveIpc(ipcMain as unknown as IpcMainLike);
      const open = async (): Promise<Peer> => {
        const mine = { frames: [] as string[], closed: false };
        current = mine;
        ipcMain.emit(IPC_CONTROL, event, { type: 'open', acks: false });
        const peer: Peer = {
          // Bytes are what a compromised renderer could pass instead of text (not a string: refused).
          send: (d) => {
            if (!mine.closed) ipcMain.emit(IPC_CHANNEL, event, d);
          },
          frames: mine.frames,
          get closed() {
            return mine.closed;
          },
        };
        peer.send('{"id":"init","method":"initialize","params":{"clientName":"fuzz"}}');
        peer.send('{"method":"initialized","params":{}}');
        return peer;
      };
      const fed = await feed(open, hostileCorpus({ ...PANEL_METHODS, ...AGENT_METHODS }));
      assertBoundsNamed(fed);
      const big = await open();
      big.send('x'.repeat(MAX_MESSAGE_BYTES + 1));
      assert.ok(big.closed, 'over the size cap: closed');
      const c = await RpcClient.open(inproc.execUrl, 'after-ipc');
      await stillServes(c, 'ipc');
      c.close();
      assert.ok(process.memoryUsage().rss < 2 * RSS_CEILING);
    } finally {
      await inproc.shutdown();
    }
  });

  test('remote-executor link: a hostile harness through the relay', async () => {
    const ENV = 'env-fuzz';
    const registry = await startFakeRegistry({ executorAuth: { kind: 'none' } });
    const server = new ExecServer({ resumeGraceMs: 0 });
    const executor = startDirectExecutor(server, {
      registry: new RegistryClient(registry.url, ENV, noAuth()),
      auth: noAuth(),
      log: server.log,
      initialRetryMs: 20,
      maxRetryMs: 100,
    });
    try {
      let fatal: unknown = null;
      executor.done.catch((e: unknown) => {
        fatal = e;
      });
      let last: Peer | null = null;
      const open = async (): Promise<Peer> => {
        await registry.waitForExecutor(ENV, 10_000).catch((e: Error) => {
          throw new Error(`${e.message} (executor: ${String(fatal)}, links ${executor.linksOpened})`);
        });
        last = await wsPeer(registry.harnessUrl(ENV));
        return last;
      };
      // Text frames only: the stand-in relay forwards text, so invalid UTF-8 never reaches the executor through it.
      const corpus = hostileCorpus(AGENT_METHODS).filter((p) => typeof p.data === 'string');
      const fed = await feed(open, corpus);
      assertBoundsNamed(fed);
      (last as Peer | null)?.close?.();
      await registry.waitForExecutor(ENV, 10_000);
      const c = await RpcClient.open(registry.harnessUrl(ENV), 'harness');
      await stillServes(c, 'remote');
      c.close();
    } finally {
      executor.stop();
      await executor.done.catch(() => {});
      await server.shutdown();
      await registry.close();
    }
  });

  test("the registry's answers: each refused with a clear error, nothing thrown past register()", async () => {
    const bodies: [string, number, string][] = [
      ['100k nested arrays', 200, '['.repeat(100_000) + ']'.repeat(100_000)],
      ['100k nested objects', 200, `${'{"a":'.repeat(100_000)}1${'}'.repeat(100_000)}`],
      ['deep error body', 500, `{"error":${'['.repeat(100_000)}${']'.repeat(100_000)}}`],
      ['wide', 200, `{"environment_id":[${'0,'.repeat(400_000)}0]}`],
      ['huge', 200, `"${'x'.repeat(2 * MiB)}"`],
      ['truncated', 200, '{"environment_id":"env-fuzz","url":"ws://127.0.0.1:1/'],
      ['NaN', 200, '{"environment_id":NaN}'],
      ['__proto__', 200, '{"__proto__":{"url":"ws://127.0.0.1:1/"},"environment_id":"env-fuzz"}'],
      ['wrong types', 200, '{"environment_id":1,"registration_id":{},"url":[],"transport":null}'],
      ['1e999', 401, '{"error":{"code":1e999,"message":{}}}'],
    ];
    let current = '';
    let status = 200;
    const http = createServer((_req, res) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(current);
    });
    http.listen(0, '127.0.0.1');
    await once(http, 'listening');
    try {
      const base = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
      for (const [name, s, body] of bodies) {
        current = body;
        status = s;
        const e = await new RegistryClient(base, 'env-fuzz', noAuth()).register().then(
          () => null,
          (x: unknown) => x,
        );
        assert.ok(e instanceof RegistryError, `${name}: ${String(e)}`);
        assert.ok(e.message.length < 1000, `${name}: a short message`);
      }
    } finally {
      http.close();
    }
  });
});
