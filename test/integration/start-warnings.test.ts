// issue 33, item 8: what a start was accepted with but cannot fully honour is said in process/start's result
// (`warnings`), not only on the panel: a managed proxy a restricted sandbox leaves unreachable (enforceManagedNetwork
// false), a mitm setting without effect as configured. A start with nothing to warn about has no `warnings` member
// (the seed's and Codex's result shapes stay exact).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { RpcClient } from '../helpers/client.js';
import { needsSandbox } from '../helpers/native.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { type Fixture, fixture, PATH, seedParam, special } from './sandbox-util.js';

let f: Fixture;
let ts: TestServer;
let c: RpcClient & { sessionId: string };
let n = 0;
before(async () => {
  f = await fixture();
  ts = await startTestServer({ launcher: { sandbox: { tmpdir: f.T } } });
  c = await ts.client('warnings');
});
after(async () => {
  await ts.close();
  await f.close();
});

async function started(extra: Record<string, unknown>): Promise<Record<string, unknown>> {
  const processId = `warn-${++n}`;
  const r = await c.request<Record<string, unknown>>('process/start', {
    processId,
    argv: ['/bin/true'],
    cwd: f.W,
    env: { PATH },
    tty: false,
    ...extra,
  });
  await c.collect(processId, 20_000);
  return r;
}

const sandbox = (enforceManagedNetwork: boolean) =>
  seedParam({
    cwd: f.W,
    entries: [special('root', 'read'), special('current_working_directory', 'write')],
    enforceManagedNetwork,
  });
const managed = (network: Record<string, unknown> = {}) => ({
  managedNetwork: { config: { network: { enabled: true, ...network } } },
});

describe('process/start result warnings', { skip: needsSandbox }, () => {
  test('a managed proxy a restricted, unenforced sandbox cannot reach is said in the result', async () => {
    const r = await started({ sandbox: sandbox(false), ...managed() });
    assert.deepEqual(r.warnings, [
      'the managed proxy is unreachable: the sandbox network is restricted and enforceManagedNetwork is false',
    ]);
  });

  test('a proxy setting without effect as configured is said in the result', async () => {
    const r = await started({ ...managed({ mitm: true }) });
    assert.ok(Array.isArray(r.warnings) && r.warnings.some((w) => /mitm/.test(String(w))), JSON.stringify(r));
  });

  test('nothing to warn about: no warnings member at all', async () => {
    for (const extra of [{}, { sandbox: sandbox(true), ...managed() }, { ...managed() }]) {
      const r = await started(extra);
      assert.equal('warnings' in r, false, JSON.stringify(r));
    }
  });
});
