import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  parseSandboxParam,
  SandboxLaunchConfigSchema,
  SandboxParamSchema,
  SandboxPolicySchema,
} from '../../src/protocol/sandbox.js';
import { effectiveSandbox, legacyToFsPolicy, startSandbox } from '../../src/sandbox/effective.js';
import { noSandboxParam } from '../helpers/startParams.js';

const noSandbox = noSandboxParam('/home/alice/src/app');

const root = { path: { type: 'special', value: { kind: 'root' } }, access: 'read' };

const ctx169 = {
  permissions: {
    type: 'managed',
    file_system: {
      type: 'restricted',
      entries: [
        root,
        { path: { type: 'special', value: { kind: 'project_roots' } }, access: 'write' },
        {
          path: { type: 'special', value: { kind: 'project_roots', subpath: '.git' } },
          access: 'read',
          missing_path_behavior: 'skip',
        },
        { path: { type: 'path', path: 'file:///home/alice/secret' }, access: 'deny' },
      ],
    },
    network: 'restricted',
  },
  cwd: 'file:///home/alice/src/app',
  workspaceRoots: ['file:///home/alice/src/app'],
  windowsSandboxLevel: 'disabled',
  windowsSandboxProxySettingsMode: 'reconcile',
  useLegacyLandlock: false,
};

test('SandboxParamSchema: undefined, null, the seed object and the 0.169 object; anything else fails', () => {
  assert.equal(SandboxParamSchema.safeParse(undefined).success, true);
  assert.equal(SandboxParamSchema.safeParse(null).success, true);
  assert.equal(SandboxParamSchema.safeParse(noSandbox).success, true);
  assert.equal(
    SandboxParamSchema.safeParse({ ...noSandbox, fileSystemPolicy: { kind: 'unrestricted', entries: [] } })
      .success,
    true,
  );
  assert.equal(SandboxParamSchema.safeParse(ctx169).success, true);
  assert.equal(SandboxParamSchema.safeParse({ sandbox_preference: 'auto' }).success, false);
  assert.equal(SandboxParamSchema.safeParse('linux-seccomp').success, false);
  assert.equal(SandboxParamSchema.safeParse([]).success, false);
});

test('parseSandboxParam picks the shape by key, so issues point at the missing field', () => {
  const { useLegacyLandlock: _, ...missing } = noSandbox;
  const r = parseSandboxParam(missing);
  assert.equal(r.success, false);
  assert.deepEqual(r.error?.issues[0]?.path, ['useLegacyLandlock']);
  const r2 = parseSandboxParam({ permissions: { type: 'yolo' } });
  assert.equal(r2.success, false);
  assert.deepEqual(r2.error?.issues[0]?.path, ['permissions', 'type']);
  const r3 = parseSandboxParam({ foo: 1 });
  assert.equal(r3.success, false);
  assert.deepEqual(r3.error?.issues[0]?.path, ['sandbox']);
});

test('relative paths are rejected everywhere', () => {
  assert.equal(parseSandboxParam({ ...noSandbox, sandboxPolicyCwd: 'src/app' }).success, false);
  const ww = { type: 'workspace-write', writable_roots: ['rel/dir'], network_access: false };
  assert.equal(SandboxPolicySchema.safeParse(ww).success, false);
  const fs = { kind: 'restricted', entries: [{ path: { type: 'path', path: 'x' }, access: 'write' }] };
  assert.equal(parseSandboxParam({ ...noSandbox, fileSystemPolicy: fs }).success, false);
  assert.equal(parseSandboxParam({ ...ctx169, cwd: 'relative' }).success, false);
  assert.equal(
    parseSandboxParam({ ...noSandbox, additionalPermissions: { file_system: { write: ['out'] } } }).success,
    false,
  );
});

test('wire spellings: kebab-case tags, snake_case fields, defaults', () => {
  const p = SandboxPolicySchema.parse({ type: 'workspace-write' });
  assert.deepEqual(p, {
    type: 'workspace-write',
    writable_roots: [],
    read_only_access: { type: 'full-access' },
    network_access: false,
    exclude_tmpdir_env_var: false,
    exclude_slash_tmp: false,
  });
  assert.deepEqual(SandboxPolicySchema.parse({ type: 'external-sandbox' }), {
    type: 'external-sandbox',
    network_access: 'restricted',
  });
  const ro = SandboxPolicySchema.parse({ type: 'read-only', access: { type: 'restricted' } });
  assert.deepEqual(ro, {
    type: 'read-only',
    access: { type: 'restricted', include_platform_defaults: true, readable_roots: [] },
    network_access: false,
  });
  assert.equal(SandboxPolicySchema.safeParse({ type: 'workspaceWrite' }).success, false);
  assert.equal(parseSandboxParam({ ...noSandbox, windowsSandboxLevel: 'restricted_token' }).success, false);
  assert.equal(parseSandboxParam({ ...noSandbox, windowsSandboxLevel: 'elevated' }).success, true);
  assert.equal(parseSandboxParam({ ...noSandbox, networkPolicy: 'Restricted' }).success, false);
  const unknownSpecial = {
    kind: 'restricted',
    entries: [{ path: { type: 'special', value: { kind: 'unknown', path: ':future' } }, access: 'read' }],
  };
  assert.equal(parseSandboxParam({ ...noSandbox, fileSystemPolicy: unknownSpecial }).success, true);
});

test('seed additionalPermissions may be missing (= null)', () => {
  const { additionalPermissions: _, ...rest } = noSandbox;
  const r = SandboxLaunchConfigSchema.parse(rest);
  assert.equal(r.additionalPermissions, undefined);
});

test('0.169 context: URIs decoded, deny → none, project_roots, missing_path_behavior ignored', () => {
  const r = parseSandboxParam(ctx169);
  assert.ok(r.success);
  const eff = effectiveSandbox(r.data!, false);
  assert.equal(eff.shape, 'context');
  assert.equal(eff.requested, 'native');
  assert.equal(eff.cwd, '/home/alice/src/app');
  assert.deepEqual(eff.projectRoots, ['/home/alice/src/app']);
  assert.equal(eff.network, 'restricted');
  assert.deepEqual(eff.fs.entries[3], { path: { type: 'path', path: '/home/alice/secret' }, access: 'none' });
  assert.equal(effectiveSandbox(r.data!, true).enforceManagedNetwork, true);
  const disabled = parseSandboxParam({ permissions: { type: 'disabled' } });
  assert.ok(disabled.success);
  assert.equal(effectiveSandbox(disabled.data!).requested, 'none');
  assert.equal(
    parseSandboxParam({ permissions: { type: 'managed' } }).success,
    false,
    'managed needs file_system',
  );
});

test('§4.3 legacy policy → entries, in Codex order; read entries inside writable roots dropped', () => {
  const ww = SandboxPolicySchema.parse({
    type: 'workspace-write',
    writable_roots: ['/home/alice/.cache/npm'],
    read_only_access: { type: 'restricted', readable_roots: ['/opt/sdk', '/home/alice/.cache/npm/x'] },
  });
  const fs = legacyToFsPolicy(ww, '/w');
  const show = fs.entries.map(
    (e) => `${e.path.type === 'path' ? e.path.path : e.path.value.kind}:${e.access}`,
  );
  assert.deepEqual(show, [
    'minimal:read',
    '/opt/sdk:read',
    'current_working_directory:write',
    'slash_tmp:write',
    'tmpdir:write',
    '/home/alice/.cache/npm:write',
  ]);
  assert.deepEqual(legacyToFsPolicy(SandboxPolicySchema.parse({ type: 'read-only' })).entries.length, 1);
  assert.equal(
    legacyToFsPolicy(SandboxPolicySchema.parse({ type: 'danger-full-access' })).kind,
    'unrestricted',
  );
});

test('§4.5 additionalPermissions merge: read-only becomes workspace-write, network enabled', () => {
  const r = parseSandboxParam({
    ...noSandbox,
    sandbox: 'linux-seccomp',
    policy: { type: 'read-only' },
    fileSystemPolicy: { kind: 'restricted', entries: [root] },
    networkPolicy: 'restricted',
    additionalPermissions: { network: { enabled: true }, file_system: { read: null, write: ['/out'] } },
  });
  assert.ok(r.success);
  const eff = effectiveSandbox(r.data!);
  assert.equal(eff.network, 'enabled');
  assert.equal(eff.legacy?.type, 'workspace-write');
  assert.deepEqual(eff.fs.entries.at(-1), { path: { type: 'path', path: '/out' }, access: 'write' });
  // Nothing is merged into an unrestricted policy.
  const u = parseSandboxParam({ ...noSandbox, additionalPermissions: { file_system: { write: ['/out'] } } });
  assert.ok(u.success);
  assert.deepEqual(effectiveSandbox(u.data!).fs.entries, []);
});

test('startSandbox: the one EffectiveSandbox of a start; enforcement alone or with a none sandbox is never ignored', () => {
  assert.equal(startSandbox(null, false, '/w'), null, 'nothing to enforce');
  assert.equal(startSandbox(undefined, false, '/w'), null);
  const only = startSandbox(null, true, '/w');
  assert.deepEqual(only, {
    shape: 'context',
    requested: 'native',
    fs: { kind: 'unrestricted', entries: [] },
    network: 'enabled',
    cwd: '/w',
    projectRoots: [],
    enforceManagedNetwork: true,
    useLegacyLandlock: false,
  });
  const seedNone = parseSandboxParam(noSandbox);
  assert.ok(seedNone.success && seedNone.data);
  assert.equal(startSandbox(seedNone.data, false, '/w')?.requested, 'none', 'a none sandbox stays none');
  const upgraded = startSandbox(seedNone.data, true, '/w');
  assert.equal(upgraded?.requested, 'native', 'top-level enforcement upgrades none');
  assert.equal(upgraded?.enforceManagedNetwork, true);
  const inner = parseSandboxParam({ ...noSandbox, enforceManagedNetwork: true });
  assert.ok(inner.success && inner.data);
  assert.equal(startSandbox(inner.data, false, '/w')?.requested, 'native', "the seed's own flag too");
  const external = parseSandboxParam({ permissions: { type: 'external', network: 'restricted' } });
  assert.ok(external.success && external.data);
  const ext = startSandbox(external.data, true, '/w');
  assert.equal(ext?.requested, 'none', 'an external sandbox is left to the client');
  assert.equal(ext?.enforceManagedNetwork, true);
  const ctx = parseSandboxParam({ ...ctx169, useLegacyLandlock: true });
  assert.ok(ctx.success && ctx.data);
  assert.equal(startSandbox(ctx.data, false, '/w')?.useLegacyLandlock, true);
});
