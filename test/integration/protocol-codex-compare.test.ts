// Side by side: the same frames against the real `codex exec-server` 0.120.0 (when cached in .cache/codex) and ours;
// codes, messages and shapes must match except where protocol.md deliberately differs (noted per case).
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { b64, RpcCallError, RpcClient } from '../helpers/client.js';
import { startTestServer, type TestServer, tempDir } from '../helpers/server.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const VENDOR = `${ROOT}.cache/codex/0.120.0/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl`;
const CODEX = [`${VENDOR}/codex/codex`, `${VENDOR}/bin/codex`].find((p) => existsSync(p)) ?? null;
const skip = CODEX
  ? false
  : 'codex 0.120.0 is not cached in .cache/codex/0.120.0 (scripts/install-codex.mjs)';
const PATH = '/usr/local/bin:/usr/bin:/bin';

type Outcome = { ok: unknown } | { code: number; message: string };

async function call(c: RpcClient, method: string, params?: unknown): Promise<Outcome> {
  try {
    return { ok: await c.request(method, params) };
  } catch (e) {
    if (e instanceof RpcCallError) return { code: e.code, message: e.message };
    throw e;
  }
}

const codeOnly = (o: Outcome) => ('code' in o ? { code: o.code } : o);

/** Keys of an object result, sorted, minus members ours adds on purpose. */
function shape(o: Outcome, extra: string[] = []): unknown {
  if (!('ok' in o)) return o;
  const v = o.ok as Record<string, unknown>;
  return Object.keys(v)
    .filter((k) => !extra.includes(k))
    .sort();
}

async function startCodex(home: string): Promise<{ proc: ChildProcess; url: string }> {
  const proc = spawn(CODEX!, ['exec-server', '--listen', 'ws://127.0.0.1:0'], {
    env: { PATH, HOME: home, CODEX_HOME: home },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const rl = createInterface({ input: proc.stdout! })[Symbol.asyncIterator]();
  const first = await rl.next();
  if (first.done) throw new Error('codex exec-server printed no URL');
  return { proc, url: first.value.trim() };
}

describe('side by side with codex exec-server 0.120.0', { skip }, () => {
  let ours: TestServer;
  let codex: { proc: ChildProcess; url: string };
  let dir: { path: string; cleanup(): void };
  before(async () => {
    dir = tempDir();
    mkdirSync(`${dir.path}/home`);
    ours = await startTestServer();
    codex = await startCodex(`${dir.path}/home`);
  });
  after(async () => {
    codex?.proc.kill('SIGKILL');
    await ours?.close();
    dir?.cleanup();
  });

  /** Runs a scenario against both servers and returns [codex, ours]. */
  async function both<T>(scenario: (url: string, tag: string) => Promise<T>): Promise<[T, T]> {
    const r: [T, T] = [await scenario(codex.url, 'codex'), await scenario(ours.url, 'ours')];
    if (process.env.CORRAL_COMPARE_DEBUG) console.log(JSON.stringify(r[0]));
    return r;
  }

  it('handshake errors and unknown methods: identical codes and texts', async () => {
    const [theirs, mine] = await both(async (url) => {
      const c = await RpcClient.connect(url);
      const out = [
        await call(c, 'bogus/method', {}),
        await call(c, 'initialized', {}),
        await call(c, 'process/start', { processId: 'x', argv: ['true'], cwd: '/tmp', env: {}, tty: false }),
        await call(c, 'fs/readFile', { path: '/etc/hostname' }),
        shape(await call(c, 'initialize', { clientName: 'cmp' })),
        await call(c, 'process/read', { processId: 'x' }),
        await call(c, 'fs/getMetadata', { path: '/' }),
        await call(c, 'initialize', { clientName: 'cmp' }),
        await call(c, 'initialize', { clientName: 'cmp', resumeSessionId: 'nope' }),
      ];
      c.close();
      return out;
    });
    assert.deepEqual(mine, theirs);
  });

  it('malformed frames: id -1, -32600, same prefix', async () => {
    const [theirs, mine] = await both(async (url) => {
      const c = await RpcClient.connect(url);
      const out: unknown[] = [];
      for (const bad of ['{nope', '[1,2,3]', '"str"', '{"id":77}']) {
        const n = c.frames.length;
        c.ws.send(bad);
        while (c.frames.length === n) await new Promise((r) => setTimeout(r, 5));
        const m = JSON.parse(c.frames[n]!) as { id: number; error: { code: number; message: string } };
        out.push([
          m.id,
          m.error.code,
          m.error.message.replace(/127\.0\.0\.1:\d+: .*$/, '127.0.0.1:<port>: …'),
        ]);
      }
      c.close();
      return out;
    });
    assert.deepEqual(mine, theirs);
  });

  it('process/start validation and spawn errors: identical codes and texts', async () => {
    const file = `${dir.path}/plain.txt`;
    writeFileSync(file, 'x');
    const base = { cwd: '/tmp', env: { PATH }, tty: false };
    const [theirs, mine] = await both(async (url) => {
      const c = await RpcClient.open(url);
      const out = [
        await call(c, 'process/start', { ...base, processId: 'a', argv: [] }),
        await call(c, 'process/start', { ...base, processId: 'a', argv: [''] }),
        await call(c, 'process/start', { ...base, processId: 'a', argv: ['/nonexistent/x'] }),
        await call(c, 'process/start', { ...base, processId: 'a', argv: ['no-such-prog-corral'] }),
        await call(c, 'process/start', {
          ...base,
          processId: 'a',
          argv: ['true'],
          cwd: `${dir.path}/missing`,
        }),
        await call(c, 'process/start', { ...base, processId: 'a', argv: ['true'], cwd: file }),
        await call(c, 'process/start', { ...base, processId: 'a', argv: [dir.path] }),
        await call(c, 'process/start', { ...base, processId: 'a', argv: [file] }),
        await call(c, 'process/start', { ...base, argv: ['true'] }),
        shape(await call(c, 'process/start', { ...base, processId: 'a', argv: ['true'] }), ['sandboxType']),
        await call(c, 'process/start', { ...base, processId: 'a', argv: ['true'] }),
        await call(c, 'process/read', { processId: 'zz' }),
        await call(c, 'process/write', { processId: 'zz', chunk: b64('x') }),
        await call(c, 'process/write', { processId: 'zz', chunk: '!!!!' }),
        await call(c, 'process/terminate', { processId: 'zz' }),
      ];
      c.close();
      return out;
    });
    assert.deepEqual(mine, theirs);
  });

  it('a process run: the same events, texts, exit code, and read-after-close result', async () => {
    const [theirs, mine] = await both(async (url) => {
      const c = await RpcClient.open(url);
      await c.request('process/start', {
        processId: 'p',
        argv: [
          '/bin/sh',
          '-c',
          'printf a; sleep 0.05; printf bb >&2; sleep 0.05; printf ccc; sleep 0.1; exit 5',
        ],
        cwd: '/tmp',
        env: { PATH },
        tty: false,
      });
      const events = (await c.collect('p')).map((n) => {
        // `usage` is Corral's own member of process/exited (docs/protocol.md); released clients ignore it.
        const {
          processId: _id,
          sandboxDenied: _sd,
          usage: _u,
          chunk,
          ...rest
        } = n.params as Record<string, unknown>;
        return {
          method: n.method,
          ...rest,
          ...(chunk ? { data: Buffer.from(chunk as string, 'base64').toString() } : {}),
        };
      });
      const strip = (o: Outcome) => {
        const { sandboxDenied: _s, ...r } = (o as { ok: Record<string, unknown> }).ok;
        return r;
      };
      const reads = [
        strip(await call(c, 'process/read', { processId: 'p', afterSeq: 0 })),
        strip(await call(c, 'process/read', { processId: 'p', afterSeq: 0, maxBytes: 0 })),
        strip(await call(c, 'process/read', { processId: 'p', afterSeq: 0, maxBytes: 2 })),
        strip(await call(c, 'process/read', { processId: 'p', afterSeq: 3 })),
      ];
      const writes = [await call(c, 'process/write', { processId: 'p', chunk: b64('x') })];
      const term = await call(c, 'process/terminate', { processId: 'p' });
      c.close();
      return { events, reads, writes, term };
    });
    assert.deepEqual(mine, theirs);
  });

  it('env: the child sees exactly env (plus PWD from sh); arg0', async () => {
    const [theirs, mine] = await both(async (url) => {
      const c = await RpcClient.open(url);
      await c.request('process/start', {
        processId: 'e',
        argv: ['/bin/sh', '-c', 'env | sort; echo $0'],
        cwd: '/tmp',
        env: { FOO: 'bar' },
        tty: false,
        arg0: 'custom',
      });
      await c.collect('e');
      const out = c.output('e');
      c.close();
      return out;
    });
    assert.equal(mine, theirs);
  });

  it('fs: same results and error codes/texts for plain absolute paths', async () => {
    const [theirs, mine] = await both(async (url, tag) => {
      const root = `${dir.path}/fs-${tag}`;
      const c = await RpcClient.open(url);
      const out = [
        await call(c, 'fs/createDirectory', { path: `${root}/a/b`, recursive: true }),
        await call(c, 'fs/writeFile', { path: `${root}/a/f.txt`, dataBase64: b64('hello') }),
        await call(c, 'fs/readFile', { path: `${root}/a/f.txt` }),
        shape(await call(c, 'fs/getMetadata', { path: `${root}/a/f.txt` }), ['isSymlink', 'size']),
        await call(c, 'fs/readDirectory', { path: `${root}/a` }),
        await call(c, 'fs/copy', {
          sourcePath: `${root}/a/f.txt`,
          destinationPath: `${root}/a/g.txt`,
          recursive: false,
        }),
        await call(c, 'fs/readFile', { path: `${root}/a/g.txt` }),
        await call(c, 'fs/readFile', { path: `${root}/missing` }),
        await call(c, 'fs/getMetadata', { path: `${root}/missing` }),
        await call(c, 'fs/readDirectory', { path: `${root}/missing` }),
        await call(c, 'fs/readFile', { path: `${root}/a` }),
        ((await call(c, 'fs/readFile', { path: 'relative/x' })) as { code: number }).code,
        await call(c, 'fs/remove', { path: `${root}/a`, recursive: true, force: true }),
        await call(c, 'fs/getMetadata', { path: `${root}/a` }),
      ];
      c.close();
      const sortEntries = (o: unknown) => {
        const r = (o as { ok?: { entries?: { fileName: string }[] } }).ok;
        r?.entries?.sort((x, y) => x.fileName.localeCompare(y.fileName));
      };
      sortEntries(out[4]);
      return out;
    });
    assert.deepEqual(mine, theirs);
  });

  it('serde texts for params errors (ours appends the field path: stripped here)', async () => {
    const base = { processId: 'q', argv: ['true'], cwd: '/tmp', env: {}, tty: false };
    const [theirs, mine] = await both(async (url) => {
      const c = await RpcClient.open(url);
      const texts = [
        await call(c, 'process/start'),
        await call(c, 'process/start', null),
        // serde's positional-struct text for [] ('invalid length 0, expected struct ExecParams with 6 elements'): code only
        codeOnly(await call(c, 'process/start', [])),
        await call(c, 'process/start', { ...base, processId: 7 }),
        await call(c, 'process/start', { ...base, argv: 'true' }),
        await call(c, 'process/start', { ...base, tty: 'yes' }),
        await call(c, 'process/start', { ...base, env: { A: 1 } }),
        await call(c, 'process/start', { ...base, env: [] }),
        await call(c, 'process/read', { processId: 'q', afterSeq: -1 }),
        // serde names the integer type ('expected u64'), ours says 'expected an integer': code only
        codeOnly(await call(c, 'process/read', { processId: 'q', afterSeq: '1' })),
        await call(c, 'process/read', {}),
        await call(c, 'process/write', { processId: 'q' }),
        await call(c, 'fs/readFile', {}),
        await call(c, 'fs/writeFile', { path: '/tmp/x', dataBase64: 5 }),
      ];
      c.close();
      return texts.map((t) =>
        'message' in t ? { ...t, message: String(t.message).replace(/ at `[^`]*`$/, '') } : t,
      );
    });
    assert.deepEqual(mine, theirs);
  });

  it('tty: echo, Ctrl-D exit 0, and writes after close are accepted', async () => {
    const [theirs, mine] = await both(async (url) => {
      const c = await RpcClient.open(url);
      await c.request('process/start', {
        processId: 't',
        argv: ['cat'],
        cwd: '/tmp',
        env: { PATH },
        tty: true,
      });
      const w1 = await c.request('process/write', { processId: 't', chunk: b64('hello\n') });
      await c.waitFor(() => c.output('t', 'pty') === 'hello\r\nhello\r\n');
      await c.request('process/write', { processId: 't', chunk: b64('\x04') });
      const events = await c.collect('t');
      const exit = events.find((n) => n.method === 'process/exited')?.params.exitCode;
      const w2 = await c.request('process/write', { processId: 't', chunk: b64('more') });
      c.close();
      return {
        w1,
        exit,
        w2,
        streams: [
          ...new Set(events.filter((n) => n.method === 'process/output').map((n) => n.params.stream)),
        ],
      };
    });
    assert.deepEqual(mine, theirs);
  });

  it('a client response frame and an unknown notification end the connection with no reply', async () => {
    const [theirs, mine] = await both(async (url) => {
      const out: unknown[] = [];
      for (const msg of ['{"id":1,"result":{}}', '{"method":"bogus/notification","params":{}}']) {
        const c = await RpcClient.open(url);
        const n = c.frames.length;
        c.ws.send(msg);
        await c.waitClose();
        out.push(c.frames.length - n);
      }
      return out;
    });
    assert.deepEqual(mine, theirs);
    assert.deepEqual(mine, [0, 0]);
  });
});
