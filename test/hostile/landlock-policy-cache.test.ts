/**
 * Issue 32: a Landlock or bwrap start reuses the policy resolution of the start before it (src/sandbox/resolveCache.ts) while
 * every question that resolution asked of the filesystem gets the same answer. A cache that skipped that check would
 * let a change made on the host between two starts with the same policy and cwd widen what the second command
 * reaches: a protected name's symlink pointed at another directory of the workspace, a `.git` file pointing at
 * another git directory, a path component renamed or swapped for a symlink to elsewhere, a filesystem mounted over
 * the workspace. Each case runs the same policy twice around the change, through prepareLaunch and the native
 * spawner, as a server would, and checks from the host that the second command got the new state's rules (and that
 * the resolution was reused when nothing changed, so the reuse path is the one under test). The cases run under both
 * backends (bwrap: all but the control mount, which is about the Landlock plan's own reuse).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { listDirectory } from '../../src/sandbox/linux/dirListing.js';
import { landlockSupport } from '../../src/sandbox/linux/landlockNative.js';
import { runLandlocked, WORKSPACE_WRITE, writeLine } from '../helpers/landlockRun.js';
import { needsSandbox } from '../helpers/native.js';
import { quietTop } from '../helpers/quietFs.js';
import { until } from '../helpers/server.js';

const support = landlockSupport();
const WORKSPACE = WORKSPACE_WRITE;
const top = realpathSync(mkdtempSync(join(quietTop, 'corral-ll-policy-cache-')));
after(() => rmSync(top, { recursive: true, force: true }));

type Backend = 'landlock' | 'bwrap';

const write = writeLine;

/** Whether this process may mount (root with CAP_SYS_ADMIN in its mount namespace). */
function canMount(): string | false {
  const probe = join(top, 'mount-probe');
  mkdirSync(probe, { recursive: true });
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'corral-probe', probe], { stdio: 'ignore' });
    execFileSync('umount', [probe], { stdio: 'ignore' });
    return false;
  } catch {
    return 'cannot mount here (not root, or no CAP_SYS_ADMIN)';
  }
}

const skipOf = (backend: Backend) =>
  backend === 'landlock'
    ? support.abi === 0
      ? `no Landlock here: ${support.missing}`
      : false
    : needsSandbox;

for (const backend of ['landlock', 'bwrap'] as const)
  describe(`${backend}: a kept policy resolution never outlives a change of what it resolved`, {
    skip: skipOf(backend),
  }, () => {
    const root = join(top, backend);
    mkdirSync(root, { recursive: true });
    /** Runs `script` sandboxed with the policy's cwd `cwd`; its output and whether the resolution was reused. */
    const run = async (cwd: string, script: string): Promise<{ out: string; resolution: unknown }> => {
      const { out, summary } = await runLandlocked(cwd, WORKSPACE, script, backend);
      return { out, resolution: summary?.policyResolution };
    };
    test('a protected name that is a symlink, pointed at another directory of the workspace', async () => {
      const W = join(root, 'link-swap');
      mkdirSync(join(W, 'g1'), { recursive: true });
      mkdirSync(join(W, 'g2'));
      symlinkSync('g1', join(W, '.git'));
      const first = await run(W, write('.git/a') + write('g2/a'));
      assert.doesNotMatch(first.out, /WROTE \.git\/a/, 'the target of .git must be read-only');
      assert.match(first.out, /WROTE g2\/a/, 'the rest of the workspace is writable');
      const again = await run(W, write('.git/a'));
      assert.equal(again.resolution, 'reused', 'nothing changed: the kept resolution is the one under test');
      assert.doesNotMatch(again.out, /WROTE/);
      // The host points .git at g2 (rename over the link: one atomic step, as git or a user's tool would).
      symlinkSync('g2', join(W, '.git.new'));
      renameSync(join(W, '.git.new'), join(W, '.git'));
      const swapped = await run(W, write('.git/b') + write('g2/b') + write('g1/b'));
      assert.equal(swapped.resolution, 'resolved');
      assert.doesNotMatch(
        swapped.out,
        /WROTE (\.git|g2)\/b/,
        `the new target of .git must be read-only\n${swapped.out}`,
      );
      assert.ok(!existsSync(join(W, 'g2', 'b')), 'the sandbox wrote into the directory .git now points at');
      assert.match(
        swapped.out,
        /WROTE g1\/b/,
        'the old target is an ordinary directory of the workspace now',
      );
    });

    test('a .git file rewritten to point at another git directory inside the workspace', async () => {
      const W = join(root, 'gitdir');
      mkdirSync(join(W, 'gd1'), { recursive: true });
      mkdirSync(join(W, 'gd2'));
      writeFileSync(join(W, '.git'), 'gitdir: gd1\n');
      assert.doesNotMatch((await run(W, write('gd1/a'))).out, /WROTE/, 'the git directory must be read-only');
      assert.equal((await run(W, write('gd1/a'))).resolution, 'reused');
      writeFileSync(join(W, '.git.new'), 'gitdir: gd2\n');
      renameSync(join(W, '.git.new'), join(W, '.git'));
      const moved = await run(W, write('gd2/b'));
      assert.equal(moved.resolution, 'resolved');
      assert.doesNotMatch(
        moved.out,
        /WROTE/,
        `the git directory .git names now must be read-only\n${moved.out}`,
      );
      assert.ok(!existsSync(join(W, 'gd2', 'b')));
    });

    test('a path component of the cwd that is a symlink, pointed elsewhere', async () => {
      const A = join(root, 'comp-a');
      const B = join(root, 'comp-b');
      for (const d of [A, B]) mkdirSync(join(d, 'ws', 'sub'), { recursive: true });
      const link = join(root, 'comp-link');
      symlinkSync(A, link);
      const cwd = join(link, 'ws');
      assert.match((await run(cwd, write('sub/a'))).out, /WROTE sub\/a/);
      assert.equal((await run(cwd, write('sub/a'))).resolution, 'reused');
      symlinkSync(B, `${link}.new`);
      renameSync(`${link}.new`, link);
      const swapped = await run(cwd, write('sub/b') + write(join(A, 'ws', 'sub', 'c')));
      assert.equal(swapped.resolution, 'resolved');
      assert.doesNotMatch(
        swapped.out,
        /WROTE .*comp-a/,
        `the old workspace is no longer writable\n${swapped.out}`,
      );
      assert.ok(
        !existsSync(join(A, 'ws', 'sub', 'c')),
        'the sandbox wrote into the directory the cwd named before',
      );
      assert.match(swapped.out, /WROTE sub\/b/, 'the cwd (now in B) is writable');
      assert.ok(existsSync(join(B, 'ws', 'sub', 'b')));
    });

    /** A workspace whose .git is a symlink to its own directory g (which must be read-only), and a sub directory. */
    const linkedGit = (ws: string) => {
      mkdirSync(join(ws, 'sub'), { recursive: true });
      mkdirSync(join(ws, 'g'));
      symlinkSync('g', join(ws, '.git'));
    };

    test('a path component of the cwd renamed away, and a workspace whose .git is a link made in its place', async () => {
      const P = join(root, 'ren');
      const Q = join(root, 'ren-old');
      const cwd = join(P, 'ws');
      mkdirSync(join(cwd, '.git'), { recursive: true });
      mkdirSync(join(cwd, 'sub'));
      assert.doesNotMatch((await run(cwd, write('.git/a'))).out, /WROTE/);
      assert.equal((await run(cwd, write('.git/a'))).resolution, 'reused');
      renameSync(P, Q);
      linkedGit(cwd);
      const fresh = await run(cwd, write(join(Q, 'ws', 'sub', 'x')) + write('g/x') + write('sub/y'));
      assert.equal(fresh.resolution, 'resolved');
      assert.match(fresh.out, /WROTE sub\/y/, 'the new workspace is writable');
      assert.doesNotMatch(
        fresh.out,
        /WROTE .*ren-old/,
        `the renamed workspace is no longer writable\n${fresh.out}`,
      );
      assert.ok(!existsSync(join(Q, 'ws', 'sub', 'x')));
      assert.doesNotMatch(
        fresh.out,
        /WROTE g\/x/,
        `the target of the new .git must be read-only\n${fresh.out}`,
      );
      assert.ok(!existsSync(join(cwd, 'g', 'x')));
    });

    test('a filesystem mounted over the workspace (its .git a link), then unmounted', {
      skip: canMount(),
    }, async () => {
      const W = join(root, 'mounted');
      mkdirSync(join(W, '.git'), { recursive: true });
      mkdirSync(join(W, 'sub'));
      assert.doesNotMatch((await run(W, write('.git/a'))).out, /WROTE/);
      assert.equal((await run(W, write('.git/a'))).resolution, 'reused');
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'corral-test', W]);
      try {
        linkedGit(W);
        const over = await run(W, write('g/x') + write('sub/y'));
        assert.equal(over.resolution, 'resolved');
        assert.match(over.out, /WROTE sub\/y/, 'the mounted workspace is writable');
        assert.doesNotMatch(
          over.out,
          /WROTE g/,
          `the target of .git on the mount must be read-only\n${over.out}`,
        );
        assert.ok(!existsSync(join(W, 'g', 'x')));
      } finally {
        execFileSync('umount', [W]);
      }
      const back = await run(W, write('.git/b') + write('sub/z'));
      assert.equal(back.resolution, 'resolved');
      assert.doesNotMatch(back.out, /WROTE \.git/, back.out);
      assert.match(back.out, /WROTE sub\/z/);
      assert.equal(readFileSync(join(W, 'sub', 'z'), 'utf8'), 'x\n');
    });
    test('a whole launch plan kept between quiet starts is made anew after a change under it', {
      skip: backend === 'bwrap' ? 'the Landlock launch plan (landlockLaunch.ts KeptLaunch)' : false,
    }, async () => {
      const W = join(root, 'kept-launch');
      mkdirSync(join(W, 'sub'), { recursive: true });
      const quiet = async () => (await runLandlocked(W, WORKSPACE, 'true', backend)).summary;
      // Starts that change nothing, until two in a row share one summary: the whole plan is kept (the path under test).
      const keptSummary = async () => {
        let last = await quiet();
        await until(
          async () => {
            const next = await quiet();
            const same = next === last;
            last = next;
            return same;
          },
          10_000,
          'two quiet starts sharing one kept plan',
        );
        return last;
      };
      const kept = await keptSummary();
      assert.equal(kept?.policyResolution, 'reused');
      assert.ok(Object.isFrozen(kept), 'a kept plan is shared frozen');
      // The host makes a protected name: the kept plan did not know it, the next start's must.
      mkdirSync(join(W, '.git'));
      const made = await runLandlocked(W, WORKSPACE, write('.git/a') + write('sub/a'), backend);
      assert.notEqual(made.summary, kept, 'planned anew after the change');
      assert.doesNotMatch(made.out, /WROTE \.git/, `the new .git must be read-only\n${made.out}`);
      assert.ok(!existsSync(join(W, '.git', 'a')));
      assert.match(made.out, /WROTE sub\/a/, made.out);
      // Kept again, then .git swapped for a link to sub: sub is the git directory now, read-only.
      const again = await keptSummary();
      rmSync(join(W, '.git'), { recursive: true });
      symlinkSync('sub', join(W, '.git'));
      const linked = await runLandlocked(W, WORKSPACE, write('sub/b'), backend);
      assert.notEqual(linked.summary, again);
      assert.doesNotMatch(linked.out, /WROTE/, `the target of .git must be read-only\n${linked.out}`);
      assert.ok(!existsSync(join(W, 'sub', 'b')));
    });

    test('a control filesystem (proc) mounted inside the workspace between two starts is read-only in the second', {
      skip: backend === 'bwrap' ? 'the Landlock plan and ruleset reuse' : canMount(),
    }, async () => {
      const W = join(root, 'proc-mount');
      mkdirSync(join(W, 'sub', 'p'), { recursive: true });
      mkdirSync(join(W, 'sub', 'q'));
      mkdirSync(join(W, '.git'));
      assert.match((await run(W, write('sub/a'))).out, /WROTE sub\/a/);
      // Settled listings: the plan and the ruleset of this start are reused by the next, as the mount changes no listing.
      await until(
        () => [W, join(W, 'sub'), root].every((d) => listDirectory(d).stable),
        5000,
        'stable listings',
      );
      assert.equal((await run(W, write('sub/a'))).resolution, 'reused');
      execFileSync('mount', ['-t', 'proc', 'corral-test-proc', join(W, 'sub', 'p')]);
      try {
        // Opened for writing and closed without a byte written: nothing on the host changes either way.
        const r = await run(
          W,
          `(: >> sub/p/sys/kernel/hostname) 2>/dev/null && echo OPENED; ${write('sub/q/b')}`,
        );
        assert.doesNotMatch(
          r.out,
          /OPENED/,
          `a kernel setting under the new proc mount opened for writing\n${r.out}`,
        );
        assert.match(r.out, /WROTE sub\/q\/b/, `the rest of the workspace stays writable\n${r.out}`);
      } finally {
        execFileSync('umount', [join(W, 'sub', 'p')]);
      }
    });
  });
