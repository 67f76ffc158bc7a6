import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parseSandboxParam } from '../../src/protocol/sandbox.js';
import type { ParsedSandbox } from '../../src/sandbox/index.js';
import { checkFsAccess, isLikelySandboxDenied, SandboxSetupError } from '../../src/sandbox/index.js';
import { needsSandbox } from '../helpers/native.js';
import {
  codexProfileEntries,
  type Fixture,
  fixture,
  gone,
  PY,
  pathEntry,
  pidsMatching,
  run,
  seed,
  special,
  waitFor,
  workspaceWrite,
} from './sandbox-util.js';

/** sandbox.md §12: the 15 conformance cases and the further quick checks, with real bwrap. */

let f: Fixture;
before(async () => {
  f = await fixture();
});
after(async () => {
  await f.close();
});

const ws = () => seed({ cwd: f.W });
const opts = () => ({ tmpdir: f.T });

describe('sandbox.md §12 conformance (Linux, real bwrap)', { skip: needsSandbox }, () => {
  test('1: none / danger-full-access runs the command itself, no bwrap', async () => {
    const sb = seed({
      cwd: f.W,
      sandbox: 'none',
      policy: { type: 'danger-full-access' },
      kind: 'unrestricted',
      entries: [],
    });
    const r = await run(
      sb,
      ['sh', '-c', 'echo x > "$OUT/f"; echo "pid=$$"; tr "\\0" " " < /proc/$$/cmdline'],
      {
        cwd: f.W,
        env: { OUT: f.OUT },
        opts: opts(),
      },
    );
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.prepared.sandboxType, 'none');
    assert.ok(existsSync(join(f.OUT, 'f')));
    assert.match(r.stdout, new RegExp(`pid=${r.pid}\\b`));
    assert.doesNotMatch(r.stdout, /bwrap/);
    assert.match(r.stdout, /^sh -c /m);
  });

  test('2: read-only [root:read] restricted: reads work, writes fail with EROFS', async () => {
    const sb = seed({ cwd: f.W, policy: { type: 'read-only' }, entries: [special('root', 'read')] });
    const r = await run(sb, ['sh', '-c', 'cat /etc/hostname; echo x > "$W/f"'], {
      cwd: f.W,
      env: { W: f.W },
      opts: opts(),
    });
    assert.equal(r.prepared.sandboxType, 'linuxSeccomp');
    assert.notEqual(r.code, 0);
    assert.equal(r.stdout, readFileSync('/etc/hostname', 'utf8'));
    assert.match(r.stderr, /Read-only file system/);
    assert.ok(!existsSync(join(f.W, 'f')));
    assert.equal(isLikelySandboxDenied(true, r.code, r.stderr), true);
  });

  test('3: workspace-write: a write in the workspace reaches the host', async () => {
    const r = await run(ws(), ['sh', '-c', 'echo ok > "$W/a.txt"'], {
      cwd: f.W,
      env: { W: f.W },
      opts: opts(),
    });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(readFileSync(join(f.W, 'a.txt'), 'utf8'), 'ok\n');
  });

  test('4: exclude_slash_tmp and no slash_tmp entry: $OUT and /tmp are read-only', async () => {
    const sb = seed({
      cwd: f.W,
      policy: workspaceWrite({ exclude_tmpdir_env_var: true, exclude_slash_tmp: true }),
      entries: [special('root', 'read'), special('current_working_directory', 'write')],
    });
    const F = `/tmp/corral-sbx-case4-${process.pid}-${Date.now()}`;
    const r = await run(sb, ['sh', '-c', 'echo x > "$OUT/b"; echo y > "$F"'], {
      cwd: f.W,
      env: { OUT: f.OUT, F },
      opts: opts(),
    });
    assert.notEqual(r.code, 0);
    assert.equal(r.stderr.match(/Read-only file system/g)?.length, 2, r.stderr);
    assert.ok(!existsSync(join(f.OUT, 'b')));
    assert.ok(!existsSync(F));
  });

  test('5: .git is readable but protected (write EROFS, rename EBUSY/EROFS)', async () => {
    const r = await run(
      ws(),
      ['sh', '-c', 'cat .git/HEAD && echo x > .git/hooks/pre-commit; mv .git g; echo "mv=$?"'],
      {
        cwd: f.W,
        opts: opts(),
      },
    );
    assert.match(r.stdout, /ref: refs\/heads\/main/);
    assert.match(r.stderr, /pre-commit: Read-only file system/);
    assert.match(r.stderr, /mv: .*(Device or resource busy|Read-only file system)/);
    assert.match(r.stdout, /mv=1/);
    assert.ok(!existsSync(join(f.W, '.git', 'hooks', 'pre-commit')));
    assert.ok(existsSync(join(f.W, '.git', 'HEAD')));
    assert.ok(!existsSync(join(f.W, 'g')));
  });

  test('6: a missing .codex stays protected and no synthetic mount point is left on the host', async () => {
    assert.ok(await gone(join(f.W, '.codex')), 'an earlier test left .codex');
    const sb = seed({
      cwd: f.W,
      entries: [
        special('root', 'read'),
        special('current_working_directory', 'write'),
        pathEntry(join(f.W, '.codex'), 'read'),
      ],
    });
    const r = await run(sb, ['sh', '-c', 'mkdir -p .codex && echo a > .codex/config.toml'], {
      cwd: f.W,
      opts: opts(),
    });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /Read-only file system|Permission denied/);
    assert.ok(await gone(join(f.W, '.codex')), 'synthetic .codex must be removed');
  });

  test('6b: concurrent sandboxes share a synthetic .codex (ref-counted): the first exit does not unprotect the second', async () => {
    const W2 = join(f.root, 'ws-shared');
    mkdirSync(W2, { recursive: true });
    const sb = seed({
      cwd: W2,
      entries: [special('root', 'read'), special('current_working_directory', 'write')],
    });
    const wait = (name: string) => `while [ ! -e "${join(W2, name)}" ]; do sleep 0.01; done`;
    const a = run(sb, ['sh', '-c', wait('go-a')], { cwd: W2, opts: opts() });
    assert.ok(await waitFor(() => existsSync(join(W2, '.codex')), 5000), 'bwrap creates the mount point');
    const b = run(sb, ['sh', '-c', `${wait('go-b')}; mkdir -p .codex/x; echo y > .codex/f; echo "rc=$?"`], {
      cwd: W2,
      opts: opts(),
    });
    // Let B get past its setup before A goes away.
    assert.ok(await waitFor(() => pidsMatching(`go-b`).length > 0, 5000));
    writeFileSync(join(W2, 'go-a'), '');
    assert.equal((await a).code, 0);
    assert.ok(existsSync(join(W2, '.codex')), 'still in use by B');
    writeFileSync(join(W2, 'go-b'), '');
    const rb = await b;
    assert.match(rb.stdout, /rc=[1-9]/);
    assert.match(rb.stderr, /Read-only file system|Permission denied/);
    assert.ok(await gone(join(W2, '.codex')), 'removed after the last user');
  });

  test('7: extra writable root, the server TMPDIR and /tmp are writable; exclude_tmpdir_env_var removes TMPDIR', async () => {
    const EXTRA = join(f.root, 'extra');
    mkdirSync(EXTRA, { recursive: true });
    const F = `/tmp/corral-sbx-case7-${process.pid}-${Date.now()}`;
    const base = [
      special('root', 'read'),
      special('current_working_directory', 'write'),
      special('slash_tmp', 'write'),
    ];
    const sb = seed({
      cwd: f.W,
      policy: workspaceWrite({ writable_roots: [EXTRA] }),
      entries: [...base, special('tmpdir', 'write'), pathEntry(EXTRA, 'write')],
    });
    const cmd = ['sh', '-c', 'echo 1 > "$EXTRA/x" && echo 2 > "$T/y" && echo 3 > "$F"'];
    const r = await run(sb, cmd, { cwd: f.W, env: { EXTRA, T: f.T, F }, opts: opts() });
    assert.equal(r.code, 0, r.stderr);
    assert.ok(existsSync(join(EXTRA, 'x')) && existsSync(join(f.T, 'y')) && existsSync(F));
    rmSync(F, { force: true });
    // With exclude_tmpdir_env_var (and, since $T lies under /tmp here, exclude_slash_tmp) $T is read-only.
    const sb3 = seed({
      cwd: f.W,
      policy: workspaceWrite({ exclude_tmpdir_env_var: true, exclude_slash_tmp: true }),
      entries: [special('root', 'read'), special('current_working_directory', 'write')],
    });
    const r3 = await run(sb3, ['sh', '-c', 'echo 2 > "$T/z"'], { cwd: f.W, env: { T: f.T }, opts: opts() });
    assert.notEqual(r3.code, 0);
    assert.match(r3.stderr, /Read-only file system/);
    assert.ok(!existsSync(join(f.T, 'z')));
  });

  test('8: network restricted: curl cannot connect; CODEX_SANDBOX_NETWORK_DISABLED=1', async () => {
    const r = await run(
      ws(),
      ['sh', '-c', 'echo "flag=$CODEX_SANDBOX_NETWORK_DISABLED"; curl -sS -m3 "http://127.0.0.1:$PORT/"'],
      { cwd: f.W, env: { PORT: String(f.port) }, opts: opts() },
    );
    assert.equal(r.code, 7, r.stderr);
    assert.match(r.stderr, /Couldn't connect/);
    assert.match(r.stdout, /flag=1/);
  });

  test('9: Restricted seccomp: AF_INET, AF_UNIX connect, ptrace, io_uring denied; socketpair allowed', async () => {
    const script = `
import socket, ctypes, errno, os
def t(name, fn):
    try:
        fn(); print(name, 'OK')
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
t('inet', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
t('unix', lambda: socket.socket(socket.AF_UNIX).connect(os.environ['SOCK']))
t('socketpair', lambda: socket.socketpair())
libc = ctypes.CDLL(None, use_errno=True)
def sc(name, *args):
    def f():
        if libc.syscall(*args) == -1:
            e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
    return f
t('ptrace', sc('ptrace', 101, 0, 0, 0, 0))
buf = ctypes.create_string_buffer(120)
t('io_uring_setup', sc('io_uring', 425, 1, buf))
`;
    const r = await run(ws(), [PY, '-c', script], { cwd: f.W, env: { SOCK: f.SOCK }, opts: opts() });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^inet EPERM$/m);
    assert.match(r.stdout, /^unix EPERM$/m);
    assert.match(r.stdout, /^socketpair OK$/m);
    assert.match(r.stdout, /^ptrace EPERM$/m);
    assert.match(r.stdout, /^io_uring_setup EPERM$/m);
    assert.equal(f.hits.uds, 0);
  });

  test('10: network enabled: curl reaches the host listener; no CODEX_SANDBOX_NETWORK_DISABLED', async () => {
    const sb = seed({ cwd: f.W, network: 'enabled' });
    const r = await run(
      sb,
      [
        'sh',
        '-c',
        // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell parameter expansion
        'echo "flag=${CODEX_SANDBOX_NETWORK_DISABLED-unset}"; curl -sS -m3 "http://127.0.0.1:$PORT/"',
      ],
      { cwd: f.W, env: { PORT: String(f.port) }, opts: opts() },
    );
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /host-listener-body/);
    assert.match(r.stdout, /flag=unset/);
  });

  test('11: read-only + additionalPermissions (network, write $OUT) are merged', async () => {
    const sb = seed({
      cwd: f.W,
      policy: { type: 'read-only' },
      entries: [special('root', 'read')],
      additionalPermissions: { network: { enabled: true }, file_system: { read: null, write: [f.OUT] } },
    });
    const r = await run(sb, ['sh', '-c', 'echo x > "$OUT/g" && curl -sS -m3 "http://127.0.0.1:$PORT/"'], {
      cwd: f.W,
      env: { OUT: f.OUT, PORT: String(f.port) },
      opts: opts(),
    });
    assert.equal(r.code, 0, r.stderr);
    assert.ok(existsSync(join(f.OUT, 'g')));
    assert.match(r.stdout, /host-listener-body/);
  });

  test('13: enforceManagedNetwork without proxy env fails closed at start', async () => {
    const sb = seed({ cwd: f.W, enforceManagedNetwork: true });
    await assert.rejects(
      run(sb, ['true'], { cwd: f.W, opts: opts() }),
      (e: Error) => e instanceof SandboxSetupError && /proxy environment variables/.test(e.message),
    );
  });

  test('14: killing the sandbox kills every process in it, setsid children included', async () => {
    const tag = `${300 + (process.pid % 1000) / 10000}${Date.now() % 1000}`;
    let pid = 0;
    const running = run(ws(), ['sh', '-c', `sleep ${tag}1 & setsid sleep ${tag}2 & wait`], {
      cwd: f.W,
      opts: opts(),
      onSpawn: (p) => {
        pid = p;
      },
    });
    assert.ok(await waitFor(() => pidsMatching(`sleep ${tag}`).length >= 2, 5000), 'sleeps should start');
    process.kill(pid, 'SIGKILL');
    const r = await running;
    assert.equal(r.signal, 'SIGKILL');
    assert.ok(await waitFor(() => pidsMatching(`sleep ${tag}`).length === 0, 1000), 'no sleep may survive');
  });

  test('15: as root, capabilities are dropped: umount/remount fail and .git stays read-only', async (t) => {
    if (process.geteuid?.() !== 0) return t.skip('needs root');
    const r = await run(
      ws(),
      [
        'sh',
        '-c',
        'grep CapEff /proc/self/status; umount "$W/.git"; echo "umount=$?"; mount -o remount,rw,bind /; echo "mount=$?"; echo x > "$W/.git/hooks/h"; echo "write=$?"',
      ],
      { cwd: f.W, env: { W: f.W }, opts: opts() },
    );
    assert.match(r.stdout, /CapEff:\s+0000000000000000/);
    assert.match(r.stdout, /umount=[1-9]/);
    assert.match(r.stdout, /mount=[1-9]/);
    assert.match(r.stdout, /write=[1-9]/);
    assert.ok(!existsSync(join(f.W, '.git', 'hooks', 'h')));
  });
});

describe('sandbox.md §12 further quick checks', { skip: needsSandbox }, () => {
  test('macos-seatbelt on Linux and windows-restricted-token are start errors naming the type', async () => {
    await assert.rejects(
      run(seed({ cwd: f.W, sandbox: 'macos-seatbelt' }), ['true'], { cwd: f.W, opts: opts() }),
      /seatbelt sandbox is only available on macOS/,
    );
    await assert.rejects(
      run(seed({ cwd: f.W, sandbox: 'windows-restricted-token' }), ['true'], { cwd: f.W, opts: opts() }),
      /sandbox type windows-restricted-token is not supported by this exec-server/,
    );
  });

  test('exit 42 passes through', async () => {
    const r = await run(ws(), ['sh', '-c', 'exit 42'], { cwd: f.W, opts: opts() });
    assert.equal(r.code, 42);
  });

  test('a missing command is a bwrap execvp failure, not a denial', async () => {
    const r = await run(ws(), ['/nonexistent/corral-no-such-cmd'], { cwd: f.W, opts: opts() });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /bwrap: execvp .*: No such file or directory/);
    assert.equal(isLikelySandboxDenied(true, r.code, r.stderr), false);
  });

  test('missing bwrap is a clear start error, never an unsandboxed run', async () => {
    const marker = join(f.OUT, 'must-not-exist');
    await assert.rejects(
      run(ws(), ['sh', '-c', `touch ${marker}`], {
        cwd: f.W,
        opts: { tmpdir: f.T, bwrapPath: '/nonexistent/bwrap' },
      }),
      (e: Error) => e instanceof SandboxSetupError && /bubblewrap.*\/nonexistent\/bwrap/.test(e.message),
    );
    assert.ok(!existsSync(marker));
  });

  test('useLegacyLandlock:true runs under the Landlock backend, not bwrap', async () => {
    const r = await run(
      seed({ cwd: f.W, useLegacyLandlock: true }),
      ['sh', '-c', 'echo ok > a.txt; cat /proc/self/status'],
      {
        cwd: f.W,
        opts: opts(),
      },
    );
    assert.equal(r.code, 0, r.stderr);
    assert.equal(readFileSync(join(f.W, 'a.txt'), 'utf8'), 'ok\n');
    // cat is an execve of the confined shell: nothing came back with it, also for a server running as root.
    for (const set of ['CapEff', 'CapPrm', 'CapInh', 'CapAmb'])
      assert.match(r.stdout, new RegExp(`^${set}:\\s+0+$`, 'm'), set);
    assert.match(r.stdout, /^Seccomp:\s+2$/m);
    assert.match(r.stdout, /^NoNewPrivs:\s+1$/m);
  });

  test('the 0.169 FileSystemSandboxContext gives the results of case 3, as linuxSeccomp', async () => {
    const uri = `file://${f.W}`;
    const parsed = parseSandboxParam({
      permissions: {
        type: 'managed',
        file_system: {
          type: 'restricted',
          entries: [
            ...codexProfileEntries({ missing_path_behavior: 'skip' }),
            { ...special('project_roots', 'read', { subpath: '.aws' }), missing_path_behavior: 'skip' },
          ],
        },
        network: 'restricted',
      },
      cwd: uri,
      workspaceRoots: [uri],
      windowsSandboxLevel: 'disabled',
      windowsSandboxProxySettingsMode: 'reconcile',
      useLegacyLandlock: false,
    });
    assert.ok(parsed.success);
    const sb = parsed.data as ParsedSandbox;
    const r = await run(sb, ['sh', '-c', 'echo ok > a169.txt; echo x > .git/hooks/y; echo x > "$OUT/z"'], {
      cwd: f.W,
      env: { OUT: f.OUT },
      opts: opts(),
    });
    assert.equal(r.prepared.sandboxType, 'linuxSeccomp');
    assert.equal(readFileSync(join(f.W, 'a169.txt'), 'utf8'), 'ok\n');
    assert.equal(r.stderr.match(/Read-only file system/g)?.length, 2, r.stderr);
    assert.ok(!existsSync(join(f.OUT, 'z')));
    for (const n of ['.agents', '.codex', '.aws'])
      assert.ok(await gone(join(f.W, n)), `${n} left on the host`);
  });

  test('a 0.169 shape with an unknown permissions.type fails validation', () => {
    const r = parseSandboxParam({ permissions: { type: 'yolo' }, cwd: `file://${f.W}` });
    assert.equal(r.success, false);
  });

  test('fs/writeFile with a sandbox context: $OUT/x and a symlink escape are refused, naming the path', () => {
    const ctx = ws();
    const target = join(f.OUT, 'x');
    const msg = checkFsAccess(ctx, target, 'write', { tmpdir: f.T });
    assert.ok(msg?.includes(target), String(msg));
    assert.equal(checkFsAccess(ctx, join(f.W, 'inside.txt'), 'write', { tmpdir: f.T }), null);
    const link = join(f.W, 'escape');
    if (!existsSync(link)) symlinkSync(f.OUT, link);
    const viaLink = checkFsAccess(ctx, join(link, 'x'), 'write', { tmpdir: f.T });
    assert.ok(viaLink?.includes(join(link, 'x')), String(viaLink));
    assert.ok(checkFsAccess(ctx, join(f.W, '.git', 'config'), 'write', { tmpdir: f.T })?.includes('.git'));
    assert.equal(checkFsAccess(ctx, '/etc/hostname', 'read', { tmpdir: f.T }), null);
    assert.ok(!existsSync(target));
  });
});
