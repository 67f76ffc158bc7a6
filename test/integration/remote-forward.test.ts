/**
 * `exec-server forward --remote URL --environment-id ID --connect URL` (codex 0.171, issue 35; src/remote/forward.ts):
 * the registry stand-in of the remote tests hands links to the forwarder, which relays each to an existing exec
 * server: a Corral server (with its agent token in --connect), and the real `codex exec-server` 0.171 when it is
 * cached. A harness on the far side of the relay starts a command and reads its output; an unreachable destination
 * closes the harness's link instead of leaving it hanging. Everything on loopback.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { WebSocket } from 'ws';
import { parseConnectUrl } from '../../src/remote/forward.js';
import { codexBinary } from '../e2e/codex/rig.js';
import { RpcClient } from '../helpers/client.js';
import { startForwardRig, startNoiseForwardRig } from '../helpers/forwarder.js';
import type { FakeRegistry } from '../helpers/registry.js';
import { shellStart } from '../helpers/registry-contract.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const ENV = 'env-forward';
const codex171 = codexBinary('0.171.0');

const forwarder = (connect: string) => startForwardRig(ENV, connect, 50);

async function echoThrough(
  registry: Pick<FakeRegistry, 'waitForExecutor' | 'harnessUrl'>,
  id: string,
  cwd = '/',
): Promise<string> {
  await registry.waitForExecutor(ENV);
  const c = await RpcClient.open(registry.harnessUrl(ENV), 'harness');
  try {
    await c.request('process/start', shellStart(id, `echo forwarded-${id}`, cwd));
    await c.collect(id);
    return c.output(id);
  } finally {
    c.close();
  }
}

describe('exec-server forward: the registry’s links relayed to an existing exec server', () => {
  const cleanups: (() => Promise<void>)[] = [];
  /** The real `codex exec-server --listen` 0.171 on loopback (CODEX_HOME outside /tmp); its ws:// URL. */
  const codexListener = async (): Promise<string> => {
    const home = join(homedir(), '.cache', 'corral-forward', 'home');
    mkdirSync(home, { recursive: true });
    const child: ChildProcess = spawn(codex171!, ['exec-server', '--listen', 'ws://127.0.0.1:0'], {
      env: { PATH: '/usr/bin:/bin', HOME: home, CODEX_HOME: home },
      stdio: ['pipe', 'pipe', 'ignore'],
    });
    cleanups.push(async () => {
      child.kill('SIGKILL');
    });
    const [line] = (await once(child.stdout!, 'data')) as [Buffer];
    return line.toString().trim().split('\n')[0]!;
  };
  after(async () => {
    for (const f of cleanups.reverse()) await f();
  });

  it('to a Corral server: a harness runs a command on it through the relay, twice (a new link each time)', async () => {
    const ts: TestServer = await startTestServer({ tokens: true });
    const { registry, fwd } = await forwarder(`${ts.url}/?token=${ts.tokens!.agent}`);
    cleanups.push(async () => {
      fwd.stop();
      await fwd.done.catch(() => {});
      await registry.close();
      await ts.close();
    });
    assert.equal(await echoThrough(registry, 'a'), 'forwarded-a\n');
    assert.equal(await echoThrough(registry, 'b'), 'forwarded-b\n');
    assert.ok(fwd.linksOpened >= 2);
    // Each harness frame went through the relay, and the destination saw a client (the forwarder's socket).
    assert.ok(registry.frames.length > 0);
  });

  it('to the real codex exec-server 0.171 (skipped when it is not cached)', { skip: !codex171 }, async () => {
    const url = await codexListener();
    assert.match(url, /^ws:\/\/127\.0\.0\.1:\d+/);
    const { registry, fwd } = await forwarder(url);
    cleanups.push(async () => {
      fwd.stop();
      await fwd.done.catch(() => {});
      await registry.close();
    });
    // 0.171's process/start takes cwd as a file: URI.
    assert.equal(await echoThrough(registry, 'c', 'file:///'), 'forwarded-c\n');
  });

  it('--remote-transport noise: each authorised Noise stream relayed to a Corral server, twice', async () => {
    const ts: TestServer = await startTestServer({ tokens: true });
    const { registry, fwd } = await startNoiseForwardRig(ENV, `${ts.url}/?token=${ts.tokens!.agent}`, 50);
    cleanups.push(async () => {
      fwd.stop();
      await fwd.done.catch(() => {});
      await registry.close();
      await ts.close();
    });
    assert.equal(await echoThrough(registry, 'n1'), 'forwarded-n1\n');
    assert.equal(await echoThrough(registry, 'n2'), 'forwarded-n2\n');
    // Registered with the hybrid key, each stream validated by the registry, only ciphertext on the relay.
    const register = registry.requests.find((r) => r.kind === 'register')!;
    assert.equal(JSON.parse(register.body).security_profile, 'noise_hybrid_ik_v1');
    assert.equal(registry.requests.filter((r) => r.kind === 'validate').length, 2);
    assert.ok(registry.fromExecutor.every((f) => f.frame !== null));
    // An unvouched harness gets no stream (and no connection to the destination).
    const h = await registry.handshake({ unissued: true });
    assert.equal(h.reset, 'noise_relay_protocol_error');
  });

  it('--remote-transport noise to the real codex exec-server 0.171 (skipped when it is not cached)', {
    skip: !codex171,
  }, async () => {
    const url = await codexListener();
    const { registry, fwd } = await startNoiseForwardRig(ENV, url, 50);
    cleanups.push(async () => {
      fwd.stop();
      await fwd.done.catch(() => {});
      await registry.close();
    });
    assert.equal(await echoThrough(registry, 'n3', 'file:///'), 'forwarded-n3\n');
  });

  it('an unreachable destination closes the harness’s link (1011), and the forwarder keeps serving', async () => {
    const ts: TestServer = await startTestServer({ tokens: true });
    const port = Number(new URL(ts.url).port);
    await ts.close();
    const { registry, fwd } = await forwarder(`ws://127.0.0.1:${port}/`);
    cleanups.push(async () => {
      fwd.stop();
      await fwd.done.catch(() => {});
      await registry.close();
    });
    await registry.waitForExecutor(ENV);
    const ws = new WebSocket(registry.harnessUrl(ENV));
    const [code] = (await once(ws, 'close')) as [number];
    // The forwarder closes the link with 1011; the stand-in relay passes the close on as an abnormal one (1006).
    assert.ok(code === 1011 || code === 1006, `closed with ${code}`);
    await registry.waitForExecutor(ENV);
  });

  it('--connect: only ws:// and wss://, no userinfo, no fragment', () => {
    for (const bad of ['http://127.0.0.1:1', 'ws://u:p@127.0.0.1:1', 'ws://127.0.0.1:1/#x', 'not a url'])
      assert.throws(() => parseConnectUrl(bad), /--connect/);
    assert.equal(parseConnectUrl('ws://127.0.0.1:1/?token=t').searchParams.get('token'), 't');
  });
});
