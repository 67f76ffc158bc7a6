/**
 * Per-command cgroups (src/process/cgroup.ts) through the real server: a fork bomb and a memory hog stay inside
 * their limits while other sessions keep working, `process/exited` names the limit that was hit, terminate kills
 * what left the process group, cgroups do not pile up, per-start `limits` are checked, and a sandboxed process cannot
 * write to the cgroup filesystem.
 *
 * Runs where the server gets a usable cgroup (root on the development machines: cgroup v1 pids + memory).
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, rmdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { cgroupHost, PREPARED_CGROUPS, poolBound } from '../../src/process/cgroup.js';
import { parseTag } from '../../src/process/serverTag.js';
import { startCli } from '../helpers/cli.js';
import { RpcClient } from '../helpers/client.js';
import { needsSandbox } from '../helpers/native.js';
import { alive, startTestServer, type TestServer, until } from '../helpers/server.js';
import { startParams } from '../helpers/startParams.js';
import { seed, special } from './sandbox-util.js';

const PATH = '/usr/local/bin:/usr/bin:/bin';
const host = cgroupHost();
const skip =
  host.status.enforced.length < 2
    ? `no cgroup with pids and memory limits here: ${host.status.problem ?? host.status.version}`
    : false;

/**
 * A fork bomb bounded by itself: bash starts `n` background sleeps and, like a real bomb, keeps retrying the forks
 * that fail (bash retries EAGAIN with a back-off), so it holds on to every process it can get.
 */
const bomb = (n: number) => `echo $$; i=0; while [ $i -lt ${n} ]; do sleep 60 & i=$((i+1)); done; wait`;

/** Every descendant of pid (through the ppid links in /proc). */
function descendants(pid: number): number[] {
  const kids = new Map<number, number[]>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${name}/stat`, 'utf8');
    } catch {
      continue;
    }
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    const list = kids.get(ppid) ?? [];
    list.push(Number(name));
    kids.set(ppid, list);
  }
  const out: number[] = [];
  const todo = [pid];
  while (todo.length > 0) {
    const p = todo.pop()!;
    for (const k of kids.get(p) ?? []) {
      out.push(k);
      todo.push(k);
    }
  }
  return out;
}

function firstLine(c: RpcClient, processId: string): Promise<string> {
  return c
    .waitFor((n) => n.method === 'process/output' && n.params.processId === processId, 20_000)
    .then(() => c.output(processId).split('\n')[0]!.trim());
}

function sandboxed(cwd: string) {
  return seed({
    cwd,
    entries: [
      special('root', 'read'),
      special('current_working_directory', 'write'),
      special('slash_tmp', 'write'),
    ],
  });
}

describe('per-command cgroups', { skip }, () => {
  let ts: TestServer;
  let a: RpcClient & { sessionId: string };
  let b: RpcClient & { sessionId: string };
  let n = 0;
  before(async () => {
    ts = await startTestServer();
    a = await ts.client('bomber');
    b = await ts.client('bystander');
  });
  after(() => ts.close());

  for (const mode of ['unsandboxed', 'sandboxed'] as const) {
    test(`a fork bomb (${mode}) stays at its pidsMax while another session starts processes`, {
      timeout: 60_000,
      skip: mode === 'sandboxed' && needsSandbox,
    }, async () => {
      const id = `bomb-${++n}`;
      const t0 = Date.now();
      await a.request('process/start', {
        processId: id,
        argv: ['/bin/bash', '-c', bomb(1000)],
        cwd: '/tmp',
        env: { PATH },
        tty: false,
        limits: { pidsMax: 64 },
        ...(mode === 'sandboxed' ? { sandbox: sandboxed('/tmp') } : {}),
      });
      const shell = Number(await firstLine(a, id));
      const root = ts.sessionOf(a).get(id)!.pid;
      assert.ok(shell > 0);
      // The bomb grows until its forks fail (it would reach 1001 processes unbounded); watch its size meanwhile.
      let peak = 0;
      await until(
        () => {
          peak = Math.max(peak, descendants(root).length + 1);
          return a.output(id, 'stderr').includes('fork: retry') || Date.now() - t0 > 10_000;
        },
        20_000,
        'the bomb to grow',
      );
      // Another session is unaffected.
      const other = `ok-${n}`;
      await b.request('process/start', {
        processId: other,
        argv: ['/bin/echo', 'still here'],
        cwd: '/tmp',
        env: { PATH },
        tty: false,
      });
      const otherEvents = await b.collect(other);
      assert.equal(b.output(other), 'still here\n');
      assert.equal(otherEvents.find((e) => e.method === 'process/exited')?.params.exitCode, 0);
      for (let i = 0; i < 20; i++) {
        peak = Math.max(peak, descendants(root).length + 1);
        await new Promise((r) => setImmediate(r));
      }
      assert.ok(peak <= 64, `the bomb had ${peak} processes with pidsMax 64`);
      const family = descendants(root);
      const r = await a.request<{ running: boolean }>('process/terminate', { processId: id });
      assert.equal(r.running, true);
      const events = await a.collect(id, 20_000);
      const exited = events.find((e) => e.method === 'process/exited')!;
      assert.equal(exited.params.limitHit, 'pids');
      await until(() => !family.some(alive), 5000, 'every bomb process to die');
      assert.ok(Date.now() - t0 < 30_000, 'bounded in time');
    });
  }

  for (const mode of ['unsandboxed', 'sandboxed'] as const) {
    test(`a memory hog (${mode}) is killed at its memory limit, with limitHit memory`, {
      timeout: 60_000,
      skip: mode === 'sandboxed' && needsSandbox,
    }, async () => {
      const id = `hog-${++n}`;
      // 512 MiB at most, so that the test stays bounded without a limit too.
      const hog = `const a=[];for(let i=0;i<32;i++)a.push(Buffer.alloc(16<<20,1));console.log('survived')`;
      await a.request('process/start', {
        processId: id,
        argv: [process.execPath, '-e', hog],
        cwd: '/tmp',
        env: { PATH },
        tty: false,
        limits: { memoryMaxBytes: 128 * 1024 * 1024 },
        ...(mode === 'sandboxed' ? { sandbox: sandboxed('/tmp') } : {}),
      });
      const events = await a.collect(id, 30_000);
      const exited = events.find((e) => e.method === 'process/exited')!;
      assert.equal(a.output(id, 'stdout'), '');
      assert.equal(exited.params.exitCode, 137);
      assert.equal(exited.params.limitHit, 'memory');
      const read = await a.request<{ limitHit?: string }>('process/read', { processId: id });
      assert.equal(read.limitHit, 'memory');
    });
  }

  test('a command within its limits reports no limitHit', async () => {
    const id = `fine-${++n}`;
    await a.request('process/start', {
      processId: id,
      argv: ['/bin/sh', '-c', 'echo hi'],
      cwd: '/tmp',
      env: { PATH },
      tty: false,
    });
    const exited = (await a.collect(id)).find((e) => e.method === 'process/exited')!;
    assert.equal(exited.params.exitCode, 0);
    assert.equal('limitHit' in exited.params, false);
  });

  for (const tty of [false, true]) {
    test(`terminate kills a descendant that left the process group with setsid (tty: ${tty})`, async () => {
      const id = `setsid-${++n}`;
      await a.request('process/start', {
        processId: id,
        // The escapee reports its pid once it leads its own session.
        argv: [
          '/bin/sh',
          '-c',
          "setsid /bin/sh -c 'echo $$; exec sleep 300 >/dev/null 2>&1 </dev/null' & wait",
        ],
        cwd: '/tmp',
        env: { PATH },
        tty,
      });
      const escaped = Number(await firstLine(a, id));
      assert.ok(escaped > 0 && alive(escaped));
      const sid = Number(readFileSync(`/proc/${escaped}/stat`, 'utf8').split(') ')[1]!.split(' ')[3]);
      assert.equal(sid, escaped, 'it leads a session of its own');
      try {
        await a.request('process/terminate', { processId: id });
        await a.collect(id);
        await until(() => !alive(escaped), 3000, 'the setsid descendant to die');
      } finally {
        if (alive(escaped)) process.kill(escaped, 'SIGKILL');
      }
    });
  }

  test('cgroups do not pile up: 1000 starts leave at most the pool, and a left-behind daemon keeps its cgroup until it exits', {
    timeout: 120_000,
  }, async () => {
    // The hierarchies that hold a p-<n> per command (not the v1 cpu one, whose base the commands enter themselves).
    const base = host.status.dirs.filter((d) => !/^\/sys\/fs\/cgroup\/(cpu|cpu,[^/]*|[^/]*,cpu)\//.test(d));
    assert.ok(
      base.length > 0 && base.length >= host.status.enforced.length,
      `hierarchies: ${host.status.dirs}`,
    );
    const countDirs = () =>
      Math.max(...base.map((d) => readdirSync(d).filter((e) => e.startsWith('p-')).length));
    const total = 1000;
    let next = 0;
    const worker = async () => {
      while (next < total) {
        const id = `many-${next++}`;
        await a.request('process/start', {
          processId: id,
          argv: ['/bin/true'],
          cwd: '/tmp',
          env: { PATH },
          tty: false,
        });
        await a.collect(id);
      }
    };
    const liveBefore = host.counts.live;
    await Promise.all(Array.from({ length: 16 }, worker));
    await until(() => host.counts.live === liveBefore, 5000, 'every cgroup released');
    assert.ok(host.counts.pooled <= 64, `pooled ${host.counts.pooled}`);
    assert.ok(
      countDirs() <= 64 + host.counts.lingering,
      `${countDirs()} cgroup directories after ${total} starts`,
    );

    // A daemon outlives its command: its cgroup is kept (never reused) until it is gone.
    const id = `daemon-${++n}`;
    await a.request('process/start', {
      processId: id,
      argv: ['/bin/sh', '-c', 'sleep 300 >/dev/null 2>&1 </dev/null & echo $!'],
      cwd: '/tmp',
      env: { PATH },
      tty: false,
    });
    const daemon = Number(await firstLine(a, id));
    await a.collect(id);
    // Its cgroup: the p-<n> named in /proc/<daemon>/cgroup, in every hierarchy of ours.
    const name = /\/corral-[\d.]+\/(p-\d+)$/m.exec(readFileSync(`/proc/${daemon}/cgroup`, 'utf8'))?.[1];
    assert.ok(name, 'the daemon is in a cgroup of ours');
    const dirs = base.map((d) => `${d}/${name}`);
    try {
      // Past a retry of the lingering cgroups, it is still there.
      const round = host.counts.lingerRounds;
      await until(() => host.counts.lingerRounds > round, 5000, 'a retry of the lingering cgroups');
      assert.ok(dirs.every(existsSync), 'kept while the daemon lives');
      assert.ok(alive(daemon));
    } finally {
      process.kill(daemon, 'SIGKILL');
    }
    await until(() => !dirs.some(existsSync), 5000, 'the emptied cgroup to be removed');
  });

  for (const nofile of [null, 400])
    test(`a server makes its first commands' cgroups ahead${nofile ? ` (as many as ${nofile} open files allow)` : ''}: they are there once it listens, and the first start takes one`, async () => {
      // A server of its own (a process of its own: cgroupHost() is one per process), found by its base directory,
      // whose name carries its pid (serverTag.ts; prlimit execs it, keeping the pid): other test files' servers run
      // meanwhile.
      const parents = host.status.dirs.map(dirname);
      const cli = await startCli(['exec-server', '--listen', 'ws://127.0.0.1:0', '--no-audit'], {
        ...(nofile ? { wrap: ['prlimit', `--nofile=${nofile}`, '--'] } : {}),
      });
      const want = nofile ? poolBound(nofile) : PREPARED_CGROUPS;
      if (nofile) assert.equal(want, 2, 'pooled cgroups hold at most a 16th of 400 open files');
      let base = '';
      try {
        const prepared = () => {
          const fresh = parents[0]!;
          const bases = readdirSync(fresh).filter(
            (e) => parseTag(e.slice('corral-'.length))?.pid === cli.proc.pid,
          );
          const names = bases.flatMap((b) => readdirSync(`${fresh}/${b}`).filter((e) => /^p-\d+$/.test(e)));
          return { bases, names: names.sort() };
        };
        // Made before it listens: there as soon as it has printed its URL.
        const before = prepared();
        assert.equal(before.names.length, want, `prepared: ${before.names.join(' ')}`);
        assert.equal(before.bases.length, 1, before.bases.join(' '));
        base = before.bases[0]!;
        const c = await RpcClient.open(cli.url!, 'prepared');
        try {
          await c.request('process/start', startParams('first', ['/bin/cat', '/proc/self/cgroup']));
          await c.collect('first');
          const inside = new RegExp(`/${base.replaceAll('.', '\\.')}/(p-\\d+)$`, 'm').exec(c.output('first'));
          assert.ok(inside, `the first command is in a cgroup of the server's: ${c.output('first')}`);
          assert.ok(before.names.includes(inside[1]!), `${inside[1]} is one of ${before.names.join(' ')}`);
          assert.deepEqual(prepared().names, before.names, 'no cgroup made for it');
        } finally {
          c.close();
        }
      } finally {
        await cli.stop();
      }
      // Its exit removes them with its base.
      await until(
        () => !existsSync(`${parents[0]}/${base}`),
        10_000,
        "the server's cgroups removed at its exit",
      );
    });

  test('per-start limits: lower than the server is fine, higher or malformed is -32602 naming the field', async () => {
    const start = (processId: string, limits: unknown) =>
      a.requestError('process/start', {
        processId,
        argv: ['/bin/true'],
        cwd: '/tmp',
        env: { PATH },
        tty: false,
        limits,
      });
    const over = await start('lim-1', { pidsMax: ts.server.commandResources.limits.pidsMax + 1 });
    assert.equal(over.code, -32602);
    assert.match(over.message, /limits\.pidsMax: \d+ is above this server's maximum of \d+/);
    const mem = await start('lim-2', {
      memoryMaxBytes: ts.server.commandResources.limits.memoryMaxBytes * 2,
    });
    assert.equal(mem.code, -32602);
    assert.match(mem.message, /limits\.memoryMaxBytes/);
    const typo = await start('lim-3', { maxPids: 10 });
    assert.equal(typo.code, -32602);
    assert.match(typo.message, /maxPids/);
    const small = await start('lim-4', { memoryMaxBytes: 10 });
    assert.equal(small.code, -32602);
    assert.match(small.message, /limits\.memoryMaxBytes/);
    const zero = await start('lim-5', { pidsMax: 0 });
    assert.match(zero.message, /limits\.pidsMax/);
    const type = await start('lim-6', { pidsMax: '12' });
    assert.match(type.message, /limits\.pidsMax/);
    // None of these registered the id; a good one runs with its limits.
    await a.request('process/start', {
      processId: 'lim-1',
      argv: [
        '/bin/sh',
        '-c',
        'cat /sys/fs/cgroup/pids$(sed -n "s/^[0-9]*:pids://p" /proc/self/cgroup)/pids.max',
      ],
      cwd: '/tmp',
      env: { PATH },
      tty: false,
      limits: { pidsMax: 77 },
    });
    await a.collect('lim-1');
    if (host.status.version === 'v1') assert.equal(a.output('lim-1'), '77\n');
  });

  test('a sandboxed process with a writable root cannot write to the cgroup filesystem', {
    skip: needsSandbox,
  }, async () => {
    const id = `escape-${++n}`;
    // Full disk write, network off: bwrap binds / read-write, so this is where cgroupfs would be writable.
    const sandbox = seed({ cwd: '/tmp', kind: 'unrestricted', network: 'restricted' });
    // Raise its own limits, make a cgroup in its own (only in Corral's cgroups: never touch anyone else's), then
    // move itself to the top of every hierarchy.
    const script = [
      'while IFS=: read -r _ ctl path; do',
      '  case "$path" in */corral-*) ;; *) continue ;; esac',
      // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell parameter expansion
      '  for d in /sys/fs/cgroup/"${ctl#name=}" /sys/fs/cgroup/unified /sys/fs/cgroup; do',
      '    for f in pids.max memory.max memory.limit_in_bytes; do',
      '      v=999999999; [ "$f" = pids.max ] && v=max',
      '      [ -f "$d$path/$f" ] && echo $v > "$d$path/$f" 2>/dev/null && echo "RAISED $d$path/$f"',
      '    done',
      '    [ -d "$d$path" ] && mkdir "$d$path/escape" 2>/dev/null && echo "MADE $d$path/escape"',
      '  done',
      'done < /proc/self/cgroup',
      "for d in $(awk '$3 ~ /^cgroup/ {print $2}' /proc/mounts); do",
      '  echo 0 > "$d/cgroup.procs" 2>/dev/null && echo "WROTE $d/cgroup.procs"',
      'done',
      'echo done',
    ].join('\n');
    await a.request('process/start', {
      processId: id,
      argv: ['/bin/sh', '-c', script],
      cwd: '/tmp',
      env: { PATH },
      tty: false,
      sandbox,
    });
    await a.collect(id, 20_000);
    const out = a.output(id, 'stdout');
    for (const line of out.split('\n')) {
      const made = /^MADE (.*)$/.exec(line)?.[1];
      if (made) rmdirSync(made);
    }
    assert.equal(out.trim(), 'done', `the sandbox changed the cgroup filesystem:\n${out}`);
  });
});
