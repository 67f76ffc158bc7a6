/**
 * The server joins its commands' CPU group (src/process/cgroup.ts, "CPU", issue 32): a group only the commands are
 * in wakes up behind at every start (EEVDF keeps its lag across sleeps) and each command's first run waited out the
 * slices of whatever else ran. Checked on real cgroups in a process of its own (test/fixtures/cgroup/
 * join-cpu-group.ts): after joinCpuGroup the process and a command it starts are in the same CPU group; a second
 * join changes nothing; dispose moves the process back where it was and removes the group. (What it is worth is a
 * figure of `npm run bench -- hotpath`, not a test's.)
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { startCli, tsEntry } from '../helpers/cli.js';
import { RpcClient } from '../helpers/client.js';
import { until } from '../helpers/server.js';

type Seen = Record<string, string | boolean | null>;

async function joinIn(env: NodeJS.ProcessEnv): Promise<Seen> {
  const script = join(import.meta.dirname, '..', 'fixtures', 'cgroup', 'join-cpu-group.ts');
  const { stdout } = await promisify(execFile)(process.execPath, tsEntry(script), { env });
  return JSON.parse(stdout) as Seen;
}

describe('the server in its commands’ CPU group', { timeout: 60_000 }, () => {
  it('joins it, its commands are in it, and it leaves it at exit so the group is removed', async (t) => {
    const r = await joinIn({ ...process.env, CORRAL_CGROUP_CPU: undefined });
    if (r.version !== 'v1' || !r.cpuGroup) {
      // v2: the server is in it already where it has a leaf of its own (corral-<tag>/server), else joinCpuGroup says why.
      t.skip(`cgroup ${r.version}, CPU group ${r.cpuGroup}: ${r.why}`);
      return;
    }
    assert.equal(r.why, null, 'joined');
    assert.equal(r.again, null, 'a second join is a no-op');
    assert.ok(typeof r.base === 'string' && r.base.endsWith(r.joined as string), `in ${r.base}: ${r.joined}`);
    assert.equal(r.command, r.joined, 'the command is in the same CPU group as the server');
    assert.notEqual(r.before, r.joined);
    assert.equal(r.after, r.before, 'back where it was at exit');
    assert.equal(r.baseLeft, false, 'the group is removed');
  });

  it('`corral exec-server` is in the CPU group its commands run in, and leaves it at exit', async (t) => {
    const probe = await joinIn({ ...process.env, CORRAL_CGROUP_CPU: undefined });
    if (probe.version !== 'v1' || !probe.cpuGroup) {
      t.skip(`cgroup ${probe.version}, CPU group ${probe.cpuGroup}`);
      return;
    }
    const cli = await startCli(['exec-server', '--listen', 'ws://127.0.0.1:0', '--log-level', 'info'], {
      env: { ...process.env, CORRAL_CGROUP_CPU: undefined },
    });
    try {
      const c = await RpcClient.open(cli.url!);
      await c.request('process/start', {
        processId: 'cg',
        argv: ['/bin/cat', '/proc/self/cgroup'],
        cwd: '/tmp',
        env: { PATH: '/usr/bin:/bin' },
        tty: false,
      });
      await c.collect('cg', 20_000);
      const command = cpuLine(c.output('cg'));
      const server = cpuLine(readFileSync(`/proc/${cli.proc.pid}/cgroup`, 'utf8'));
      assert.ok(command?.includes('/corral-'), `the command is in a corral CPU group: ${command}`);
      assert.equal(server, command, 'the server is in its commands’ CPU group');
      assert.doesNotMatch(cli.stderr(), /not in its commands' CPU group/);
      c.close();
      const mount = (probe.base as string).slice(
        0,
        (probe.base as string).length - (probe.joined as string).length,
      );
      await cli.stop();
      await until(() => !existsSync(`${mount}${command}`), 5000, 'the CPU group to be removed');
    } finally {
      await cli.stop();
    }
  });

  it('CORRAL_CGROUP_CPU=0: no CPU group to join, said why, not moved', async () => {
    const r = await joinIn({ ...process.env, CORRAL_CGROUP_CPU: '0' });
    assert.match(String(r.why), /CORRAL_CGROUP_CPU=0|cgroups are|no usable cgroup/);
    assert.equal(r.joined, r.before, 'not moved');
  });
});

/** The cpu controller's line of a /proc/<pid>/cgroup text (v1). */
function cpuLine(text: string): string | null {
  return (
    text
      .split('\n')
      .find((l) => l.split(':')[1]?.split(',').includes('cpu'))
      ?.split(':')[2] ?? null
  );
}
