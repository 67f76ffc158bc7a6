import assert from 'node:assert/strict';
import { posix } from 'node:path';
import { test } from 'node:test';
import { parseSandboxParam } from '../../src/protocol/sandbox.js';
import { effectiveSandbox } from '../../src/sandbox/effective.js';
import type { FsProbe } from '../../src/sandbox/fsProbe.js';
import type { ParsedSandbox } from '../../src/sandbox/index.js';
import { type BwrapOptions, bwrapArgs, bwrapFsArgs } from '../../src/sandbox/linux/bwrapArgs.js';
import { buildSeatbelt, seatbeltArgv } from '../../src/sandbox/macos/seatbelt.js';
import { accessOf, resolvePolicy } from '../../src/sandbox/resolve.js';
import { seedSandbox } from '../helpers/startParams.js';

type Node = 'dir' | 'file' | { link: string } | { text: string };

/** An in-memory filesystem for pure resolution tests. */
export function fakeFs(tree: Record<string, Node>): FsProbe {
  const all: Record<string, Node> = { '/': 'dir', ...tree };
  // Parents exist as directories.
  for (const p of Object.keys(tree)) {
    for (let d = posix.dirname(p); d !== '/'; d = posix.dirname(d)) all[d] ??= 'dir';
  }
  const real = (p: string, hops = 0): string | null => {
    if (hops > 20) return null;
    const parts = p.split('/').filter(Boolean);
    let cur = '/';
    for (const [i, part] of parts.entries()) {
      const next = posix.join(cur, part);
      const n = all[next];
      if (n === undefined) return null;
      if (typeof n === 'object' && 'link' in n) {
        const target = posix.resolve(cur, n.link);
        return real(posix.join(target, ...parts.slice(i + 1)), hops + 1);
      }
      cur = next;
    }
    return cur;
  };
  return {
    kind(p) {
      const n = all[p];
      if (n === undefined) return null;
      if (typeof n === 'object') return 'link' in n ? 'symlink' : 'file';
      return n;
    },
    realpath: (p) => real(p),
    readText(p) {
      const n = all[p];
      return typeof n === 'object' && 'text' in n ? n.text : null;
    },
    readlink(p) {
      const n = all[p];
      return typeof n === 'object' && 'link' in n ? n.link : null;
    },
  };
}

/**
 * The bwrap words for a missing protected path: its placeholder made again if it went meanwhile, then an empty tmpfs
 * of mode 0555 that holds the name (a synthetic target).
 */
const synth = (...paths: string[]) =>
  paths.flatMap((p) => ['--perms', '500', '--dir', p, '--perms', '555', '--tmpfs', p]);
const NAMES = ['.agents', '.aws', '.codex', '.git'];
const names = (root: string, except: string[] = []) =>
  NAMES.filter((n) => !except.includes(n)).map((n) => posix.join(root, n));

const sp = (kind: string, access: string, extra: Record<string, unknown> = {}) => ({
  path: { type: 'special', value: { kind, ...extra } },
  access,
});
const pe = (path: string, access: string) => ({ path: { type: 'path', path }, access });

function seed(
  cwd: string,
  entries: unknown[],
  policy: Record<string, unknown> = { type: 'workspace-write' },
): ParsedSandbox {
  const r = parseSandboxParam(
    seedSandbox({ policy, fileSystemPolicy: { kind: 'restricted', entries }, sandboxPolicyCwd: cwd }),
  );
  if (!r.success) throw r.error;
  return r.data!;
}

const FEATURES = { argv0: false, perms: true };
/** bwrapArgs' options for `/bin/sh` in /w with a new network, pid and session, `over` on top. */
const shIn = (over: Partial<BwrapOptions> = {}): BwrapOptions => ({
  unshareNet: true,
  proc: true,
  newSession: true,
  chdir: '/w',
  file: '/bin/sh',
  args: [],
  features: FEATURES,
  ...over,
});

test('bwrap args: read-only', () => {
  const probe = fakeFs({ '/w': 'dir', '/tmp': 'dir' });
  const r = resolvePolicy(effectiveSandbox(seed('/w', [sp('root', 'read')], { type: 'read-only' })), {
    probe,
  });
  assert.equal(r.fullRead, true);
  assert.equal(r.fullWrite, false);
  assert.deepEqual(r.writableRoots, []);
  const b = bwrapArgs(r, shIn({ args: ['-c', 'true'], argv0: 'sh', seccompFd: 3 }));
  assert.deepEqual(b.args, [
    '--new-session',
    '--die-with-parent',
    '--ro-bind',
    '/',
    '/',
    '--dev',
    '/dev',
    '--unshare-user',
    '--unshare-pid',
    '--unshare-ipc',
    '--unshare-net',
    '--proc',
    '/proc',
    // The host's kernel settings stay read-only (issue 30).
    '--ro-bind',
    '/proc/sys',
    '/proc/sys',
    '--ro-bind-try',
    '/proc/sysrq-trigger',
    '/proc/sysrq-trigger',
    '--cap-drop',
    'ALL',
    '--chdir',
    '/w',
    '--seccomp',
    '3',
    '--',
    '/bin/sh',
    '-c',
    'true',
  ]);
  assert.equal(b.argv0Ignored, false, 'the bare name of the resolved program is not a custom arg0');
  const custom = bwrapArgs(r, shIn({ argv0: 'my-shell' }));
  assert.equal(custom.argv0Ignored, true);
  assert.ok(!custom.args.includes('--argv0'));
  const supported = bwrapArgs(r, shIn({ argv0: 'my-shell', features: { argv0: true, perms: true } }));
  assert.deepEqual(
    supported.args.slice(supported.args.indexOf('--argv0'), supported.args.indexOf('--argv0') + 2),
    ['--argv0', 'my-shell'],
  );
});

test('bwrap args: nested roots; the missing protected names of each root are synthetic; deeper roots protect their own', () => {
  const probe = fakeFs({
    '/tmp': 'dir',
    '/tmp/w/.git/HEAD': 'file',
    '/tmp/w/.agents': 'dir',
    '/srv/tmpdir': 'dir',
    '/extra': 'dir',
  });
  const sb = seed('/tmp/w', [
    sp('root', 'read'),
    sp('current_working_directory', 'write'),
    sp('slash_tmp', 'write'),
    sp('tmpdir', 'write'),
    pe('/extra', 'write'),
    pe('/tmp/w/.git', 'read'),
  ]);
  const r = resolvePolicy(effectiveSandbox(sb), { probe, tmpdir: '/srv/tmpdir' });
  const fs = bwrapFsArgs(r, FEATURES);
  assert.deepEqual(fs.args, [
    '--ro-bind',
    '/',
    '/',
    '--dev',
    '/dev',
    '--bind',
    '/extra',
    '/extra',
    ...synth(...names('/extra')),
    '--bind',
    '/tmp',
    '/tmp',
    // /tmp/w's protected paths are left to /tmp/w: its bind comes later and would cover them.
    ...synth(...names('/tmp')),
    '--bind',
    '/srv/tmpdir',
    '/srv/tmpdir',
    ...synth(...names('/srv/tmpdir')),
    '--bind',
    '/tmp/w',
    '/tmp/w',
    '--ro-bind',
    '/tmp/w/.agents',
    '/tmp/w/.agents',
    ...synth('/tmp/w/.aws', '/tmp/w/.codex'),
    '--ro-bind',
    '/tmp/w/.git',
    '/tmp/w/.git',
  ]);
  assert.deepEqual(fs.syntheticTargets.sort(), [
    ...names('/extra'),
    ...names('/srv/tmpdir'),
    ...names('/tmp'),
    '/tmp/w/.aws',
    '/tmp/w/.codex',
  ]);
  assert.deepEqual(r.pinnedLinks, []);
  assert.equal(accessOf(r.entries, '/tmp/w/src/a.ts'), 'write');
  assert.equal(accessOf(r.entries, '/tmp/w/.git/hooks/x'), 'read');
  assert.equal(accessOf(r.entries, '/tmp/w/.codex/config.toml'), 'read');
  assert.equal(accessOf(r.entries, '/extra/.git/hooks/pre-commit'), 'read');
  assert.equal(accessOf(r.entries, '/etc/passwd'), 'read');
});

test('bwrap args: the directories between a root and a nested root or protected path are pinned against renames', () => {
  const probe = fakeFs({ '/x/a/b/inner/.git': 'dir', '/x/c/d/secret.txt': 'file', '/w': 'dir' });
  const sb = seed('/w', [
    sp('root', 'read'),
    sp('current_working_directory', 'write'),
    pe('/x', 'write'),
    pe('/x/a/b/inner', 'write'),
    pe('/x/c/d/secret.txt', 'read'),
  ]);
  const r = resolvePolicy(effectiveSandbox(sb), { probe });
  const x = r.writableRoots.find((w) => w.root === '/x')!;
  assert.deepEqual(x.pinnedDirs, ['/x/a', '/x/c', '/x/a/b', '/x/c/d']);
  const args = bwrapFsArgs(r, FEATURES).args;
  const at = args.indexOf('/x');
  assert.deepEqual(args.slice(at - 1, at + 14), [
    '--bind',
    '/x',
    '/x',
    '--bind',
    '/x/a',
    '/x/a',
    '--bind',
    '/x/c',
    '/x/c',
    '--bind',
    '/x/a/b',
    '/x/a/b',
    '--bind',
    '/x/c/d',
    '/x/c/d',
  ]);
  assert.deepEqual(r.writableRoots.find((w) => w.root === '/x/a/b/inner')!.pinnedDirs, []);
});

test('bwrap args: a protected name that is a symlink is pinned by name and its target protected; gitdir: file', () => {
  const probe = fakeFs({
    '/w/realcodex': 'dir',
    '/w/.codex': { link: 'realcodex' },
    '/w/.agents': { link: '/nowhere' },
    '/w/.git': { text: 'gitdir: /repo/.git/worktrees/w\n' },
    '/repo/.git/worktrees/w': 'dir',
  });
  const sb = seed('/w', [sp('root', 'read'), sp('current_working_directory', 'write')]);
  const r = resolvePolicy(effectiveSandbox(sb), { probe });
  assert.deepEqual(bwrapFsArgs(r, FEATURES).args, [
    '--ro-bind',
    '/',
    '/',
    '--dev',
    '/dev',
    '--bind',
    '/w',
    '/w',
    ...synth('/w/.aws'),
    '--ro-bind',
    '/w/.git',
    '/w/.git',
    '--ro-bind',
    '/w/realcodex',
    '/w/realcodex',
  ]);
  // Never mounted on (bwrap would follow them): pinned in the sandbox's mount namespace before the command runs.
  // A dangling link is pinned too; its target lies outside the writable roots, read-only already.
  assert.deepEqual(r.pinnedLinks, ['/w/.agents', '/w/.codex']);
  // The gitdir target is outside the writable roots: read-only already, but recorded for access checks.
  assert.equal(accessOf(r.entries, '/repo/.git/worktrees/w/HEAD'), 'read');
  assert.equal(accessOf(r.entries, '/w/realcodex/x'), 'read');
  // A chain of links to the target: every link on the way is pinned, the target protected.
  const chained = fakeFs({
    '/w/.aws': { link: 'hop' },
    '/w/hop': { link: 'hop2' },
    '/w/hop2': { link: 'data' },
    '/w/data': 'dir',
  });
  const c = resolvePolicy(effectiveSandbox(sb), { probe: chained });
  assert.deepEqual(c.pinnedLinks, ['/w/.aws', '/w/hop', '/w/hop2']);
  assert.equal(accessOf(c.entries, '/w/data/credentials'), 'read');
  // A dangling link whose target would be in the workspace: the target is held by a synthetic mount target.
  const dangling = resolvePolicy(effectiveSandbox(sb), { probe: fakeFs({ '/w/.git': { link: 'gitdata' } }) });
  assert.deepEqual(dangling.pinnedLinks, ['/w/.git']);
  assert.ok(bwrapFsArgs(dangling, FEATURES).syntheticTargets.includes('/w/gitdata'));
});

test('bwrap args: restricted read (minimal + readable roots), none entries, missing writable root', () => {
  const probe = fakeFs({
    '/usr/bin/sh': 'file',
    '/etc': 'dir',
    '/bin': { link: 'usr/bin' },
    '/opt/sdk': 'dir',
    '/w/secret': 'dir',
    '/w/token': 'file',
  });
  const sb = seed(
    '/w',
    [
      sp('minimal', 'read'),
      pe('/opt/sdk', 'read'),
      sp('current_working_directory', 'write'),
      pe('/w/secret', 'none'),
      pe('/w/token', 'deny'),
    ],
    { type: 'workspace-write', read_only_access: { type: 'restricted' } },
  );
  const r = resolvePolicy(effectiveSandbox(sb), { probe });
  assert.equal(r.fullRead, false);
  assert.deepEqual(bwrapFsArgs(r, FEATURES).args, [
    '--tmpfs',
    '/',
    '--ro-bind',
    '/bin',
    '/bin',
    '--ro-bind',
    '/etc',
    '/etc',
    '--ro-bind',
    '/usr',
    '/usr',
    '--ro-bind',
    '/opt/sdk',
    '/opt/sdk',
    '--dev',
    '/dev',
    '--bind',
    '/w',
    '/w',
    ...synth(...names('/w')),
    '--perms',
    '000',
    '--tmpfs',
    '/w/secret',
    '--remount-ro',
    '/w/secret',
    '--ro-bind',
    '/dev/null',
    '/w/token',
  ]);
  assert.equal(accessOf(r.entries, '/w/secret/k'), 'none');
  assert.equal(accessOf(r.entries, '/home/alice/x'), 'none');
  assert.equal(accessOf(r.entries, '/usr/lib/x'), 'read');
  assert.throws(
    () => resolvePolicy(effectiveSandbox(seed('/w', [sp('root', 'read'), pe('/nope', 'write')])), { probe }),
    /Sandbox expected writable root \/nope, but it does not exist/,
  );
});

test('precedence: most specific wins; tie none > write > read', () => {
  const E = (path: string, access: 'read' | 'write' | 'none') => ({ path, access, origin: 'entry' as const });
  const es = [
    E('/', 'read'),
    E('/w', 'write'),
    E('/w/.git', 'read'),
    E('/w/.git/x', 'write'),
    E('/a', 'read'),
    E('/a', 'write'),
    E('/b', 'write'),
    E('/b', 'none'),
  ];
  assert.equal(accessOf(es, '/w/f'), 'write');
  assert.equal(accessOf(es, '/w/.git/config'), 'read');
  assert.equal(accessOf(es, '/w/.git/x/y'), 'write');
  assert.equal(accessOf(es, '/a/f'), 'write');
  assert.equal(accessOf(es, '/b/f'), 'none');
  assert.equal(accessOf([], '/x'), 'none');
  assert.equal(accessOf(es, '/wx'), 'read', 'prefix is not a parent');
});

test('full write + restricted network binds / writable; root:write with a carve-out keeps the carve-out', () => {
  const probe = fakeFs({ '/w/.git': 'dir' });
  const full = resolvePolicy(effectiveSandbox(seed('/w', [sp('root', 'write')])), { probe });
  assert.equal(full.fullWrite, true);
  assert.deepEqual(bwrapFsArgs(full, FEATURES).args, ['--bind', '/', '/', '--dev', '/dev']);
  const carved = resolvePolicy(effectiveSandbox(seed('/w', [sp('root', 'write'), pe('/w/.git', 'read')])), {
    probe,
  });
  assert.equal(carved.fullWrite, false);
  // `/` is the writable root: its names and the cwd's are protected, and /w is pinned against a rename.
  assert.deepEqual(bwrapFsArgs(carved, FEATURES).args, [
    '--bind',
    '/',
    '/',
    '--dev',
    '/dev',
    '--bind',
    '/w',
    '/w',
    ...synth(...names('/'), ...names('/w', ['.git'])),
    '--ro-bind',
    '/w/.git',
    '/w/.git',
  ]);
});

test('0.169 project_roots expand per workspace root, with subpaths', () => {
  const probe = fakeFs({ '/a/.git': 'dir', '/b': 'dir' });
  const r = parseSandboxParam({
    permissions: {
      type: 'managed',
      file_system: {
        type: 'restricted',
        entries: [
          sp('root', 'read'),
          sp('project_roots', 'write'),
          sp('project_roots', 'read', { subpath: '.aws' }),
        ],
      },
      network: 'restricted',
    },
    cwd: 'file:///a',
    workspaceRoots: ['file:///a', 'file:///b'],
  });
  assert.ok(r.success);
  const res = resolvePolicy(effectiveSandbox(r.data!), { probe });
  assert.deepEqual(
    res.writableRoots.map((w) => [w.root, w.readOnlySubpaths.map((s) => `${s.path}:${s.state}`)]),
    [
      ['/a', ['/a/.agents:missing', '/a/.aws:missing', '/a/.codex:missing', '/a/.git:dir']],
      ['/b', ['/b/.agents:missing', '/b/.aws:missing', '/b/.codex:missing', '/b/.git:missing']],
    ],
  );
});

test('seatbelt: profile text and parameters (paths only as parameters)', () => {
  const probe = fakeFs({
    '/w/.git': 'dir',
    '/w/.codex': 'dir',
    '/private/tmp': 'dir',
    '/tmp': { link: 'private/tmp' },
  });
  const sb = seed('/w', [
    sp('root', 'read'),
    sp('current_working_directory', 'write'),
    sp('slash_tmp', 'write'),
  ]);
  const r = resolvePolicy(effectiveSandbox(sb), { probe });
  const p = buildSeatbelt(r, { network: 'restricted', managed: false, proxyPorts: [] });
  assert.deepEqual(p.params, [
    ['WRITABLE_ROOT_0', '/w'],
    ...names('/w').map((n, j) => [`WRITABLE_ROOT_0_RO_${j}`, n]),
    ['WRITABLE_ROOT_1', '/private/tmp'],
    ...names('/private/tmp').map((n, j) => [`WRITABLE_ROOT_1_RO_${j}`, n]),
  ]);
  const tail = p.profile.slice(
    p.profile.indexOf('(allow user-preference-read)') + '(allow user-preference-read)'.length,
  );
  const ro = (i: number) =>
    NAMES.map(
      (_, j) =>
        `(require-not (literal (param "WRITABLE_ROOT_${i}_RO_${j}"))) (require-not (subpath (param "WRITABLE_ROOT_${i}_RO_${j}")))`,
    ).join(' ');
  assert.equal(
    tail,
    `
(allow file-read*)
(allow file-write*
  (require-all (subpath (param "WRITABLE_ROOT_0")) ${ro(0)})
  (require-all (subpath (param "WRITABLE_ROOT_1")) ${ro(1)}))`,
  );
  assert.ok(p.profile.startsWith('(version 1)\n(deny default)\n'));
  assert.ok(!p.profile.includes('/w'), 'no path in the profile text');
  const managed = buildSeatbelt(r, { network: 'restricted', managed: true, proxyPorts: [8080, 3128, 8080] });
  assert.match(
    managed.profile,
    /\(allow network-outbound\n {2}\(remote ip "localhost:3128"\)\n {2}\(remote ip "localhost:8080"\)\)/,
  );
  assert.match(managed.profile, /com\.apple\.trustd\.agent/);
  const closed = buildSeatbelt(r, { network: 'enabled', managed: true, proxyPorts: [] });
  assert.doesNotMatch(closed.profile, /network-outbound/);
  const open = buildSeatbelt(r, { network: 'enabled', managed: false, proxyPorts: [] });
  assert.match(open.profile, /\(allow network-outbound\)\n\(allow network-inbound\)/);
  assert.deepEqual(seatbeltArgv(p, '/bin/sh', ['-c', 'x']).slice(-5), [
    '-DWRITABLE_ROOT_1_RO_3=/private/tmp/.git',
    '--',
    '/bin/sh',
    '-c',
    'x',
  ]);
});
