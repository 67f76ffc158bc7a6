/**
 * A hostile local process and a workspace on FUSE (docs/security.md: "changes inotify does not see"). A kept policy
 * resolution, launch plan or Landlock ruleset is vouched for by the planning watch only on local filesystems; on FUSE,
 * NFS, 9p it is checked by asking again at every start, and FUSE answers from its kernel caches (attributes for a
 * second, here the same inode number and ctime for a symlink replaced behind it). The workspace here is a bindfs mount
 * of a backing directory, and every change is made in the backing directory, where neither the watch nor the mount's
 * caches see it: the second start must still get the new state's rules. Each case runs under both backends, checks
 * that nothing changed is reused (so the reuse path is the one under test), and checks from the host what the command
 * wrote.
 *
 * The same change met by fs/* with a sandbox context: its policy resolution asks the same questions.
 *
 * Needs root, /dev/fuse and bindfs (the pretest step installs it as root); skips, saying which, without them.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  realpathSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { landlockSupport } from '../../src/sandbox/linux/landlockNative.js';
import { runLandlocked, WORKSPACE_WRITE, writeLine } from '../helpers/landlockRun.js';
import { needsConfinedFs, needsSandbox } from '../helpers/native.js';
import { quietTop } from '../helpers/quietFs.js';
import { startTestServer } from '../helpers/server.js';
import { entry, managedContext, rootEntry } from './fs-util.js';

const WORKSPACE = WORKSPACE_WRITE;
const write = writeLine;

const top = realpathSync(mkdtempSync(join(quietTop, 'corral-fuse-kept-')));
const back = join(top, 'back');
const mnt = join(top, 'mnt');
mkdirSync(back);
mkdirSync(mnt);

/** Mounts the backing directory on `mnt` with bindfs; why not, when it cannot. */
function mountFuse(): string | false {
  if (process.geteuid?.() !== 0) return 'needs root (a FUSE mount)';
  if (!existsSync('/dev/fuse')) return 'no /dev/fuse here';
  const r = spawnSync('bindfs', [back, mnt], { encoding: 'utf8' });
  if (r.error) return 'bindfs is not installed (apt-get install bindfs)';
  if (r.status !== 0) return `bindfs cannot mount here: ${r.stderr.trim()}`;
  return false;
}
const fuse = mountFuse();
after(() => {
  if (!fuse) spawnSync('umount', ['-l', mnt]); // lazy: a mount still busy goes when its last user does
  rmSync(top, { recursive: true, force: true });
});

const support = landlockSupport();
const skipOf = (backend: 'landlock' | 'bwrap') =>
  fuse ||
  (backend === 'landlock'
    ? support.abi === 0
      ? `no Landlock here: ${support.missing}`
      : false
    : needsSandbox);

for (const backend of ['landlock', 'bwrap'] as const)
  describe(`${backend}, a workspace on FUSE changed behind the mount: a kept plan never outlives the change`, {
    skip: skipOf(backend),
  }, () => {
    const run = async (cwd: string, script: string) => {
      const { out, summary } = await runLandlocked(cwd, WORKSPACE, script, backend);
      return { out, resolution: summary?.policyResolution };
    };
    /** The case's directory in the backing store and the same directory seen through the FUSE mount. */
    const place = (name: string) => {
      const B = join(back, backend, name);
      mkdirSync(B, { recursive: true });
      return { B, W: join(mnt, backend, name) };
    };

    test('the mount is FUSE (what the watch does not cover)', () => {
      // FUSE_SUPER_MAGIC: fswatch.c's local_fs says no to it.
      assert.equal(execFileSync('stat', ['-f', '-c', '%t', mnt], { encoding: 'utf8' }).trim(), '65735546');
    });

    test('a protected .git symlink pointed at another directory of the workspace', async () => {
      const { B, W } = place('link-swap');
      mkdirSync(join(B, 'g1'));
      mkdirSync(join(B, 'g2'));
      symlinkSync('g1', join(B, '.git'));
      const first = await run(W, write('.git/a') + write('g2/a'));
      assert.doesNotMatch(first.out, /WROTE \.git\/a/, 'the target of .git must be read-only');
      assert.match(first.out, /WROTE g2\/a/);
      const again = await run(W, write('.git/a'));
      assert.equal(again.resolution, 'reused', 'nothing changed: the kept resolution is the one under test');
      symlinkSync('g2', join(B, '.git.new'));
      renameSync(join(B, '.git.new'), join(B, '.git'));
      const swapped = await run(W, write('.git/b') + write('g2/b') + write('g1/b'));
      assert.notEqual(swapped.resolution, 'reused');
      assert.ok(
        !existsSync(join(B, 'g2', 'b')),
        `the sandbox wrote into the new target of .git\n${swapped.out}`,
      );
      assert.match(
        swapped.out,
        /WROTE g1\/b/,
        'the old target is an ordinary directory of the workspace now',
      );
    });

    test('a .git file rewritten in place (same inode, same size) to name another git directory', async () => {
      const { B, W } = place('gitdir');
      mkdirSync(join(B, 'gd1'));
      mkdirSync(join(B, 'gd2'));
      writeFileSync(join(B, '.git'), 'gitdir: gd1\n');
      assert.doesNotMatch((await run(W, write('gd1/a'))).out, /WROTE/, 'the git directory must be read-only');
      assert.equal((await run(W, write('gd1/a'))).resolution, 'reused');
      writeFileSync(join(B, '.git'), 'gitdir: gd2\n');
      const moved = await run(W, write('gd2/b') + write('gd1/b'));
      assert.notEqual(moved.resolution, 'reused');
      assert.ok(
        !existsSync(join(B, 'gd2', 'b')),
        `the git directory .git names now must be read-only\n${moved.out}`,
      );
      assert.match(moved.out, /WROTE gd1\/b/, 'the old git directory is an ordinary directory now');
    });

    test('the workspace renamed away and another made in its place, whose .git is a link', async () => {
      const { B, W } = place('renamed');
      mkdirSync(join(B, '.git'));
      mkdirSync(join(B, 'sub'));
      assert.doesNotMatch((await run(W, write('.git/a'))).out, /WROTE/);
      assert.equal((await run(W, write('.git/a'))).resolution, 'reused');
      renameSync(B, `${B}-old`);
      mkdirSync(join(B, 'sub'), { recursive: true });
      mkdirSync(join(B, 'g'));
      symlinkSync('g', join(B, '.git'));
      const fresh = await run(W, write(`${W}-old/sub/x`) + write('g/x') + write('sub/y'));
      assert.notEqual(fresh.resolution, 'reused');
      assert.ok(
        !existsSync(join(`${B}-old`, 'sub', 'x')),
        `the old workspace is no longer writable\n${fresh.out}`,
      );
      assert.ok(!existsSync(join(B, 'g', 'x')), `the target of the new .git must be read-only\n${fresh.out}`);
      assert.match(fresh.out, /WROTE sub\/y/, 'the new workspace is writable');
    });
  });

describe('fs/* with a sandbox context, a workspace on FUSE changed behind the mount', {
  skip: fuse || needsConfinedFs,
}, () => {
  test("a .git directory replaced by a link to a directory of the workspace: writes to the link's target refused", async () => {
    const B = join(back, 'fs', 'ws');
    const W = join(mnt, 'fs', 'ws');
    mkdirSync(join(B, '.git'), { recursive: true });
    mkdirSync(join(B, 'sub'));
    const ts = await startTestServer();
    try {
      const c = await ts.client();
      const sandbox = managedContext(W, [rootEntry('read'), entry(W, 'write')]);
      const writeFile = (path: string) =>
        c.request('fs/writeFile', { path, dataBase64: Buffer.from('x').toString('base64'), sandbox }).then(
          () => 'written',
          (e: Error) => e.message,
        );
      assert.match(await writeFile(join(W, '.git', 'a')), /sandbox denied write/);
      assert.equal(await writeFile(join(W, 'sub', 'a')), 'written');
      renameSync(B, `${B}-old`);
      mkdirSync(join(B, 'g'), { recursive: true });
      symlinkSync('g', join(B, '.git'));
      const got = await writeFile(join(W, 'g', 'x'));
      assert.ok(!existsSync(join(B, 'g', 'x')), `written into the new target of .git (${got})`);
      assert.match(got, /sandbox denied write .*read-only/);
    } finally {
      await ts.close();
    }
  });
});
