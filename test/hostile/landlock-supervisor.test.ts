/**
 * Issue 30, item 2 (its last gap): a Landlock command has no pid namespace, and where no cgroup holds it nothing but a
 * supervisor finds what it started once that left its process group and session (`setsid`). On cca01b7 only pipe-mode
 * starts of the native spawner in async mode had one (spawn.c supervisor_main): a Landlock *terminal* (node-pty, through
 * the sandbox launcher), a pipe-mode start of the native spawner in vfork mode (every architecture but x86_64 and
 * arm64) and the child_process spawner left a `setsid` daemon running after the command's exit, its group kill
 * (process/terminate) and the death of the process that started it. Now each of them runs the command under the
 * launcher's supervisor (src/platform/native/supervise.c) and the daemon dies with the command, as in bwrap.
 * The spawners are driven directly, as the server drives them; the protocol-level walk (a server with CORRAL_CGROUPS=0,
 * process/terminate, the server SIGKILLed) is landlock-cgroup.test.ts.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { sandboxLauncher } from '../../src/platform/sandbox.js';
import type { LaunchSpec } from '../../src/process/launch.js';
import { type PtyChild, spawnPty } from '../../src/process/pty.js';
import { type SpawnedChild, spawnPipedWith } from '../../src/process/spawner.js';
import { buildSeccompFilter } from '../../src/sandbox/index.js';
import { handledFs, READ, SCOPE, WRITE } from '../../src/sandbox/linux/landlock.js';
import { buildRuleset, closeRuleset, landlockSupport } from '../../src/sandbox/linux/landlockNative.js';
import { hostSeccompArch } from '../../src/sandbox/linux/seccomp.js';
import { until } from '../helpers/server.js';
import { alive, readPid } from './procs.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PATH = '/usr/local/bin:/usr/bin:/bin';
const support = landlockSupport();
const dir = realpathSync(mkdtempSync(join('/var/tmp', 'corral-ll-supervisor-')));
after(() => rmSync(dir, { recursive: true, force: true }));

type Way = 'native async' | 'native vfork' | 'child_process' | 'terminal';
const WAYS: Way[] = ['native async', 'native vfork', 'child_process', 'terminal'];

/** A shell line that starts a daemon (own session and group) writing its pid to `file`, then waits for that pid. */
function daemonThen(file: string, then: string): string {
  return (
    `setsid -f /bin/sh -c 'echo $$ > ${file}.tmp && mv ${file}.tmp ${file}; exec sleep 300' </dev/null >/dev/null 2>&1; ` +
    `while [ ! -s ${file} ]; do sleep 0.01; done; ${then}`
  );
}

function confinedSpec(script: string): { spec: LaunchSpec; close(): void } {
  const fd = buildRuleset({
    handledFs: handledFs(support.abi),
    handledNet: 0,
    scoped: support.abi >= 6 ? SCOPE.SIGNAL : 0,
    rules: [
      { path: '/', rights: READ },
      { path: dir, rights: WRITE },
      { path: '/dev', rights: WRITE },
    ],
    connectPorts: [],
  });
  return {
    spec: {
      file: '/bin/sh',
      argv: ['sh', '-c', script],
      env: { PATH },
      cwd: dir,
      freshSessionKeyring: true,
      confine: {
        rulesetFd: fd,
        seccomp: buildSeccompFilter(hostSeccompArch(os.arch(), os.machine()), 'network-enabled'),
      },
    },
    close: () => closeRuleset(fd),
  };
}

interface Started {
  pid: number;
  exit: Promise<number>;
  output(): string;
}

function start(way: Way, script: string): Started {
  const { spec, close } = confinedSpec(script);
  let out = '';
  try {
    if (way === 'terminal') {
      const t: PtyChild = spawnPty(spec.file, spec.argv.slice(1), {
        cwd: spec.cwd,
        env: spec.env,
        cols: 80,
        rows: 24,
        freshSessionKeyring: true,
        confine: spec.confine!,
      });
      t.onData((d) => {
        out += d.toString();
      });
      return { pid: t.pid, exit: new Promise((r) => t.onExit(r)), output: () => out };
    }
    const c: SpawnedChild =
      way === 'child_process'
        ? spawnPipedWith('node', spec, { stdin: 'null' })
        : spawnPipedWith('native', spec, { stdin: 'null' }, way === 'native vfork' ? 'vfork' : 'async');
    for (const s of [c.stdout, c.stderr])
      s.on('data', (d: Buffer) => {
        out += d.toString();
      });
    return { pid: c.pid, exit: new Promise((r) => c.onExit(r)), output: () => out };
  } finally {
    close();
  }
}

const leftovers: number[] = [];
after(() => {
  for (const pid of leftovers) {
    try {
      process.kill(pid, 'SIGKILL'); // only when a check failed: never leave one behind
    } catch {
      // gone, as it should be
    }
  }
});

let n = 0;
function pidFile(): string {
  return join(dir, `daemon-${++n}.pid`);
}

describe('a Landlock command that no cgroup holds runs under a supervisor, whichever way it starts', {
  skip: support.abi === 0 ? `no Landlock here: ${support.missing}` : false,
}, () => {
  for (const way of WAYS) {
    test(`${way}: its exit status comes back, and by then its setsid daemon is gone`, {
      timeout: 30_000,
    }, async () => {
      const file = pidFile();
      const s = start(way, daemonThen(file, 'exit 7'));
      const code = await s.exit;
      const daemon = readPid(file);
      leftovers.push(daemon);
      assert.equal(code, 7, s.output());
      assert.ok(daemon > 0, `no daemon started: ${s.output()}`);
      // Terminals: node-pty reports the launcher's exit, which waited for the supervisor to have reaped everything.
      // Pipes: the supervisor's exit, reported once it has none left.
      assert.ok(!alive(daemon), `the daemon ${daemon} outlived the command`);
    });

    test(`${way}: a group kill of the pid the server knows (process/terminate) kills its setsid daemon`, {
      timeout: 30_000,
    }, async () => {
      const file = pidFile();
      const s = start(way, daemonThen(file, 'exec sleep 300'));
      await until(() => alive(readPid(file)), 10_000, `the daemon: ${s.output()}`);
      const daemon = readPid(file);
      leftovers.push(daemon);
      process.kill(-s.pid, 'SIGKILL');
      assert.equal(await s.exit, 128 + 9);
      await until(() => !alive(daemon), 10_000, `the daemon ${daemon} to die with the group kill`);
    });

    test(`${way}: a signal to the group reaches the command, and its death by it comes back`, {
      timeout: 30_000,
    }, async () => {
      const file = pidFile();
      const s = start(way, `echo $$ > ${file}; exec sleep 300`);
      await until(() => readPid(file) > 0, 10_000, `the command: ${s.output()}`);
      process.kill(-s.pid, 'SIGTERM');
      assert.equal(await s.exit, 128 + 15, s.output());
    });

    test(`${way}: the command cannot signal its supervisor (Landlock signal scope)`, {
      timeout: 30_000,
      skip: support.abi < 6 ? `Landlock ABI ${support.abi} < 6 has no signal scope` : false,
    }, async () => {
      const s = start(way, 'kill -KILL $PPID && echo KILLED || echo REFUSED; exit 3');
      assert.equal(await s.exit, 3, s.output());
      assert.match(s.output(), /REFUSED/);
    });
  }

  for (const way of ['native vfork', 'child_process', 'terminal'] as const) {
    test(`${way}: its setsid daemon dies with the SIGKILLed process that started it`, {
      timeout: 60_000,
    }, async () => {
      const file = pidFile();
      const h = startHelper(way, daemonThen(file, 'exec sleep 300'));
      try {
        await until(() => alive(readPid(file)), 20_000, 'the daemon');
        const daemon = readPid(file);
        leftovers.push(daemon);
        h.kill('SIGKILL');
        await until(() => !alive(h.pid!), 10_000, 'the helper to die');
        await until(() => !alive(daemon), 10_000, `the daemon ${daemon} to die with its server`);
      } finally {
        h.kill('SIGKILL');
      }
    });
  }
});

describe("the launcher's options, malformed or hostile", {
  skip: sandboxLauncher ? false : 'the launcher is not built',
}, () => {
  const marker = join(dir, 'ran');
  const cases: [string, string[]][] = [
    ['no value', ['--supervise']],
    ['empty', ['--supervise', '']],
    ['zero', ['--supervise', '0']],
    ['negative', ['--supervise', '-1']],
    ['not a number', ['--supervise', '12ab']],
    ['too large', ['--supervise', '99999999999999999999']],
    ['huge (100 000 digits)', ['--supervise', '9'.repeat(100_000)]],
    ['not its parent', ['--supervise', '1']],
    ['not its parent (repeated, wide)', Array.from({ length: 5000 }, () => ['--supervise', '1']).flat()],
  ];
  for (const [what, args] of cases) {
    test(`--supervise ${what}: refused with a reason, the program never runs`, () => {
      const r = spawnSync(sandboxLauncher!, [...args, '--', '/bin/sh', '-c', `echo > ${marker}`], {
        encoding: 'utf8',
      });
      assert.equal(r.status, 127, r.stderr);
      assert.match(r.stderr, /^corral-sandbox-exec: .*(bad argument|the server is gone)/m, r.stderr);
      assert.equal(readPid(marker), 0);
      assert.throws(() => readFileSync(marker));
    });
  }
});

/** A Node process (standing in for the server) that starts `script` the given way, confined, and stays. */
function startHelper(way: Way, script: string): ChildProcess {
  const src = `
    const os = await import('node:os');
    const spawner = await import(${JSON.stringify(join(ROOT, 'src/process/spawner.ts'))});
    const pty = await import(${JSON.stringify(join(ROOT, 'src/process/pty.ts'))});
    const sb = await import(${JSON.stringify(join(ROOT, 'src/sandbox/index.ts'))});
    const ll = await import(${JSON.stringify(join(ROOT, 'src/sandbox/linux/landlock.ts'))});
    const native = await import(${JSON.stringify(join(ROOT, 'src/sandbox/linux/landlockNative.ts'))});
    const sc = await import(${JSON.stringify(join(ROOT, 'src/sandbox/linux/seccomp.ts'))});
    const abi = native.landlockSupport().abi;
    const fd = native.buildRuleset({ handledFs: ll.handledFs(abi), handledNet: 0, scoped: abi >= 6 ? ll.SCOPE.SIGNAL : 0,
      rules: [{ path: '/', rights: ll.READ }, { path: ${JSON.stringify(dir)}, rights: ll.WRITE }, { path: '/dev', rights: ll.WRITE }],
      connectPorts: [] });
    const confine = { rulesetFd: fd, seccomp: sb.buildSeccompFilter(sc.hostSeccompArch(os.arch(), os.machine()), 'network-enabled') };
    const spec = { file: '/bin/sh', argv: ['sh', '-c', ${JSON.stringify(script)}], env: { PATH: ${JSON.stringify(PATH)} }, cwd: ${JSON.stringify(dir)}, freshSessionKeyring: true, confine };
    ${
      way === 'terminal'
        ? `pty.spawnPty(spec.file, spec.argv.slice(1), { cwd: spec.cwd, env: spec.env, cols: 80, rows: 24, freshSessionKeyring: true, confine });`
        : way === 'child_process'
          ? `spawner.spawnPipedWith('node', spec, { stdin: 'null' });`
          : `spawner.spawnPipedWith('native', spec, { stdin: 'null' }, 'vfork');`
    }
    native.closeRuleset(fd);
    setInterval(() => {}, 1000);
  `;
  return spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', src], {
    cwd: ROOT,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}
