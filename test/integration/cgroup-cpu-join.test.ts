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
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';

type Seen = Record<string, string | boolean | null>;

async function joinIn(env: NodeJS.ProcessEnv): Promise<Seen> {
  const script = join(import.meta.dirname, '..', 'fixtures', 'cgroup', 'join-cpu-group.ts');
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', script], { env });
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

  it('CORRAL_CGROUP_CPU=0: no CPU group to join, said why, not moved', async () => {
    const r = await joinIn({ ...process.env, CORRAL_CGROUP_CPU: '0' });
    assert.match(String(r.why), /CORRAL_CGROUP_CPU=0|cgroups are|no usable cgroup/);
    assert.equal(r.joined, r.before, 'not moved');
  });
});
