// The pipe-mode spawner (src/process/spawner.ts): every case runs against both implementations, the native addon and
// the child_process fallback, with real processes.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { build } from 'esbuild';
import { groupWatchdog } from '../../src/platform/watchdog.js';
import type { LaunchSpec } from '../../src/process/launch.js';
import { spawnPty } from '../../src/process/pty.js';
import {
  nativeLoadError,
  SpawnError,
  type SpawnedChild,
  spawnerKind,
  spawnPipedWith,
} from '../../src/process/spawner.js';
import { needsAddon } from '../helpers/native.js';

const root = join(import.meta.dirname, '..', '..');
const SPAWNER = join(root, 'src', 'process', 'spawner.ts');
const PATH = '/usr/local/bin:/usr/bin:/bin';
const BUNDLE_DIR = join(root, 'test-artifacts', 'spawner-bundle');

let dir = '';
before(() => {
  dir = mkdtempSync(join(tmpdir(), 'corral-spawner-'));
});
after(() => rmSync(dir, { recursive: true, force: true }));

function sh(script: string, extra: Partial<LaunchSpec> = {}): LaunchSpec {
  return { file: '/bin/sh', argv: ['sh', '-c', script], env: { PATH }, cwd: '/', ...extra };
}

interface Result {
  stdout: string;
  stderr: string;
  code: number;
  signal: NodeJS.Signals | null;
}

/** Waits for the exit and for both pipes to close. */
function finish(c: SpawnedChild): Promise<Result> {
  return new Promise((resolve) => {
    let stdout = '';
    let stderr = '';
    let left = 3;
    let code = -1;
    let signal: NodeJS.Signals | null = null;
    const done = () => {
      if (--left === 0) resolve({ stdout, stderr, code, signal });
    };
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    c.stdout.on('data', (d) => out.push(Buffer.from(d)));
    c.stderr.on('data', (d) => err.push(Buffer.from(d)));
    c.stdout.on('close', () => {
      stdout = Buffer.concat(out).toString('utf8');
      done();
    });
    c.stderr.on('close', () => {
      stderr = Buffer.concat(err).toString('utf8');
      done();
    });
    c.onExit((exitCode, sig) => {
      code = exitCode;
      signal = sig;
      done();
    });
  });
}

/** 'native' is the addon in its default async-exec mode, 'vfork' the addon waiting for exec, 'node' child_process. */
type Impl = 'native' | 'vfork' | 'node';

function spawnWith(impl: Impl, spec: LaunchSpec, opts: { stdin: 'null' | 'pipe' }): SpawnedChild {
  if (impl === 'node') return spawnPipedWith('node', spec, opts);
  return spawnPipedWith('native', spec, opts, impl === 'vfork' ? 'vfork' : 'async');
}

/** The expression a helper script uses to spawn with `impl` (its spawner module is `m`). */
function helperSpawn(impl: Impl, spec: string): string {
  return impl === 'node'
    ? `m.spawnPipedWith('node', ${spec}, { stdin: 'null' })`
    : `m.spawnPipedWith('native', ${spec}, { stdin: 'null' }, ${JSON.stringify(impl === 'vfork' ? 'vfork' : 'async')})`;
}

function run(kind: Impl, spec: LaunchSpec, input?: string): Promise<Result> {
  const c = spawnWith(kind, spec, { stdin: input === undefined ? 'null' : 'pipe' });
  if (input !== undefined) c.stdin!.end(input);
  return finish(c);
}

/** Polls OS state (the process table) until `cond` holds; fails after `ms`. */
async function until(what: string, cond: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** True once `pid` is gone or a zombie (its parent, possibly init, has not reaped it yet). */
function dead(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
    return state === 'Z' || state === 'X';
  } catch {
    return true;
  }
}

/** The fds `ls -l /proc/self/fd` reports, without ls's own directory handle. */
function childFds(lsOutput: string): number[] {
  return lsOutput
    .split('\n')
    .map((l) => /^\S+\s.*\s(\d+) -> (.*)$/.exec(l))
    .filter((m): m is RegExpExecArray => m !== null && !/^\/proc\/\d+\/fd$/.test(m[2]!))
    .map((m) => Number(m[1]))
    .sort((a, b) => a - b);
}

/** This process's fds that would survive exec (no O_CLOEXEC): child_process hands these on. */
function inheritableFds(): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc/self/fdinfo')) {
    try {
      const flags = /flags:\s+(\d+)/.exec(readFileSync(`/proc/self/fdinfo/${name}`, 'utf8'));
      if (flags && (Number.parseInt(flags[1]!, 8) & 0o2000000) === 0) out.push(Number(name));
    } catch {
      // closed meanwhile (the fd of the directory listing itself)
    }
  }
  return out.filter((fd) => fd > 2).sort((a, b) => a - b);
}

/** Runs a module-type script in a helper node process that can import the TypeScript sources. */
function helper(code: string, env: NodeJS.ProcessEnv = process.env, extraStdio: 'pipe'[] = []) {
  return spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
    cwd: root,
    env,
    stdio: ['ignore', 'pipe', 'inherit', ...extraStdio],
  });
}

async function helperOutput(code: string, env: NodeJS.ProcessEnv = process.env, extraStdio: 'pipe'[] = []) {
  const p = helper(code, env, extraStdio);
  let out = '';
  p.stdout!.setEncoding('utf8').on('data', (d: string) => {
    out += d;
  });
  const status = await new Promise<number | null>((r) => p.on('close', (c) => r(c)));
  assert.equal(status, 0, `helper failed: ${out}`);
  return out;
}

/** Bundles `entry` with esbuild into test-artifacts/spawner-bundle/<name> (outside src/, like dist/); returns its path. */
async function bundleInto(entry: string, name: string): Promise<string> {
  const outfile = join(BUNDLE_DIR, name);
  mkdirSync(BUNDLE_DIR, { recursive: true });
  await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    packages: 'external',
    logLevel: 'error',
  });
  return outfile;
}

describe('group watchdog', { skip: nativeLoadError ? `addon not built: ${nativeLoadError}` : false }, () => {
  it('keeps running through signal storms: no restart, no native child killed', async () => {
    // Signals interrupt system calls (EINTR); mistaking an interrupted liveness check for the watchdog's death once
    // restarted it, and the old watchdog killed every registered group (children exited 137).
    const codes = [(await finish(spawnPipedWith('native', sh('exit 0'), { stdin: 'null' }))).code];
    const dog = groupWatchdog!.pid();
    assert.ok(dog > 0, 'a watchdog runs once a native child exists');
    const onSignal = () => {};
    // SIGURG: a signal Node gives no meaning of its own (its test runner writes a diagnostic report on every SIGUSR2
    // from Node 24 on, a file per signal of the storm).
    process.on('SIGURG', onSignal);
    const storm = spawn('/bin/sh', ['-c', `while kill -URG ${process.pid}; do :; done`], {
      stdio: 'ignore',
    });
    try {
      const end = Date.now() + 1000;
      const lane = async () => {
        while (Date.now() < end)
          codes.push((await finish(spawnPipedWith('native', sh('exit 0'), { stdin: 'null' }))).code);
      };
      await Promise.all(Array.from({ length: 32 }, lane));
    } finally {
      storm.kill('SIGKILL');
      process.off('SIGURG', onSignal);
    }
    assert.deepEqual(
      codes.filter((c) => c !== 0),
      [],
    );
    assert.equal(groupWatchdog!.pid(), dog);
  });

  it('a killed watchdog is replaced at the next spawn, and the replacement holds only its pipe', async () => {
    await finish(spawnPipedWith('native', sh('exit 0'), { stdin: 'null' }));
    const dog = groupWatchdog!.pid();
    assert.ok(dog > 0);
    process.kill(dog, 'SIGKILL');
    await until('the old watchdog to be a zombie', () =>
      readFileSync(`/proc/${dog}/stat`, 'utf8').split(') ')[1]!.startsWith('Z'),
    );
    const r = await finish(spawnPipedWith('native', sh('exit 3'), { stdin: 'null' }));
    assert.equal(r.code, 3);
    const next = groupWatchdog!.pid();
    assert.ok(next > 0 && next !== dog, 'a new watchdog');
    assert.throws(() => readFileSync(`/proc/${dog}/stat`), 'the old one is reaped');
    await until('the new watchdog to drop our fds', () => readdirSync(`/proc/${next}/fd`).length === 1);
  });
});

describe('spawner selection', () => {
  it('uses the native addon on Linux unless CORRAL_NATIVE=0', () => {
    if (process.env.CORRAL_NATIVE === '0') assert.equal(spawnerKind, 'node');
    else if (process.platform === 'linux') {
      assert.equal(nativeLoadError, null);
      assert.equal(spawnerKind, 'native');
    } else assert.equal(spawnerKind, 'node');
  });

  it('CORRAL_NATIVE=0 selects child_process and turns every native capability off, saying so', async () => {
    const out = await helperOutput(
      `const m = await import(${JSON.stringify(SPAWNER)});
       const w = await import(${JSON.stringify(join(root, 'src/platform/watchdog.ts'))});
       const r = await import(${JSON.stringify(join(root, 'src/platform/relay.ts'))});
       const f = await import(${JSON.stringify(join(root, 'src/platform/confinedFs.ts'))});
       console.log(JSON.stringify([m.spawnerKind, m.nativeLoadError, w.groupWatchdog, r.spliceRelay, f.nativeFs]));`,
      { ...process.env, CORRAL_NATIVE: '0' },
    );
    const why = 'the native addon is turned off (CORRAL_NATIVE=0)';
    assert.deepEqual(JSON.parse(out), ['node', why, null, null, { available: false, reason: why }]);
  });

  it('the vfork mode waits for exec (exec-time errors throw)', {
    skip: nativeLoadError ? `needs the native addon: ${nativeLoadError}` : false,
  }, () => {
    const script = join(dir, 'bad-interpreter-env');
    writeFileSync(script, '#!/no/such/interpreter\n');
    chmodSync(script, 0o755);
    assert.throws(
      () =>
        spawnPipedWith(
          'native',
          { file: script, argv: ['x'], env: {}, cwd: '/' },
          { stdin: 'null' },
          'vfork',
        ),
      (e: SpawnError) => e.errno === 'ENOENT',
    );
  });

  it('an esbuild bundle outside src/ finds the addon from the package root', async () => {
    mkdirSync(BUNDLE_DIR, { recursive: true });
    const entry = join(BUNDLE_DIR, 'entry.ts');
    writeFileSync(
      entry,
      `import { spawnerKind, spawnPiped } from ${JSON.stringify(SPAWNER.replace(/\.ts$/, '.js'))};\n` +
        `const c = spawnPiped({ file: '/bin/sh', argv: ['sh', '-c', 'echo bundled'], env: {}, cwd: '/' }, { stdin: 'null' });\n` +
        `let out = ''; c.stdout.on('data', (d) => { out += d; });\n` +
        `let code = -1; let left = 2; const done = () => { if (--left === 0) console.log(spawnerKind, code, out.trim()); };\n` +
        `c.onExit((c2) => { code = c2; done(); }); c.stdout.on('close', done);\n`,
    );
    await bundleInto(entry, 'bundle.js');
    const p = spawn(process.execPath, [join(BUNDLE_DIR, 'bundle.js')], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    p.stdout.setEncoding('utf8').on('data', (d: string) => {
      out += d;
    });
    await new Promise((r) => p.on('close', r));
    const expected = process.platform === 'linux' && process.env.CORRAL_NATIVE !== '0' ? 'native' : 'node';
    assert.equal(out.trim(), `${expected} 0 bundled`);
  });
  it('two copies of the module in one process (sources and a bundle) both get their exits', async () => {
    const bundle = await bundleInto(SPAWNER, 'spawner-copy.mjs');
    const copy = (await import(pathToFileURL(bundle).href)) as typeof import('../../src/process/spawner.js');
    const exitOf = (c: SpawnedChild) => new Promise<number>((r) => c.onExit((code) => r(code)));
    const codes = await Promise.all([
      exitOf(spawnPipedWith(spawnerKind, sh('exit 11'), { stdin: 'null' })),
      exitOf(copy.spawnPipedWith(spawnerKind, sh('exit 12'), { stdin: 'null' })),
      exitOf(spawnPipedWith(spawnerKind, sh('exit 13'), { stdin: 'null' })),
    ]);
    assert.deepEqual(codes, [11, 12, 13]);
  });

  it('works in a worker thread, whose teardown leaves the addon usable', async () => {
    // The worker cannot load TypeScript: give it a bundle of the spawner, outside src/ like dist/.
    const bundle = await bundleInto(SPAWNER, 'spawner.mjs');
    const spawnSh = (script: string) =>
      `m.spawnPiped({ file: '/bin/sh', argv: ['sh', '-c', '${script}'], env: {}, cwd: '/' }, { stdin: 'null' })`;
    writeFileSync(
      join(BUNDLE_DIR, 'worker.mjs'),
      [
        "import { parentPort } from 'node:worker_threads';",
        `import * as m from ${JSON.stringify(bundle)};`,
        'for (let i = 0; i < 20; i++) {',
        `  const c = ${spawnSh('echo hi')};`,
        '  c.stdout.resume();',
        '  c.stderr.resume();',
        '}',
        'parentPort.postMessage(m.spawnerKind);',
      ].join('\n'),
    );
    writeFileSync(
      join(BUNDLE_DIR, 'main.mjs'),
      [
        "import { Worker } from 'node:worker_threads';",
        `const worker = new Worker(${JSON.stringify(join(BUNDLE_DIR, 'worker.mjs'))});`,
        "const kind = await new Promise((r) => worker.once('message', r));",
        'await worker.terminate();',
        `const m = await import(${JSON.stringify(bundle)});`,
        `const c = ${spawnSh('exit 5')};`,
        'c.onExit((code) => console.log(kind, code));',
      ].join('\n'),
    );
    const p = spawn(process.execPath, [join(BUNDLE_DIR, 'main.mjs')], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.setEncoding('utf8').on('data', (d: string) => {
      out += d;
    });
    p.stderr.setEncoding('utf8').on('data', (d: string) => {
      out += d;
    });
    const status = await new Promise<number | null>((r) => p.on('close', (c) => r(c)));
    assert.equal(status, 0, out);
    const expected = process.platform === 'linux' && process.env.CORRAL_NATIVE !== '0' ? 'native' : 'node';
    assert.equal(out.trim(), `${expected} 5`);
  });
});

for (const kind of ['native', 'vfork', 'node'] as const) {
  describe(`spawnPiped (${kind})`, { skip: kind !== 'node' && needsAddon('the native spawner') }, () => {
    it('reports exit codes: status & 0xff, 128+signo for signals', async () => {
      assert.deepEqual(await run(kind, sh('printf out; printf err >&2; exit 3')), {
        stdout: 'out',
        stderr: 'err',
        code: 3,
        signal: null,
      });
      assert.equal((await run(kind, sh('exit 300'))).code, 44);
      assert.equal((await run(kind, sh('exit 0'))).code, 0);
      const k9 = await run(kind, sh('kill -9 $$'));
      assert.equal(k9.code, 137);
      assert.equal(k9.signal, 'SIGKILL');
      const term = await run(kind, sh('kill -TERM $$'));
      assert.equal(term.code, 143);
      assert.equal(term.signal, 'SIGTERM');
    });

    it('resets signal dispositions: the child is not left ignoring SIGPIPE like Node', async () => {
      // A shell keeps signals that were ignored when it started ignored, so this survives if SIGPIPE was inherited.
      const r = await run(kind, sh('kill -PIPE $$; echo survived'));
      assert.equal(r.stdout, '');
      assert.equal(r.code, 141);
      assert.equal(r.signal, 'SIGPIPE');
    });

    it('the child runs with the normal scheduling policy (SCHED_OTHER)', async () => {
      // The native spawner starts children as SCHED_BATCH so that they do not preempt the event loop; they must
      // switch back before exec.
      const r = await run(kind, {
        file: '/bin/grep',
        argv: ['grep', '^policy', '/proc/self/sched'],
        env: {},
        cwd: '/',
      });
      assert.match(r.stdout, /^policy\s+:\s+0\n$/);
    });

    it('the spawning thread is SCHED_OTHER again once the loop polls; a PTY child of the same turn is too', async () => {
      // The native spawner keeps this thread SCHED_BATCH from its first spawn of a loop turn until the loop is
      // about to poll (spawn.c, batch_begin); node-pty forks this thread, so it must end that window first.
      const policy = () =>
        Number(readFileSync('/proc/thread-self/stat', 'utf8').split(') ')[1]!.split(' ')[38]);
      const c = spawnWith(kind, sh('exit 0'), { stdin: 'null' });
      const term = spawnPty('/bin/grep', ['^policy', '/proc/self/sched'], {
        cwd: '/',
        env: {},
        cols: 80,
        rows: 24,
      });
      let out = '';
      term.onData((d) => {
        out += d.toString();
      });
      const exited = new Promise<void>((r) => term.onExit(() => r()));
      await finish(c);
      await exited;
      assert.match(out, /^policy\s+:\s+0\r?\n$/);
      await new Promise((r) => setImmediate(r));
      assert.equal(policy(), 0, 'SCHED_OTHER');
    });

    it('stdin null is /dev/null; the child reads EOF at once', async () => {
      const c = spawnWith(kind, sh('cat; readlink /proc/$$/fd/0'), { stdin: 'null' });
      assert.equal(c.stdin, null);
      const r = await finish(c);
      assert.equal(r.stdout, '/dev/null\n');
      assert.equal(r.code, 0);
    });

    it('stdin pipe carries data and EOF', async () => {
      const r = await run(kind, sh('cat; echo "[eof]"'), 'hello\nworld\n');
      assert.equal(r.stdout, 'hello\nworld\n[eof]\n');
      assert.equal(r.code, 0);
    });

    it('passes argv[0] as given (arg0)', async () => {
      const shell = await run(kind, {
        file: '/bin/sh',
        argv: ['my-arg0', '-c', 'echo "$0"'],
        env: {},
        cwd: '/',
      });
      assert.equal(shell.stdout, 'my-arg0\n');
      const cat = await run(kind, {
        file: '/bin/cat',
        argv: ['other name', '/proc/self/cmdline'],
        env: {},
        cwd: '/',
      });
      assert.equal(cat.stdout, 'other name\0/proc/self/cmdline\0');
    });

    it('gives the child exactly spec.env', async () => {
      const env = { FOO: 'bar', EMPTY: '', 'WITH SPACE': 'a=b c', UNICODE: 'é✓' };
      const r = await run(kind, { file: '/usr/bin/env', argv: ['env'], env, cwd: '/' });
      assert.deepEqual(
        r.stdout.split('\n').filter(Boolean).sort(),
        Object.entries(env)
          .map(([k, v]) => `${k}=${v}`)
          .sort(),
      );
      assert.equal((await run(kind, { file: '/usr/bin/env', argv: ['env'], env: {}, cwd: '/' })).stdout, '');
    });

    it('runs in spec.cwd', async () => {
      const cwd = join(dir, `cwd-${kind}`);
      mkdirSync(cwd);
      const r = await run(kind, { file: '/bin/pwd', argv: ['pwd', '-P'], env: {}, cwd });
      assert.equal(r.stdout, `${realpathSync(cwd)}\n`);
    });

    it('passes extraFds at 3, 4, …; null leaves the slot closed', async () => {
      writeFileSync(join(dir, `a-${kind}`), 'from fd 3\n');
      writeFileSync(join(dir, `b-${kind}`), 'from fd 5\n');
      const a = openSync(join(dir, `a-${kind}`), 'r');
      const b = openSync(join(dir, `b-${kind}`), 'r');
      try {
        const r = await run(
          kind,
          sh('cat <&3; if [ -e /proc/$$/fd/4 ]; then echo open4; else echo closed4; fi; cat <&5', {
            extraFds: [a, null, b],
          }),
        );
        assert.equal(r.stdout, 'from fd 3\nclosed4\nfrom fd 5\n');
        assert.equal(r.code, 0);
      } finally {
        closeSync(a);
        closeSync(b);
      }
    });

    it('reports exec failures synchronously as SpawnError with the OS text', async () => {
      const file = join(dir, `plain-${kind}`);
      writeFileSync(file, 'not a program\n');
      chmodSync(file, 0o644);
      const cases: [Partial<LaunchSpec>, string, string][] = [
        [{ file: join(dir, 'no-such-program') }, 'ENOENT', 'No such file or directory (os error 2)'],
        [{ cwd: join(dir, 'no-such-dir') }, 'ENOENT', 'No such file or directory (os error 2)'],
        [{ cwd: file }, 'ENOTDIR', 'Not a directory (os error 20)'],
        [{ file: dir }, 'EACCES', 'Permission denied (os error 13)'],
        [{ file }, 'EACCES', 'Permission denied (os error 13)'],
      ];
      const fdsBefore = readdirSync('/proc/self/fd').length;
      for (const [over, errno, text] of cases) {
        const spec: LaunchSpec = { file: '/bin/true', argv: ['x'], env: {}, cwd: '/', ...over };
        assert.throws(
          () => spawnWith(kind, spec, { stdin: 'pipe' }),
          (e: unknown) => {
            assert.ok(e instanceof SpawnError, `${JSON.stringify(over)}: ${String(e)}`);
            assert.equal(e.errno, errno, JSON.stringify(over));
            assert.equal(e.osMessage, text);
            assert.equal(e.message, text);
            return true;
          },
        );
      }
      // Failed spawns leave no pipes behind (child_process closes them on the next tick).
      await until(
        'the pipes of failed spawns to close',
        () => readdirSync('/proc/self/fd').length <= fdsBefore,
      );
    });

    it('a spec whose very file and cwd were just checked (spec.checked) is not checked again: async mode leaves it to execve', async () => {
      const missing = join(dir, 'checked-then-gone');
      const gone: LaunchSpec = {
        file: missing,
        argv: ['x'],
        env: {},
        cwd: '/',
        checked: { file: missing, cwd: '/' },
      };
      const refused = (spec: LaunchSpec) => {
        try {
          spawnWith(kind, spec, { stdin: 'null' });
        } catch (e) {
          return e instanceof SpawnError ? e.errno : String(e);
        }
        return null;
      };
      // No synchronous check in async mode (the caller vouched for both paths): the child's execve reports it. vfork
      // reports execve's own error and child_process checks in JS: synchronous either way.
      if (kind !== 'native') assert.equal(refused(gone), 'ENOENT');
      else {
        const r = await run(kind, gone);
        assert.equal(r.code, 127);
        assert.equal(r.stderr, `corral: cannot execute ${missing}: No such file or directory\n`);
      }
      // A spec derived from a checked one (other file, other cwd) is checked as always, in every mode.
      const otherFile = { ...gone, checked: { file: '/bin/true', cwd: '/' } };
      const otherCwd = { ...otherFile, file: '/bin/true', cwd: join(dir, 'no-such-dir') };
      assert.equal(refused(otherFile), 'ENOENT');
      assert.equal(refused(otherCwd), 'ENOENT');
    });

    it('exec failures only execve can see: SpawnError (vfork), or (async: native, child_process) exit 127 with the error on stderr', async () => {
      const script = join(dir, `bad-interpreter-${kind}`);
      writeFileSync(script, '#!/no/such/interpreter\necho never\n');
      chmodSync(script, 0o755);
      const spec: LaunchSpec = { file: script, argv: ['x'], env: {}, cwd: '/' };
      if (kind !== 'vfork') {
        const r = await run(kind, spec);
        assert.deepEqual(r, {
          stdout: '',
          stderr: `corral: cannot execute ${script}: No such file or directory\n`,
          code: 127,
          signal: null,
        });
      } else {
        assert.throws(
          () => spawnWith(kind, spec, { stdin: 'null' }),
          (e: unknown) => e instanceof SpawnError && e.errno === 'ENOENT',
        );
      }
    });

    it('makes the child its own session and process-group leader', async () => {
      const c = spawnWith(
        kind,
        { file: '/bin/cat', argv: ['cat', '/proc/self/stat'], env: {}, cwd: '/' },
        {
          stdin: 'null',
        },
      );
      const r = await finish(c);
      const [, , pgrp, session] = r.stdout.slice(r.stdout.lastIndexOf(')') + 2).split(' ');
      assert.equal(Number(pgrp), c.pid);
      assert.equal(Number(session), c.pid);
    });

    it('a group kill takes a background grandchild', async () => {
      const c = spawnWith(kind, sh('sleep 1000 & echo $!; wait'), { stdin: 'null' });
      const done = finish(c);
      const grandchild = await new Promise<number>((resolve) => {
        let line = '';
        c.stdout.on('data', (d: Buffer | string) => {
          line += String(d);
          if (line.includes('\n')) resolve(Number(line.trim()));
        });
      });
      assert.ok(!dead(grandchild));
      process.kill(-c.pid, 'SIGKILL');
      const r = await done;
      assert.equal(r.code, 137);
      await until(`grandchild ${grandchild} to die`, () => dead(grandchild));
    });

    it('a signal sent right after the spawn, before the child may have run, still lands', async () => {
      // In async mode the child calls setsid a moment after spawnPiped returns: until then the group does not exist,
      // and a group kill must fall back to the pid (as ManagedProcess.kill does). Blocked signals stay pending.
      for (const [signal, code] of [
        ['SIGKILL', 137],
        ['SIGTERM', 143],
      ] as const) {
        const c = spawnWith(
          kind,
          { file: '/bin/sleep', argv: ['sleep', '1000'], env: {}, cwd: '/' },
          { stdin: 'null' },
        );
        try {
          process.kill(-c.pid, signal);
        } catch {
          process.kill(c.pid, signal);
        }
        const r = await finish(c);
        assert.equal(r.code, code);
        assert.equal(r.signal, signal);
      }
    });

    it('leaks no fds of this process into the child', async () => {
      const mine = openSync(join(dir, `leak-${kind}`), 'w');
      try {
        const r = await run(kind, {
          file: '/bin/ls',
          argv: ['ls', '-l', '/proc/self/fd'],
          env: {},
          cwd: '/',
        });
        // child_process cannot close fds this process inherited without O_CLOEXEC; the native spawner closes them.
        const allowed = kind === 'node' ? inheritableFds() : [];
        assert.deepEqual(
          childFds(r.stdout).filter((fd) => !allowed.includes(fd)),
          [0, 1, 2],
          r.stdout,
        );
      } finally {
        closeSync(mine);
      }
    });

    it('closes inherited non-CLOEXEC fds too', {
      skip: kind === 'node' ? 'child_process hands on fds the server inherited without O_CLOEXEC' : false,
    }, async () => {
      // The helper gets fd 3 from us without O_CLOEXEC (a pipe), then lists what its own child sees.
      const out = await helperOutput(
        `const m = await import(${JSON.stringify(SPAWNER)});
           const c = ${helperSpawn(kind, "{ file: '/bin/ls', argv: ['ls', '-l', '/proc/self/fd'], env: {}, cwd: '/' }")};
           const fs = await import('node:fs');
           console.log(fs.readlinkSync('/proc/self/fd/3'));
           c.stdout.on('data', (d) => process.stdout.write(Buffer.from(d)));`,
        process.env,
        ['pipe'],
      );
      const [inherited, ...listing] = out.split('\n');
      assert.match(inherited!, /^(pipe|socket):/);
      assert.deepEqual(childFds(listing.join('\n')), [0, 1, 2], out);
    });

    it('the child dies when the spawning process is SIGKILLed (PR_SET_PDEATHSIG)', {
      skip: kind === 'node' ? 'child_process cannot set PR_SET_PDEATHSIG' : false,
    }, async () => {
      const h = helper(
        `const m = await import(${JSON.stringify(SPAWNER)});
           const c = ${helperSpawn(kind, "{ file: '/bin/sleep', argv: ['sleep', '1000'], env: {}, cwd: '/' }")};
           console.log(c.pid);`,
      );
      const pid = await new Promise<number>((resolve) => {
        let line = '';
        h.stdout!.on('data', (d: Buffer) => {
          line += String(d);
          if (line.includes('\n')) resolve(Number(line.trim()));
        });
      });
      assert.ok(pid > 0 && !dead(pid));
      const closed = new Promise((r) => h.on('close', r));
      h.kill('SIGKILL');
      await closed;
      await until(`child ${pid} to die with its spawner`, () => dead(pid));
    });

    it('calls onExit exactly once per callback, also when registered after the exit', async () => {
      const c = spawnWith(kind, sh('exit 7'), { stdin: 'null' });
      const calls: number[] = [];
      c.onExit((code) => calls.push(code));
      await finish(c);
      await new Promise<void>((resolve) =>
        c.onExit((code) => {
          calls.push(code);
          resolve();
        }),
      );
      assert.deepEqual(calls, [7, 7]);
    });

    it('handles many concurrent children', async () => {
      const results = await Promise.all(
        Array.from({ length: 64 }, (_, i) =>
          run(kind, sh(`for j in 1 2 3; do echo ${i}-$j; done; exit ${i % 5}`)),
        ),
      );
      results.forEach((r, i) => {
        assert.equal(r.stdout, `${i}-1\n${i}-2\n${i}-3\n`);
        assert.equal(r.code, i % 5);
      });
    });
  });
}
