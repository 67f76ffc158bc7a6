// fs/* with a sandbox context (sandbox.md §3.3, protocol.md §6) through the real WebSocket server: what the policy
// allows works (symlinks inside the workspace included), what it does not is refused naming the path, decided on
// what was opened: protected names of every writable root, `none` entries inside a recursive copy (issue 12 item 6),
// carve-outs reached by another name (hard link, bind mount). Without the addon, sandboxed fs/* is refused.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  existsSync,
  lchownSync,
  linkSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { CORRAL_BIN } from '../helpers/cli.js';
import { b64, RpcClient } from '../helpers/client.js';
import { needsConfinedFs } from '../helpers/native.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { entry, type HostileFixture, hostileFixture, sandboxContext } from '../hostile/fs-util.js';

let f: HostileFixture;
let ts: TestServer;
let c: RpcClient;
before(async () => {
  f = hostileFixture('corral-fs-sbx-');
  ts = await startTestServer({ launcher: { sandbox: { tmpdir: f.T } } });
  c = await ts.client('agent');
});
after(async () => {
  await ts.close();
  f.close();
});

const text = (r: { dataBase64: string }) => Buffer.from(r.dataBase64, 'base64').toString();

async function refused(method: string, params: Record<string, unknown>, names: string): Promise<string> {
  const e = await c.requestError(method, params);
  assert.equal(e.code, -32603, `${method}: ${e.message}`);
  assert.ok(e.message.includes(names), `${method}: "${e.message}" does not name ${names}`);
  return e.message;
}

describe('fs/* with a sandbox context', () => {
  test('inside the workspace everything works, symlinks inside it included', {
    skip: needsConfinedFs,
  }, async () => {
    const sb = sandboxContext(f);
    const W = join(f.W, 'basic');
    await c.request('fs/createDirectory', { path: `${W}/real/deep`, recursive: true, sandbox: sb });
    symlinkSync('real', `${W}/link`);
    symlinkSync('real/deep/../../..', `${W}/up`);
    await c.request('fs/writeFile', { path: `${W}/link/f.txt`, dataBase64: b64('via link'), sandbox: sb });
    assert.equal(readFileSync(`${W}/real/f.txt`, 'utf8'), 'via link');
    assert.equal(
      text(await c.request('fs/readFile', { path: `${W}/up/basic/link/f.txt`, sandbox: sb })),
      'via link',
    );
    assert.equal(
      (await c.request<{ path: string }>('fs/canonicalize', { path: `${W}/link/deep/../f.txt`, sandbox: sb }))
        .path,
      `${W}/real/f.txt`,
    );
    const m = await c.request<Record<string, unknown>>('fs/getMetadata', { path: `${W}/link`, sandbox: sb });
    assert.equal(m.isSymlink, true);
    assert.equal(m.isDirectory, true);
    const d = await c.request<{ entries: { fileName: string; isDirectory: boolean; isFile: boolean }[] }>(
      'fs/readDirectory',
      { path: W, sandbox: sb },
    );
    assert.deepEqual(d.entries, [
      { fileName: 'link', isDirectory: true, isFile: false },
      { fileName: 'real', isDirectory: true, isFile: false },
      { fileName: 'up', isDirectory: true, isFile: false },
    ]);
    await c.request('fs/copy', {
      sourcePath: `${W}/link`,
      destinationPath: `${W}/copy`,
      recursive: true,
      sandbox: sb,
    });
    assert.equal(readFileSync(`${W}/copy/f.txt`, 'utf8'), 'via link');
    await c.request('fs/remove', { path: `${W}/copy`, recursive: true, force: false, sandbox: sb });
    assert.ok(!existsSync(`${W}/copy`));
    await c.request('fs/remove', { path: `${W}/link`, recursive: true, force: false, sandbox: sb });
    assert.ok(!existsSync(`${W}/link`) && existsSync(`${W}/real/f.txt`), 'a link is removed, not its target');
    // The same errors as without a context.
    let e = await c.requestError('fs/readFile', { path: `${W}/missing`, sandbox: sb });
    assert.deepEqual([e.code, e.message], [-32004, 'No such file or directory (os error 2)']);
    e = await c.requestError('fs/readFile', { path: `${W}/real`, sandbox: sb });
    assert.deepEqual([e.code, e.message], [-32603, 'Is a directory (os error 21)']);
    symlinkSync('loop', `${W}/loop`);
    e = await c.requestError('fs/readFile', { path: `${W}/loop`, sandbox: sb });
    assert.deepEqual([e.code, e.message], [-32603, 'Too many levels of symbolic links (os error 40)']);
    e = await c.requestError('fs/remove', { path: `${W}/real`, recursive: false, force: false, sandbox: sb });
    assert.deepEqual([e.code, e.message], [-32603, 'Directory not empty (os error 39)']);
  });

  test('outside, through a link or not, nothing is read, written or removed', {
    skip: needsConfinedFs,
  }, async () => {
    const sb = sandboxContext(f);
    const W = join(f.W, 'out');
    mkdirSync(W);
    writeFileSync(join(f.OUT, 'secret'), 'SECRET');
    symlinkSync(f.OUT, `${W}/o`);
    symlinkSync(join(f.OUT, 'secret'), `${W}/s`);
    symlinkSync(`../../${f.OUT.split('/').pop()}/secret`, `${W}/rel`);
    for (const p of [
      `${W}/s`,
      `${W}/o/secret`,
      `${W}/rel`,
      join(f.OUT, 'secret'),
      join(f.OUT, 'nothing-here'),
    ]) {
      await refused('fs/readFile', { path: p, sandbox: sb }, p);
      await refused('fs/getMetadata', { path: p, sandbox: sb }, p);
      await refused('fs/writeFile', { path: p, dataBase64: b64('x'), sandbox: sb }, p);
      await refused(
        'fs/copy',
        { sourcePath: p, destinationPath: `${W}/c`, recursive: false, sandbox: sb },
        p,
      );
    }
    await refused('fs/readDirectory', { path: `${W}/o`, sandbox: sb }, `${W}/o`);
    mkdirSync(join(f.OUT, 'exists'));
    await refused(
      'fs/createDirectory',
      { path: join(f.OUT, 'exists'), recursive: true, sandbox: sb },
      join(f.OUT, 'exists'),
    );
    await refused(
      'fs/remove',
      { path: `${W}/o/secret`, recursive: false, force: true, sandbox: sb },
      `${W}/o/secret`,
    );
    await refused('fs/createDirectory', { path: `${W}/o/d/e`, recursive: true, sandbox: sb }, `${W}/o/d`);
    await refused(
      'fs/copy',
      { sourcePath: `${W}/s`, destinationPath: `${W}/o/c`, recursive: false, sandbox: sb },
      `${W}/s`,
    );
    writeFileSync(`${W}/mine`, 'mine');
    await refused(
      'fs/copy',
      { sourcePath: `${W}/mine`, destinationPath: `${W}/o/c`, recursive: false, sandbox: sb },
      `${W}/o/c`,
    );
    assert.equal(readFileSync(join(f.OUT, 'secret'), 'utf8'), 'SECRET');
    assert.ok(!existsSync(join(f.OUT, 'c')) && !existsSync(join(f.OUT, 'd')) && !existsSync(`${W}/c`));
  });

  test("the server's own /proc and /dev are not the sandbox's: refused, through a link too", {
    skip: needsConfinedFs,
  }, async () => {
    const sb = sandboxContext(f);
    const W = join(f.W, 'host-only');
    mkdirSync(W);
    symlinkSync('/proc/self/environ', `${W}/env`);
    const shm = `/dev/shm/corral-fs-test-${process.pid}`;
    writeFileSync(shm, 'host shm');
    try {
      for (const p of [`${W}/env`, '/proc/self/environ', '/proc/self/status', shm]) {
        const m = await refused('fs/readFile', { path: p, sandbox: sb }, p);
        assert.match(m, /the server's own \/proc or \/dev/);
      }
      await refused('fs/writeFile', { path: shm, dataBase64: b64('x'), sandbox: sb }, shm);
      await refused('fs/readDirectory', { path: '/proc', sandbox: sb }, '/proc');
      // Without a context (full access) the agent reads what the server reads, as before.
      assert.ok(text(await c.request('fs/readFile', { path: shm })).includes('host shm'));
    } finally {
      rmSync(shm, { force: true });
    }
  });

  test('protected names (.git .codex .agents .aws) are read-only in every writable root, links to them too', {
    skip: needsConfinedFs,
  }, async () => {
    const sb = sandboxContext(f, [entry(f.T, 'write')]);
    const W = f.W;
    for (const root of [W, f.T])
      for (const name of ['.git', '.codex', '.agents', '.aws']) {
        await refused(
          'fs/createDirectory',
          { path: `${root}/${name}`, recursive: true, sandbox: sb },
          `${root}/${name}`,
        );
        await refused(
          'fs/writeFile',
          { path: `${root}/${name}`, dataBase64: b64('x'), sandbox: sb },
          `${root}/${name}`,
        );
        assert.ok(!existsSync(`${root}/${name}`), `${root}/${name} was created`);
      }
    // An existing .git: nothing in it can be changed.
    mkdirSync(`${W}/.git/hooks`, { recursive: true });
    writeFileSync(`${W}/.git/HEAD`, 'ref: refs/heads/main\n');
    await refused(
      'fs/writeFile',
      { path: `${W}/.git/hooks/pre-commit`, dataBase64: b64('#!/bin/sh\n'), sandbox: sb },
      '.git',
    );
    await refused('fs/remove', { path: `${W}/.git`, recursive: true, force: true, sandbox: sb }, `${W}/.git`);
    await refused(
      'fs/remove',
      { path: `${W}/.git/HEAD`, recursive: false, force: true, sandbox: sb },
      '.git',
    );
    assert.equal(
      text(await c.request('fs/readFile', { path: `${W}/.git/HEAD`, sandbox: sb })),
      'ref: refs/heads/main\n',
    );
    // A .codex that is a link to a real directory elsewhere in the workspace: the link's name is what is protected.
    mkdirSync(`${W}/elsewhere`);
    symlinkSync(`${W}/elsewhere`, `${W}/.codex`);
    await refused(
      'fs/writeFile',
      { path: `${W}/.codex/config.toml`, dataBase64: b64('x'), sandbox: sb },
      `${W}/.codex`,
    );
    await refused(
      'fs/remove',
      { path: `${W}/.codex`, recursive: false, force: true, sandbox: sb },
      `${W}/.codex`,
    );
    assert.ok(!existsSync(`${W}/elsewhere/config.toml`) && lstatSync(`${W}/.codex`).isSymbolicLink());
    // Only in a writable root itself: a .git deeper down is an ordinary name.
    await c.request('fs/createDirectory', { path: `${W}/sub/.git`, recursive: true, sandbox: sb });
    assert.ok(existsSync(`${W}/sub/.git`));
  });

  test('a recursive copy with a `none` entry inside is refused as a whole, naming the entry (issue 12 item 6)', {
    skip: needsConfinedFs,
  }, async () => {
    const P = join(f.W, 'proj');
    mkdirSync(`${P}/secret`, { recursive: true });
    mkdirSync(`${P}/sub`);
    writeFileSync(`${P}/a.txt`, 'a');
    writeFileSync(`${P}/secret/key`, 'KEY');
    writeFileSync(`${P}/sub/b.txt`, 'b');
    writeFileSync(`${P}/sub/token`, 'TOKEN');
    const sb = sandboxContext(f, [entry(`${P}/secret`, 'none'), entry(`${P}/sub/token`, 'none')]);
    await refused('fs/readFile', { path: `${P}/secret/key`, sandbox: sb }, `${P}/secret/key`);
    const msg = await refused(
      'fs/copy',
      { sourcePath: P, destinationPath: `${f.W}/proj2`, recursive: true, sandbox: sb },
      `${P}/secret`,
    );
    assert.match(msg, /not readable/);
    assert.ok(!existsSync(`${f.W}/proj2`), 'nothing of the copy was made');
    await refused(
      'fs/copy',
      { sourcePath: `${P}/sub`, destinationPath: `${f.W}/sub2`, recursive: true, sandbox: sb },
      `${P}/sub/token`,
    );
    assert.ok(!existsSync(`${f.W}/sub2`));
    // A link to the secret is copied as a link (its target as written), never as the secret's bytes.
    mkdirSync(`${f.W}/tree`);
    symlinkSync('../proj/secret/key', `${f.W}/tree/key-link`);
    writeFileSync(`${f.W}/tree/ok`, 'ok');
    await c.request('fs/copy', {
      sourcePath: `${f.W}/tree`,
      destinationPath: `${f.W}/tree2`,
      recursive: true,
      sandbox: sb,
    });
    assert.equal(readlinkSync(`${f.W}/tree2/key-link`), '../proj/secret/key');
    assert.equal(readFileSync(`${f.W}/tree2/ok`, 'utf8'), 'ok');
    await refused('fs/readFile', { path: `${f.W}/tree2/key-link`, sandbox: sb }, `${P}/secret/key`);
    // Not a regular file, directory or link: the whole copy is refused too.
    execFileSync('mkfifo', [`${f.W}/tree/fifo`]);
    await refused(
      'fs/copy',
      { sourcePath: `${f.W}/tree`, destinationPath: `${f.W}/tree3`, recursive: true, sandbox: sb },
      `${f.W}/tree/fifo`,
    );
    assert.ok(!existsSync(`${f.W}/tree3`));
    // A recursive remove that would take a read-only entry with it is refused before anything goes.
    const sbRo = sandboxContext(f, [entry(`${P}/sub/b.txt`, 'read')]);
    await refused('fs/remove', { path: P, recursive: true, force: true, sandbox: sbRo }, `${P}/sub/b.txt`);
    assert.ok(existsSync(`${P}/a.txt`) && existsSync(`${P}/sub/b.txt`));
  });

  test('a carve-out reached by another name keeps its access (hard link, bind mount)', {
    skip: needsConfinedFs,
  }, async () => {
    const W = join(f.W, 'ident');
    mkdirSync(`${W}/ro`, { recursive: true });
    writeFileSync(`${W}/secret.txt`, 'SECRET');
    linkSync(`${W}/secret.txt`, `${W}/public.txt`);
    writeFileSync(`${W}/ro/x`, 'ro');
    const sb = sandboxContext(f, [entry(`${W}/secret.txt`, 'none'), entry(`${W}/ro`, 'read')]);
    await refused('fs/readFile', { path: `${W}/public.txt`, sandbox: sb }, `${W}/public.txt`);
    if (process.getuid?.() !== 0) return;
    mkdirSync(`${W}/alias`);
    execFileSync('mount', ['--bind', `${W}/ro`, `${W}/alias`]);
    try {
      await refused(
        'fs/writeFile',
        { path: `${W}/alias/x`, dataBase64: b64('pwned'), sandbox: sb },
        `${W}/alias/x`,
      );
      await refused(
        'fs/remove',
        { path: `${W}/alias/x`, recursive: false, force: true, sandbox: sb },
        `${W}/alias/x`,
      );
      assert.equal(readFileSync(`${W}/ro/x`, 'utf8'), 'ro');
    } finally {
      execFileSync('umount', [`${W}/alias`]);
    }
  });

  test("in a sticky world-writable root, another user's links are not followed nor their files written (as the kernel's protected_symlinks/protected_regular)", {
    skip: needsConfinedFs,
  }, async () => {
    if (process.getuid?.() !== 0) return; // needs chown
    const S = join(f.root, 'sticky');
    mkdirSync(S);
    chmodSync(S, 0o1777);
    writeFileSync(`${f.W}/victim`, 'keep');
    const sb = sandboxContext(f, [entry(S, 'write')]);
    symlinkSync(`${f.W}/victim`, `${S}/theirs`);
    lchownSync(`${S}/theirs`, 65534, 65534);
    writeFileSync(`${S}/their-file`, 'theirs');
    chownSync(`${S}/their-file`, 65534, 65534);
    await refused(
      'fs/writeFile',
      { path: `${S}/theirs`, dataBase64: b64('pwned'), sandbox: sb },
      'owned by uid 65534',
    );
    await refused(
      'fs/writeFile',
      { path: `${S}/their-file`, dataBase64: b64('pwned'), sandbox: sb },
      'owned by uid 65534',
    );
    assert.equal(readFileSync(`${f.W}/victim`, 'utf8'), 'keep');
    assert.equal(readFileSync(`${S}/their-file`, 'utf8'), 'theirs');
    // Our own link and file there are used as usual.
    symlinkSync(`${f.W}/victim`, `${S}/mine`);
    await c.request('fs/writeFile', { path: `${S}/mine`, dataBase64: b64('mine'), sandbox: sb });
    assert.equal(readFileSync(`${f.W}/victim`, 'utf8'), 'mine');
  });

  test('without the addon (CORRAL_NATIVE=0) sandboxed fs/* is refused, saying why; unsandboxed fs/* works', async () => {
    const root = fileURLToPath(new URL('../..', import.meta.url));
    const proc = spawn(process.execPath, [CORRAL_BIN, 'exec-server'], {
      cwd: root,
      env: { ...process.env, CORRAL_NATIVE: '0' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      const url = (await createInterface({ input: proc.stdout! })[Symbol.asyncIterator]().next())
        .value as string;
      const cli = await RpcClient.open(url);
      const path = join(f.W, 'no-addon.txt');
      const e = await cli.requestError('fs/writeFile', {
        path,
        dataBase64: b64('x'),
        sandbox: sandboxContext(f),
      });
      assert.equal(e.code, -32603);
      assert.ok(
        e.message.includes(path) && e.message.includes('CORRAL_NATIVE=0') && e.message.includes('openat2'),
        e.message,
      );
      assert.ok(!existsSync(path));
      await cli.request('fs/writeFile', { path, dataBase64: b64('plain') });
      assert.equal(readFileSync(path, 'utf8'), 'plain');
      cli.close();
    } finally {
      proc.kill('SIGKILL');
    }
  });
});
