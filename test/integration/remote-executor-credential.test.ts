// Issue 35, item 5: `--executor-credential-stdin` (codex 0.171), rotating executor credentials read from standard input
// as Codex's executor reads them (src/remote/executorCredential.ts), against the loopback registry stand-in the remote
// tests use (test/helpers/registry.ts). Recorded from the codex 0.171.0 binary against a loopback registry: one JSON
// frame a line {version:1, environment_id, token, expires_at (unix s)}, at most 16 KiB; the token is the registration's
// `Authorization: Bearer`; a later frame replaces it for the next registration; its texts for bad frames. In process
// here (the CLI's exit codes and what it leaves behind: cli-executor-credential.test.ts).
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { after, describe, it } from 'node:test';
import { type Clock, realClock } from '../../src/clock.js';
import { type DirectExecutor, startDirectExecutor } from '../../src/remote/direct.js';
import {
  CREDENTIAL_TEXT,
  ExecutorCredentialStream,
  executorCredentialAuth,
} from '../../src/remote/executorCredential.js';
import { generateIdentity, publicKeyJson } from '../../src/remote/noiseChannel.js';
import { startNoiseExecutor } from '../../src/remote/noiseExecutor.js';
import { RegistryClient } from '../../src/remote/registry.js';
import { ExecServer } from '../../src/server/execServer.js';
import { RpcClient } from '../helpers/client.js';
import { FakeClock } from '../helpers/clock.js';
import { startNoiseRegistry } from '../helpers/noiseRegistry.js';
import { type FakeRegistry, startFakeRegistry } from '../helpers/registry.js';
import { shellStart } from '../helpers/registry-contract.js';
import { until } from '../helpers/server.js';

const ENV = 'env-credential';
const TOKEN_1 = `exec-cred-one-${'a'.repeat(24)}`;
const TOKEN_2 = `exec-cred-two-${'b'.repeat(24)}`;
const inAnHour = () => Math.floor(Date.now() / 1000) + 3600;
const frame = (token: string, o: { env?: string; expiresAt?: number } = {}) =>
  `${JSON.stringify({ version: 1, environment_id: o.env ?? ENV, token, expires_at: o.expiresAt ?? inAnHour() })}\n`;

interface Rig {
  registry: FakeRegistry;
  accepted: Set<string>;
  stdin: PassThrough;
  stream: ExecutorCredentialStream;
  server: ExecServer;
  executor: DirectExecutor;
  close(): Promise<void>;
}

async function rig(server = new ExecServer({ resumeGraceMs: 5000 }), clock: Clock = realClock): Promise<Rig> {
  const accepted = new Set([TOKEN_1]);
  const registry = await startFakeRegistry({ executorAuth: { kind: 'bearers', tokens: accepted } });
  const stdin = new PassThrough();
  const stream = new ExecutorCredentialStream(stdin, { environmentId: ENV, clock });
  stdin.write(frame(TOKEN_1));
  await stream.first;
  const auth = executorCredentialAuth(stream);
  const executor = startDirectExecutor(server, {
    registry: new RegistryClient(registry.url, ENV, auth),
    auth,
    log: server.log,
    initialRetryMs: 50,
  });
  return {
    registry,
    accepted,
    stdin,
    stream,
    server,
    executor,
    async close() {
      stream.close();
      executor.stop();
      await executor.done.catch(() => {});
      await server.shutdown();
      await registry.close();
    },
  };
}

const bearers = (r: Rig, kind: 'register' | 'executor-handshake') =>
  r.registry.requests.filter((x) => x.kind === kind).map((x) => x.headers.authorization);

describe('--executor-credential-stdin: rotating credentials on the registry protocol', () => {
  const open: Rig[] = [];
  after(async () => {
    for (const r of open) await r.close();
  });

  it('the token is the bearer of the registration and the link; a new frame is used from the next registration on', async () => {
    const r = await rig(new ExecServer({ resumeGraceMs: 5000, baseEnv: { PATH: '/usr/bin:/bin' } }));
    open.push(r);
    await r.registry.waitForRequests('executor-handshake', 1);
    assert.deepEqual(bearers(r, 'register'), [`Bearer ${TOKEN_1}`]);
    assert.deepEqual(bearers(r, 'executor-handshake'), [`Bearer ${TOKEN_1}`]);
    // Rotation: the registry now knows only the new token and forgets the registration (409 at the next handshake).
    r.stdin.write(frame(TOKEN_2));
    await new Promise<void>((resolve) => setImmediate(resolve));
    r.accepted.clear();
    r.accepted.add(TOKEN_2);
    r.registry.expireRegistrations();
    r.registry.dropLinks();
    await r.registry.waitForRequests('register', 2);
    await r.registry.waitForExecutor(ENV);
    assert.deepEqual(bearers(r, 'register'), [`Bearer ${TOKEN_1}`, `Bearer ${TOKEN_2}`]);
    assert.equal(bearers(r, 'executor-handshake').at(-1), `Bearer ${TOKEN_2}`);
    // A harness through the relay runs a command; neither token reaches it, not even through an env it sets itself.
    const c = await RpcClient.open(r.registry.harnessUrl(ENV), 'harness');
    await c.request('process/start', {
      ...shellStart('env', 'env', '/tmp'),
      env: { T1: TOKEN_1, T2: TOKEN_2, PATH: '/usr/bin:/bin' },
    });
    await c.collect('env');
    const out = c.output('env');
    assert.match(out, /^PATH=/m);
    assert.ok(!out.includes(TOKEN_1) && !out.includes(TOKEN_2), `a token reached the child: ${out}`);
    c.close();
  });

  it('--remote-transport noise: the token is the bearer of the registration and of each harness-key validation (never on the rendezvous link); a new frame is used from the next request on', async () => {
    const accepted = new Set([TOKEN_1]);
    const registry = await startNoiseRegistry({ bearers: accepted });
    const stdin = new PassThrough();
    const stream = new ExecutorCredentialStream(stdin, { environmentId: ENV, clock: realClock });
    stdin.write(frame(TOKEN_1));
    await stream.first;
    const auth = executorCredentialAuth(stream);
    const server = new ExecServer({ resumeGraceMs: 5000, baseEnv: { PATH: '/usr/bin:/bin' } });
    const identity = generateIdentity();
    const executor = startNoiseExecutor(server, {
      registry: new RegistryClient(registry.url, ENV, auth, {
        noiseKey: publicKeyJson({ dh: identity.dh.publicKey, kem: identity.kem.publicKey }),
      }),
      auth,
      log: server.log,
      identity,
      initialRetryMs: 50,
    });
    try {
      await registry.waitForExecutor(ENV);
      const auths = (kind: string) =>
        registry.requests.filter((x) => x.kind === kind).map((x) => x.headers.authorization);
      const echo = async (id: string) => {
        const c = await RpcClient.open(registry.harnessUrl(ENV), 'harness');
        await c.request('process/start', {
          ...shellStart(id, 'env', '/tmp'),
          env: { T1: TOKEN_1, T2: TOKEN_2, PATH: '/usr/bin:/bin' },
        });
        await c.collect(id);
        const out = c.output(id);
        c.close();
        return out;
      };
      const first = await echo('n1');
      assert.match(first, /^PATH=/m);
      assert.deepEqual(auths('register'), [`Bearer ${TOKEN_1}`]);
      assert.deepEqual(auths('validate'), [`Bearer ${TOKEN_1}`]);
      assert.deepEqual(auths('rendezvous'), [undefined]);
      // Rotation: the registry now knows only the new token; the next stream's validation carries it.
      stdin.write(frame(TOKEN_2));
      await new Promise<void>((resolve) => setImmediate(resolve));
      accepted.clear();
      accepted.add(TOKEN_2);
      const second = await echo('n2');
      assert.equal(auths('validate').at(-1), `Bearer ${TOKEN_2}`);
      // No token the executor was given reaches a child, not even through an env the harness sets itself (TOKEN_2
      // is only a string to Corral before its frame is read).
      assert.ok(!first.includes(TOKEN_1), `a token reached the child: ${first}`);
      assert.ok(
        !second.includes(TOKEN_1) && !second.includes(TOKEN_2),
        `a token reached the child: ${second}`,
      );
    } finally {
      stream.close();
      executor.stop();
      await executor.done.catch(() => {});
      await server.shutdown();
      await registry.close();
    }
  });

  it('a credential that expires while in use fails the next registration with Codex’s text (fatal)', async () => {
    // The credential's time is a fake clock's: its expiry is reached by moving that clock, not by waiting.
    const clock = new FakeClock();
    const r = await rig(undefined, clock);
    open.push(r);
    await r.registry.waitForRequests('executor-handshake', 1);
    // A frame that expires in 1 s replaces the good one; after that, the next registration cannot be signed.
    const soon = Math.floor(clock.now() / 1000) + 1;
    r.stdin.write(frame(TOKEN_1, { expiresAt: soon }));
    await until(() => r.stream.credential().expiresAt === soon, 5000, 'the expiring frame to be read');
    await clock.advance(2000);
    r.registry.expireRegistrations();
    r.registry.dropLinks();
    await assert.rejects(r.executor.done, new RegExp(CREDENTIAL_TEXT.expired));
    assert.equal(bearers(r, 'register').length, 1, 'no registration was sent with the expired credential');
  });

  it('a bad later frame ends the stream with its text; the pipe closing after good frames ends it cleanly', async () => {
    for (const [input, text] of [
      ['garbage\n', CREDENTIAL_TEXT.invalid],
      [frame(TOKEN_2, { env: 'another' }), CREDENTIAL_TEXT.otherEnvironment],
      [frame(TOKEN_2, { expiresAt: 5 }), CREDENTIAL_TEXT.expired],
      [`${'x'.repeat(20_000)}\n`, CREDENTIAL_TEXT.tooLarge],
    ] as const) {
      const stdin = new PassThrough();
      const s = new ExecutorCredentialStream(stdin, { environmentId: ENV, clock: realClock });
      stdin.write(frame(TOKEN_1));
      await s.first;
      stdin.write(input);
      await assert.rejects(s.ended, { message: text });
      assert.equal(s.credential().token, TOKEN_1, 'the bad frame replaced nothing');
    }
    const stdin = new PassThrough();
    const s = new ExecutorCredentialStream(stdin, { environmentId: ENV, clock: realClock });
    stdin.end(frame(TOKEN_1) + frame(TOKEN_2));
    await s.ended;
    assert.equal(s.credential().token, TOKEN_2);
    assert.deepEqual(s.secrets(), [TOKEN_1, TOKEN_2]);
  });

  it('no frame in time: Codex’s timeout text; the pipe closing first: its pipe-closed text', async () => {
    const idle = new PassThrough();
    const t = new ExecutorCredentialStream(idle, {
      environmentId: ENV,
      clock: realClock,
      initialTimeoutMs: 50,
    });
    await assert.rejects(t.first, { message: CREDENTIAL_TEXT.timeout });
    const closed = new PassThrough();
    const c = new ExecutorCredentialStream(closed, { environmentId: ENV, clock: realClock });
    closed.end();
    await assert.rejects(c.first, { message: CREDENTIAL_TEXT.pipeClosed });
  });
});
