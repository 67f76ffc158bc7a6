// Issue 35, `--linux-sandbox-transparent-tcp` end to end: a managed-network sandbox whose program ignores the proxy
// variables (bash's /dev/tcp). With the flag, its connect is asked of the command's own SOCKS5 listener by the
// server's connect supervisor (netnotify.c), so the managed policy decides and audits it: an allowed loopback origin
// answers, a denied one is refused (ECONNREFUSED: "Connection refused") and its listener sees nothing. Without the
// flag the same connect fails as on cca01b7 (Landlock: EACCES, "Permission denied").
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { netNotifyAbsence } from '../../src/platform/netNotify.js';
import type { AuditProcessResult } from '../../src/protocol/audit.js';
import { landlockSupport } from '../../src/sandbox/linux/landlockNative.js';
import { NetworkLog } from '../../src/server/monitor/monitorNetwork.js';
import type { RpcClient } from '../helpers/client.js';
import { needsSandbox } from '../helpers/native.js';
import { managedLoopbackStart } from '../helpers/netNotifyConfined.js';
import { tempDir } from '../helpers/server.js';
import { type AuditedServer, startAuditedServer } from './audit-helpers.js';
import { type Fixture, fixture } from './sandbox-util.js';

const BASH = '/bin/bash';
const support = landlockSupport();
const skip =
  process.platform !== 'linux'
    ? 'Linux only'
    : support.abi < 4
      ? `Landlock ABI 4 is needed (${support.missing ?? support.abi})`
      : (netNotifyAbsence() ?? (existsSync(BASH) ? false : 'bash is needed'));

let f: Fixture;
let deniedListener: net.Server;
let deniedPort = 0;
let deniedSeen = 0;
const servers: AuditedServer[] = [];
const dir = tempDir('corral-ttcp-');

before(async () => {
  if (skip) return;
  f = await fixture();
  // A denied destination: another loopback address (not on the policy's list), with a listener that must stay idle.
  deniedListener = net.createServer((c) => {
    deniedSeen++;
    c.destroy();
  });
  await new Promise<void>((r) => deniedListener.listen(0, '127.0.0.2', r));
  deniedPort = (deniedListener.address() as net.AddressInfo).port;
});
after(async () => {
  for (const s of servers) await s.close();
  deniedListener?.close();
  await f?.close();
  dir.cleanup();
});

type Started = { as: AuditedServer; agent: RpcClient & { sessionId: string }; panelLog: NetworkLog };

async function server(transparentTcp: boolean): Promise<Started> {
  const as = await startAuditedServer(
    { dbPath: join(dir.path, `audit-${transparentTcp}.db`), outputBytes: 4096 },
    {
      launcher: {
        sandbox: { tmpdir: f.T, ...(transparentTcp ? { transparentTcp: true } : {}) },
        resolver: (host) => Promise.reject(new Error(`no DNS in tests: ${host}`)),
      },
    },
  );
  servers.push(as);
  // What the panel's monitor keeps of the proxies' decisions (src/server/monitor), fed by the same bus.
  const panelLog = new NetworkLog();
  as.server.launcher.networkEvents.on('audit', (e) => panelLog.addAudit(e));
  return { as, agent: await as.agent(`ttcp-${transparentTcp}`), panelLog };
}

let withFlag: Promise<Started> | undefined;
let withoutFlag: Promise<Started> | undefined;
const transparentServer = () => {
  withFlag ??= server(true);
  return withFlag;
};
const plainServer = () => {
  withoutFlag ??= server(false);
  return withoutFlag;
};

async function auditOf(s: Started, processId: string): Promise<AuditProcessResult> {
  await s.as.audit.trail!.flush();
  return (await s.as.panel()).request<AuditProcessResult>('audit/process', {
    sessionId: s.as.publicId(s.agent),
    processId,
  });
}

/** bash's /dev/tcp: an HTTP GET to the allowed origin, then the denied one and [::1]; each line label=exit status. */
function script(): string {
  return [
    `exec 3<>/dev/tcp/127.0.0.1/${f.port} && printf 'GET /ttcp HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n' >&3 && head -1 <&3; echo "allowed=$?"`,
    `(exec 4<>/dev/tcp/127.0.0.2/${deniedPort}); echo "denied=$?"`,
    `(exec 5<>/dev/tcp/::1/${f.port6}); echo "v6=$?"`,
    // A proxy-aware client: through its proxy variables as before (under bwrap the in-namespace forwarder).
    `curl -sS -m10 --noproxy '' -o /dev/null -w 'curl=%{http_code}\\n' http://127.0.0.1:${f.port}/viaproxy`,
  ].join('; ');
}

async function run(s: Started, processId: string, useLegacyLandlock: boolean): Promise<string> {
  await s.agent.request(
    'process/start',
    managedLoopbackStart(processId, [BASH, '-c', script()], {
      cwd: f.W,
      env: { PATH: '/usr/bin:/bin', LC_ALL: 'C' },
      useLegacyLandlock,
    }),
  );
  const events = await s.agent.collect(processId, 30_000);
  const exited = events.find((e) => e.method === 'process/exited');
  const out = s.agent.output(processId, 'stdout') + s.agent.output(processId, 'stderr');
  assert.equal(exited?.params.exitCode, 0, out);
  return out;
}

describe('--linux-sandbox-transparent-tcp: raw TCP through the managed SOCKS5 proxy', { skip }, () => {
  for (const backend of ['bwrap', 'landlock'] as const) {
    const landlock = backend === 'landlock';
    test(`${backend}: allowed answers and is audited, denied refused and unseen, [::1] refused, curl as before`, {
      skip: !landlock && needsSandbox,
    }, async () => {
      const s = await transparentServer();
      const hits = f.hits.tcp;
      const seen = deniedSeen;
      const seen6 = f.hits.tcp6;
      const processId = `ttcp-${backend}`;
      const out = await run(s, processId, landlock);
      assert.match(out, /^HTTP\/1\.[01] 200 OK\r?$/m, out);
      assert.match(out, /^allowed=0$/m, out);
      assert.match(out, /^denied=1$/m, out);
      assert.match(out, /127\.0\.0\.2\/\d+: Connection refused/, out);
      assert.match(out, /^v6=1$/m, out);
      assert.match(out, /^curl=200$/m, out);
      assert.equal(f.hits.tcp - hits, 2, 'the allowed origin got the raw request and the proxied one');
      assert.equal(deniedSeen, seen, 'the denied listener saw nothing');
      assert.equal(f.hits.tcp6, seen6, '[::1] saw nothing');
      const d = await auditOf(s, processId);
      // The raw connects' rows say they were transparent; curl's (it spoke to the proxy itself) does not.
      const rows = (n: {
        host: string;
        port: number;
        decision: string;
        protocol: string;
        transport?: string;
      }) => [n.host, n.port, n.decision, n.protocol, n.transport ?? 'proxied'];
      const expected = [
        ['127.0.0.1', f.port, 'allow', 'socks5_tcp', 'transparent'],
        ['127.0.0.1', f.port, 'allow', 'http', 'proxied'],
        ['127.0.0.2', deniedPort, 'deny', 'socks5_tcp', 'transparent'],
        ['::1', f.port6, 'deny', 'socks5_tcp', 'transparent'],
      ].sort();
      assert.deepEqual(d.network.map(rows).sort(), expected, JSON.stringify(d.network));
      // The panel's network events say the same.
      assert.deepEqual(
        s.panelLog.audit
          .filter((a) => a.processId === processId)
          .map(rows)
          .sort(),
        expected,
        JSON.stringify(s.panelLog.audit),
      );
    });

    test(`${backend} without the flag: the same raw connects fail as before, nothing asked of the proxy`, {
      skip: !landlock && needsSandbox,
    }, async () => {
      const s = await plainServer();
      const hits = f.hits.tcp;
      const seen = deniedSeen;
      const processId = `plain-${backend}`;
      const out = await run(s, processId, landlock);
      assert.match(out, /^allowed=1$/m, out);
      assert.match(out, landlock ? /Permission denied/ : /Connection refused/, out);
      assert.match(out, /^denied=1$/m, out);
      assert.match(out, /^curl=200$/m, out);
      assert.equal(f.hits.tcp - hits, 1, 'only the proxied request');
      assert.equal(deniedSeen, seen);
      const d = await auditOf(s, processId);
      assert.deepEqual(
        d.network.map((n) => [n.host, n.port, n.decision, n.transport ?? 'proxied']),
        [['127.0.0.1', f.port, 'allow', 'proxied']],
      );
    });
  }
});
