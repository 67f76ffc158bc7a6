// Issue 13 item 4: nothing a hostile repository plants makes fs/* unbounded. `ln -s /dev/zero package.json` grew
// the server without end; FIFOs blocked the connection (process/terminate included), four of them the libuv thread
// pool for every client, and the server then ignored SIGTERM. The server runs as the real CLI in a child process here,
// so that a hang is a failed assertion and not a hung test run.
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { DEFAULT_FS_LIMITS } from '../../src/server/fs/fsIo.js';
import { startCli } from '../helpers/cli.js';
import { b64, RpcCallError, RpcClient } from '../helpers/client.js';
import { needsConfinedFs } from '../helpers/native.js';
import { startTestServer } from '../helpers/server.js';
import { PATH } from '../integration/sandbox-util.js';
import { type HostileFixture, hostileFixture, sandboxContext } from './fs-util.js';

interface Cli {
  proc: ChildProcess;
  url: string;
  exited: Promise<number | null>;
  /** Resident memory of the server, in MiB. */
  rssMiB(): number;
}

/** The CLI server; `prefix` runs it through another command (prlimit). */
async function startServerCli(f: HostileFixture, prefix: string[] = []): Promise<Cli> {
  const cli = await startCli(['exec-server', '--listen', 'ws://127.0.0.1:0'], {
    env: { ...process.env, TMPDIR: f.T },
    wrap: prefix,
  });
  return {
    proc: cli.proc,
    url: cli.url!,
    exited: cli.exited.then((e) => e.code),
    rssMiB: () =>
      Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${cli.proc.pid}/status`, 'utf8'))?.[1]) / 1024,
  };
}

/** The request's outcome (result or RpcCallError), or 'no answer' when none came within `ms`. */
async function within<T>(ms: number, p: Promise<T>): Promise<T | RpcCallError | 'no answer'> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'no answer'>((resolve) => {
    timer = setTimeout(() => resolve('no answer'), ms);
  });
  try {
    return await Promise.race([
      p.catch((e: unknown) => (e instanceof RpcCallError ? e : Promise.reject(e))),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

function refusal(outcome: unknown, ...names: string[]): void {
  assert.ok(
    outcome instanceof RpcCallError,
    `expected an error, got ${outcome === 'no answer' ? 'no answer' : JSON.stringify(outcome).slice(0, 100)}`,
  );
  assert.equal(outcome.code, -32603, outcome.message);
  for (const n of names) assert.ok(outcome.message.includes(n), `"${outcome.message}" does not name ${n}`);
}

let f: HostileFixture;
const servers: Cli[] = [];
before(() => {
  f = hostileFixture('corral-fs-bounds-');
});
after(() => {
  for (const s of servers) s.proc.kill('SIGKILL');
  f.close();
});

async function server(prefix: string[] = []): Promise<Cli> {
  const s = await startServerCli(f, prefix);
  servers.push(s);
  return s;
}

describe('fs/* is bounded whatever it meets', () => {
  test('a symlink to /dev/zero is refused at once, naming it, with and without a sandbox context', {
    skip: needsConfinedFs,
  }, async () => {
    const s = await server();
    const c = await RpcClient.open(s.url);
    const link = join(f.W, 'package.json');
    symlinkSync('/dev/zero', link);
    for (const sandbox of [undefined, sandboxContext(f)]) {
      // Without a context it is opened and found to be a device; with one, /dev is not even reached.
      const what = sandbox ? "the server's own /proc or /dev" : 'character device';
      refusal(await within(5000, c.request('fs/readFile', { path: link, sandbox })), link, what);
      refusal(
        await within(
          5000,
          c.request('fs/copy', { sourcePath: link, destinationPath: `${f.W}/z`, recursive: false, sandbox }),
        ),
        link,
        what,
      );
      refusal(
        await within(5000, c.request('fs/writeFile', { path: link, dataBase64: b64('x'), sandbox })),
        link,
      );
    }
    assert.ok(!existsSync(`${f.W}/z`));
    assert.ok(s.rssMiB() < 512, `server RSS ${s.rssMiB()} MiB`);
    c.close();
  });

  test('fs/readFile is capped at what fits in one message, and says so', {
    skip: needsConfinedFs,
  }, async () => {
    const ts = await startTestServer();
    try {
      const c = await ts.client();
      const cap = DEFAULT_FS_LIMITS.maxReadBytes;
      const exact = join(f.W, 'exact.bin');
      writeFileSync(exact, Buffer.alloc(cap, 7));
      const r = await c.request<{ dataBase64: string }>('fs/readFile', {
        path: exact,
        sandbox: sandboxContext(f),
      });
      assert.equal(Buffer.from(r.dataBase64, 'base64').length, cap);
      const over = join(f.W, 'over.bin');
      writeFileSync(over, Buffer.alloc(cap + 1, 7));
      const huge = join(f.W, 'sparse.bin');
      writeFileSync(huge, '');
      truncateSync(huge, 2 ** 40);
      for (const p of [over, huge])
        for (const sandbox of [undefined, sandboxContext(f)])
          refusal(await within(5000, c.request('fs/readFile', { path: p, sandbox })), p, `${cap}-byte limit`);
    } finally {
      await ts.close();
    }
  });

  test('fs/readFile of a file whose size lies: growing while read, sysfs (says 4096, holds less), /proc (says 0)', async () => {
    // The read stops at a short read only once fstat's size is in (fsIo.readCapped): a file another process keeps
    // growing is read as a prefix of what it becomes, within the cap; files that say a size they do not hold are read
    // whole.
    const ts = await startTestServer();
    const grower = spawn(
      '/bin/sh',
      ['-c', `while :; do printf 'abcdefgh%.0s' $(seq 512) >> "$1"; done`, 'sh', join(f.W, 'growing.txt')],
      {
        stdio: 'ignore',
      },
    );
    try {
      const c = await ts.client();
      const path = join(f.W, 'growing.txt');
      while (!existsSync(path)) await new Promise((r) => setImmediate(r));
      let last = 0;
      for (let i = 0; i < 50; i++) {
        const outcome = await within(5000, c.request<{ dataBase64: string }>('fs/readFile', { path }));
        if (outcome instanceof RpcCallError) {
          // Grown past the cap between two reads: refused, naming it; the file is then too big to read.
          refusal(outcome, path, `${DEFAULT_FS_LIMITS.maxReadBytes}-byte limit`);
          break;
        }
        assert.notEqual(outcome, 'no answer', 'a growing file is answered');
        const got = Buffer.from((outcome as { dataBase64: string }).dataBase64, 'base64').toString();
        assert.ok(
          got.length >= last,
          `read ${i} is no shorter than the one before (${got.length} < ${last})`,
        );
        assert.ok('abcdefgh'.repeat(got.length / 8 + 1).startsWith(got), `read ${i}: a prefix`);
        last = got.length;
      }
      assert.ok(last > 0);
      for (const lying of ['/sys/kernel/mm/transparent_hugepage/enabled', '/proc/self/mountinfo']) {
        if (!existsSync(lying)) continue;
        const r = await c.request<{ dataBase64: string }>('fs/readFile', { path: lying });
        const got = Buffer.from(r.dataBase64, 'base64').toString();
        if (lying.startsWith('/sys')) assert.equal(got, readFileSync(lying, 'utf8'), lying);
        else
          assert.ok(
            got.endsWith('\n') && got.split('\n').length > 3,
            `${lying}: whole lines (${got.length} bytes)`,
          );
      }
    } finally {
      grower.kill('SIGKILL');
      await ts.close();
    }
  });

  test('four FIFO reads and a FIFO write neither block their connections, nor other clients, nor process/*', {
    skip: needsConfinedFs,
  }, async () => {
    const s = await server();
    const fifos = [1, 2, 3, 4, 5].map((i) => join(f.W, `fifo${i}`));
    for (const p of fifos) execFileSync('mkfifo', [p]);
    const readers = await Promise.all(fifos.map(() => RpcClient.open(s.url)));
    // Each reader connection has a process running that it will terminate right after its fs request.
    for (const [i, c] of readers.entries())
      await c.request('process/start', {
        processId: `sleep${i}`,
        argv: ['sleep', '60'],
        cwd: f.W,
        env: { PATH },
        tty: false,
        arg0: null,
      });
    const pending = readers.map((c, i) =>
      within(
        3000,
        i < 4
          ? c.request('fs/readFile', { path: fifos[i], sandbox: i % 2 ? sandboxContext(f) : undefined })
          : c.request('fs/writeFile', { path: fifos[i], dataBase64: b64('x') }),
      ),
    );
    const terminated = readers.map((c, i) =>
      within(3000, c.request('process/terminate', { processId: `sleep${i}` })),
    );
    // Another client meanwhile: fs/* and process/start work as usual.
    const other = await RpcClient.open(s.url);
    writeFileSync(join(f.W, 'plain.txt'), 'plain');
    const read = await within(
      3000,
      other.request<{ dataBase64: string }>('fs/readFile', { path: join(f.W, 'plain.txt') }),
    );
    assert.ok(
      !(read instanceof RpcCallError) && read !== 'no answer',
      `other client's fs/readFile: ${String(read)}`,
    );
    assert.equal(Buffer.from(read.dataBase64, 'base64').toString(), 'plain');
    const started = await within(
      3000,
      other.request('process/start', {
        processId: 'echo',
        argv: ['echo', 'hi'],
        cwd: f.W,
        env: { PATH },
        tty: false,
        arg0: null,
      }),
    );
    assert.ok(
      !(started instanceof RpcCallError) && started !== 'no answer',
      `other client's process/start: ${String(started)}`,
    );
    await other.collect('echo', 3000);
    for (const [i, t] of (await Promise.all(terminated)).entries())
      assert.deepEqual(t, { running: true }, `process/terminate on FIFO connection ${i}`);
    for (const [i, p] of pending.entries()) refusal(await p, fifos[i]!, 'FIFO');
    for (const c of [...readers, other]) c.close();
  });

  test('a slow fs/* request does not hold the process/* requests of its connection', {
    skip: needsConfinedFs,
  }, async () => {
    const s = await server();
    const c = await RpcClient.open(s.url);
    const tree = join(f.W, 'many');
    mkdirSync(tree);
    for (let i = 0; i < 500; i++) writeFileSync(join(tree, `f${i}`), `file ${i}`);
    await c.request('process/start', {
      processId: 'long',
      argv: ['sleep', '60'],
      cwd: f.W,
      env: { PATH },
      tty: false,
      arg0: null,
    });
    const order: string[] = [];
    const copy = c
      .request('fs/copy', {
        sourcePath: tree,
        destinationPath: join(f.W, 'many2'),
        recursive: true,
        sandbox: sandboxContext(f),
      })
      .then(() => order.push('copy'));
    const terminate = c
      .request('process/terminate', { processId: 'long' })
      .then(() => order.push('terminate'));
    await Promise.all([copy, terminate]);
    assert.deepEqual(order, ['terminate', 'copy']);
    assert.equal(readdirSync(join(f.W, 'many2')).length, 500);
    c.close();
  });

  test('SIGTERM with such requests pending ends the server promptly', async () => {
    const s = await server();
    const fifos = [1, 2, 3, 4].map((i) => join(f.W, `sig-fifo${i}`));
    for (const p of fifos) execFileSync('mkfifo', [p]);
    const clients = await Promise.all(fifos.map(() => RpcClient.open(s.url)));
    const sent = clients.map((c, i) => c.request('fs/readFile', { path: fifos[i] }).catch(() => null));
    clients[0]!.request('fs/readFile', { path: '/dev/zero' }).catch(() => null);
    // The requests have reached the server once another request on each connection was answered.
    await Promise.all(clients.map((c) => within(10_000, c.request('fs/getMetadata', { path: f.W }))));
    s.proc.kill('SIGTERM');
    // Promptly: the bug was a server held forever by a read that never ends; 15 s leaves room for a loaded CI machine.
    const code = await within(15_000, s.exited);
    assert.notEqual(code, 'no answer', 'the server did not exit within 15 s of SIGTERM');
    await Promise.all(sent);
  });

  test('deep trees: a recursive copy or remove holds few fds per level, and refuses past 256 levels', {
    skip: needsConfinedFs,
  }, async () => {
    // 150 levels in a server allowed 400 open files: fine; 300 levels: refused before anything changes.
    const s = await server(['prlimit', '--nofile=400', '--']);
    const c = await RpcClient.open(s.url);
    const chain = (levels: number) => Array.from({ length: levels }, () => 'd');
    const deep = (name: string, levels: number) => {
      const top = join(f.W, name);
      mkdirSync(join(top, ...chain(levels)), { recursive: true });
      writeFileSync(join(top, ...chain(levels), 'leaf'), 'leaf');
      return top;
    };
    const ok = deep('deep150', 150);
    for (const sandbox of [sandboxContext(f), undefined]) {
      const copy = `${ok}-copy${sandbox ? 's' : 'u'}`;
      await c.request('fs/copy', { sourcePath: ok, destinationPath: copy, recursive: true, sandbox });
      assert.ok(existsSync(join(copy, ...chain(150), 'leaf')));
      await c.request('fs/remove', { path: copy, recursive: true, force: false, sandbox });
      assert.ok(!existsSync(copy));
    }
    const tooDeep = deep('deep300', 300);
    for (const sandbox of [sandboxContext(f), undefined]) {
      const dst = `${tooDeep}-copy`;
      const copied = c.request('fs/copy', {
        sourcePath: tooDeep,
        destinationPath: dst,
        recursive: true,
        sandbox,
      });
      refusal(await within(10_000, copied), 'nested more than 256 directories deep');
    }
    // Sandboxed, the remove is refused before anything goes (the scan); without a context it stops at that depth.
    refusal(
      await within(
        10_000,
        c.request('fs/remove', { path: tooDeep, recursive: true, sandbox: sandboxContext(f) }),
      ),
      'nested more than 256 directories deep',
    );
    assert.ok(existsSync(join(tooDeep, ...chain(300), 'leaf')));
    refusal(
      await within(10_000, c.request('fs/remove', { path: tooDeep, recursive: true })),
      'nested more than 256',
    );
    c.close();
  });

  test('a request that runs out of time is answered with an error naming it, and stops', async () => {
    const ts = await startTestServer({ fsLimits: { timeoutMs: 100 } });
    try {
      const c = await ts.client();
      const tree = join(f.W, 'big');
      mkdirSync(tree);
      for (let i = 0; i < 2000; i++) writeFileSync(join(tree, `f${i}`), 'x');
      const dst = join(f.W, 'big2');
      const e = await c.requestError('fs/copy', { sourcePath: tree, destinationPath: dst, recursive: true });
      assert.equal(e.code, -32603);
      assert.match(e.message, /^fs\/copy of .*\/big timed out after 100 ms$/);
      // The copy stopped with the answer (at most the entry in hand is finished): what it made no longer grows.
      // (Under load it can run out before the destination is even made.)
      const copied = () => (existsSync(dst) ? readdirSync(dst).length : 0);
      const n = copied();
      assert.ok(n < 2000, `${n} files copied`);
      for (let i = 0; i < 5; i++) await c.request('fs/getMetadata', { path: f.W });
      assert.ok(copied() <= n + 1, `${copied()} files copied after the answer, ${n} before`);
    } finally {
      await ts.close();
    }
  });
});
