/**
 * `corral doctor` without a server says what a server started here would get (src/doctor/hostChecks.ts cgroupCheck):
 * the server's own decision (src/process/cgroup.ts previewCgroups, the plan half of setupCgroups) taken from reading
 * the system, nothing made. Checked in a process of its own (test/fixtures/cgroup/preview.ts): the preview makes none
 * of the directories it names, and is exactly what the same process then gets from the real setup. Before, the
 * doctor had its own probe and could disagree with the server (it said "cgroup v1" without asking whether the
 * hierarchies were writable, and "not delegated" where root gets a cgroup anyway). The preview under
 * CORRAL_CGROUPS=0 and CORRAL_CGROUP_CPU=0 says what those do.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { describeCgroups } from '../../src/doctor/hostChecks.js';
import type { CgroupStatus } from '../../src/process/cgroup.js';
import { tsEntry } from '../helpers/cli.js';

interface Seen {
  preview: CgroupStatus;
  madeByPreview: string[];
  live: CgroupStatus;
}

async function previewIn(env: NodeJS.ProcessEnv, as?: { uid: number; gid: number }): Promise<Seen> {
  const script = join(import.meta.dirname, '..', 'fixtures', 'cgroup', 'preview.ts');
  const { stdout } = await promisify(execFile)(process.execPath, tsEntry(script), { env, ...as });
  return JSON.parse(stdout) as Seen;
}

describe("the doctor's cgroup preview", { skip: process.platform !== 'linux', timeout: 60_000 }, () => {
  it('is what the server then sets up, and makes nothing', async () => {
    const r = await previewIn({ ...process.env, CORRAL_CGROUPS: undefined, CORRAL_CGROUP_CPU: undefined });
    assert.deepEqual(r.madeByPreview, [], 'the preview made no directory');
    assert.deepEqual(r.preview, r.live);
    const check = describeCgroups(r.preview, false);
    if (r.live.version === 'none') {
      assert.equal(check.status, 'missing');
      assert.ok(check.detail.includes(r.live.problem!), check.detail);
    } else {
      assert.match(
        check.detail,
        new RegExp(`^cgroup ${r.live.version}: a server started here gives each command`),
      );
      for (const k of r.live.enforced) assert.ok(check.detail.includes(k), check.detail);
    }
  });

  it('for a user who may not make cgroups: none, each version saying why, and how to get one', {
    skip: process.getuid?.() !== 0 ? 'needs root to run the preview as another user' : false,
  }, async () => {
    const r = await previewIn(
      { ...process.env, CORRAL_CGROUPS: undefined, CORRAL_CGROUP_CPU: undefined },
      { uid: 65534, gid: 65534 },
    );
    assert.deepEqual(r.preview, r.live);
    assert.equal(r.preview.version, 'none', JSON.stringify(r.preview));
    const check = describeCgroups(r.preview, false);
    assert.equal(check.status, 'missing');
    assert.match(
      check.detail,
      /^commands would run without pids and memory limits: cgroup v2: .*cgroup v1: /,
    );
    assert.ok(!check.detail.includes('no usable cgroup'), check.detail);
    assert.match(check.fix ?? '', /systemd-run --user --scope -p Delegate=yes/);
  });

  it('says what CORRAL_CGROUPS=0 and CORRAL_CGROUP_CPU=0 do', async () => {
    const off = await previewIn({ ...process.env, CORRAL_CGROUPS: '0' });
    assert.equal(off.preview.version, 'none');
    assert.deepEqual(off.preview, off.live);
    const check = describeCgroups(off.preview, false);
    assert.equal(check.status, 'info');
    assert.match(check.detail, /without pids and memory limits: cgroups are turned off \(CORRAL_CGROUPS=0\)/);

    const noCpu = await previewIn({ ...process.env, CORRAL_CGROUPS: undefined, CORRAL_CGROUP_CPU: '0' });
    assert.deepEqual(noCpu.preview, noCpu.live);
    assert.equal(noCpu.preview.cpuGroup, false);
    if (noCpu.preview.version !== 'none')
      assert.match(
        describeCgroups(noCpu.preview, false).detail,
        /no common CPU group: CPU groups are turned off/,
      );
  });
});
