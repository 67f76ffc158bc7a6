import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { tsEntry } from '../helpers/cli.js';
import { b64, RpcCallError, RpcClient } from '../helpers/client.js';
import { needsSandbox } from '../helpers/native.js';
import {
  loggingProxy,
  PATH,
  PY,
  pidsMatching,
  runThrough,
  sandboxServer,
  seed,
  serverUrl,
  waitFor,
  workspaceEntries,
} from './sandbox-util.js';

/** The key sandbox cases through the real WebSocket server (process/start → bwrap → notifications). */

const sb = sandboxServer('sandbox-test');
let n = 0;

function seedWire(o: { network?: 'restricted' | 'enabled'; enforceManagedNetwork?: boolean } = {}) {
  return seed({
    cwd: sb.f.W,
    entries: workspaceEntries(),
    ...(o.network ? { network: o.network } : {}),
    ...(o.enforceManagedNetwork !== undefined ? { enforceManagedNetwork: o.enforceManagedNetwork } : {}),
  });
}

const runVia = (
  client: RpcClient,
  argv: string[],
  extra: Record<string, unknown> = {},
  env: Record<string, string> = {},
) =>
  runThrough(client, {
    processId: `sbx-${++n}`,
    argv,
    cwd: sb.f.W,
    env: { PATH, ...env },
    sandbox: seedWire(),
    ...extra,
  });

/** Starts, sandboxed in the workspace, two sleeps tagged `tag` (one of them in its own session) and a wait. */
const startSleepers = (client: RpcClient, processId: string, tag: string) =>
  client.request('process/start', {
    processId,
    argv: ['/bin/sh', '-c', `sleep ${tag}1 & setsid sleep ${tag}2 & wait`],
    cwd: sb.f.W,
    env: { PATH },
    tty: false,
    sandbox: seedWire(),
  });

/** The error of a `/bin/true` start in the workspace with `extra`. */
const refusedStart = (extra: Record<string, unknown>) =>
  sb.c.requestError('process/start', {
    processId: `sbx-${++n}`,
    argv: ['/bin/true'],
    cwd: sb.f.W,
    env: { PATH },
    tty: false,
    ...extra,
  });

describe('sandbox through the exec server', { skip: needsSandbox }, () => {
  test('workspace write succeeds and reports sandboxType linuxSeccomp', async () => {
    const r = await runVia(sb.c, ['/bin/sh', '-c', 'echo srv > srv.txt']);
    assert.equal(r.started.sandboxType, 'linuxSeccomp');
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.sandboxDenied, false);
    assert.equal(readFileSync(join(sb.f.W, 'srv.txt'), 'utf8'), 'srv\n');
  });

  test('an outside write is denied and classified sandboxDenied', async () => {
    const r = await runVia(sb.c, ['/bin/sh', '-c', 'echo x > "$OUT/srv"'], {}, { OUT: sb.f.OUT });
    assert.notEqual(r.exitCode, 0);
    assert.match(r.stderr, /Read-only file system/);
    assert.equal(r.sandboxDenied, true);
    assert.ok(!existsSync(join(sb.f.OUT, 'srv')));
  });

  test('network restricted: curl cannot connect', async () => {
    const r = await runVia(sb.c, ['/usr/bin/curl', '-sS', '-m3', `http://127.0.0.1:${sb.f.port}/`]);
    assert.equal(r.exitCode, 7, r.stderr);
    assert.match(r.stderr, /Couldn't connect/);
  });

  test('PTY processes are sandboxed too', async () => {
    const r = await runVia(
      sb.c,
      [
        '/bin/sh',
        '-c',
        `[ -t 1 ] && echo ISATTY; echo x > "$OUT/pty"; ${PY} -c "import socket; socket.socket()" 2>&1 | tail -1`,
      ],
      { tty: true },
      { OUT: sb.f.OUT },
    );
    assert.match(r.pty, /ISATTY/);
    assert.match(r.pty, /Read-only file system/);
    assert.match(r.pty, /Operation not permitted/);
    assert.ok(!existsSync(join(sb.f.OUT, 'pty')));
  });

  test('managed network: the proxy path works, direct connections fail', async () => {
    const proxy = await loggingProxy();
    try {
      const r = await runVia(
        sb.c,
        [
          '/bin/sh',
          '-c',
          `curl -sS -m5 http://example.invalid/srv; curl -sS -m3 --noproxy '*' http://127.0.0.1:${sb.f.port}/; echo "direct=$?"`,
        ],
        { sandbox: seedWire({ enforceManagedNetwork: true }) },
        { HTTP_PROXY: `http://127.0.0.1:${proxy.port}` },
      );
      assert.match(r.stdout, /proxied: GET http:\/\/example.invalid\/srv/);
      assert.match(r.stdout, /direct=7/);
      assert.deepEqual(proxy.log, ['GET http://example.invalid/srv']);
    } finally {
      await proxy.close();
    }
  });

  test("the server's own managed proxy: in-namespace connections go straight to it (HTTP and SOCKS5), refusals answered", async () => {
    const hits = sb.f.hits.tcp;
    const r = await runVia(
      sb.c,
      [
        '/bin/sh',
        '-c',
        [
          'echo "http=$HTTP_PROXY all=$ALL_PROXY lower=$http_proxy"',
          // NO_PROXY names loopback: --noproxy '' sends these through the proxy all the same.
          `curl -sS -m5 --noproxy '' http://127.0.0.1:${sb.f.port}/`,
          `curl -sS -m5 --noproxy '' -x "$ALL_PROXY" http://127.0.0.1:${sb.f.port}/`,
          `curl -sS -m5 -o /dev/null -w 'blocked=%{http_code}\\n' http://blocked.test/x`,
          `curl -sS -m3 --noproxy '*' http://127.0.0.1:${sb.f.port}/; echo "direct=$?"`,
        ].join('; '),
      ],
      {
        sandbox: seedWire({ enforceManagedNetwork: true }),
        managedNetwork: {
          config: {
            network: {
              enabled: true,
              enable_socks5: true,
              allow_local_binding: true,
              domains: { '127.0.0.1': 'allow', 'blocked.test': 'deny' },
            },
          },
        },
      },
      { HTTP_PROXY: 'http://127.0.0.1:9' },
    );
    // The variables name the in-namespace forwarders (SOCKS first, as ALL_PROXY sorts first), whatever was sent.
    assert.match(
      r.stdout,
      /http=http:\/\/127\.0\.0\.1:3129 all=socks5h:\/\/127\.0\.0\.1:3128 lower=http:\/\/127\.0\.0\.1:3129/,
    );
    assert.equal(r.stdout.match(/host-listener-body/g)?.length, 2, r.stdout + r.stderr);
    assert.match(r.stdout, /blocked=403/);
    assert.match(r.stdout, /direct=7/);
    assert.equal(sb.f.hits.tcp - hits, 2, 'only the two proxied requests reached the host listener');
  });

  test('enforceManagedNetwork without proxy variables: -32603 naming proxy environment variables', async () => {
    const e = await refusedStart({ sandbox: seedWire({ enforceManagedNetwork: true }) });
    assert.equal(e.code, -32603);
    assert.match(e.message, /proxy environment variables/);
  });

  test('windows-restricted-token is a -32603 naming the type; a bad sandbox shape is -32602', async () => {
    const e = await refusedStart({ sandbox: { ...seedWire(), sandbox: 'windows-restricted-token' } });
    assert.equal(e.code, -32603);
    assert.match(e.message, /sandbox type windows-restricted-token is not supported by this exec-server/);
    const bad = await refusedStart({ sandbox: { permissions: { type: 'bogus' } } });
    assert.equal(bad.code, -32602);
  });

  test('terminate kills everything in the sandbox, setsid children included', async () => {
    const tag = `77${process.pid}.${Date.now() % 100000}`;
    const processId = `sbx-${++n}`;
    await startSleepers(sb.c, processId, tag);
    assert.ok(await waitFor(() => pidsMatching(`sleep ${tag}`).length >= 2, 5000));
    const t = await sb.c.request<{ running: boolean }>('process/terminate', { processId });
    assert.equal(t.running, true);
    await sb.c.waitFor((e) => e.method === 'process/exited' && e.params.processId === processId, 5000);
    assert.ok(await waitFor(() => pidsMatching(`sleep ${tag}`).length === 0, 1000));
  });

  test('fs/writeFile with a sandbox context outside the writable roots is -32603 and writes nothing', async () => {
    const target = join(sb.f.OUT, 'fs-x');
    const e = await sb.c.requestError('fs/writeFile', {
      path: target,
      dataBase64: b64('x'),
      sandbox: seedWire(),
    });
    assert.equal(e.code, -32603);
    assert.ok(e.message.includes(target), e.message);
    assert.ok(!existsSync(target));
    await sb.c.request('fs/writeFile', {
      path: join(sb.f.W, 'fs-ok'),
      dataBase64: b64('y'),
      sandbox: seedWire(),
    });
    assert.equal(readFileSync(join(sb.f.W, 'fs-ok'), 'utf8'), 'y');
    assert.ok(e instanceof RpcCallError);
  });

  test('sandboxed processes die with the server on SIGKILL', async () => {
    const here = dirname(fileURLToPath(import.meta.url));
    const script = join(here, '..', 'fixtures', 'sandbox', 'server-child.ts');
    const child = spawn(process.execPath, [...tsEntry(script), sb.f.T], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = new Promise((r) => child.once('exit', r));
    try {
      const url = await serverUrl(child);
      const c2 = await RpcClient.open(url, 'die-test');
      const tag = `78${process.pid}.${Date.now() % 100000}`;
      await startSleepers(c2, 'die', tag);
      assert.ok(await waitFor(() => pidsMatching(`sleep ${tag}`).length >= 2, 5000));
      child.kill('SIGKILL');
      await exited;
      assert.ok(
        await waitFor(() => pidsMatching(`sleep ${tag}`).length === 0, 2000),
        'sandbox outlived the server',
      );
      c2.close();
    } finally {
      child.kill('SIGKILL');
    }
  });
});
