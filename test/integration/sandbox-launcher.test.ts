/**
 * The native pieces the sandbox launch relies on, run for real: the launcher that terminals and child_process go
 * through (fresh session keyring, exactly the fds it is given), the addon's fd sealing and pipes, and the pinning of a
 * protected symlink refusing the start when the link was replaced before it could be pinned.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { sandboxLauncher, sandboxNative } from '../../src/platform/sandbox.js';
import { type Fixture, fixture, run, seed, special } from './sandbox-util.js';

const skip = sandboxLauncher && sandboxNative ? false : 'the addon and its launcher are not built';

function launch(args: string[], stdio: (string | number)[]): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const c = spawn(sandboxLauncher!, args, { stdio: ['ignore', 'pipe', 'pipe', ...stdio] as never });
    let out = '';
    c.stdout!.setEncoding('utf8').on('data', (d: string) => {
      out += d;
    });
    c.stderr!.setEncoding('utf8').on('data', (d: string) => {
      out += d;
    });
    c.on('close', (code) => resolve({ code, out }));
  });
}

describe('corral-sandbox-exec', { skip }, () => {
  test('moves the fds it is given to 3, 4, … (a swap included) and closes every other fd', async () => {
    const a = openSync('/etc/hostname', 'r');
    const b = openSync('/etc/passwd', 'r');
    const c = openSync('/etc/group', 'r');
    try {
      // The child gets a at 3, b at 4, c at 5; the launcher is told: 4 first, then 3 (5 is not named).
      const r = await launch(
        [
          '--fd',
          '4',
          '--fd',
          '3',
          '--',
          '/bin/sh',
          '-c',
          'for f in 3 4 5 6; do readlink /proc/self/fd/$f || echo "$f closed"; done',
        ],
        [a, b, c],
      );
      assert.equal(r.code, 0, r.out);
      assert.deepEqual(r.out.trim().split('\n'), ['/etc/passwd', '/etc/hostname', '5 closed', '6 closed']);
    } finally {
      for (const fd of [a, b, c]) closeSync(fd);
    }
  });

  test('joins a fresh session keyring: the parent keyring is not possessed', async () => {
    const keyctl = process.arch === 'x64' ? 250 : 219;
    const id = `import ctypes; print(ctypes.CDLL(None).syscall(${keyctl}, 0, -3, 0))`; // KEYCTL_GET_KEYRING_ID @s
    const mine = execFileSync('/usr/bin/python3', ['-c', id], { encoding: 'utf8' }).trim();
    const r = await launch(['--', '/usr/bin/python3', '-c', id], []);
    assert.equal(r.code, 0, r.out);
    assert.notEqual(r.out.trim(), mine);
    assert.match(r.out.trim(), /^\d+$/);
  });

  test('refuses a relative program and a bad argument, exit 127 with a message', async () => {
    const rel = await launch(['--', 'sh', '-c', 'true'], []);
    assert.equal(rel.code, 127);
    assert.match(rel.out, /corral-sandbox-exec: expected -- and an absolute program path/);
    const bad = await launch(['--fd', 'x', '--', '/bin/true'], []);
    assert.equal(bad.code, 127);
    assert.match(bad.out, /bad argument --fd/);
  });
});

describe('addon: sealFds and pipe', { skip }, () => {
  test('pipe() ends are close-on-exec; setInheritable clears and sets it; sealFds marks everything', () => {
    const flags = (fd: number) =>
      readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8').match(/^flags:\s+(\d+)/m)![1]!;
    const cloexec = (fd: number) => (Number.parseInt(flags(fd), 8) & 0o2000000) !== 0;
    const [r, w] = sandboxNative!.pipe();
    try {
      assert.ok(cloexec(r) && cloexec(w));
      sandboxNative!.setInheritable(r, true);
      assert.ok(!cloexec(r));
      sandboxNative!.sealFds();
      assert.ok(cloexec(r));
    } finally {
      closeSync(r);
      closeSync(w);
    }
  });
});

describe('pinning a protected symlink', { skip }, () => {
  let f: Fixture;
  before(async () => {
    f = await fixture();
  });
  after(() => f.close());

  test('a link replaced before it could be pinned refuses the start; the command never runs', async () => {
    const W = join(f.root, 'pin-ws');
    mkdirSync(join(W, 'real-git'), { recursive: true });
    symlinkSync('real-git', join(W, '.git'));
    const sb = seed({
      cwd: W,
      entries: [special('root', 'read'), special('current_working_directory', 'write')],
    });
    await assert.rejects(
      run(sb, ['/bin/sh', '-c', 'echo RAN > ran'], {
        cwd: W,
        onSpawn: () => {
          rmSync(join(W, '.git'));
          mkdirSync(join(W, '.git'));
        },
      }),
      /cannot pin the symbolic link a protected path goes through \(it is no longer a symbolic link\)/,
    );
    assert.throws(() => readFileSync(join(W, 'ran')), /ENOENT/);
  });
});
