/**
 * The Landlock ruleset builder (src/platform/native/landlock.c) applied by a real child (confine.c): a rule lands on
 * the path the plan named, never on what a symlink put on the way since planning points at.
 */
import assert from 'node:assert/strict';
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { LaunchSpec } from '../../src/process/launch.js';
import { spawnPiped } from '../../src/process/spawner.js';
import { buildSeccompFilter } from '../../src/sandbox/index.js';
import { handledFs, READ, WRITE } from '../../src/sandbox/linux/landlock.js';
import {
  buildBoundRuleset,
  buildRuleset,
  closeRuleset,
  landlockSupport,
} from '../../src/sandbox/linux/landlockNative.js';
import { hostSeccompArch } from '../../src/sandbox/linux/seccomp.js';
import { outputAndExit } from '../helpers/spawned.js';

const support = landlockSupport();
const root = realpathSync(mkdtempSync(join(os.tmpdir(), 'corral-ll-ruleset-')));
after(() => rmSync(root, { recursive: true, force: true }));

async function runConfined(rules: { path: string; rights: number }[], script: string): Promise<string> {
  const fd = buildRuleset({
    handledFs: handledFs(support.abi),
    handledNet: 0,
    scoped: 0,
    rules,
    connectPorts: [],
  });
  const spec: LaunchSpec = {
    file: '/bin/sh',
    argv: ['sh', '-c', script],
    env: { PATH: '/usr/bin:/bin' },
    cwd: '/',
    confine: {
      rulesetFd: fd,
      seccomp: buildSeccompFilter(hostSeccompArch(os.arch(), os.machine()), 'network-enabled'),
    },
  };
  let c: ReturnType<typeof spawnPiped>;
  try {
    c = spawnPiped(spec, { stdin: 'null' });
  } finally {
    closeRuleset(fd);
  }
  return outputAndExit(c);
}

test('a rule whose path goes through a symlink is not placed (no write reaches the link target)', {
  skip: support.abi === 0 ? `no Landlock here: ${support.missing}` : false,
}, async () => {
  const real = join(root, 'outside');
  mkdirSync(join(real, 'sub'), { recursive: true });
  mkdirSync(join(root, 'ws', 'sub'), { recursive: true });
  // Control: the rule on the real path grants the write.
  const ok = await runConfined(
    [
      { path: '/', rights: READ },
      { path: join(root, 'ws', 'sub'), rights: WRITE },
    ],
    `echo x > ${join(root, 'ws', 'sub', 'a')} && echo WROTE`,
  );
  assert.match(ok, /WROTE/, ok);
  // The plan named ws/sub; since, ws became a symlink to outside (a sandbox could do that in a writable root).
  rmSync(join(root, 'ws'), { recursive: true });
  symlinkSync(real, join(root, 'ws'));
  const out = await runConfined(
    [
      { path: '/', rights: READ },
      { path: join(root, 'ws', 'sub'), rights: WRITE },
    ],
    `echo x > ${join(real, 'sub', 'b')} && echo WROTE`,
  );
  assert.ok(!existsSync(join(real, 'sub', 'b')), `the rule followed the symlink: ${out}`);
  assert.doesNotMatch(out, /WROTE/);
});

test('the build says what each rule is bound to: the inode it opened, a symlink as itself, "-" for nothing', {
  skip: support.abi === 0 ? `no Landlock here: ${support.missing}` : false,
}, () => {
  const dir = join(root, 'bound');
  mkdirSync(join(dir, 'd'), { recursive: true });
  writeFileSync(join(dir, 'f'), 'x');
  symlinkSync(join(dir, 'd'), join(dir, 'link'));
  symlinkSync(dir, join(root, 'via'));
  const paths = [
    join(dir, 'd'),
    join(dir, 'f'),
    join(dir, 'link'), // a trailing symlink: itself (and no rule)
    join(dir, 'missing'),
    join(root, 'via', 'd'), // a symlink on the way: nothing opened
    join(dir, 'f', 'below-a-file'),
  ];
  const { fd, inodes } = buildBoundRuleset({
    handledFs: handledFs(support.abi),
    handledNet: 0,
    scoped: 0,
    rules: paths.map((path) => ({ path, rights: READ })),
    connectPorts: [],
  });
  closeRuleset(fd);
  const own = (p: string) => {
    const st = lstatSync(p);
    return `${st.dev}:${st.ino}`;
  };
  assert.deepEqual(inodes, [own(paths[0]!), own(paths[1]!), own(paths[2]!), '-', '-', '-']);
});
