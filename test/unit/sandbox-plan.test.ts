import assert from 'node:assert/strict';
import { fstatSync, mkdirSync, mkdtempSync, readSync, rmSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { LaunchSpec } from '../../src/process/launch.js';
import { parseSandboxParam } from '../../src/protocol/sandbox.js';
import {
  type EffectiveSandbox,
  prepareLaunch,
  previewLaunch,
  SandboxSetupError,
  startSandbox,
  WINDOWS_ERROR,
} from '../../src/sandbox/index.js';
import { needsSandbox } from '../helpers/native.js';

const root = mkdtempSync(join(os.tmpdir(), 'corral-sbx-plan-'));
const W = join(root, 'ws');
mkdirSync(join(W, '.git'), { recursive: true });
after(() => rmSync(root, { recursive: true, force: true }));

const sp = (kind: string, access: string) => ({ path: { type: 'special', value: { kind } }, access });
/** A seed sandbox param, parsed by the real schema and made the start's effective sandbox. */
function seed(o: Record<string, unknown> = {}): EffectiveSandbox | null {
  const r = parseSandboxParam({
    sandbox: 'linux-seccomp',
    policy: { type: 'workspace-write' },
    fileSystemPolicy: {
      kind: 'restricted',
      entries: [sp('root', 'read'), sp('current_working_directory', 'write')],
    },
    networkPolicy: 'restricted',
    sandboxPolicyCwd: W,
    additionalPermissions: null,
    enforceManagedNetwork: false,
    windowsSandboxLevel: 'disabled',
    windowsSandboxPrivateDesktop: false,
    useLegacyLandlock: false,
    ...o,
  });
  if (!r.success) throw r.error;
  return startSandbox(r.data, false, W);
}
const spec = (env: Record<string, string> = {}): LaunchSpec => ({
  file: '/bin/echo',
  argv: ['echo', 'hi'],
  env: { PATH: '/usr/bin:/bin', ...env },
  cwd: W,
});
const linux = { platform: 'linux' as const, arch: 'x64', machine: 'x86_64', tmpdir: '' };

test('no sandbox: the spec is returned unchanged', () => {
  const s = spec();
  const p = previewLaunch(null, { spec: s, tty: false }, linux);
  assert.equal(p.sandboxType, 'none');
  assert.equal(p.spec, s);
});

test('pipes: bwrap argv with --seccomp 3 and a seccomp fd slot; env flags the restricted network', () => {
  const p = previewLaunch(seed(), { spec: spec(), tty: false }, linux);
  assert.equal(p.sandboxType, 'linuxSeccomp');
  assert.equal(p.mechanism, 'bwrap');
  assert.deepEqual(p.fdSlots, ['seccomp']);
  assert.equal(p.spec.argv[0], p.spec.file);
  const a = p.spec.argv;
  if (process.geteuid?.() === 0) {
    // Root: under the pid-namespace guard (unshare + a plain sh as the namespace's init).
    assert.deepEqual(a.slice(1, 9), [
      '--pid',
      '--fork',
      '--kill-child',
      '--',
      '/bin/sh',
      '-c',
      '"$@"; exit $?',
      'sh',
    ]);
    assert.match(a[9]!, /bwrap$/);
  } else assert.match(p.spec.file, /bwrap$/);
  assert.deepEqual(a.slice(a.indexOf('--cap-drop'), a.length), [
    '--cap-drop',
    'ALL',
    '--chdir',
    W,
    '--seccomp',
    '3',
    '--',
    '/bin/echo',
    'hi',
  ]);
  assert.ok(a.includes('--unshare-net') && a.includes('--new-session') && a.includes('--die-with-parent'));
  assert.equal(p.spec.env.CODEX_SANDBOX_NETWORK_DISABLED, '1');
  assert.deepEqual(p.seccomp, { arch: 'x64', mode: 'restricted', instructions: 60 });
  assert.equal(p.summary.arg0, undefined, 'argv[0] "echo" vs file: only a differing arg0 is reported');
  // The fd is filled in by prepareLaunch (a pipe); the spawner gives the child a fresh session keyring.
  assert.deepEqual(p.spec.extraFds, [null]);
  assert.equal(p.spec.freshSessionKeyring, true);
});

test('PTY: the same launch as pipes (the fds go through the sandbox launcher), without --new-session', () => {
  const tty = previewLaunch(seed(), { spec: spec(), tty: true }, linux);
  const pipes = previewLaunch(seed(), { spec: spec(), tty: false }, linux);
  assert.deepEqual(tty.fdSlots, ['seccomp']);
  assert.deepEqual(tty.spec.extraFds, [null]);
  assert.equal(tty.spec.freshSessionKeyring, true);
  assert.ok(!tty.spec.argv.includes('--new-session'));
  assert.deepEqual(
    tty.spec.argv,
    pipes.spec.argv.filter((a) => a !== '--new-session'),
  );
});

test('every sandbox has a seccomp filter: network enabled gets the network-enabled one', () => {
  const p = previewLaunch(seed({ networkPolicy: 'enabled' }), { spec: spec(), tty: false }, linux);
  assert.deepEqual(p.seccomp, { arch: 'x64', mode: 'network-enabled', instructions: 26 });
  assert.ok(!p.spec.argv.includes('--unshare-net'));
  assert.deepEqual(p.fdSlots, ['seccomp']);
});

test('a protected name that is a symlink: pinned after setup (info and block fds), its target protected', () => {
  const S = join(root, 'sym-ws');
  mkdirSync(join(S, 'real-git'), { recursive: true });
  symlinkSync('real-git', join(S, '.git'));
  const p = previewLaunch(seed({ sandboxPolicyCwd: S }), { spec: { ...spec(), cwd: S }, tty: false }, linux);
  assert.deepEqual(p.fdSlots, ['seccomp', 'info', 'block']);
  assert.deepEqual(p.summary.pinnedSymlinks, [join(S, '.git')]);
  const a = p.spec.argv;
  const at = a.indexOf(join(S, 'real-git'));
  assert.deepEqual(a.slice(at - 1, at + 2), ['--ro-bind', join(S, 'real-git'), join(S, 'real-git')]);
  assert.ok(!a.includes(join(S, '.git')), 'bwrap never mounts on the link (that would follow it)');
});

test('managed network: proxy env rewritten (both cases), ProxyRouted, info/block fd slots; none → fails closed', () => {
  const p = previewLaunch(
    seed({ enforceManagedNetwork: true }),
    {
      spec: spec({ HTTP_PROXY: 'http://user:pw@127.0.0.1:8899', ALL_PROXY: 'socks5h://localhost:1080' }),
      tty: false,
    },
    linux,
  );
  assert.deepEqual(p.fdSlots, ['seccomp', 'info', 'block']);
  assert.equal(p.seccomp?.mode, 'proxy-routed');
  assert.equal(p.spec.env.HTTP_PROXY, 'http://user:pw@127.0.0.1:3129');
  assert.equal(p.spec.env.http_proxy, 'http://user:pw@127.0.0.1:3129');
  assert.equal(p.spec.env.ALL_PROXY, 'socks5h://127.0.0.1:3128');
  assert.equal(p.spec.env.all_proxy, 'socks5h://127.0.0.1:3128');
  const a = p.spec.argv;
  assert.deepEqual(a.slice(a.indexOf('--seccomp'), a.lastIndexOf('--')), [
    '--seccomp',
    '3',
    '--info-fd',
    '4',
    '--block-fd',
    '5',
  ]);
  assert.throws(
    () => previewLaunch(seed({ enforceManagedNetwork: true }), { spec: spec(), tty: false }, linux),
    (e: Error) => e instanceof SandboxSetupError && /proxy environment variables/.test(e.message),
  );
});

test('enforceManagedNetwork without a sandbox still enforces (network-only sandbox), never ignored', () => {
  const p = previewLaunch(
    startSandbox(null, true, W),
    { spec: spec({ HTTP_PROXY: 'http://127.0.0.1:8899' }), tty: false },
    linux,
  );
  assert.equal(p.sandboxType, 'linuxSeccomp');
  assert.ok(p.spec.argv.includes('--unshare-net'));
  assert.deepEqual(p.spec.argv.slice(p.spec.argv.indexOf('--die-with-parent') + 1).slice(0, 3), [
    '--bind',
    '/',
    '/',
  ]);
  assert.throws(
    () => previewLaunch(startSandbox(null, true, W), { spec: spec(), tty: false }, linux),
    SandboxSetupError,
  );
});

test('dispatch errors: windows, seatbelt off macOS, linux off Linux, legacy landlock, unsupported arch', () => {
  assert.throws(
    () => previewLaunch(seed({ sandbox: 'windows-restricted-token' }), { spec: spec(), tty: false }, linux),
    {
      message: WINDOWS_ERROR,
    },
  );
  assert.throws(
    () => previewLaunch(seed({ sandbox: 'macos-seatbelt' }), { spec: spec(), tty: false }, linux),
    /only available on macOS/,
  );
  assert.throws(
    () => previewLaunch(seed(), { spec: spec(), tty: false }, { ...linux, platform: 'darwin' }),
    /linux-seccomp is only available on Linux/,
  );
  // useLegacyLandlock: the Landlock backend (linux/landlock.ts), never bwrap in its place; without the addon (which
  // builds the ruleset) it is refused, saying why, and bwrap is not used instead either.
  const legacy = () => previewLaunch(seed({ useLegacyLandlock: true }), { spec: spec(), tty: false }, linux);
  if (needsSandbox) assert.throws(legacy, /Landlock is not available here .*the command was not run/);
  else assert.equal(legacy().mechanism, 'landlock');
  assert.throws(
    () => previewLaunch(seed(), { spec: spec(), tty: false }, { ...linux, arch: 'ia32', machine: 'i686' }),
    /unsupported architecture/,
  );
  assert.throws(
    () => previewLaunch(seed(), { spec: spec(), tty: false }, { ...linux, arch: 'x64', machine: 'aarch64' }),
    /mismatch/,
  );
});

test('full write + network enabled is not wrapped (still reported linuxSeccomp); external sandbox and 0.169 disabled are none', () => {
  const full = previewLaunch(
    seed({
      policy: { type: 'danger-full-access' },
      fileSystemPolicy: { kind: 'unrestricted' },
      networkPolicy: 'enabled',
    }),
    { spec: spec(), tty: false },
    linux,
  );
  assert.equal(full.sandboxType, 'linuxSeccomp');
  assert.equal(full.mechanism, 'passthrough');
  assert.equal(full.spec.file, '/bin/echo');
  const ext = previewLaunch(
    seed({ policy: { type: 'external-sandbox' }, fileSystemPolicy: { kind: 'external-sandbox' } }),
    { spec: spec(), tty: false },
    linux,
  );
  assert.equal(ext.sandboxType, 'none');
  const disabled = parseSandboxParam({ permissions: { type: 'disabled' } });
  assert.ok(disabled.success);
  assert.equal(
    previewLaunch(startSandbox(disabled.data, false, W), { spec: spec(), tty: false }, linux).sandboxType,
    'none',
  );
});

test('macOS: sandbox-exec argv, params after realpath, CODEX_SANDBOX=seatbelt', () => {
  const p = previewLaunch(
    seed({ sandbox: 'macos-seatbelt' }),
    { spec: spec(), tty: false },
    { ...linux, platform: 'darwin' },
  );
  assert.equal(p.sandboxType, 'macosSeatbelt');
  assert.equal(p.spec.file, '/usr/bin/sandbox-exec');
  assert.equal(p.spec.argv[1], '-p');
  assert.equal(p.spec.argv[2], p.seatbeltProfile);
  assert.ok(p.spec.argv.includes(`-DWRITABLE_ROOT_0=${W}`));
  assert.deepEqual(p.spec.argv.slice(-3), ['--', '/bin/echo', 'hi']);
  assert.equal(p.spec.env.CODEX_SANDBOX, 'seatbelt');
  assert.equal(p.spec.env.CODEX_SANDBOX_NETWORK_DISABLED, '1');
});

test('prepareLaunch: the seccomp program comes in a pipe (pipes and PTY alike), closed by cleanup; nothing on disk', {
  skip: needsSandbox,
}, async () => {
  for (const tty of [false, true]) {
    const l = await prepareLaunch(seed(), { spec: spec(), tty }, { tmpdir: '' });
    const fd = l.spec.extraFds?.[0];
    assert.equal(typeof fd, 'number');
    assert.ok(fstatSync(fd as number).isFIFO());
    const buf = Buffer.alloc(4096);
    assert.equal(readSync(fd as number, buf), 60 * 8, 'the whole program, then EOF');
    assert.equal(readSync(fd as number, buf), 0);
    // Masked in the sandbox: the mount-target lock directory, and nothing else of the server's (no private
    // directory is made any more).
    const masked = l.summary?.masked as string[];
    assert.deepEqual(
      masked.map((m) => l.spec.argv[l.spec.argv.indexOf(m) - 1]),
      ['--tmpfs'],
    );
    assert.match(masked[0]!, /corral-mount-targets-/);
    l.cleanup();
    assert.throws(() => fstatSync(fd as number));
  }
});

test('prepareLaunch: a missing bwrap is a SandboxSetupError naming the path', async () => {
  await assert.rejects(
    prepareLaunch(seed(), { spec: spec(), tty: false }, { bwrapPath: '/nonexistent/bwrap' }),
    (e: Error) => e instanceof SandboxSetupError && e.message.includes('/nonexistent/bwrap'),
  );
});
