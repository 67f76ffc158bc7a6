// issue 33, item 5: `--require-sandbox`. The seed declares process/start's `sandbox` required: with the flag, a start
// without a sandbox object (absent, null, or a client-wrapped argv that brings its own launcher instead) is -32602
// ``missing field `sandbox` `` before anything else is checked or made; an explicit `{"sandbox":"none",…}` and a
// 0.169 context still run; initialize says the server is strict. Without the flag nothing changes. Through the real
// CLI (`corral exec-server --require-sandbox`) and an in-process server.
import assert from 'node:assert/strict';
import { chmodSync, existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startCli } from '../helpers/cli.js';
import { RpcCallError, RpcClient } from '../helpers/client.js';
import { startTestServer, type TestServer, tempDir } from '../helpers/server.js';
import { noSandboxParam } from '../helpers/startParams.js';

const noSandbox = noSandboxParam('/tmp');
const context = {
  permissions: { type: 'disabled' },
  cwd: '/tmp',
};
const MISSING = { code: -32602, message: 'missing field `sandbox`' };

const dir = tempDir('corral-require-sandbox-');
let strict: TestServer;
let loose: TestServer;
let c: RpcClient & { sessionId: string };
let n = 0;
before(async () => {
  strict = await startTestServer({ launcher: { sandbox: { requireSandbox: true } } });
  loose = await startTestServer();
  c = await strict.client('strict-agent');
});
after(async () => {
  await strict.close();
  await loose.close();
  dir.cleanup();
});

async function start(client: RpcClient, extra: Record<string, unknown>, processId = `rs-${++n}`) {
  return client.request('process/start', {
    processId,
    argv: ['/bin/sh', '-c', `echo ${processId} > "${join(dir.path, processId)}"`],
    cwd: '/tmp',
    env: { PATH: '/usr/bin:/bin' },
    tty: false,
    ...extra,
  });
}

async function refused(extra: Record<string, unknown>): Promise<{ code: number; message: string }> {
  const processId = `rs-${++n}`;
  let error: unknown;
  try {
    await start(c, extra, processId);
  } catch (e) {
    error = e;
  }
  assert.ok(error instanceof RpcCallError, `${JSON.stringify(extra).slice(0, 120)} was not refused`);
  const read = await c.requestError('process/read', { processId, afterSeq: 0, waitMs: 0 });
  assert.equal(read.code, -32600, 'nothing was started');
  assert.ok(!existsSync(join(dir.path, processId)), 'nothing ran');
  return { code: error.code, message: error.message };
}

describe('--require-sandbox', () => {
  test('initialize reports it (and only then)', async () => {
    for (const [server, expected] of [
      [strict, true],
      [loose, undefined],
    ] as const) {
      const raw = await RpcClient.connect(server.url);
      try {
        const init = await raw.request<{ sessionId: string; requireSandbox?: boolean }>('initialize', {
          clientName: 'probe',
        });
        assert.equal(init.requireSandbox, expected);
        assert.deepEqual(
          Object.keys(init).sort(),
          expected ? ['requireSandbox', 'sessionId'] : ['sessionId'],
        );
      } finally {
        raw.close();
      }
    }
  });

  test('absent, null, and a client-wrapped argv without a sandbox: -32602 missing field, before any other check', async () => {
    assert.deepEqual(await refused({}), MISSING);
    assert.deepEqual(await refused({ sandbox: null }), MISSING);
    // Before argv, cwd, program and limits are looked at, as serde refuses the struct before any of it runs.
    assert.deepEqual(await refused({ sandbox: null, argv: [] }), MISSING);
    assert.deepEqual(await refused({ argv: ['/no/such/program'], cwd: '/no/such/dir' }), MISSING);
    assert.deepEqual(await refused({ limits: { pidsMax: 4_000_000 } }), MISSING);
    assert.deepEqual(await refused({ managedNetwork: { config: { network: { enabled: true } } } }), MISSING);
    assert.equal(strict.server.launcher.proxies.size, 0);
    assert.deepEqual(await refused({ enforceManagedNetwork: true }), MISSING);
    const launcher = join(dir.path, 'codex-linux-sandbox');
    writeFileSync(launcher, '#!/bin/sh\nexit 0\n');
    chmodSync(launcher, 0o755);
    assert.deepEqual(
      await refused({ argv: [launcher, '--sandbox-policy-cwd', '/tmp', '--', '/bin/true'], arg0: launcher }),
      MISSING,
    );
    // A malformed sandbox is still the table's own -32602, naming what is wrong with it.
    const bad = await refused({ sandbox: 'x' });
    assert.equal(bad.code, -32602);
    assert.notEqual(bad.message, MISSING.message);
  });

  test('an explicit sandbox "none" and a 0.169 context still run', async () => {
    for (const sandbox of [noSandbox, context]) {
      const processId = `rs-${++n}`;
      await start(c, { sandbox }, processId);
      await c.collect(processId, 10_000);
      assert.ok(existsSync(join(dir.path, processId)), `${JSON.stringify(sandbox).slice(0, 60)} ran`);
    }
  });

  test('without the flag, absent and null still mean no sandbox', async () => {
    const l = await loose.client('loose-agent');
    for (const extra of [{}, { sandbox: null }]) {
      const processId = `rs-${++n}`;
      await start(l, extra, processId);
      await l.collect(processId, 10_000);
      assert.ok(existsSync(join(dir.path, processId)));
    }
  });

  test('corral exec-server --require-sandbox: initialize says so, a bare start is refused', async () => {
    for (const [flags, expected] of [
      [['--require-sandbox'], true],
      [[], undefined],
    ] as const) {
      const cli = await startCli(['exec-server', '--listen', 'ws://127.0.0.1:0', '--no-audit', ...flags]);
      try {
        const raw = await RpcClient.connect(cli.url!);
        try {
          const init = await raw.request<{ sessionId: string; requireSandbox?: boolean }>('initialize', {
            clientName: 'cli-probe',
          });
          assert.equal(init.requireSandbox, expected);
          assert.equal(typeof init.sessionId, 'string');
          raw.notify('initialized', {});
          const processId = `cli-${++n}`;
          const r = await raw
            .request('process/start', {
              processId,
              argv: ['/bin/true'],
              cwd: '/tmp',
              env: { PATH: '/usr/bin:/bin' },
              tty: false,
            })
            .then(
              () => null,
              (e: unknown) => e,
            );
          if (expected) {
            assert.ok(r instanceof RpcCallError);
            assert.deepEqual({ code: r.code, message: r.message }, MISSING);
          } else assert.equal(r, null);
        } finally {
          raw.close();
        }
      } finally {
        await cli.stop();
      }
    }
  });
});
