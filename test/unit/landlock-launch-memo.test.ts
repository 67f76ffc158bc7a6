/**
 * The whole Landlock launch plan kept between starts (src/sandbox/linux/landlockLaunch.ts KeptLaunch, issue 32): starts
 * under one kept policy parse (as a server parses it) while the planning watch saw nothing share one plan and one
 * frozen summary, but each gets its own command (argv, env, TMPDIR); anything the plan depends on that differs (the
 * command's TMPDIR, the server's hidden paths, a policy that is not a kept parse, managed network) is planned on its
 * own. That a change on disk is never missed: test/hostile/landlock-policy-cache.test.ts ("a whole launch plan").
 */
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import type { PreparedLaunch } from '../../src/process/launch.js';
import { quietFs } from '../../src/sandbox/fsQuiet.js';
import { type PrepareOptions, prepareLaunch, startSandbox } from '../../src/sandbox/index.js';
import { landlockSupport } from '../../src/sandbox/linux/landlockNative.js';
import { quietTop, scratchDirs } from '../helpers/quietFs.js';
import { until } from '../helpers/server.js';
import { keptSeed, seed, special } from '../integration/sandbox-util.js';

const support = landlockSupport();
const WORKSPACE = [special('root', 'read'), special('current_working_directory', 'write')];
const dir = scratchDirs('corral-ll-launch-memo-', quietTop);

const skip =
  support.abi === 0
    ? `no Landlock here: ${support.missing}`
    : !quietFs.enabled
      ? 'no planning watch (no addon, or CORRAL_FS_WATCH=0): nothing is kept'
      : false;

describe('a Landlock launch plan kept between quiet starts', { skip }, () => {
  const W = dir();
  mkdirSync(join(W, 'sub'));
  const policy = { cwd: W, entries: WORKSPACE, useLegacyLandlock: true };
  const kept = () => startSandbox(keptSeed(policy), false, W);

  async function prep(
    argv: string[] = ['/bin/true'],
    env: Record<string, string> = { PATH: '/usr/bin:/bin' },
    eff = kept(),
    opts?: PrepareOptions,
  ): Promise<PreparedLaunch> {
    const p = await prepareLaunch(eff, { spec: { file: '/bin/true', argv, env, cwd: W }, tty: false }, opts);
    p.cleanup();
    return p;
  }

  /** Prepares until two starts in a row share one summary (the directories' listings settle within ~50 ms). */
  async function keptSummary(): Promise<Record<string, unknown>> {
    let last = (await prep()).summary;
    await until(
      async () => {
        const next = (await prep()).summary;
        const same = next === last;
        last = next;
        return same;
      },
      5000,
      'two starts sharing one kept plan',
    );
    return last!;
  }

  test('one frozen summary, each start its own command', async () => {
    assert.equal(kept(), kept(), 'a kept parse makes one effective sandbox');
    assert.ok(Object.isFrozen(kept()) && Object.isFrozen(kept()?.fs));
    const summary = await keptSummary();
    assert.ok(Object.isFrozen(summary));
    assert.equal(summary.policyResolution, 'reused');
    assert.equal(summary.landlockRuleset, 'reused');
    const a = await prep(['/bin/true', 'a'], { PATH: '/usr/bin:/bin', X: '1' });
    const b = await prep(['/bin/true', 'b'], { PATH: '/usr/bin:/bin', X: '2' });
    assert.equal(a.summary, summary);
    assert.equal(b.summary, summary);
    assert.deepEqual(a.spec.argv, ['/bin/true', 'a']);
    assert.deepEqual(b.spec.argv, ['/bin/true', 'b']);
    assert.equal(a.spec.env.X, '1');
    assert.equal(b.spec.env.X, '2');
    for (const p of [a, b]) {
      assert.equal(p.spec.env.CODEX_SANDBOX_NETWORK_DISABLED, '1', 'the sandbox env of every start');
      assert.equal(p.spec.freshSessionKeyring, true);
      assert.ok(p.spec.confine && p.spec.confine.rulesetFd >= 0, 'every start is confined');
    }
    assert.throws(() => {
      (summary as Record<string, unknown>).landlockRules = 0;
    }, TypeError);
  });

  test('what the plan depends on besides the disk: planned on its own', async () => {
    // Made first: a new name next to the workspace is an event of a watched directory (see the last test).
    const T = dir();
    const token = join(dir(), 'panel.token');
    writeFileSync(token, 'x');
    const summary = await keptSummary();
    // The command's TMPDIR (a writable temp root of the policy is canonicalised from it).
    const withTmp = await prep(['/bin/true'], { PATH: '/usr/bin:/bin', TMPDIR: T });
    assert.notEqual(withTmp.summary, summary);
    // The server's own hidden files (its token): a plan for another server's facts.
    const hidden = await prep(undefined, undefined, kept(), { hiddenPaths: [token] });
    assert.notEqual(hidden.summary, summary);
    // A policy that is not a kept parse (a client-wrapped command's): planned every time.
    const fresh = () => startSandbox(seed(policy), false, W);
    assert.notEqual(fresh(), fresh());
    // Frozen by someone else is not kept: only a parse the protocol module froze whole is known by its identity.
    const frozenElsewhere = Object.freeze(seed(policy));
    assert.notEqual(startSandbox(frozenElsewhere, false, W), startSandbox(frozenElsewhere, false, W));
    const f1 = await prep(undefined, undefined, fresh());
    const f2 = await prep(undefined, undefined, fresh());
    assert.notEqual(f1.summary, f2.summary);
    assert.deepEqual({ ...f1.summary }, { ...summary }, 'the same plan, made anew');
    // Managed network: each command's own routes.
    const managed = () => startSandbox(keptSeed(policy), true, W);
    assert.equal(managed(), managed());
    assert.notEqual(managed(), kept(), 'one effective sandbox per flag');
    // Back to the first: still kept.
    assert.equal((await prep()).summary, summary);
  });

  test('a new entry of a directory the plan listed: planned again; below one it only looked at: still kept', async () => {
    const summary = await keptSummary();
    // The plan looked at sub (an entry of the frozen workspace) but not into it: nothing there is its business.
    writeFileSync(join(W, 'sub', 'x'), 'x');
    assert.equal((await prep()).summary, summary);
    // A new entry of the workspace, whose top level the plan froze entry by entry: one rule more.
    writeFileSync(join(W, 'new'), 'x');
    const after = await prep();
    assert.notEqual(after.summary, summary);
    assert.equal(
      after.summary?.landlockRules,
      (summary.landlockRules as number) + 1,
      JSON.stringify(after.summary),
    );
  });
});
