import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { isSeedSandbox } from '../../src/protocol/sandbox.js';
import {
  type ClientWrapped,
  isClientWrapped,
  parseClientWrapped,
  shouldUnwrap,
} from '../../src/sandbox/codexWrapped.js';
import { effectiveSandbox } from '../../src/sandbox/effective.js';
import type { FsProbe } from '../../src/sandbox/fsProbe.js';
import { resolvePolicy } from '../../src/sandbox/resolve.js';

/*
 * The exact argv shapes of 0.120–0.130 client-wrapped commands (sandbox.md §3.1): the real frames captured by the
 * e2e rig (test-artifacts/codex-e2e/corral-<version>.json), inlined here because test-artifacts/ is not committed.
 */

const E2E = '/root/.cache/corral-e2e/codex/corral-0.120.0/basic-workspace-write';
const CMD = ['/bin/bash', '-lc', 'echo hello > out.txt && cat out.txt'];

/** The real 0.120 (and 0.125: identical flags) process/start argv. */
const REAL_0120 = [
  `${E2E}/codex-home/tmp/arg0/codex-arg0iMSFDV/codex-linux-sandbox`,
  '--sandbox-policy-cwd',
  `${E2E}/work`,
  '--command-cwd',
  `${E2E}/work`,
  '--sandbox-policy',
  `{"type":"workspace-write","writable_roots":["${E2E}/codex-home/memories"],"network_access":false,"exclude_tmpdir_env_var":false,"exclude_slash_tmp":false}`,
  '--file-system-sandbox-policy',
  `{"kind":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},{"path":{"type":"special","value":{"kind":"current_working_directory"}},"access":"write"},{"path":{"type":"special","value":{"kind":"slash_tmp"}},"access":"write"},{"path":{"type":"special","value":{"kind":"tmpdir"}},"access":"write"},{"path":{"type":"path","path":"${E2E}/codex-home/memories"},"access":"write"},{"path":{"type":"path","path":"${E2E}/work/.codex"},"access":"read"}]}`,
  '--network-sandbox-policy',
  '"restricted"',
  '--',
  ...CMD,
];

const E130 = '/root/.cache/corral-e2e/codex/corral-0.130.0/basic-workspace-write';
/** The real 0.130 process/start argv (permission profile with project_roots specials). */
const REAL_0130 = [
  `${E130}/codex-home/tmp/arg0/codex-arg00Rf4Q2/codex-linux-sandbox`,
  '--sandbox-policy-cwd',
  `${E130}/work`,
  '--command-cwd',
  `${E130}/work`,
  '--permission-profile',
  `{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},{"path":{"type":"special","value":{"kind":"project_roots"}},"access":"write"},{"path":{"type":"special","value":{"kind":"slash_tmp"}},"access":"write"},{"path":{"type":"special","value":{"kind":"tmpdir"}},"access":"write"},{"path":{"type":"special","value":{"kind":"project_roots","subpath":".git"}},"access":"read"},{"path":{"type":"special","value":{"kind":"project_roots","subpath":".agents"}},"access":"read"},{"path":{"type":"special","value":{"kind":"project_roots","subpath":".codex"}},"access":"read"},{"path":{"type":"path","path":"${E130}/codex-home/memories"},"access":"write"}]},"network":"restricted"}`,
  '--',
  ...CMD,
];

/** The spec's example (sandbox.md §3.1) for cwd /home/alice/src/app with one extra writable root. */
const SPEC_0120 = [
  '/home/alice/.codex/tmp/arg0/codex-arg0AbCdEf/codex-linux-sandbox',
  '--sandbox-policy-cwd',
  '/home/alice/src/app',
  '--command-cwd',
  '/home/alice/src/app',
  '--sandbox-policy',
  '{"type":"workspace-write","writable_roots":["/home/alice/.codex/memories"],"network_access":false,"exclude_tmpdir_env_var":false,"exclude_slash_tmp":false}',
  '--file-system-sandbox-policy',
  '{"kind":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},{"path":{"type":"special","value":{"kind":"current_working_directory"}},"access":"write"},{"path":{"type":"special","value":{"kind":"slash_tmp"}},"access":"write"},{"path":{"type":"special","value":{"kind":"tmpdir"}},"access":"write"},{"path":{"type":"path","path":"/home/alice/.codex/memories"},"access":"write"},{"path":{"type":"path","path":"/home/alice/src/app/.codex"},"access":"read"}]}',
  '--network-sandbox-policy',
  '"restricted"',
  '--',
  '/bin/bash',
  '-lc',
  'npm test',
];

function unwrapped(r: ClientWrapped) {
  assert.equal(r.kind, 'unwrapped', r.kind === 'refused' ? r.reason : r.kind);
  return r as Extract<ClientWrapped, { kind: 'unwrapped' }>;
}

function refused(r: ClientWrapped, reason: RegExp) {
  assert.equal(r.kind, 'refused');
  assert.match((r as Extract<ClientWrapped, { kind: 'refused' }>).reason, reason);
}

/** Replaces the value of `flag` in a copy of argv. */
function withFlag(argv: string[], flag: string, value: string): string[] {
  const a = [...argv];
  a[a.indexOf(flag) + 1] = value;
  return a;
}

/** Inserts extra launcher arguments right before `--`. */
function insertBeforeDashDash(argv: string[], ...extra: string[]): string[] {
  const i = argv.indexOf('--');
  return [...argv.slice(0, i), ...extra, ...argv.slice(i)];
}

/** An in-memory filesystem: every listed path and its parents exist. */
function probeOf(paths: string[]): FsProbe {
  const all = new Map<string, 'dir' | 'file'>([['/', 'dir']]);
  for (const p of paths) {
    all.set(p, p.endsWith('HEAD') ? 'file' : 'dir');
    for (let d = p.slice(0, p.lastIndexOf('/')); d !== ''; d = d.slice(0, d.lastIndexOf('/')))
      all.set(d, 'dir');
  }
  return { kind: (p) => all.get(p) ?? null, realpath: (p) => (all.has(p) ? p : null), readText: () => null };
}

describe('recognising the launcher', () => {
  test('basename(argv[0]) must be exactly codex-linux-sandbox', () => {
    assert.equal(isClientWrapped(REAL_0120), true);
    assert.equal(isClientWrapped(['codex-linux-sandbox', '--']), true);
    assert.equal(isClientWrapped(['/bin/bash', '-lc', 'codex-linux-sandbox']), false);
    assert.equal(isClientWrapped(['/usr/bin/codex-linux-sandbox-not', '--']), false);
    assert.equal(isClientWrapped([]), false);
    assert.deepEqual(parseClientWrapped(['/bin/bash', '-lc', 'true']), { kind: 'not-wrapped' });
  });
});

describe('0.120 / 0.125 legacy flags', () => {
  test('the real 0.120 argv becomes a seed linux-seccomp SandboxLaunchConfig', () => {
    const r = unwrapped(parseClientWrapped(REAL_0120));
    assert.equal(r.shape, 'legacy-flags');
    assert.deepEqual(r.command, CMD);
    assert.equal(r.cwd, `${E2E}/work`);
    assert.equal(r.launcher, REAL_0120[0]);
    assert.ok(isSeedSandbox(r.sandbox));
    assert.equal(r.sandbox.sandbox, 'linux-seccomp');
    assert.equal(r.sandbox.sandboxPolicyCwd, `${E2E}/work`);
    assert.equal(r.sandbox.networkPolicy, 'restricted');
    assert.equal(r.sandbox.enforceManagedNetwork, false);
    assert.equal(r.sandbox.useLegacyLandlock, false);
    assert.deepEqual(r.sandbox.policy, {
      type: 'workspace-write',
      writable_roots: [`${E2E}/codex-home/memories`],
      read_only_access: { type: 'full-access' },
      network_access: false,
      exclude_tmpdir_env_var: false,
      exclude_slash_tmp: false,
    });
    assert.equal(r.sandbox.fileSystemPolicy.kind, 'restricted');
    assert.equal(r.sandbox.fileSystemPolicy.entries.length, 6);
  });

  test('the spec example resolves to the same roots the launcher would enforce', () => {
    const r = unwrapped(parseClientWrapped(SPEC_0120));
    assert.deepEqual(r.command, ['/bin/bash', '-lc', 'npm test']);
    const probe = probeOf(['/home/alice/src/app/.git/HEAD', '/home/alice/.codex/memories', '/tmp', '/srv/t']);
    const pol = resolvePolicy(effectiveSandbox(r.sandbox), { probe, tmpdir: '/srv/t' });
    assert.equal(pol.fullRead, true);
    assert.equal(pol.fullWrite, false);
    const roots = pol.writableRoots.map((w) => w.root).sort();
    assert.deepEqual(roots, ['/home/alice/.codex/memories', '/home/alice/src/app', '/srv/t', '/tmp']);
    const app = pol.writableRoots.find((w) => w.root === '/home/alice/src/app')!;
    const ro = app.readOnlySubpaths.map((s) => s.path).sort();
    assert.ok(ro.includes('/home/alice/src/app/.git'), `carve-outs: ${ro.join(', ')}`);
    assert.ok(ro.includes('/home/alice/src/app/.codex'), `carve-outs: ${ro.join(', ')}`);
    assert.equal(effectiveSandbox(r.sandbox).network, 'restricted');
  });

  test('--flag=value spelling and any flag order are accepted; --command-cwd is optional', () => {
    const a = [
      SPEC_0120[0]!,
      `--network-sandbox-policy=${SPEC_0120[10]}`,
      '--file-system-sandbox-policy',
      SPEC_0120[8]!,
      `--sandbox-policy-cwd=/home/alice/src/app`,
      '--sandbox-policy',
      SPEC_0120[6]!,
      '--',
      'true',
    ];
    const r = unwrapped(parseClientWrapped(a));
    assert.equal(r.cwd, undefined);
    assert.deepEqual(r.command, ['true']);
  });

  test('a read-only policy unwraps too', () => {
    const a = withFlag(
      withFlag(SPEC_0120, '--sandbox-policy', '{"type":"read-only"}'),
      '--file-system-sandbox-policy',
      '{"kind":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}',
    );
    const r = unwrapped(parseClientWrapped(a));
    const pol = resolvePolicy(effectiveSandbox(r.sandbox), { probe: probeOf(['/home/alice/src/app']) });
    assert.deepEqual(pol.writableRoots, []);
  });

  test('missing or mixed policy flags are refused', () => {
    const noNet = [...SPEC_0120];
    noNet.splice(noNet.indexOf('--network-sandbox-policy'), 2);
    refused(parseClientWrapped(noNet), /missing --network-sandbox-policy/);
    const noCwd = [...SPEC_0120];
    noCwd.splice(noCwd.indexOf('--sandbox-policy-cwd'), 2);
    refused(parseClientWrapped(noCwd), /missing --sandbox-policy-cwd/);
    refused(
      parseClientWrapped(insertBeforeDashDash(SPEC_0120, '--permission-profile', '{"type":"managed"}')),
      /together with/,
    );
  });
});

describe('0.130 permission profile', () => {
  test('the real 0.130 argv becomes a FileSystemSandboxContext with cwd = --sandbox-policy-cwd', () => {
    const r = unwrapped(parseClientWrapped(REAL_0130));
    assert.equal(r.shape, 'permission-profile');
    assert.deepEqual(r.command, CMD);
    assert.equal(r.cwd, `${E130}/work`);
    assert.ok(!isSeedSandbox(r.sandbox));
    assert.equal(r.sandbox.cwd, `${E130}/work`);
    assert.equal(r.sandbox.permissions.type, 'managed');
    const eff = effectiveSandbox(r.sandbox);
    assert.equal(eff.requested, 'native');
    assert.equal(eff.network, 'restricted');
    assert.equal(eff.useLegacyLandlock, false);
    // project_roots (no workspaceRoots) resolve against the cwd: the work dir is writable, .git/.codex/.agents not.
    const probe = probeOf([`${E130}/work/.git/HEAD`, `${E130}/codex-home/memories`, '/tmp']);
    const pol = resolvePolicy(eff, { probe });
    const work = pol.writableRoots.find((w) => w.root === `${E130}/work`);
    assert.ok(work, `writable roots: ${pol.writableRoots.map((w) => w.root).join(', ')}`);
    const ro = work.readOnlySubpaths.map((s) => s.path);
    for (const sub of ['.git', '.agents', '.codex'])
      assert.ok(ro.includes(`${E130}/work/${sub}`), ro.join(', '));
    assert.ok(pol.writableRoots.some((w) => w.root === `${E130}/codex-home/memories`));
    assert.ok(
      !pol.writableRoots.some((w) => w.root === E130),
      'the parent of the work dir must stay read-only',
    );
  });

  test('only a managed profile is unwrapped', () => {
    for (const type of ['disabled', 'external', 'mystery']) {
      refused(
        parseClientWrapped(withFlag(REAL_0130, '--permission-profile', `{"type":"${type}"}`)),
        /only "managed"/,
      );
    }
  });

  test('access "deny" and missing_path_behavior are accepted (the stricter reading)', () => {
    const profile = JSON.parse(REAL_0130[6]!);
    profile.file_system.entries.push({
      path: { type: 'path', path: '/etc/secret' },
      access: 'deny',
      missing_path_behavior: 'skip',
    });
    const r = unwrapped(
      parseClientWrapped(withFlag(REAL_0130, '--permission-profile', JSON.stringify(profile))),
    );
    assert.ok(effectiveSandbox(r.sandbox).fs.entries.some((e) => e.access === 'none'));
  });
});

describe('anything not understood is run as sent', () => {
  test('unknown flags (--use-legacy-landlock, --allow-network-for-proxy, --no-proc, …)', () => {
    for (const extra of [
      ['--use-legacy-landlock'],
      ['--allow-network-for-proxy'],
      ['--proxy-route-spec', '{}'],
      ['--apply-seccomp-then-exec'],
      ['--no-proc'],
      ['--whatever=1'],
    ]) {
      for (const base of [REAL_0120, REAL_0130]) {
        const name = extra[0]!.replace(/=.*/, '');
        refused(
          parseClientWrapped(insertBeforeDashDash(base, ...extra)),
          new RegExp(`unknown launcher flag ${name}`),
        );
      }
    }
  });

  test('unparseable JSON', () => {
    refused(
      parseClientWrapped(withFlag(REAL_0120, '--sandbox-policy', '{"type":')),
      /unparseable JSON in --sandbox-policy/,
    );
    refused(
      parseClientWrapped(withFlag(REAL_0120, '--network-sandbox-policy', 'restricted')),
      /unparseable JSON in --network-sandbox-policy/,
    );
    refused(
      parseClientWrapped(withFlag(REAL_0130, '--permission-profile', 'not json')),
      /unparseable JSON in --permission-profile/,
    );
  });

  test('JSON that does not match the schema, or carries keys we do not know', () => {
    refused(
      parseClientWrapped(withFlag(REAL_0120, '--network-sandbox-policy', '"open"')),
      /invalid launcher policy/,
    );
    refused(
      parseClientWrapped(
        withFlag(REAL_0120, '--sandbox-policy', '{"type":"workspace-write","writable_roots":["rel"]}'),
      ),
      /invalid launcher policy/,
    );
    refused(
      parseClientWrapped(
        withFlag(REAL_0120, '--sandbox-policy', '{"type":"workspace-write","future_knob":true}'),
      ),
      /unknown key sandbox-policy\.future_knob/,
    );
    const fs = JSON.parse(REAL_0120[8]!);
    fs.entries[0].path.value.extra = 1;
    refused(
      parseClientWrapped(withFlag(REAL_0120, '--file-system-sandbox-policy', JSON.stringify(fs))),
      /unknown key file-system-sandbox-policy\.entries\[0\]\.path\.value\.extra/,
    );
    const p = JSON.parse(REAL_0130[6]!);
    p.network_proxy = { port: 1 };
    refused(
      parseClientWrapped(withFlag(REAL_0130, '--permission-profile', JSON.stringify(p))),
      /unknown key permission-profile\.network_proxy/,
    );
    const q = JSON.parse(REAL_0130[6]!);
    q.file_system.entries[1].access = 'append';
    refused(
      parseClientWrapped(withFlag(REAL_0130, '--permission-profile', JSON.stringify(q))),
      /invalid --permission-profile/,
    );
  });

  test('external-sandbox policies are left to the client', () => {
    refused(
      parseClientWrapped(withFlag(REAL_0120, '--sandbox-policy', '{"type":"external-sandbox"}')),
      /external-sandbox/,
    );
    refused(
      parseClientWrapped(withFlag(REAL_0120, '--file-system-sandbox-policy', '{"kind":"external-sandbox"}')),
      /external-sandbox/,
    );
  });

  test('malformed argv: no --, no command, repeated flag, positional, missing value, relative cwd', () => {
    refused(parseClientWrapped(REAL_0120.slice(0, REAL_0120.indexOf('--'))), /no -- before the command/);
    refused(parseClientWrapped(REAL_0120.slice(0, REAL_0120.indexOf('--') + 1)), /no command after --/);
    refused(parseClientWrapped(insertBeforeDashDash(REAL_0120, '--command-cwd', '/x')), /given twice/);
    refused(parseClientWrapped(insertBeforeDashDash(REAL_0120, 'stray')), /unexpected launcher argument/);
    refused(parseClientWrapped([REAL_0120[0]!, '--sandbox-policy-cwd']), /has no value/);
    refused(parseClientWrapped(withFlag(REAL_0120, '--sandbox-policy-cwd', 'work')), /not absolute/);
    refused(parseClientWrapped(withFlag(REAL_0120, '--command-cwd', 'work')), /not absolute/);
  });
});

test('shouldUnwrap: auto only as root', () => {
  assert.equal(shouldUnwrap('auto', 0), true);
  assert.equal(shouldUnwrap('auto', 1000), false);
  assert.equal(shouldUnwrap('auto', undefined), false);
  assert.equal(shouldUnwrap('always', 1000), true);
  assert.equal(shouldUnwrap('never', 0), false);
});

/** Every client-wrapped process/start the e2e rig captured (when its artifacts are present locally). */
test('every captured 0.120–0.130 wrapped argv unwraps', (t) => {
  const dir = join(import.meta.dirname, '..', '..', 'test-artifacts', 'codex-e2e');
  let seen = 0;
  for (const v of ['0.120.0', '0.125.0', '0.130.0']) {
    const file = join(dir, `corral-${v}.json`);
    if (!existsSync(file)) continue;
    const walk = (o: unknown): void => {
      if (Array.isArray(o)) for (const x of o) walk(x);
      else if (o && typeof o === 'object') {
        const m = o as { method?: string; params?: { argv?: string[] } };
        if (m.method === 'process/start' && m.params?.argv && isClientWrapped(m.params.argv)) {
          const r = unwrapped(parseClientWrapped(m.params.argv));
          assert.equal(r.shape, v === '0.130.0' ? 'permission-profile' : 'legacy-flags');
          assert.deepEqual(r.command.slice(0, 2), ['/bin/bash', '-lc']);
          seen++;
        }
        for (const x of Object.values(o)) walk(x);
      }
    };
    walk(JSON.parse(readFileSync(file, 'utf8')));
  }
  if (seen === 0) t.skip('no e2e artifacts in test-artifacts/codex-e2e');
});
