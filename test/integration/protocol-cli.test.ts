// Conformance: the CLI entry point (protocol.md §2.1, §8 shutdown): URL on stdout, SIGINT/SIGTERM kill every child
// before exit, --listen stdio, --ws-token-file, --allow-origin, and the server's own variables never reaching children.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { spawnerKind } from '../../src/process/spawner.js';
import { CORRAL_BIN, ROOT, startCli } from '../helpers/cli.js';
import { RpcClient } from '../helpers/client.js';
import { upgradeStatus } from '../helpers/http.js';
import { alive, tempDir, until } from '../helpers/server.js';

const PATH = '/usr/local/bin:/usr/bin:/bin';

/** Starts `sh` with a background grandchild; returns both OS pids. */
async function startFamily(c: RpcClient, processId: string, tty = false): Promise<[number, number]> {
  await c.request('process/start', {
    processId,
    argv: ['/bin/sh', '-c', 'sleep 300 & echo "$$ $!"; sleep 300'],
    cwd: '/tmp',
    env: { PATH },
    tty,
  });
  const n = await c.waitFor((m) => m.method === 'process/output' && m.params.processId === processId);
  const [child, grandchild] = Buffer.from(n.params.chunk as string, 'base64')
    .toString()
    .trim()
    .split(/\s+/)
    .map(Number) as [number, number];
  assert.ok(alive(child) && alive(grandchild));
  return [child, grandchild];
}

/** Every family a killed server left, killed in turn once the file is done (whether or not it died as it should). */
const families: number[][] = [];
after(() => {
  for (const pid of families.flat()) if (alive(pid)) process.kill(pid, 'SIGKILL');
});

/** A CLI server starts a family (`startFamily`), then is SIGKILLed; the family's pids. */
async function familyOfKilledServer(processId: string, tty = false): Promise<[number, number]> {
  const cli = await startCli(['exec-server', '--listen', 'ws://127.0.0.1:0']);
  const c = await RpcClient.open(cli.url!);
  const family = await startFamily(c, processId, tty);
  families.push(family);
  cli.proc.kill('SIGKILL');
  await cli.exited;
  return family;
}

describe('protocol CLI', () => {
  let dir: { path: string; cleanup(): void };
  before(() => {
    dir = tempDir();
  });
  after(() => dir.cleanup());

  it('prints exactly one line ws://127.0.0.1:<port>/?token=<generated> on stdout and serves the protocol', async () => {
    const cli = await startCli(['exec-server', '--listen', 'ws://127.0.0.1:0']);
    try {
      assert.match(cli.url!, /^ws:\/\/127\.0\.0\.1:\d+\/\?token=[\w-]{43}$/);
      const c = await RpcClient.open(cli.url!);
      assert.match(c.sessionId, /^[0-9a-f-]{36}$/);
      c.close();
    } finally {
      cli.proc.kill('SIGTERM');
      await cli.exited;
    }
  });

  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    it(`${signal} to the CLI kills every child and grandchild (pipes and tty, two sessions) before exit`, async () => {
      const cli = await startCli(['exec-server', '--listen', 'ws://127.0.0.1:0']);
      const a = await RpcClient.open(cli.url!);
      const b = await RpcClient.open(cli.url!);
      const pids = [
        ...(await startFamily(a, 'p')),
        ...(await startFamily(a, 't', true)),
        ...(await startFamily(b, 'p')),
      ];
      // A detached session's processes too (the default grace keeps them for 10 s).
      const d = await RpcClient.open(cli.url!);
      pids.push(...(await startFamily(d, 'detached')));
      d.close();
      await d.waitClose();
      cli.proc.kill(signal);
      const { code } = await cli.exited;
      const survivors = pids.filter(alive);
      for (const pid of survivors) process.kill(pid, 'SIGKILL');
      assert.deepEqual(survivors, [], `alive after the CLI exited (${code})`);
      assert.equal(code, 0);
    });
  }

  it('a SIGKILLed server does not leave its direct children running (pdeathsig)', {
    skip: spawnerKind !== 'native' ? 'the child_process spawner cannot set PR_SET_PDEATHSIG' : false,
  }, async () => {
    const [child] = await familyOfKilledServer('p');
    await until(() => !alive(child), 2000, 'the direct child to die with the server');
  });

  it('a SIGKILLed server: tty children and their grandchildren die by hang-up', async () => {
    const family = await familyOfKilledServer('t', true);
    await until(() => !family.some(alive), 2000, 'the tty family to die with the server');
  });

  it('a SIGKILLed server does not leave background grandchildren running', {
    skip: spawnerKind !== 'native' ? 'the group watchdog belongs to the native spawner' : false,
  }, async () => {
    const [child, grandchild] = await familyOfKilledServer('p');
    await until(() => !alive(child) && !alive(grandchild), 2000, 'the grandchild to die with the server');
  });

  it('the group watchdog keeps no fd of the server but its pipe, and goes when the server goes', {
    skip: spawnerKind !== 'native' ? 'the group watchdog belongs to the native spawner' : false,
  }, async () => {
    const cli = await startCli(['exec-server', '--listen', 'ws://127.0.0.1:0']);
    const c = await RpcClient.open(cli.url!);
    const [child, grandchild] = await startFamily(c, 'w');
    const server = cli.proc.pid!;
    const dogs = readFileSync(`/proc/${server}/task/${server}/children`, 'utf8')
      .split(/\s+/)
      .filter(Boolean)
      .map(Number)
      .filter((pid) => readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'corral-watchdog');
    assert.equal(dogs.length, 1, 'one watchdog per server');
    const dog = dogs[0]!;
    // Holding a copy of a client socket or a child's pipe would keep it open after the server closed it.
    assert.equal(readdirSync(`/proc/${dog}/fd`).length, 1);
    // Every signal blocked (our handlers must never run on its stack): SIGHUP, SIGINT, SIGTERM among them.
    const blocked = BigInt(
      `0x${readFileSync(`/proc/${dog}/status`, 'utf8').match(/^SigBlk:\s+(\S+)/m)?.[1]}`,
    );
    for (const sig of [1, 2, 15]) assert.ok(blocked & (1n << BigInt(sig - 1)), `signal ${sig} blocked`);
    cli.proc.kill('SIGTERM');
    await cli.exited;
    try {
      await until(() => !alive(dog) && !alive(child) && !alive(grandchild), 2000, 'the watchdog to exit');
    } finally {
      for (const pid of [child, grandchild]) if (alive(pid)) process.kill(pid, 'SIGKILL');
    }
  });

  it('--listen stdio: newline-delimited JSON-RPC; closing stdin stops the server and kills its children', async () => {
    const cli = await startCli(['exec-server', '--listen', 'stdio'], { stdio: true });
    const send = (m: unknown) => cli.proc.stdin.write(`${JSON.stringify(m)}\n`);
    const next = async () => {
      const r = await cli.lines.next();
      if (r.done) throw new Error(`stdout ended: ${cli.stderr()}`);
      return JSON.parse(r.value) as Record<string, unknown>;
    };
    send({ id: 1, method: 'initialize', params: { clientName: 'stdio' } });
    const init = await next();
    assert.equal(init.id, 1);
    assert.equal(typeof (init.result as { sessionId: string }).sessionId, 'string');
    send({ method: 'initialized' });
    send({
      id: 2,
      method: 'process/start',
      params: {
        processId: 'p',
        argv: ['/bin/sh', '-c', 'sleep 300 & echo "$$ $!"; read x; echo "got $x"; sleep 300'],
        cwd: '/tmp',
        env: { PATH },
        tty: false,
        pipeStdin: true,
      },
    });
    assert.deepEqual(await next(), { id: 2, result: { processId: 'p', sandboxType: 'none' } });
    const out = await next();
    assert.equal(out.method, 'process/output');
    const [child, grandchild] = Buffer.from((out.params as { chunk: string }).chunk, 'base64')
      .toString()
      .trim()
      .split(/\s+/)
      .map(Number) as [number, number];
    send({
      id: 3,
      method: 'process/write',
      params: { processId: 'p', chunk: Buffer.from('hi\n').toString('base64') },
    });
    const frames = [await next(), await next()];
    const resp = frames.find((f) => f.id === 3);
    assert.deepEqual(resp, { id: 3, result: { status: 'accepted' } });
    const got = frames.find((f) => f.method === 'process/output');
    assert.equal(Buffer.from((got!.params as { chunk: string }).chunk, 'base64').toString(), 'got hi\n');
    cli.proc.stdin.write('{bad json\n');
    const perr = await next();
    assert.equal(perr.id, -1);
    assert.equal((perr.error as { code: number }).code, -32600);
    assert.ok(alive(child) && alive(grandchild));
    cli.proc.stdin.end();
    const { code } = await cli.exited;
    const survivors = [child, grandchild].filter(alive);
    for (const pid of survivors) process.kill(pid, 'SIGKILL');
    assert.equal(code, 0);
    assert.deepEqual(survivors, [], 'children killed when stdin closed');
  });

  it('--ws-token-file: Bearer header and ?token= accepted; wrong or missing → 401; --allow-origin', async () => {
    const tokenFile = `${dir.path}/token`;
    writeFileSync(tokenFile, 'tok-123-0123456789\n', { mode: 0o600 });
    const cli = await startCli([
      'exec-server',
      '--listen',
      'ws://127.0.0.1:0',
      '--ws-token-file',
      tokenFile,
      '--allow-origin',
      'http://localhost:3000',
    ]);
    try {
      // The token is the caller's: the printed URL does not echo it.
      const url = cli.url!;
      assert.match(url, /^ws:\/\/127\.0\.0\.1:\d+$/);
      assert.equal(
        await upgradeStatus(url, { headers: { Authorization: 'Bearer tok-123-0123456789' } }),
        101,
      );
      assert.equal(await upgradeStatus(`${url}/?token=tok-123-0123456789`), 101);
      assert.equal(await upgradeStatus(url), 401);
      assert.equal(
        await upgradeStatus(url, { headers: { Authorization: 'Bearer tok-124-0123456789' } }),
        401,
      );
      assert.equal(await upgradeStatus(`${url}/?token=nope`), 401);
      assert.equal(
        await upgradeStatus(`${url}/?token=tok-123-0123456789`, { origin: 'http://localhost:3000' }),
        101,
      );
      assert.equal(
        await upgradeStatus(`${url}/?token=tok-123-0123456789`, { origin: 'https://evil.example' }),
        403,
      );
      const c = await RpcClient.connect(url, { headers: { Authorization: 'Bearer tok-123-0123456789' } });
      await c.request('initialize', { clientName: 't' });
      c.close();
    } finally {
      cli.proc.kill('SIGTERM');
      await cli.exited;
    }
  });

  it('bad options exit 2 with a message', async () => {
    const proc = spawn(process.execPath, [CORRAL_BIN, 'exec-server', '--listen', 'ws://0.0.0.0:0'], {
      cwd: ROOT,
    });
    let err = '';
    proc.stderr.on('data', (d) => {
      err += d;
    });
    const code = await new Promise((r) => proc.once('exit', r));
    assert.equal(code, 2);
    assert.match(err, /not a loopback address/);
  });

  it('§5.10: envPolicy inherit all never passes the server’s ELECTRON_*, NODE_OPTIONS or CORRAL_* variables', async () => {
    const env = {
      ...process.env,
      ELECTRON_RUN_AS_NODE: '1',
      ELECTRON_NO_ATTACH_CONSOLE: '1',
      NODE_OPTIONS: '--no-warnings',
      CORRAL_INTERNAL_SECRET: 'x',
      CORRAL_NATIVE: process.env.CORRAL_NATIVE ?? '1',
      MY_API_KEY: 'k',
      GH_TOKEN: 't',
      aws_secret_access: 's',
      PLAIN_VAR: 'plain',
      LANG: 'C.UTF-8',
    };
    const cli = await startCli(['exec-server', '--listen', 'ws://127.0.0.1:0'], { env });
    const c = await RpcClient.open(cli.url!);
    const run = async (processId: string, envPolicy: unknown, childEnv: Record<string, string> = {}) => {
      await c.request('process/start', {
        processId,
        argv: ['/usr/bin/env'],
        cwd: '/tmp',
        env: childEnv,
        tty: false,
        envPolicy,
      });
      await c.collect(processId);
      return new Map(
        c
          .output(processId, 'stdout')
          .trim()
          .split('\n')
          .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)] as [string, string]),
      );
    };
    try {
      const internal = (names: Map<string, string>) =>
        [...names.keys()].filter((k) => /^(ELECTRON_|CORRAL_)/i.test(k) || k === 'NODE_OPTIONS');
      const all = await run('all', { inherit: 'all' });
      assert.equal(all.get('PLAIN_VAR'), 'plain');
      assert.equal(all.get('PATH'), process.env.PATH);
      assert.deepEqual(internal(all), []);
      for (const k of ['MY_API_KEY', 'GH_TOKEN', 'aws_secret_access'])
        assert.ok(!all.has(k), `${k} excluded by default`);

      const ignore = await run('ignore', { inherit: 'all', ignoreDefaultExcludes: true });
      assert.deepEqual(internal(ignore), []);
      for (const k of ['MY_API_KEY', 'GH_TOKEN', 'aws_secret_access']) assert.ok(ignore.has(k), `${k} kept`);

      const core = await run('core', { inherit: 'core' });
      const coreNames = new Set([
        'PATH',
        'SHELL',
        'TMPDIR',
        'TEMP',
        'TMP',
        'HOME',
        'LANG',
        'LC_ALL',
        'LC_CTYPE',
        'LOGNAME',
        'USER',
      ]);
      assert.ok(
        [...core.keys()].every((k) => coreNames.has(k)),
        [...core.keys()].join(','),
      );
      assert.equal(core.get('LANG'), 'C.UTF-8');

      const shaped = await run(
        'shaped',
        {
          inherit: 'all',
          exclude: ['plain_*'],
          set: { SET_ME: '1', PLAIN_VAR: 'from-set' },
          includeOnly: ['SET_*', 'PATH', 'OVER'],
        },
        { OVER: 'env-wins', SET_ME: '2' },
      );
      assert.deepEqual(Object.fromEntries(shaped), { PATH: process.env.PATH, SET_ME: '2', OVER: 'env-wins' });

      const setBack = await run('setback', {
        inherit: 'all',
        exclude: ['PLAIN_VAR'],
        set: { PLAIN_VAR: 'again' },
      });
      assert.equal(setBack.get('PLAIN_VAR'), 'again', 'set applies after exclude');

      // A client may explicitly pass such a name in env: that is the client's choice, not a leak.
      const explicit = await run('explicit', { inherit: 'none' }, { NODE_OPTIONS: '--x' });
      assert.deepEqual(Object.fromEntries(explicit), { NODE_OPTIONS: '--x' });
      c.close();
    } finally {
      cli.proc.kill('SIGTERM');
      await cli.exited;
    }
  });
});
