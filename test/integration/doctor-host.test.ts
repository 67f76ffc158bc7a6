/**
 * `corral doctor` in the host's `host/info` (what the panel's host info shows): the report is there for a panel
 * connection, made with this server's sandbox options, and matches the protocol's schema. The namespace-less
 * environments are in landlock-fallback.test.ts (the CLI there); this one is the host as it runs here.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { HostInfo } from '../../src/protocol/host.js';
import { type Host, startHost } from '../../src/server/host.js';
import { RpcClient } from '../helpers/client.js';

let host: Host;
before(async () => {
  host = await startHost({
    server: { launcher: { sandbox: { fallback: 'landlock', acceptWeaker: ['proxy-port'] } } },
  });
});
after(() => host?.shutdown());

test('host/info carries the doctor report, made with the server sandbox options', async () => {
  const url = host.execUrl.replace(/\?token=.*/, `?token=${encodeURIComponent(host.tokens.panel)}`);
  const panel = await RpcClient.open(url, 'corral-panel');
  try {
    const info = HostInfo.parse(await panel.request('host/info', {}));
    const d = info.doctor;
    assert.ok(d, 'no doctor report');
    assert.deepEqual(d.options, { fallback: 'landlock', acceptWeaker: ['proxy-port'] });
    const ids = d.checks.map((c) => c.id);
    for (const id of ['bwrap', 'landlock', 'seccomp', 'cgroup', 'addon', 'launcher', 'panel'])
      assert.ok(ids.includes(id), ids.join(' '));
    const legacy = d.policies.find((p) => p.policy === 'useLegacyLandlock (workspace-write)');
    assert.equal(legacy?.sandbox, 'landlock', JSON.stringify(d.policies));
    // Asked again: the same report (made once per host).
    assert.deepEqual(HostInfo.parse(await panel.request('host/info', {})).doctor, d);
  } finally {
    panel.close();
  }
});
