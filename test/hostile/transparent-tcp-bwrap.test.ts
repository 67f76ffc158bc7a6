/**
 * Issue 35, `--linux-sandbox-transparent-tcp` under bwrap, attacked from inside the sandbox (a real server, its
 * managed proxy and policy, the in-sandbox launcher installing the supervision filter): raw connects that ignore the
 * proxy variables, IPv6 ::1, a non-blocking connect, a thread rewriting the sockaddr during the call (between an
 * allowed and a denied destination), and a flood of 200 concurrent connects. The denied destination (another loopback
 * address, with a listener) must never see a connection; the allowed origin sees only what the proxy admitted. On
 * cca01b7 the flag was only warned about: every raw connect failed in the sandbox's empty network namespace.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { netNotifyAbsence } from '../../src/platform/netNotify.js';
import type { RpcClient } from '../helpers/client.js';
import { needsSandbox } from '../helpers/native.js';
import { managedLoopbackStart } from '../helpers/netNotifyConfined.js';
import { tempDir } from '../helpers/server.js';
import { type AuditedServer, startAuditedServer } from '../integration/audit-helpers.js';
import { type Fixture, fixture } from '../integration/sandbox-util.js';

const PY = '/usr/bin/python3';
const SCRIPT = fileURLToPath(new URL('./netnotify-transparent.py', import.meta.url));
const skip = needsSandbox || netNotifyAbsence() || (!existsSync(PY) && 'python3 is needed');
const ECONNREFUSED = 111;

let f: Fixture;
let as: AuditedServer;
let agent: RpcClient & { sessionId: string };
let origin: net.Server;
let denied: net.Server;
let originPort = 0;
let deniedPort = 0;
let originSeen = 0;
let deniedSeen = 0;
const dir = tempDir('corral-ttcp-bwrap-');

before(async () => {
  if (skip) return;
  f = await fixture();
  origin = net.createServer((c) => {
    originSeen++;
    c.on('error', () => {});
    c.end('ORIGIN');
  });
  denied = net.createServer((c) => {
    deniedSeen++;
    c.destroy();
  });
  await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
  await new Promise<void>((r) => denied.listen(0, '127.0.0.2', r));
  originPort = (origin.address() as net.AddressInfo).port;
  deniedPort = (denied.address() as net.AddressInfo).port;
  as = await startAuditedServer(
    { dbPath: join(dir.path, 'audit.db'), outputBytes: 1 << 16 },
    {
      launcher: {
        sandbox: { tmpdir: f.T, transparentTcp: true },
        resolver: (host) => Promise.reject(new Error(`no DNS in tests: ${host}`)),
      },
    },
  );
  agent = await as.agent('ttcp-bwrap');
});
after(async () => {
  await as?.close();
  origin?.close();
  denied?.close();
  await f?.close();
  dir.cleanup();
});

let n = 0;
async function attack(what: string, ...extra: string[]): Promise<Record<string, unknown>> {
  const processId = `ttcp-${what}-${n++}`;
  await agent.request(
    'process/start',
    managedLoopbackStart(
      processId,
      [PY, SCRIPT, '0', String(originPort), String(deniedPort), what, ...extra],
      {
        cwd: f.W,
        env: { PATH: '/usr/bin:/bin', DENIED_HOST: '127.0.0.2' },
      },
    ),
  );
  const events = await agent.collect(processId, 60_000);
  const exited = events.find((e) => e.method === 'process/exited');
  const out = agent.output(processId, 'stdout');
  assert.equal(exited?.params.exitCode, 0, `${out}\n${agent.output(processId, 'stderr')}`);
  return JSON.parse(out) as Record<string, unknown>;
}

describe('transparent TCP under bwrap, attacked from inside', { skip }, () => {
  test('raw IPv4, ::1 and a non-blocking connect: allowed through the proxy, denied ECONNREFUSED', async () => {
    const seen = deniedSeen;
    const r = await attack('raw');
    assert.equal(r.allowed, 'ORIGIN');
    assert.equal(r.denied, ECONNREFUSED);
    assert.equal(r.v6, ECONNREFUSED, '::1 is not on the policy: refused by the proxy');
    assert.deepEqual(r.nonblock, [true, true, 0, 'ORIGIN']);
    assert.equal(deniedSeen, seen);
  });

  test('a thread rewriting the sockaddr: each call is the allowed origin or refused, never the denied listener', async () => {
    const seen = deniedSeen;
    const before = originSeen;
    const r = (await attack('race')) as { got: Record<string, number> };
    for (const k of Object.keys(r.got))
      assert.ok(k === 'ORIGIN' || k === String(ECONNREFUSED), `outcome ${k}`);
    assert.equal(originSeen - before, r.got.ORIGIN ?? 0, 'the origin saw exactly the admitted ones');
    assert.equal(deniedSeen, seen);
  });

  test('a flood of 200 concurrent connects', async () => {
    const seen = deniedSeen;
    const r = (await attack('flood', '200')) as { got: Record<string, number> };
    assert.deepEqual(r.got, { ORIGIN: 100, [ECONNREFUSED]: 100 });
    assert.equal(deniedSeen, seen);
  });
});
