// The audit database's directory in every sandbox plan (issue 15): bubblewrap mounts an empty, read-only, mode-000
// tmpfs over it after every bind (so also inside a writable root or under a full-disk-read policy); Seatbelt denies
// reading and writing it. The plans are pure: nothing here runs.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { type EffectiveSandbox, previewLaunch, startSandbox } from '../../src/sandbox/index.js';
import { seed, special } from '../integration/sandbox-util.js';

const root = mkdtempSync(join(os.tmpdir(), 'corral-audit-mask-'));
const W = join(root, 'ws');
const hidden = join(W, '.state', 'corral');
mkdirSync(hidden, { recursive: true });
after(() => rmSync(root, { recursive: true, force: true }));

const sp = special;
const sandbox = (name: string, entries: unknown[]): EffectiveSandbox | null =>
  startSandbox(seed({ cwd: W, sandbox: name, entries }), false, W);
const cmd = {
  spec: { file: '/bin/cat', argv: ['cat', join(hidden, 'audit.db')], env: {}, cwd: W },
  tty: false,
};
const facts = {
  platform: 'linux' as const,
  arch: 'x64',
  machine: 'x86_64',
  tmpdir: '',
  hiddenPaths: [hidden],
};

for (const [name, entries] of [
  ['the workspace is writable', [sp('root', 'read'), sp('current_working_directory', 'write')]],
  ['only the workspace is readable', [sp('current_working_directory', 'write')]],
  ['everything is readable, /tmp writable', [sp('root', 'read'), sp('slash_tmp', 'write')]],
] as const) {
  test(`bwrap: the directory is an empty 000 tmpfs, mounted last, when ${name}`, () => {
    const p = previewLaunch(sandbox('linux-seccomp', [...entries]), cmd, facts);
    assert.equal(p.mechanism, 'bwrap');
    const a = p.spec.argv;
    const at = a.findIndex((x, i) => x === '--tmpfs' && a[i + 1] === hidden);
    assert.ok(at > 0, a.join(' '));
    assert.deepEqual(a.slice(at - 2, at + 4), ['--perms', '000', '--tmpfs', hidden, '--remount-ro', hidden]);
    // No bind after it could lay the real directory over the mask again.
    const lastBind = a.reduce(
      (last, x, i) => (/^--(ro-)?bind$/.test(x) && i < a.indexOf('--') ? i : last),
      -1,
    );
    assert.ok(lastBind < at, `a bind at ${lastBind} comes after the mask at ${at}`);
  });
}

test('Seatbelt: reading and writing the directory is denied', () => {
  const p = previewLaunch(
    sandbox('macos-seatbelt', [sp('root', 'read'), sp('current_working_directory', 'write')]),
    cmd,
    {
      ...facts,
      platform: 'darwin',
    },
  );
  assert.equal(p.mechanism, 'seatbelt');
  const param = p.seatbeltParams?.find(([, v]) => v === hidden)?.[0];
  assert.ok(param, JSON.stringify(p.seatbeltParams));
  assert.match(
    p.seatbeltProfile!,
    new RegExp(`\\(deny file-read\\* file-write\\*[^)]*\\(subpath \\(param "${param}"\\)\\)`),
  );
});

test('without hidden paths the plan is as before', () => {
  const p = previewLaunch(sandbox('linux-seccomp', [sp('root', 'read')]), cmd, { ...facts, hiddenPaths: [] });
  assert.equal(p.spec.argv.includes(hidden), false);
});
