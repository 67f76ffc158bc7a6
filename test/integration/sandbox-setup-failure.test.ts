// A sandbox whose setup fails after the spawn (bwrap held on its block fd while the server sets up the managed network
// or pins links): the start is refused, nothing is left running, and the error says what the setup wrote — bwrap's
// own reason ("Can't find source path …"), which the process's output had and nobody read.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { closeSync, constants, mkdirSync, openSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { release } from '../../src/sandbox/linux/managedNet.js';
import { silentLogger } from '../../src/server/core/log.js';
import { Launcher, type LaunchPreparer } from '../../src/server/process/launcher.js';
import { failingSetup } from '../helpers/failingSetup.js';
import { needsSandbox } from '../helpers/native.js';
import { alive, startTestServer, tempDir, until } from '../helpers/server.js';
import { startParams as params } from '../helpers/startParams.js';
import { pathEntry, seedParam, special } from './sandbox-util.js';

describe('a sandbox setup that fails after the spawn', () => {
  const dirs: { path: string; cleanup(): void }[] = [];
  after(() => {
    for (const d of dirs) d.cleanup();
  });

  for (const tty of [false, true]) {
    test(`the error carries what the setup wrote, on one line; the process is gone (${tty ? 'tty' : 'pipes'})`, async () => {
      const dir = tempDir();
      dirs.push(dir);
      // A long message with control characters and a terminal escape: one line, its end kept.
      const said = `${'x'.repeat(900)}\u001b[31m\rbwrap: Can't find source path /nowhere/.agents: No such file or directory`;
      const f = failingSetup(dir.path, `printf '%s\\n' "$SAID" >&2`, { SAID: said });
      const ts = await startTestServer({ preparer: f.preparer });
      try {
        const c = await ts.client();
        const e = await c.requestError('process/start', params('p', ['/bin/true'], { tty }));
        assert.equal(e.code, -32603);
        assert.match(
          e.message,
          /^sandbox setup failed: sandbox setup: the process exited during setup \(it wrote: …x+ \[31m bwrap: Can't find source path \/nowhere\/\.agents: No such file or directory\)$/,
        );
        assert.doesNotMatch(e.message, /[\u0000-\u001f]/);
        assert.ok(e.message.length < 700, `${e.message.length} characters`);
        const pid = Number(readFileSync(f.pidFile, 'utf8'));
        await until(() => !alive(pid), 5000, 'the process to be killed');
      } finally {
        await ts.close();
      }
    });
  }

  test("real bwrap: a writable root removed between prepare and spawn, with a pinned link: bwrap's reason in the error", {
    skip: needsSandbox,
  }, async () => {
    const dir = tempDir();
    dirs.push(dir);
    // The workspace's .git is a link (its target pinned after bwrap's setup: bwrap waits on its block fd), and a
    // second writable root that is gone when bwrap comes to bind it — as a hostile local process could arrange.
    const ws = join(dir.path, 'ws');
    const extra = join(dir.path, 'extra');
    mkdirSync(join(ws, 'real-git'), { recursive: true });
    mkdirSync(extra);
    symlinkSync('real-git', join(ws, '.git'));
    const launcher = new Launcher({ log: silentLogger });
    const preparer: LaunchPreparer = {
      async prepare(p, spec, ctx) {
        const launch = await launcher.prepare(p, spec, ctx);
        rmSync(extra, { recursive: true });
        return launch;
      },
      classify: launcher.classify,
    };
    const ts = await startTestServer({ preparer });
    try {
      const c = await ts.client();
      const sandbox = seedParam({
        cwd: ws,
        entries: [special('root', 'read'), pathEntry(ws, 'write'), pathEntry(extra, 'write')],
      });
      const e = await c.requestError('process/start', {
        ...params('p', ['/bin/true'], { cwd: ws }),
        sandbox,
      });
      assert.equal(e.code, -32603);
      assert.match(
        e.message,
        /^sandbox setup failed: .*\(it wrote: bwrap: Can't find source path .*extra: No such file or directory\)$/,
      );
    } finally {
      await ts.close();
    }
  });

  test('a setup that wrote nothing keeps its own message', async () => {
    const dir = tempDir();
    dirs.push(dir);
    const f = failingSetup(dir.path, ':');
    const ts = await startTestServer({ preparer: f.preparer });
    try {
      const c = await ts.client();
      const e = await c.requestError('process/start', params('p', ['/bin/true']));
      assert.equal(e.message, 'sandbox setup failed: sandbox setup: the process exited during setup');
    } finally {
      await ts.close();
    }
  });

  test('releasing a bwrap that is gone is a setup error, not a raw EPIPE', () => {
    const dir = tempDir();
    dirs.push(dir);
    // A pipe whose reader is gone, as bwrap's block pipe is when bwrap has died.
    const fifo = join(dir.path, 'block');
    execFileSync('mkfifo', [fifo]);
    const r = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    const w = openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK);
    closeSync(r);
    try {
      assert.throws(() => release(w), {
        name: 'SandboxSetupError',
        message: 'sandbox setup: the process exited during setup',
      });
    } finally {
      closeSync(w);
    }
    // Any other failure is what it is.
    assert.throws(() => release(w), { code: 'EBADF' });
  });
});
