/**
 * Issue 33, item 3, in the Landlock planner (src/sandbox/linux/landlock.ts): with the connect supervisor available a
 * managed start is planned exactly (Landlock allows no TCP connect, the proxy ports go to the supervisor, no weaker
 * guarantee, TCP-only seccomp); without it the start is refused naming why the supervisor cannot run, as before
 * unless `proxy-port` is accepted.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { WeakerGuarantee } from '../../src/protocol/exec.js';
import { effectiveSandbox, resolvePolicy, SandboxSetupError } from '../../src/sandbox/index.js';
import { type LandlockHost, NET, planLandlock } from '../../src/sandbox/linux/landlock.js';
import { seed, special } from '../integration/sandbox-util.js';

const W = realpathSync(mkdtempSync(join(os.tmpdir(), 'corral-ll-supervisor-plan-')));
after(() => rmSync(W, { recursive: true, force: true }));
const resolved = () =>
  resolvePolicy(
    effectiveSandbox(
      seed({ cwd: W, entries: [special('root', 'read'), special('current_working_directory', 'write')] }),
      true,
    ),
    { tmpdir: undefined },
  );
const managed = (o: Partial<LandlockHost>): LandlockHost => ({
  abi: 7,
  accept: new Set<WeakerGuarantee>(),
  network: 'restricted',
  managed: true,
  proxyPorts: [3128, 1080, 3128],
  masks: [],
  tmpRoots: [],
  envTmpdir: undefined,
  controlMounts: [],
  ...o,
});

test('the supervisor available: exact, no port rule, the proxy ports supervised', () => {
  for (const accept of [new Set<WeakerGuarantee>(), new Set<WeakerGuarantee>(['proxy-port'])]) {
    const plan = planLandlock(resolved(), managed({ connectSupervisor: null, accept }));
    assert.deepEqual(plan.connectPorts, [], 'Landlock allows no TCP connect');
    assert.equal(plan.handledNet, NET.BIND_TCP | NET.CONNECT_TCP);
    assert.deepEqual(plan.netNotify, [1080, 3128]);
    assert.deepEqual(plan.weaker, [], 'proxy-port is not used even where accepted');
    assert.equal(plan.seccompMode, 'proxy-routed');
    assert.equal(plan.seccompExtras.tcpOnly, true);
  }
});

test('the supervisor missing: refused naming why, unless proxy-port is accepted (then the port rule, as before)', () => {
  const why = 'this kernel has no SECCOMP_IOCTL_NOTIF_ADDFD (Linux 5.9 or later is needed)';
  assert.throws(
    () => planLandlock(resolved(), managed({ connectSupervisor: why })),
    (e: unknown) =>
      e instanceof SandboxSetupError &&
      /managed network \(proxy-port\)/.test(e.message) &&
      e.message.includes(why) &&
      /--sandbox-accept-weaker proxy-port/.test(e.message),
  );
  const plan = planLandlock(resolved(), managed({ connectSupervisor: why, accept: new Set(['proxy-port']) }));
  assert.deepEqual(plan.connectPorts, [1080, 3128]);
  assert.equal(plan.netNotify, undefined);
  assert.deepEqual(plan.weaker, ['proxy-port']);
});
