// issue 33, item 8: what a start was accepted with but cannot fully honour is said in process/start's result
// (`warnings`), not only on the panel: a managed proxy a restricted sandbox leaves unreachable (enforceManagedNetwork
// false), a mitm setting without effect as configured. A start with nothing to warn about has no `warnings` member
// (the seed's and Codex's result shapes stay exact).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { needsSandbox } from '../helpers/native.js';
import { PATH, sandboxServer, seedParam, special } from './sandbox-util.js';

const sb = sandboxServer('warnings');
let n = 0;

async function started(extra: Record<string, unknown>): Promise<Record<string, unknown>> {
  const processId = `warn-${++n}`;
  const r = await sb.c.request<Record<string, unknown>>('process/start', {
    processId,
    argv: ['/bin/true'],
    cwd: sb.f.W,
    env: { PATH },
    tty: false,
    ...extra,
  });
  await sb.c.collect(processId, 20_000);
  return r;
}

const sandbox = (enforceManagedNetwork: boolean) =>
  seedParam({
    cwd: sb.f.W,
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
