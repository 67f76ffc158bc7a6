/**
 * The cgroups of whole servers (src/process/cgroup.ts) and what a server leaves behind: a SIGKILLed server takes its
 * commands' descendants along (tty `nohup` children, `setsid` escapes: the group watchdog), leaves no cgroups, and
 * what a dead server did leave (cgroups, the private directory older versions made) is removed by the next server, never a live
 * server's and never anything planted through a symlink. A fork bomb of an unprivileged server (uid 65534, its own
 * delegated cgroup, RLIMIT_NPROC 300) no longer takes the uid's whole process budget. Without a usable cgroup the
 * server says so and refuses per-start limits.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import {
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { cgroupHost, setupCgroups } from '../../src/process/cgroup.js';
import { ownTag, processStartTime } from '../../src/process/serverTag.js';
import { spawnerKind } from '../../src/process/spawner.js';
import { type Cli, CORRAL_BIN, startCli } from '../helpers/cli.js';
import { RpcClient } from '../helpers/client.js';
import { alive, until } from '../helpers/server.js';
import { seed, special } from './sandbox-util.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PATH = '/usr/local/bin:/usr/bin:/bin';
const host = cgroupHost();
const noCgroups =
  host.status.enforced.length < 2
    ? `no cgroup with pids and memory limits here: ${host.status.problem}`
    : false;
/** Whether cgroup v2 can be used here (set up once and removed again). */
const v2Usable = (() => {
  const probe = setupCgroups('v2');
  probe.dispose();
  return probe.status.version === 'v2';
})();
const noWatchdog = spawnerKind !== 'native' ? 'the group watchdog belongs to the native spawner' : false;

/** Every CLI started, so that none outlives the file even when a test fails early. */
const started: Cli[] = [];
after(() => {
  for (const c of started) if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
});

async function startServerCli(
  args: string[],
  env: NodeJS.ProcessEnv,
  wrap: string[] = [],
): Promise<Cli & { url: string }> {
  const cli = await startCli(['exec-server', '--listen', 'ws://127.0.0.1:0', ...args], { env, wrap });
  started.push(cli);
  return { ...cli, url: cli.url! };
}

/** The pid of the server that `cli` runs (the wrapper execs it, so it is the same process). */
const serverPid = (cli: Cli) => cli.proc.pid!;

function watchdogOf(pid: number): number | undefined {
  return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
    .split(/\s+/)
    .filter(Boolean)
    .map(Number)
    .find((p) => readFileSync(`/proc/${p}/comm`, 'utf8').trim() === 'corral-watchdog');
}

/** Starts `script`, which prints a pid first; returns that pid. */
async function startPrinting(c: RpcClient, processId: string, script: string, tty: boolean, extra = {}) {
  await c.request('process/start', {
    processId,
    argv: ['/bin/sh', '-c', script],
    cwd: '/tmp',
    env: { PATH },
    tty,
    ...extra,
  });
  await c.waitFor((n) => n.method === 'process/output' && n.params.processId === processId, 20_000);
  await until(() => /\d+\s/.test(c.output(processId)), 5000, 'the pid');
  return Number(c.output(processId).trim().split(/\s+/)[0]);
}

/**
 * Our cgroup directories of a process (from /proc/<pid>/cgroup): the corral-<tag> base per hierarchy (a command's
 * `p-<n>` is in it; in the v1 cpu hierarchy the command is in the base itself).
 */
function basesOf(pid: number): string[] {
  const out: string[] = [];
  for (const line of readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n')) {
    const [, ctl, path] = line.split(':');
    const m = /^(.*\/corral-[\d.]+)(\/p-\d+)?$/.exec(path ?? '');
    if (!m) continue;
    const mount = ctl === '' ? '/sys/fs/cgroup/unified' : `/sys/fs/cgroup/${ctl!.replace(/^name=/, '')}`;
    for (const d of [mount, '/sys/fs/cgroup']) if (existsSync(`${d}${m[1]}`)) out.push(`${d}${m[1]}`);
  }
  return [...new Set(out)];
}

function killAll(pids: number[]): void {
  for (const p of pids) if (alive(p)) process.kill(p, 'SIGKILL');
}

describe('servers that die', () => {
  let tmp: string;
  let env: NodeJS.ProcessEnv;
  before(() => {
    tmp = mkdtempSync('/var/tmp/corral-cg-it-');
    // Older servers' private directories went to $XDG_RUNTIME_DIR (without it /dev/shm, never a temp dir a sandbox
    // may write), and that is where the sweep looks: here, into tmp.
    env = { ...process.env, TMPDIR: tmp, XDG_RUNTIME_DIR: tmp };
  });
  after(() => rmSync(tmp, { recursive: true, force: true }));

  for (const cgroups of ['1', '0'] as const) {
    it(`a SIGKILLed server: a nohup child of a tty process dies (CORRAL_CGROUPS=${cgroups})`, {
      skip: noWatchdog || (cgroups === '1' && noCgroups),
    }, async () => {
      const cli = await startServerCli([], { ...env, CORRAL_CGROUPS: cgroups });
      const c = await RpcClient.open(cli.url);
      const child = await startPrinting(c, 't', 'nohup sleep 300 >/dev/null 2>&1 & echo $!; sleep 300', true);
      // Once nohup has made it ignore SIGHUP, the pty's hang-up no longer reaches it.
      await until(
        () =>
          (BigInt(`0x${/^SigIgn:\s+(\S+)/m.exec(readFileSync(`/proc/${child}/status`, 'utf8'))?.[1]}`) &
            1n) ===
          1n,
        5000,
        'nohup to ignore SIGHUP',
      );
      cli.proc.kill('SIGKILL');
      await cli.exited;
      try {
        await until(() => !alive(child), 3000, 'the nohup child to die with the server');
      } finally {
        killAll([child]);
      }
    });
  }

  // v2 as well where a cgroup2 hierarchy is writable (on the v1 development machines: the unified hierarchy, without
  // controllers): cgroup.kill on terminate, and the watchdog's v2 path.
  for (const version of ['auto', 'v2'] as const) {
    const skipV2 = version === 'v2' && !v2Usable ? 'no writable cgroup v2' : false;
    it(`a setsid descendant dies on terminate and with a SIGKILLed server; no cgroup is left (CORRAL_CGROUPS=${version})`, {
      skip: noWatchdog || (version === 'auto' ? noCgroups : skipV2),
    }, async () => {
      const cli = await startServerCli([], { ...env, CORRAL_CGROUPS: version });
      const c = await RpcClient.open(cli.url);
      const setsidEscape = "setsid /bin/sh -c 'echo $$; exec sleep 300 >/dev/null 2>&1 </dev/null' & wait";
      const first = await startPrinting(c, 'p1', setsidEscape, false);
      const second = await startPrinting(c, 'p2', setsidEscape, false);
      const bases = basesOf(second);
      try {
        await c.request('process/terminate', { processId: 'p1' });
        await until(() => !alive(first), 3000, 'the setsid descendant to die on terminate');
        cli.proc.kill('SIGKILL');
        await cli.exited;
        await until(() => !alive(second), 3000, 'the setsid descendant to die with the server');
        assert.ok(bases.length > 0, 'the command ran in our cgroup');
        await until(() => !bases.some(existsSync), 3000, 'the cgroups to be removed');
      } finally {
        killAll([first, second]);
      }
    });
  }

  it('SIGTERM: every cgroup of the server is gone after it exits', { skip: noCgroups }, async () => {
    const cli = await startServerCli([], env);
    const c = await RpcClient.open(cli.url);
    const daemon = await startPrinting(c, 'd', 'sleep 300 >/dev/null 2>&1 </dev/null & echo $!', false);
    const bases = basesOf(daemon);
    assert.ok(bases.length > 0);
    cli.proc.kill('SIGTERM');
    await cli.exited;
    try {
      await until(() => !alive(daemon), 3000, 'the left-behind daemon to be killed');
      await until(() => !bases.some(existsSync), 3000, 'the cgroups to be removed');
    } finally {
      killAll([daemon]);
    }
  });

  it('the next server removes what a dead server left (cgroups and what is in them, an older version’s private directory), never a live server’s nor planted entries', {
    skip: noWatchdog || noCgroups,
    timeout: 60_000,
  }, async () => {
    const sandbox = seed({ cwd: '/tmp', entries: [special('root', 'read'), special('slash_tmp', 'write')] });
    // The dead one: its watchdog is killed first, so nothing cleans up after it.
    const dead = await startServerCli([], env);
    const d = await RpcClient.open(dead.url);
    const orphan = await startPrinting(
      d,
      'bg',
      'sleep 300 >/dev/null 2>&1 </dev/null & echo $!; sleep 300',
      false,
    );
    await startPrinting(d, 'sbx', 'echo $$; sleep 300', false, { sandbox });
    // The live one.
    const live = await startServerCli([], env);
    const l = await RpcClient.open(live.url);
    const liveChild = await startPrinting(l, 'bg', 'echo $$; sleep 300', false);
    await startPrinting(l, 'sbx', 'echo $$; sleep 300', false, { sandbox });
    const tagOf = (pid: number) => `${ownTag().pidNs}.${pid}.${processStartTime(pid)}`;
    const deadTag = tagOf(serverPid(dead));
    const liveTag = tagOf(serverPid(live));
    const privateOf = (tag: string) => readdirSync(tmp).filter((e) => e.startsWith(`corral-sandbox-${tag}-`));
    // Servers make no private directory any more (a sandboxed start ran on each); older versions did, named with
    // their tag: one each, as such a server would have left it.
    assert.equal(privateOf(deadTag).length, 0);
    assert.equal(privateOf(liveTag).length, 0);
    for (const tag of [deadTag, liveTag]) mkdirSync(`${tmp}/corral-sandbox-${tag}-older`, { mode: 0o700 });
    const deadBases = basesOf(orphan);
    const liveBases = basesOf(liveChild);
    assert.ok(deadBases.length > 0 && liveBases.length > 0);

    // Planted with a dead server's name: a symlink to a directory of ours, and directories that are not ours
    // (another user's; ours but not 0700). None of it may go.
    const gone = `${ownTag().pidNs}.999999.1`;
    const target = mkdtempSync('/var/tmp/corral-cg-target-');
    writeFileSync(`${target}/precious`, 'x');
    symlinkSync(target, `${tmp}/corral-sandbox-${gone}-link`);
    mkdirSync(`${tmp}/corral-sandbox-${gone}-theirs`, { mode: 0o700 });
    writeFileSync(`${tmp}/corral-sandbox-${gone}-theirs/file`, 'x');
    chownSync(`${tmp}/corral-sandbox-${gone}-theirs`, 65534, 65534);
    mkdirSync(`${tmp}/corral-sandbox-${gone}-open`, { mode: 0o755 });
    // Inside the dead server's own directory: a link out, which must be removed as a link, never followed.
    symlinkSync(target, `${tmp}/${privateOf(deadTag)[0]}/link-out`);

    try {
      const dog = watchdogOf(serverPid(dead));
      assert.ok(dog, 'the dead server had a watchdog');
      process.kill(dog, 'SIGKILL');
      await until(() => !alive(dog), 2000, 'its watchdog to die');
      dead.proc.kill('SIGKILL');
      await dead.exited;
      assert.ok(alive(orphan), 'nothing has cleaned up yet');
      assert.ok(deadBases.every(existsSync));

      const next = await startServerCli([], env);
      try {
        await until(() => !alive(orphan), 5000, 'the orphan in the dead server’s cgroup to be killed');
        await until(() => !deadBases.some(existsSync), 5000, 'the dead server’s cgroups to be removed');
        await until(() => privateOf(deadTag).length === 0, 5000, 'the dead server’s private directory to go');
        assert.ok(liveBases.every(existsSync), 'the live server’s cgroups stay');
        assert.equal(privateOf(liveTag).length, 1, 'the live server’s private directory stays');
        assert.ok(alive(liveChild));
        assert.equal(readFileSync(`${target}/precious`, 'utf8'), 'x');
        assert.ok(existsSync(`${tmp}/corral-sandbox-${gone}-link`));
        assert.ok(existsSync(`${tmp}/corral-sandbox-${gone}-theirs/file`));
        assert.ok(existsSync(`${tmp}/corral-sandbox-${gone}-open`));
      } finally {
        next.proc.kill('SIGTERM');
        await next.exited;
      }
    } finally {
      live.proc.kill('SIGTERM');
      await live.exited;
      killAll([orphan, liveChild]);
      rmSync(target, { recursive: true, force: true });
      for (const e of ['link', 'theirs', 'open'])
        rmSync(`${tmp}/corral-sandbox-${gone}-${e}`, { recursive: true, force: true });
    }
  });

  it('--pids-max and --memory-max: bad values stop the CLI with a message naming the flag', () => {
    for (const [flag, value, message] of [
      ['--pids-max', '0', /--pids-max must be a whole number 1\.\.4194304/],
      ['--pids-max', 'many', /--pids-max must be a whole number/],
      ['--memory-max', '12x', /--memory-max: expected a size of at least 1M \(e\.g\. 512M, 8G\), got 12x/],
      ['--memory-max', '1000', /--memory-max: expected a size of at least 1M/],
    ] as const) {
      const r = spawnSync(process.execPath, [CORRAL_BIN, 'exec-server', flag, value], {
        cwd: ROOT,
        encoding: 'utf8',
      });
      assert.equal(r.status, 2, `${flag} ${value}`);
      assert.match(r.stderr, message);
    }
  });

  it('without a usable cgroup the server says so at start and refuses per-start limits', async () => {
    const cli = await startServerCli([], { ...env, CORRAL_CGROUPS: '0' });
    try {
      assert.match(
        cli.stderr(),
        /commands are not bounded \(no pids or memory limit\): cgroups are turned off/,
      );
      const c = await RpcClient.open(cli.url);
      const e = await c.requestError('process/start', {
        processId: 'x',
        argv: ['/bin/true'],
        cwd: '/tmp',
        env: { PATH },
        tty: false,
        limits: { pidsMax: 10 },
      });
      assert.equal(e.code, -32603);
      assert.match(e.message, /^limits\.pidsMax: this server cannot enforce a pids limit/);
      // Without limits it runs, unbounded, as before.
      await c.request('process/start', {
        processId: 'y',
        argv: ['/bin/true'],
        cwd: '/tmp',
        env: { PATH },
        tty: false,
      });
      await c.collect('y');
      c.close();
    } finally {
      cli.proc.kill('SIGTERM');
      await cli.exited;
    }
  });
});

/** A cgroup of our own, delegated to uid 65534 (what `systemd-run -p Delegate=yes` gives a user), per hierarchy. */
function delegatedCgroups(): string[] | string {
  if (process.getuid?.() !== 0) return 'not root: cannot delegate a cgroup';
  if (host.status.version !== 'v1' && host.status.version !== 'v2') return 'no usable cgroup';
  const dirs = host.status.dirs.map(
    (d) => `${d.slice(0, d.lastIndexOf('/'))}/corral-test-delegated-${process.pid}`,
  );
  for (const d of dirs) {
    mkdirSync(d);
    chownSync(d, 65534, 65534);
    for (const f of ['cgroup.procs', 'tasks', 'cgroup.subtree_control'])
      if (existsSync(`${d}/${f}`)) chownSync(`${d}/${f}`, 65534, 65534);
  }
  return dirs;
}

describe('an unprivileged server', () => {
  const NOBODY = ['--reuid=65534', '--regid=65534', '--clear-groups'];
  let skip: string | false = noCgroups;
  if (!skip && process.getuid?.() !== 0) skip = 'not root: nothing to switch away from';
  if (!skip) {
    try {
      execFileSync('setpriv', [...NOBODY, 'test', '-r', `${ROOT}/src/cli.ts`], { stdio: 'ignore' });
    } catch {
      skip = 'setpriv is missing, or uid 65534 cannot read the sources';
    }
  }

  it('a fork bomb under RLIMIT_NPROC 300 stays at --pids-max while another session starts processes', {
    skip,
    timeout: 90_000,
  }, async () => {
    const dirs = delegatedCgroups();
    assert.ok(Array.isArray(dirs), String(dirs));
    // Into the delegated cgroups as root, then uid 65534 with 300 processes for the whole uid.
    const enter = dirs.map((_, i) => `echo $$ > "$${i + 1}/cgroup.procs" && `).join('');
    const script = `${enter}shift ${dirs.length} && exec prlimit --nproc=300 setpriv ${NOBODY.join(' ')} "$@"`;
    const cli = await startServerCli(
      ['--pids-max', '64'],
      { ...process.env, HOME: '/tmp', TMPDIR: '/tmp', XDG_RUNTIME_DIR: '' },
      ['/bin/sh', '-c', script, 'sh', ...dirs],
    );
    const family: number[] = [];
    try {
      const a = await RpcClient.open(cli.url, 'bomber');
      const b = await RpcClient.open(cli.url, 'bystander');
      // bash retries the forks that fail: the bomb holds on to every process it can get (1001 at most).
      const bomb = 'echo $$; i=0; while [ $i -lt 1000 ]; do sleep 60 & i=$((i+1)); done; wait';
      const root = await startPrinting(a, 'bomb', bomb, false, { argv: ['/bin/bash', '-c', bomb] });
      const t0 = Date.now();
      let peak = 0;
      // The bomb's processes: those in its pids cgroup (the line naming our p-<n> cgroup, never a shared one).
      const line = readFileSync(`/proc/${root}/cgroup`, 'utf8')
        .split('\n')
        .find((l) => /:pids:.*\/corral-[\d.]+\/p-\d+$/.test(l));
      assert.ok(line, 'the bomb runs in a cgroup of ours');
      const count = () => {
        const inBomb = readdirSync('/proc').filter((e) => {
          if (!/^\d+$/.test(e)) return false;
          try {
            return readFileSync(`/proc/${e}/cgroup`, 'utf8').split('\n').includes(line);
          } catch {
            return false;
          }
        });
        peak = Math.max(peak, inBomb.length);
        return inBomb.map(Number);
      };
      await until(
        () => {
          count();
          return a.output('bomb', 'stderr').includes('fork: retry') || Date.now() - t0 > 10_000;
        },
        20_000,
        'the bomb to grow',
      );
      await b.request('process/start', {
        processId: 'ok',
        argv: ['/bin/echo', 'still here'],
        cwd: '/tmp',
        env: { PATH },
        tty: false,
      });
      const events = await b.collect('ok');
      assert.equal(b.output('ok'), 'still here\n');
      assert.equal(events.find((e) => e.method === 'process/exited')?.params.exitCode, 0);
      family.push(...count());
      assert.ok(peak <= 64, `the bomb had ${peak} processes with --pids-max 64`);
      await a.request('process/terminate', { processId: 'bomb' });
      const exited = (await a.collect('bomb', 20_000)).find((e) => e.method === 'process/exited')!;
      assert.equal(exited.params.limitHit, 'pids');
      await until(() => !family.some(alive), 5000, 'every bomb process to die');
      assert.ok(Date.now() - t0 < 30_000, 'bounded in time');
    } finally {
      cli.proc.kill('SIGTERM');
      await cli.exited;
      killAll(family);
      // The server removes its cgroups at exit; its watchdog leaves the delegated cgroup last.
      await until(
        () =>
          dirs.every(
            (d) =>
              readdirSync(d).every((e) => !e.startsWith('corral-')) &&
              readFileSync(`${d}/cgroup.procs`, 'utf8').trim() === '',
          ),
        10_000,
        'the server to remove its cgroups and leave',
      );
      for (const d of dirs) rmdirSync(d);
    }
  });
});
