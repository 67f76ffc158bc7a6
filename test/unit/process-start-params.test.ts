// process/start's `sandbox`, `networkProxy` and `managedNetwork` are typed by the method table (protocol/exec.ts):
// each bad value still answers exactly the code and text it answered when the launcher parsed them (these texts were
// recorded from that code, commit 4e7e41d), through the field error map, and then the launcher still refuses what
// only it can (windows, enforcement without a proxy).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { METHODS } from '../../src/protocol/methods.js';
import { parseParams } from '../../src/server/core/params.js';
import { Launcher } from '../../src/server/process/launcher.js';
import { proxy169, seedSandbox } from '../helpers/startParams.js';

const log = { info() {}, warn() {}, error() {}, debug() {} } as never;
const launcher = new Launcher({ log });
const base = { processId: 'p', argv: ['/bin/true'], cwd: '/tmp', env: {}, tty: false };
const seed = seedSandbox({ additionalPermissions: undefined });
const ctx = {
  permissions: { type: 'managed', file_system: { type: 'restricted', entries: [] }, network: 'restricted' },
  cwd: '/tmp',
};
const proxy = proxy169();
const cases: Record<string, unknown> = {
  s_str: { sandbox: 'x' },
  s_num: { sandbox: 1 },
  s_arr: { sandbox: [] },
  s_true: { sandbox: true },
  s_empty: { sandbox: {} },
  s_unk: { sandbox: { foo: 1 } },
  s_badtype: { sandbox: { ...seed, sandbox: 'bogus' } },
  s_nopolicy: { sandbox: { ...seed, policy: undefined } },
  s_policytype: { sandbox: { ...seed, policy: { type: 'yolo' } } },
  s_policynotype: { sandbox: { ...seed, policy: {} } },
  s_rel: { sandbox: { ...seed, sandboxPolicyCwd: 'rel' } },
  s_cwdnum: { sandbox: { ...seed, sandboxPolicyCwd: 5 } },
  s_entries: {
    sandbox: {
      ...seed,
      fileSystemPolicy: {
        kind: 'restricted',
        entries: [{ path: { type: 'path', path: 'x' }, access: 'write' }],
      },
    },
  },
  s_access: {
    sandbox: {
      ...seed,
      fileSystemPolicy: {
        kind: 'restricted',
        entries: [{ path: { type: 'path', path: '/x' }, access: 'all' }],
      },
    },
  },
  s_netpol: { sandbox: { ...seed, networkPolicy: 'Restricted' } },
  s_win: { sandbox: { ...seed, windowsSandboxLevel: 'x' } },
  s_nolandlock: { sandbox: { ...seed, useLegacyLandlock: undefined } },
  s_landlockstr: { sandbox: { ...seed, useLegacyLandlock: 'yes' } },
  s_addperm: { sandbox: { ...seed, additionalPermissions: { file_system: { write: ['rel'] } } } },
  c_bogus: { sandbox: { permissions: { type: 'bogus' } } },
  c_nofs: { sandbox: { permissions: { type: 'managed' } } },
  c_cwd: { sandbox: { ...ctx, cwd: 'rel' } },
  c_perm_str: { sandbox: { permissions: 'x' } },
  c_net: { sandbox: { ...ctx, permissions: { ...ctx.permissions, network: 'all' } } },
  c_roots: { sandbox: { ...ctx, workspaceRoots: 'x' } },
  c_special: {
    sandbox: {
      ...ctx,
      permissions: {
        ...ctx.permissions,
        file_system: {
          type: 'restricted',
          entries: [{ path: { type: 'special', value: { kind: 'nope' } }, access: 'read' }],
        },
      },
    },
  },
  c_both: { sandbox: { ...ctx, sandbox: 'none' } },
  m_str: { managedNetwork: 'x' },
  m_arr: { managedNetwork: [] },
  m_num: { managedNetwork: 3 },
  m_empty: { managedNetwork: {} },
  m_fact_bad: { managedNetwork: { loopbackPorts: [70000], allowLocalBinding: true } },
  m_fact_missing: { managedNetwork: { loopbackPorts: [1] } },
  m_cfg_bad: { managedNetwork: { config: 5 } },
  m_cfg_bad2: { managedNetwork: { config: { network: { enabled: 'yes' } } } },
  m_constraints_bad: { managedNetwork: { config: { network: { enabled: true } }, constraints: 5 } },
  p_str: { networkProxy: 'x' },
  p_empty: { networkProxy: {} },
  p_missing: { networkProxy: { proxy: { ...proxy.proxy, enableSocks5: undefined } } },
  p_disabled: { networkProxy: { proxy: { ...proxy.proxy, enabled: false } } },
  p_mode: { networkProxy: { proxy: { ...proxy.proxy, mode: 'x' } } },
  p_exec: { networkProxy: { ...proxy, executionId: 5 } },
  p_both: { networkProxy: proxy, managedNetwork: { config: { network: { enabled: true } } } },
  p_audit: { networkProxy: { ...proxy, auditMetadata: 5 } },
  both_bad: { sandbox: 'x', networkProxy: 'y' },
  sn_bad: { sandbox: { ...seed, policy: { type: 'yolo' } }, managedNetwork: 'x' },
  emn_true_nonobject: { enforceManagedNetwork: 'x' },
  win: { sandbox: { ...seed, sandbox: 'windows-restricted-token' } },
  enforce_disabled: {
    sandbox: { ...seed, enforceManagedNetwork: true },
    managedNetwork: { config: { network: { enabled: false } } },
  },
  s_null: { sandbox: null, managedNetwork: null, networkProxy: null },
};

const expected: Record<string, [number, string]> = {
  s_str: [-32602, 'invalid type: string "x", expected struct SandboxLaunchConfig'],
  s_num: [-32602, 'invalid type: integer `1`, expected struct SandboxLaunchConfig'],
  s_arr: [-32602, 'invalid type: sequence, expected struct SandboxLaunchConfig'],
  s_true: [-32602, 'invalid type: boolean `true`, expected struct SandboxLaunchConfig'],
  s_empty: [
    -32602,
    'invalid value: null, invalid option: expected one of "none"|"macos-seatbelt"|"linux-seccomp"|"windows-restricted-token" at `sandbox.sandbox`',
  ],
  s_unk: [
    -32602,
    'invalid value: null, invalid option: expected one of "none"|"macos-seatbelt"|"linux-seccomp"|"windows-restricted-token" at `sandbox.sandbox`',
  ],
  s_badtype: [
    -32602,
    'unknown variant `bogus`, expected one of `none`, `macos-seatbelt`, `linux-seccomp`, `windows-restricted-token` at `sandbox.sandbox`',
  ],
  s_nopolicy: [-32602, 'missing field `policy`'],
  s_policytype: [
    -32602,
    "invalid value: string \"yolo\", invalid discriminator value. Expected 'danger-full-access' | 'read-only' | 'external-sandbox' | 'workspace-write' at `sandbox.policy.type`",
  ],
  s_policynotype: [
    -32602,
    "invalid value: null, invalid discriminator value. Expected 'danger-full-access' | 'read-only' | 'external-sandbox' | 'workspace-write' at `sandbox.policy.type`",
  ],
  s_rel: [
    -32602,
    'AbsolutePathBuf deserialized without a base path: "rel" is not absolute at `sandbox.sandboxPolicyCwd`',
  ],
  s_cwdnum: [-32602, 'invalid type: integer `5`, expected a string at `sandbox.sandboxPolicyCwd`'],
  s_entries: [
    -32602,
    'AbsolutePathBuf deserialized without a base path: "x" is not absolute at `sandbox.fileSystemPolicy.entries.0.path.path`',
  ],
  s_access: [
    -32602,
    'unknown variant `all`, expected one of `read`, `write`, `none`, `deny` at `sandbox.fileSystemPolicy.entries.0.access`',
  ],
  s_netpol: [
    -32602,
    'unknown variant `Restricted`, expected one of `restricted`, `enabled` at `sandbox.networkPolicy`',
  ],
  s_win: [
    -32602,
    'unknown variant `x`, expected one of `disabled`, `restricted-token`, `elevated` at `sandbox.windowsSandboxLevel`',
  ],
  s_nolandlock: [-32602, 'missing field `useLegacyLandlock`'],
  s_landlockstr: [-32602, 'invalid type: string "yes", expected a boolean at `sandbox.useLegacyLandlock`'],
  s_addperm: [
    -32602,
    'AbsolutePathBuf deserialized without a base path: "rel" is not absolute at `sandbox.additionalPermissions.file_system.write.0`',
  ],
  c_bogus: [
    -32602,
    "invalid value: string \"bogus\", invalid discriminator value. Expected 'managed' | 'disabled' | 'external' at `sandbox.permissions.type`",
  ],
  c_nofs: [-32602, 'missing field `file_system` in `permissions`'],
  c_cwd: [-32602, 'AbsolutePathBuf deserialized without a base path: "rel" is not absolute at `sandbox.cwd`'],
  c_perm_str: [-32602, 'invalid type: string "x", expected a map at `sandbox.permissions`'],
  c_net: [
    -32602,
    'unknown variant `all`, expected one of `restricted`, `enabled` at `sandbox.permissions.network`',
  ],
  c_roots: [-32602, 'invalid type: string "x", expected a sequence at `sandbox.workspaceRoots`'],
  c_special: [
    -32602,
    "invalid value: string \"nope\", invalid discriminator value. Expected 'root' | 'minimal' | 'current_working_directory' | 'project_roots' | 'tmpdir' | 'slash_tmp' | 'unknown' at `sandbox.permissions.file_system.entries.0.path.value.kind`",
  ],
  c_both: [-32602, 'missing field `policy`'],
  m_str: [-32602, 'invalid type: string, expected a map'],
  m_arr: [-32602, 'invalid type: sequence, expected a map'],
  m_num: [-32602, 'invalid type: number, expected a map'],
  m_empty: [-32602, 'missing field `config`'],
  m_fact_bad: [-32602, 'invalid value: integer `70000`, expected an integer in range at `loopbackPorts.0`'],
  m_fact_missing: [-32602, 'missing field `allowLocalBinding`'],
  m_cfg_bad: [-32602, 'invalid network proxy config: invalid type: number, expected a map'],
  m_cfg_bad2: [
    -32602,
    'invalid network proxy config: invalid type: string "yes", expected a boolean at `enabled`',
  ],
  m_constraints_bad: [
    -32602,
    'invalid network proxy config: invalid type: integer `5`, expected struct NetworkProxyConstraints',
  ],
  p_str: [-32602, 'invalid type: string "x", expected struct RemoteNetworkProxyLaunchConfig'],
  p_empty: [-32602, 'missing field `proxy`'],
  p_missing: [-32602, 'missing field `enableSocks5`'],
  p_disabled: [
    -32602,
    'invalid network proxy config: executor-local network proxy launch requires an enabled proxy',
  ],
  p_mode: [-32602, 'unknown variant `x`, expected one of `full`, `limited` at `proxy.mode`'],
  p_exec: [-32602, 'invalid type: integer `5`, expected a string at `executionId`'],
  p_both: [
    -32602,
    'invalid network proxy config: managedNetwork.config and networkProxy cannot both be given',
  ],
  p_audit: [
    -32602,
    'invalid network proxy config: invalid type: integer `5`, expected struct NetworkProxyAuditMetadata',
  ],
  both_bad: [-32602, 'invalid type: string "x", expected struct SandboxLaunchConfig'],
  sn_bad: [
    -32602,
    "invalid value: string \"yolo\", invalid discriminator value. Expected 'danger-full-access' | 'read-only' | 'external-sandbox' | 'workspace-write' at `sandbox.policy.type`",
  ],
  emn_true_nonobject: [-32602, 'invalid type: string "x", expected a boolean at `enforceManagedNetwork`'],
  win: [-32603, 'sandbox type windows-restricted-token is not supported by this exec-server'],
  enforce_disabled: [
    -32603,
    'managed network enforcement requested but the managed proxy is disabled (network.enabled is false): refusing to start',
  ],
};

/** What the wire answers for one process/start: dispatch's parse (with the table's field error map), then the launcher. */
async function answer(extra: object): Promise<{ code?: number; message: string } | { ok: string }> {
  const spec = METHODS['process/start'];
  try {
    const p = parseParams(
      spec.params,
      { ...base, ...extra },
      spec.paramsName,
      spec.fieldErrors,
      spec.fastParams,
    );
    const spec0 = { file: '/bin/true', argv: ['/bin/true'], env: {}, cwd: '/tmp' };
    const launch = await launcher.prepare(p, spec0, { sessionId: 's' });
    launch.cleanup();
    return { ok: launch.sandboxType };
  } catch (e) {
    return { code: (e as { code?: number }).code, message: (e as Error).message };
  }
}

test('every bad sandbox / networkProxy / managedNetwork answers the code and text it always did', async () => {
  for (const [name, extra] of Object.entries(cases)) {
    const want = expected[name];
    const got = await answer(extra as object);
    if (!want) assert.deepEqual(got, { ok: 'none' }, name);
    else assert.deepEqual(got, { code: want[0], message: want[1] }, name);
  }
});

test('the table types the three members: parsed shapes, null when absent', () => {
  const spec = METHODS['process/start'];
  const none = parseParams(spec.params, base, spec.paramsName, spec.fieldErrors);
  assert.equal(none.sandbox ?? null, null);
  assert.equal(none.managedNetwork ?? null, null);
  assert.equal(none.networkProxy ?? null, null);
  const p = parseParams(
    spec.params,
    {
      ...base,
      sandbox: ctx,
      managedNetwork: { loopbackPorts: [3128], allowLocalBinding: false },
      networkProxy: proxy,
    },
    spec.paramsName,
    spec.fieldErrors,
  );
  assert.ok(p.sandbox && 'permissions' in p.sandbox);
  assert.equal(p.sandbox.permissions.type, 'managed');
  assert.ok(p.managedNetwork && 'loopbackPorts' in p.managedNetwork);
  assert.deepEqual(p.managedNetwork.loopbackPorts, [3128]);
  assert.equal(p.networkProxy?.proxy.enabled, true);
  const seedParsed = parseParams(spec.params, { ...base, sandbox: seed }, spec.paramsName, spec.fieldErrors);
  assert.ok(seedParsed.sandbox && 'sandbox' in seedParsed.sandbox);
  assert.deepEqual(seedParsed.sandbox.policy, {
    type: 'read-only',
    access: { type: 'full-access' },
    network_access: false,
  });
});

test('a bad member before the three is reported first, as before (they come last in the table)', async () => {
  assert.deepEqual(await answer({ envPolicy: { inherit: 'some' }, sandbox: 'x' }), {
    code: -32602,
    message: 'unknown variant `some`, expected one of `all`, `core`, `none` at `envPolicy.inherit`',
  });
  assert.deepEqual(await answer({ limits: { pidsMax: 'x' }, managedNetwork: 'x' }), {
    code: -32602,
    message: 'invalid type: string "x", expected an integer at `limits.pidsMax`',
  });
});
