/**
 * What a Landlock start reuses (src/sandbox/linux/landlockReuse.ts, dirListing.ts): the plan and the ruleset of the
 * start before, only while the directories they were made from are unchanged. Real starts through prepareLaunch and
 * the native spawner; each check waits (on the listing's own state, not a fixed time) until the workspace's listing
 * is stable, so the reuse path is the one under test, then changes the workspace from the host as a user would.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, realpathSync, renameSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { listDirectory } from '../../src/sandbox/linux/dirListing.js';
import { landlockSupport } from '../../src/sandbox/linux/landlockNative.js';
import { runLandlocked } from '../helpers/landlockRun.js';
import { until } from '../helpers/server.js';
import { special } from './sandbox-util.js';

const support = landlockSupport();
/** Read everything, write the workspace (no temp roots: only the workspace is decomposed). */
const WORKSPACE_ONLY = [special('root', 'read'), special('current_working_directory', 'write')];
const root = realpathSync(mkdtempSync(join(os.tmpdir(), 'corral-ll-reuse-')));
after(() => rmSync(root, { recursive: true, force: true }));

/** Runs `script` Landlock-sandboxed in `cwd`; its output and how the ruleset came about. */
async function run(cwd: string, script: string): Promise<{ out: string; ruleset: unknown }> {
  const { out, summary } = await runLandlocked(cwd, WORKSPACE_ONLY, script);
  return { out, ruleset: summary?.landlockRuleset };
}

/** Waits until every listed directory's listing is stable (its times old enough to show any later change). */
async function settled(...dirs: string[]): Promise<void> {
  await until(
    () => dirs.every((d) => listDirectory(d).stable),
    5000,
    `stable listings of ${dirs.join(', ')}`,
  );
}

describe('Landlock starts reuse plan and ruleset only while the workspace is unchanged', {
  skip: support.abi === 0 ? `no Landlock here: ${support.missing}` : false,
}, () => {
  test('an unchanged workspace reuses the ruleset, and its rules still hold', async () => {
    const W = join(root, 'same');
    mkdirSync(join(W, '.git'), { recursive: true });
    mkdirSync(join(W, 'src'));
    await run(W, 'true');
    await settled(W, root);
    await run(W, 'true'); // the first start under stable listings checks every rule once more
    const again = await run(W, `echo x > src/a && echo WROTE; echo y > .git/b && echo GIT`);
    assert.equal(again.ruleset, 'reused', again.out);
    assert.match(again.out, /WROTE/);
    assert.doesNotMatch(again.out, /GIT/, 'a reused ruleset let the sandbox write .git');
    assert.ok(!existsSync(join(W, '.git', 'b')));
  });

  for (const settle of [false, true]) {
    test(`a directory the host replaces: a new ruleset, the old one reaches nothing (next start ${settle ? 'once the change settled' : 'at once'})`, async () => {
      const W = join(root, `moved-${settle}`);
      const OUT = join(root, `moved-out-${settle}`);
      mkdirSync(join(W, '.git'), { recursive: true });
      mkdirSync(join(W, 'sub'));
      mkdirSync(OUT);
      await run(W, 'true');
      await settled(W, root);
      assert.equal((await run(W, 'true')).ruleset, 'reused');
      renameSync(join(W, 'sub'), join(OUT, 'sub'));
      mkdirSync(join(W, 'sub'));
      // Settled, the new listing vouches again: only comparing it with the one the rules were checked under shows it.
      if (settle) await settled(W, root);
      const stale = await run(W, `echo x > ${join(OUT, 'sub', 'b')} && echo WROTE`);
      assert.equal(stale.ruleset, 'built', stale.out);
      assert.ok(!existsSync(join(OUT, 'sub', 'b')), `wrote through a stale rule\n${stale.out}`);
      assert.match(
        (await run(W, 'echo x > sub/c && echo WROTE')).out,
        /WROTE/,
        'the new sub must be writable',
      );
    });
  }

  test('an entry the host adds to a frozen workspace top level is writable from the next start', async () => {
    const W = join(root, 'added');
    mkdirSync(join(W, '.git'), { recursive: true });
    await run(W, 'true');
    await settled(W, root);
    assert.equal((await run(W, 'true')).ruleset, 'reused');
    mkdirSync(join(W, 'new'));
    const r = await run(W, 'echo x > new/a && echo WROTE');
    assert.match(r.out, /WROTE/, r.out);
    assert.equal(r.ruleset, 'built');
  });

  test('a listing is stable only once its directory is older than the racy window, and is read again on change', async () => {
    const D = join(root, 'racy');
    mkdirSync(D);
    const fresh = listDirectory(D);
    assert.equal(fresh.stable, false, 'a directory changed just now cannot vouch for its entries');
    await settled(D);
    const before = listDirectory(D);
    assert.deepEqual(before.entries, []);
    mkdirSync(join(D, 'x'));
    const after = listDirectory(D);
    assert.notEqual(after.token, before.token);
    assert.deepEqual(
      after.entries?.map((e) => e.name),
      ['x'],
    );
    assert.equal(after.stable, false);
  });
});
