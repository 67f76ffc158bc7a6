/**
 * One CPU group for all of a server's commands (src/process/cgroup.ts, "CPU"): every command runs in the server's
 * `corral-<tag>` CPU group, so six busy commands together get about as much CPU as one busy program the user runs
 * elsewhere (its own session, as a terminal's program is). Without the group (CORRAL_CGROUP_CPU=0) each command is
 * a session of its own and weighs like that program: the same six take ~6/7 of the machine. Real processes, real
 * cgroups, the shares read from /proc.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { after, describe, it } from 'node:test';
import { cgroupHost } from '../../src/process/cgroup.js';
import { readMounts } from '../../src/process/cgroupFs.js';
import { type Cli, startCli } from '../helpers/cli.js';
import { RpcClient } from '../helpers/client.js';
import { alive, until } from '../helpers/server.js';

const PATH = '/usr/local/bin:/usr/bin:/bin';
const status = cgroupHost().status;
const noCpu = status.cpuGroup ? false : `no CPU group here: ${status.cpuProblem}`;
const BUSY = 6;
/**
 * The outsider's CPU against the busy commands' that tells the two weighings apart. Ungrouped, it is one of 7 equal
 * entities on 2 cores: ~1/6 of the commands'. Grouped, it weighs as the whole group, but the group's weight is split
 * between the cores its loops run on, so on the outsider's core the group has about half of it: ~1/2 on 2 cores, up to
 * 1 as the balancer moves the loops (measured 0.50–0.68 here). 1/3 lies between them with room on both sides.
 */
const SPLIT = 1 / 3;

const clis: Cli[] = [];
const outsiders: ChildProcess[] = [];
after(async () => {
  for (const o of outsiders) o.kill('SIGKILL');
  for (const c of clis) await c.stop();
});

/** CPU time (utime + stime, clock ticks) of a process; 0 once it is gone. */
function ticks(pid: number): number {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return Number(f[11]) + Number(f[12]);
  } catch {
    return 0;
  }
}

/** The cpu cgroup of a process: v1 its `cpu` line, v2 its one path (whose CPU group is the nearest one with cpu). */
function cpuCgroupOf(pid: number): string {
  const lines = readFileSync(`/proc/${pid}/cgroup`, 'utf8').trim().split('\n');
  const v1 = lines.find((l) => l.split(':')[1]!.split(',').includes('cpu'));
  return (v1 ?? lines.find((l) => l.startsWith('0::'))!).split(':')[2]!;
}

/**
 * A server (through the CLI), `BUSY` busy commands in it (or, `oneCommand`, one command that starts `BUSY` busy
 * loops in sessions of their own, as a hostile command would to be weighed `BUSY` times) and one busy program in a
 * session of its own.
 */
async function contend(
  env: NodeJS.ProcessEnv,
  oneCommand = false,
): Promise<{ inside: number; outside: number; groups: string[] }> {
  const cli = await startCli(['exec-server', '--listen', 'ws://127.0.0.1:0', '--log-level', 'info'], { env });
  clis.push(cli);
  const c = await RpcClient.open(cli.url!);
  const pidsOf = (id: string) => c.output(id).trim().split(/\s+/).filter(Boolean).map(Number);
  const pids: number[] = [];
  const starts = oneCommand ? 1 : BUSY;
  for (let i = 0; i < starts; i++) {
    const id = `busy${i}`;
    const loop = "/bin/sh -c 'echo $$; while :; do :; done'";
    await c.request('process/start', {
      processId: id,
      argv: ['/bin/sh', '-c', oneCommand ? `${`setsid ${loop} & `.repeat(BUSY)}wait` : `exec ${loop}`],
      cwd: '/tmp',
      env: { PATH },
      tty: false,
    });
    const want = oneCommand ? BUSY : 1;
    await until(() => pidsOf(id).length >= want && /\n$/.test(c.output(id)), 10_000, `the pids of ${id}`);
    pids.push(...pidsOf(id));
  }
  const outsider = spawn('setsid', ['/bin/sh', '-c', 'while :; do :; done'], { stdio: 'ignore' });
  outsiders.push(outsider);
  await until(() => outsider.pid !== undefined && ticks(outsider.pid) > 0, 10_000, 'the outsider to run');
  const o0 = ticks(outsider.pid!);
  const i0 = pids.reduce((t, p) => t + ticks(p), 0);
  // Until the commands have had 1.5 s of CPU between them: then compare what the outsider had meanwhile.
  let inside = 0;
  await until(
    () => {
      inside = pids.reduce((t, p) => t + ticks(p), 0) - i0;
      return inside >= 150;
    },
    60_000,
    'the busy commands to use 1.5 s of CPU',
  );
  const outside = ticks(outsider.pid!) - o0;
  const groups = pids.map(cpuCgroupOf);
  outsider.kill('SIGKILL');
  for (const p of pids) assert.ok(alive(p), 'the busy commands kept running');
  c.close();
  await cli.stop();
  return { inside, outside, groups };
}

describe('the CPU group of a server’s commands', { skip: noCpu, timeout: 120_000 }, () => {
  it('all commands are in the server’s CPU group, and six busy ones weigh about as one program', async (t) => {
    const env = { ...process.env, CORRAL_CGROUP_CPU: undefined };
    const r = await contend(env);
    const stderr = clis.at(-1)!.stderr();
    assert.match(stderr, /all commands share one CPU group/);
    // The same group for all: the server's base (v1: commands enter it; v2: p-<n> below it, the base has cpu).
    const bases = new Set(r.groups.map((g) => /^(.*\/corral-[\d.]+)(\/p-\d+)?$/.exec(g)?.[1]));
    assert.equal(bases.size, 1, `one base for all: ${r.groups.join(' ')}`);
    assert.ok(![...bases][0]?.endsWith('undefined'), `in a corral base: ${r.groups.join(' ')}`);
    // Fair between the two groups: the outsider gets about what the six get together (one core each on 2 cores);
    // ungrouped it would get about a sixth of it.
    const ratio = r.outside / r.inside;
    t.diagnostic(`outsider ${r.outside} ticks, commands ${r.inside}: ${ratio.toFixed(2)}`);
    assert.ok(
      ratio > SPLIT,
      `the outsider had ${r.outside} ticks while the commands had ${r.inside} (${ratio.toFixed(2)})`,
    );
    // The base is gone once the server is.
    const mount = r.groups[0]!.startsWith('/') ? cpuMount() : null;
    if (mount)
      await until(() => !existsSync(`${mount}${[...bases][0]}`), 5000, 'the CPU group to be removed');
  });

  it('a command that starts six busy loops in sessions of their own (setsid) still weighs as one program', async (t) => {
    const r = await contend({ ...process.env, CORRAL_CGROUP_CPU: undefined }, true);
    assert.equal(new Set(r.groups).size, 1, `all in one CPU group: ${r.groups.join(' ')}`);
    const ratio = r.outside / r.inside;
    t.diagnostic(`outsider ${r.outside} ticks, the loops ${r.inside}: ${ratio.toFixed(2)}`);
    assert.ok(
      ratio > SPLIT,
      `the outsider had ${r.outside} ticks while the loops had ${r.inside} (${ratio.toFixed(2)})`,
    );
  });

  it('CORRAL_CGROUP_CPU=0: each command weighs like a program of its own (the test above tells them apart)', async (t) => {
    const r = await contend({ ...process.env, CORRAL_CGROUP_CPU: '0' });
    assert.match(clis.at(-1)!.stderr(), /commands do not share one CPU group: CPU groups are turned off/);
    const ratio = r.outside / r.inside;
    t.diagnostic(`outsider ${r.outside} ticks, commands ${r.inside}: ${ratio.toFixed(2)}`);
    assert.ok(
      ratio < SPLIT,
      `the outsider had ${r.outside} ticks while the commands had ${r.inside} (${ratio.toFixed(2)})`,
    );
  });
});

/** Where the cpu controller's hierarchy is mounted (v1 `cpu`, else the v2 mount). */
function cpuMount(): string | null {
  const mounts = readMounts();
  const v1 = mounts.find((m) => m.fsType === 'cgroup' && m.superOptions.includes('cpu'));
  return (v1 ?? mounts.find((m) => m.fsType === 'cgroup2'))?.mountPoint ?? null;
}
