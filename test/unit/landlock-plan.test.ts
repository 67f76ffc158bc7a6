/**
 * The Landlock backend's planning (src/sandbox/linux/landlock.ts) on a real directory tree: which carve-outs are held
 * exactly and at what cost (a frozen directory), and each refusal naming its element and the flag that accepts it.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { WeakerGuarantee } from '../../src/protocol/exec.js';
import { effectiveSandbox, resolvePolicy, SandboxSetupError } from '../../src/sandbox/index.js';
import { FS, type LandlockHost, planLandlock, READ, SCOPE } from '../../src/sandbox/linux/landlock.js';
import { seed, special } from '../integration/sandbox-util.js';

const root = realpathSync(mkdtempSync(join(os.tmpdir(), 'corral-ll-plan-')));
after(() => rmSync(root, { recursive: true, force: true }));
const W = join(root, 'ws');
mkdirSync(join(W, '.git', 'hooks'), { recursive: true });
mkdirSync(join(W, 'src'), { recursive: true });
writeFileSync(join(W, 'README'), 'x');

function resolved() {
  const sb = seed({
    cwd: W,
    entries: [special('root', 'read'), special('current_working_directory', 'write')],
  });
  return resolvePolicy(effectiveSandbox(sb, false), { tmpdir: undefined });
}
const host = (o: Partial<LandlockHost> = {}): LandlockHost => ({
  abi: 7,
  accept: new Set<WeakerGuarantee>(),
  network: 'restricted',
  managed: false,
  proxyPorts: [],
  masks: [],
  tmpRoots: [],
  envTmpdir: undefined,
  controlMounts: [],
  ...o,
});
const MAKE = FS.MAKE_REG | FS.MAKE_DIR | FS.REMOVE_FILE | FS.REMOVE_DIR;
const rulesUnder = (rules: { path: string; rights: number }[], p: string) =>
  rules.filter((r) => r.path === p || r.path.startsWith(`${p}/`));

test('a protected .git in a writable workspace is held exactly: the workspace top level is frozen, the rest writable', () => {
  const plan = planLandlock(resolved(), host());
  // The workspace itself: read only (a write right on it would cover .git); nothing can be created at its top level.
  assert.deepEqual(
    plan.rules.filter((r) => r.path === W).map((r) => r.rights & ~READ),
    [],
    JSON.stringify(plan.rules),
  );
  assert.ok(plan.frozen.includes(W), plan.frozen.join(' '));
  // Every other entry gets the write rights by a rule of its own; .git gets none (and no missing name is creatable).
  for (const name of ['src', 'README']) {
    const r = plan.rules.find((x) => x.path === join(W, name));
    assert.ok(r && (r.rights & FS.WRITE_FILE) !== 0, `${name}: ${JSON.stringify(r)}`);
  }
  assert.ok((plan.rules.find((x) => x.path === join(W, 'src'))!.rights & MAKE) === MAKE);
  assert.deepEqual(rulesUnder(plan.rules, join(W, '.git')), []);
  for (const n of ['.codex', '.agents', '.aws']) assert.deepEqual(rulesUnder(plan.rules, join(W, n)), []);
  assert.deepEqual(plan.weaker, []);
  assert.equal(plan.scoped, SCOPE.SIGNAL | SCOPE.ABSTRACT_UNIX_SOCKET);
  assert.equal(plan.seccompExtras.metadata, 'deny');
  assert.equal(plan.seccompExtras.denyHostIpc, true);
});

test('protected-names accepted: the workspace is writable whole (its .git too), and the plan says so', () => {
  const plan = planLandlock(resolved(), host({ accept: new Set(['protected-names']) }));
  const r = plan.rules.find((x) => x.path === W);
  assert.ok(r && (r.rights & MAKE) === MAKE, JSON.stringify(plan.rules.slice(0, 5)));
  assert.ok(!plan.frozen.includes(W));
  assert.deepEqual(plan.weaker, ['protected-names']);
});

test('each element Landlock cannot hold is refused, naming it and the flag that accepts it', () => {
  const refused = (h: LandlockHost, re: RegExp) =>
    assert.throws(
      () => planLandlock(resolved(), h),
      (e: unknown) => e instanceof SandboxSetupError && re.test(e.message),
    );
  refused(host({ abi: 5 }), /signals \(signals\).*--sandbox-accept-weaker signals/);
  refused(
    host({ managed: true, proxyPorts: [3128] }),
    /managed network \(proxy-port\).*3128.*--sandbox-accept-weaker proxy-port/,
  );
  refused(
    host({ abi: 3, managed: true, proxyPorts: [3128], accept: new Set(['proxy-port', 'signals']) }),
    /ABI 4/,
  );
  refused(
    host({ masks: [{ path: join(W, 'src'), what: 'the token file' }] }),
    /the server's private files: .*cannot hide .*src \(the token file\) inside the writable root/,
  );
  // Accepted, each shows in the plan's weaker list.
  const plan = planLandlock(
    resolved(),
    host({
      abi: 5,
      managed: true,
      proxyPorts: [3128],
      accept: new Set(['signals', 'proxy-port', 'metadata', 'host-ipc']),
    }),
  );
  assert.deepEqual(plan.weaker, ['host-ipc', 'metadata', 'proxy-port', 'signals']);
  assert.deepEqual(plan.connectPorts, [3128]);
  assert.equal(plan.seccompExtras.metadata, 'no-privilege-bits');
  assert.equal(plan.seccompExtras.denyHostIpc, undefined);
});

test('a cgroup mount inside a writable root is carved out read-only; a write asked for inside one is refused', () => {
  // The workspace's src stands in for a cgroup mount (the plan only sees paths).
  const mount = join(W, 'src');
  const plan = planLandlock(resolved(), host({ controlMounts: [{ path: mount, fsType: 'cgroup' }] }));
  const writes = (p: string) =>
    plan.rules.filter((r) => isUnderPath(p, r.path) && (r.rights & ~READ) !== 0).map((r) => r.path);
  // No rule on the mount or on any of its ancestors gives more than reading.
  assert.deepEqual(writes(mount), [], JSON.stringify(plan.rules));
  assert.ok((plan.rules.find((r) => r.path === join(W, 'README'))!.rights & FS.WRITE_FILE) !== 0);
  // Writable `/` (a full-access policy under Landlock): the same, every ancestor frozen.
  const full = resolvePolicy(effectiveSandbox(seed({ cwd: W, entries: [special('root', 'write')] }), false), {
    tmpdir: undefined,
  });
  const p2 = planLandlock(full, host({ controlMounts: [{ path: mount, fsType: 'cgroup' }] }));
  assert.deepEqual(
    p2.rules.filter((r) => isUnderPath(mount, r.path) && (r.rights & ~READ) !== 0).map((r) => r.path),
    [],
  );
  assert.ok(p2.frozen.includes('/') && p2.frozen.includes(W), p2.frozen.join(' '));
  // A writable root inside a cgroup mount cannot be held: refused, naming the mount.
  assert.throws(
    () => planLandlock(resolved(), host({ controlMounts: [{ path: root, fsType: 'cgroup' }] })),
    (e: unknown) => e instanceof SandboxSetupError && e.message.includes(`lies in the cgroup mount ${root}`),
  );
});

function isUnderPath(p: string, r: string): boolean {
  return r === '/' || p === r || p.startsWith(`${r}/`);
}
