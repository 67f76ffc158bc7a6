// The remote executor's outbound link (src/remote/direct.ts) against the fake registry + relay, in process, on
// loopback: a bearer-authenticated registry, what a harness on the far side of the relay can and cannot do (an agent,
// never the panel), what the executor's children can see of its registry credentials, 4 MiB of output over the
// client-side (masked) link, network approvals answered by the harness through the relay, and fatal refusals.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { after, describe, it } from 'node:test';
import type { NetworkPolicyRequestParams } from '../../src/protocol/approvals.js';
import { bearerAuth, noAuth, sigv4Auth } from '../../src/remote/auth.js';
import { CLOSE_GRACE_MS, type DirectExecutor, startDirectExecutor } from '../../src/remote/direct.js';
import { RegistryClient } from '../../src/remote/registry.js';
import { ExecServer, type ExecServerOptions } from '../../src/server/execServer.js';
import { RpcClient } from '../helpers/client.js';
import { FakeClock } from '../helpers/clock.js';
import { type ExecutorAuth, type FakeRegistry, startFakeRegistry } from '../helpers/registry.js';
import { FAKE_AWS, shellStart } from '../helpers/registry-contract.js';
import { until } from '../helpers/server.js';
import { loopbackOnlyDialer, startOrigin, stubResolver } from './network-helpers.js';

const ENV = 'env-link';
const BEARER = 'registry-bearer-0123456789abcdef';

interface Rig {
  registry: FakeRegistry;
  server: ExecServer;
  executor: DirectExecutor;
  harness(extra?: Record<string, unknown>): Promise<RpcClient & { sessionId: string }>;
  close(): Promise<void>;
}

async function rig(
  o: { executorAuth?: ExecutorAuth; auth?: ReturnType<typeof bearerAuth>; server?: ExecServerOptions } = {},
): Promise<Rig> {
  const registry = await startFakeRegistry({
    executorAuth: o.executorAuth ?? { kind: 'bearer', token: BEARER },
  });
  const server = new ExecServer({ resumeGraceMs: 5000, ...o.server });
  const auth = o.auth ?? bearerAuth(BEARER);
  const executor = startDirectExecutor(server, {
    registry: new RegistryClient(registry.url, ENV, auth),
    auth,
    log: server.log,
    initialRetryMs: 50,
  });
  const clients: RpcClient[] = [];
  return {
    registry,
    server,
    executor,
    async harness(extra = {}) {
      await registry.waitForExecutor(ENV);
      const c = await RpcClient.open(registry.harnessUrl(ENV), 'harness', extra);
      clients.push(c);
      return c;
    },
    async close() {
      for (const c of clients) c.close();
      executor.stop();
      await executor.done.catch(() => {});
      await server.shutdown();
      await registry.close();
    },
  };
}

describe('remote executor link (direct transport) through the fake registry', () => {
  const open: Rig[] = [];
  after(async () => {
    for (const r of open) await r.close();
  });

  it('a bearer registry: the bearer goes on the registration and on every handshake', async () => {
    const r = await rig();
    open.push(r);
    const c = await r.harness();
    await c.request('process/start', shellStart('hi', 'echo hi', '/tmp'));
    await c.collect('hi');
    assert.equal(c.output('hi'), 'hi\n');
    const seen = r.registry.requests.filter((x) => x.kind === 'register' || x.kind === 'executor-handshake');
    assert.ok(seen.length >= 2);
    for (const x of seen) assert.equal(x.headers.authorization, `Bearer ${BEARER}`, `${x.kind} ${x.url}`);
  });

  it('the harness is an agent: no monitor, no approvals, no host info (the relay is not the panel)', async () => {
    const r = await rig();
    open.push(r);
    const c = await r.harness();
    for (const m of ['monitor/subscribe', 'approvals/list', 'host/info', 'approvals/decide']) {
      const e = await c.requestError(m, m === 'approvals/decide' ? { id: 'x', decision: 'allowOnce' } : {});
      assert.ok(e.code === -32600 || e.code === -32601, `${m}: ${e.code} ${e.message}`);
    }
    assert.equal(r.server.sessions.size, 1);
    assert.equal([...r.server.sessions.values()][0]!.owner.credential, `remote:${ENV}`);
  });

  it("no child sees the registry credentials (bearer, AWS secret and session token), even with inherit: 'all'", async () => {
    const secret = FAKE_AWS.secretAccessKey;
    const sessionToken = 'FwoGZXIvYXdzEXAMPLE-session-token';
    const env = {
      AWS_ACCESS_KEY_ID: FAKE_AWS.accessKeyId,
      AWS_SECRET_ACCESS_KEY: secret,
      AWS_SESSION_TOKEN: sessionToken,
    };
    const auth = sigv4Auth({ region: FAKE_AWS.region, env });
    const r = await rig({
      executorAuth: { kind: 'sigv4', ...FAKE_AWS },
      auth,
      server: { baseEnv: { PATH: '/usr/bin:/bin', ...env, COPY: `x${secret}x` } },
    });
    open.push(r);
    const c = await r.harness();
    await c.request('process/start', {
      ...shellStart('env', 'env', '/tmp'),
      envPolicy: { inherit: 'all', ignoreDefaultExcludes: true, exclude: [], set: {}, includeOnly: [] },
    });
    await c.collect('env');
    const out = c.output('env');
    assert.match(out, /^PATH=/m, 'the environment was inherited');
    assert.ok(!out.includes(secret), 'the AWS secret reached a child');
    assert.ok(!out.includes(sessionToken), 'the AWS session token reached a child');
    assert.match(out, /^AWS_ACCESS_KEY_ID=AKIDEXAMPLE$/m, 'the key id is not a secret');
  });

  it('4 MiB of output crosses the masked client-side link intact and in order', async () => {
    const r = await rig();
    open.push(r);
    const c = await r.harness();
    await c.request('process/start', shellStart('big', 'seq 1 600000', '/tmp'));
    await c.collect('big', 30_000);
    const out = c.output('big');
    const lines = out.split('\n');
    assert.equal(lines.length, 600001);
    assert.equal(lines[0], '1');
    assert.equal(lines[599_999], '600000');
    const seqs = c.notifications
      .filter((n) => n.params?.processId === 'big' && n.method === 'process/output')
      .map((n) => n.params.seq as number);
    assert.ok(
      seqs.every((s, i) => i === 0 || s === seqs[i - 1]! + 1),
      'seq has gaps or is out of order',
    );
  });

  it('network approvals: the harness declares it and decides its prompt through the relay', {
    skip: existsSync('/usr/bin/curl') ? false : 'curl is not installed',
  }, async () => {
    const origin = await startOrigin();
    const offMachine: string[] = [];
    const r = await rig({
      server: { launcher: { resolver: stubResolver, dialer: loopbackOnlyDialer(offMachine) } },
    });
    open.push(r);
    try {
      const c = await r.harness({ capabilities: { networkApprovals: true } });
      const asked: NetworkPolicyRequestParams[] = [];
      c.onRequest = (_m, p) => {
        asked.push(p as unknown as NetworkPolicyRequestParams);
        return { decision: { type: 'allow' } };
      };
      const url = `http://127.0.0.1:${origin.port}/through-the-relay`;
      await c.request('process/start', {
        ...shellStart('net', `curl --noproxy '' -s -o /dev/null -w 'code=%{http_code}\\n' ${url}`, '/tmp'),
        managedNetwork: {
          config: {
            network: { enabled: true, allow_local_binding: true, hard_deny_allowlist_misses: false },
          },
        },
      });
      await c.collect('net', 20_000);
      assert.match(c.output('net'), /^code=200$/m);
      assert.equal(asked.length, 1);
      assert.equal(asked[0]!.request.port, origin.port);
      // The request and its answer crossed the relay.
      assert.ok(
        r.registry.frames.some(
          (f) => f.dir === 'executor→harness' && f.text.includes('network/policyRequest'),
        ),
      );
      assert.deepEqual(offMachine, []);
    } finally {
      await origin.close();
    }
  });

  it('a refused credential (401 at registration) and a 403 at the handshake are fatal, not retried', async () => {
    const bad = await startFakeRegistry({ executorAuth: { kind: 'bearer', token: BEARER } });
    const server = new ExecServer();
    try {
      const auth = bearerAuth('the-wrong-bearer');
      const ex = startDirectExecutor(server, {
        registry: new RegistryClient(bad.url, ENV, auth),
        auth,
        log: server.log,
      });
      await assert.rejects(ex.done, /authentication failed \(HTTP 401\)/);
      const ok = bearerAuth(BEARER);
      bad.refuseHandshakes(403, 100);
      const ex2 = startDirectExecutor(server, {
        registry: new RegistryClient(bad.url, ENV, ok),
        auth: ok,
        log: server.log,
      });
      await assert.rejects(ex2.done, /HTTP 403: giving up/);
      assert.equal(
        bad.requests.filter((x) => x.kind === 'executor-handshake').length,
        1,
        'a 403 was retried',
      );
    } finally {
      await server.shutdown();
      await bad.close();
    }
  });
});

describe('remote executor link: the first harness message', () => {
  it('a message that arrives in the same TCP read as the 101 is served, not lost', async () => {
    const { createServer } = await import('node:http');
    const { createHash } = await import('node:crypto');
    const initialize = JSON.stringify({ id: 1, method: 'initialize', params: { clientName: 'eager' } });
    const frame = Buffer.concat([
      Buffer.from([0x81, Buffer.byteLength(initialize)]),
      Buffer.from(initialize),
    ]);
    let answer: (text: string) => void;
    const answered = new Promise<string>((r) => {
      answer = r;
    });
    const srv = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const port = (srv.address() as { port: number }).port;
        res.writeHead(200, { 'content-type': 'application/json' }).end(
          JSON.stringify({
            environment_id: ENV,
            transport: 'direct_jsonrpc_v1',
            registration_id: 'r1',
            url: `ws://127.0.0.1:${port}/link`,
          }),
        );
      });
    });
    srv.on('upgrade', (req, socket) => {
      const accept = createHash('sha1')
        .update(`${req.headers['sec-websocket-key']}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`)
        .digest('base64');
      // The 101 and the harness's first frame in ONE write: the executor reads them together.
      socket.write(
        Buffer.concat([
          Buffer.from(
            `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`,
          ),
          frame,
        ]),
      );
      let buf = Buffer.alloc(0);
      socket.on('data', (d: Buffer) => {
        buf = Buffer.concat([buf, d]);
        // One masked client frame (payload < 64 KiB): opcode, 126 + u16 or short length, mask, payload.
        if (buf.length < 2) return;
        let len = buf[1]! & 0x7f;
        let off = 2;
        if (len === 126) {
          len = buf.readUInt16BE(2);
          off = 4;
        }
        if (buf.length < off + 4 + len) return;
        const mask = buf.subarray(off, off + 4);
        const payload = Buffer.from(buf.subarray(off + 4, off + 4 + len));
        for (let i = 0; i < payload.length; i++) payload[i]! ^= mask[i % 4]!;
        answer(payload.toString());
      });
    });
    srv.listen(0, '127.0.0.1');
    await once(srv, 'listening');
    const clock = new FakeClock();
    const server = new ExecServer({ clock });
    const auth = noAuth();
    const base = `http://127.0.0.1:${(srv.address() as { port: number }).port}`;
    const ex = startDirectExecutor(server, {
      registry: new RegistryClient(base, ENV, auth),
      auth,
      log: server.log,
    });
    try {
      const text = await Promise.race([
        answered,
        new Promise<string>((_, reject) =>
          setTimeout(() => reject(new Error('initialize was never answered')), 5000),
        ),
      ]);
      assert.match(text, /^\{"id":1,"result":\{"sessionId":"/);
      // This relay never answers a close frame: stop() ends the executor at the close grace (on the server's clock),
      // not after ws's 30 s.
      let done = false;
      void ex.done
        .catch(() => {})
        .then(() => {
          done = true;
        });
      ex.stop();
      await clock.advance(CLOSE_GRACE_MS - 1);
      assert.equal(done, false, 'not before the close grace');
      await clock.advance(1);
      await until(() => done, 5000, 'stop() to end the executor at the close grace');
    } finally {
      ex.stop();
      await ex.done.catch(() => {});
      await server.shutdown();
      srv.closeAllConnections();
      srv.close();
    }
  });
});
