// issue 33, item 2: the seed's central combination end to end. The server's own `managedNetwork` proxy together with
// `sandbox.enforceManagedNetwork: true` under bwrap, every decision taken from inside the sandbox, with pipes and
// with a PTY: an allowed host gets 200, a loopback literal not on the list 403 `not_allowed_local` (the proxy's JSON),
// a direct connection is refused. The audit trail records each decision against the process, and the panel's row
// and rings show the same.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { AuditProcessResult } from '../../src/protocol/audit.js';
import type { MonitorSnapshot } from '../../src/protocol/monitor.js';
import type { Monitor } from '../../src/server/monitor/monitor.js';
import { servePanel } from '../../src/server/monitor/panel.js';
import type { RpcClient } from '../helpers/client.js';
import { needsSandbox } from '../helpers/native.js';
import { tempDir } from '../helpers/server.js';
import { type AuditedServer, startAuditedServer } from './audit-helpers.js';
import { centralStart, type Fixture, fixture } from './sandbox-util.js';

const CURL = '/usr/bin/curl';

let f: Fixture;
let as: AuditedServer;
let monitor: Monitor;
let agent: RpcClient & { sessionId: string };
let panel: RpcClient & { sessionId: string };
const dir = tempDir('corral-central-');
const lookups: string[] = [];

before(async () => {
  f = await fixture();
  as = await startAuditedServer(
    { dbPath: join(dir.path, 'audit.db'), outputBytes: 1024 },
    {
      launcher: {
        sandbox: { tmpdir: f.T },
        // No DNS in tests: neither name below needs a lookup (localhost and IP literals are never resolved).
        resolver: (host) => {
          lookups.push(host);
          return Promise.reject(new Error(`no DNS in tests: ${host}`));
        },
      },
    },
  );
  monitor = servePanel(as.server);
  monitor.attachNetwork(as.server.launcher.networkEvents);
  agent = await as.agent('central');
  panel = await as.panel();
});
after(async () => {
  monitor?.dispose();
  await as?.close();
  await f?.close();
  dir.cleanup();
  assert.deepEqual(lookups, []);
});

async function central(processId: string, tty: boolean): Promise<string> {
  await agent.request(
    'process/start',
    centralStart(processId, { port: f.port, cwd: f.W, tty, conversationId: `conv-${processId}` }),
  );
  const events = await agent.collect(processId, 30_000);
  const exited = events.find((e) => e.method === 'process/exited');
  assert.equal(exited?.params.exitCode, 0);
  return agent.output(processId, tty ? 'pty' : 'stdout');
}

describe('managedNetwork + enforceManagedNetwork under bwrap (the seed central combination)', {
  skip: needsSandbox || (!existsSync(CURL) && 'no curl'),
}, () => {
  for (const tty of [false, true]) {
    const processId = tty ? 'central-pty' : 'central-pipes';
    test(`${tty ? 'PTY' : 'pipes'}: allowed 200, loopback literal 403 not_allowed_local, direct refused; audited; on the panel`, async () => {
      const hits = f.hits.tcp;
      const out = (await central(processId, tty)).replace(/\r/g, '');
      assert.match(out, /^allowed=200$/m, out);
      assert.match(out, /"reason":"not_allowed_local"/, out);
      assert.match(out, /^local=403$/m, out);
      assert.match(out, /^direct=7$/m, out);
      assert.equal(f.hits.tcp - hits, 1, 'only the allowed request reached the host listener');

      // The audit trail: both decisions, against this process, with the client's audit metadata.
      await as.audit.trail!.flush();
      const d = await panel.request<AuditProcessResult>('audit/process', {
        sessionId: as.publicId(agent),
        processId,
      });
      assert.equal(d.process?.sandboxType, 'linuxSeccomp');
      const byHost = new Map(d.network.map((n) => [n.host, n]));
      const allowed = byHost.get('localhost');
      assert.deepEqual(
        [allowed?.decision, allowed?.port, allowed?.method, allowed?.processId],
        ['allow', f.port, 'GET', processId],
      );
      const local = byHost.get('127.0.0.1');
      assert.deepEqual([local?.decision, local?.reason, local?.port], ['deny', 'not_allowed_local', f.port]);
      assert.equal(d.network.length, 2, JSON.stringify(d.network));

      // The panel: the row (sandboxed, its proxy in the policy summary), the blocked ring and the audit ring.
      const snap = await panel.request<MonitorSnapshot>('monitor/subscribe', { output: 'followed' });
      const row = snap.processes.find((p) => p.processId === processId);
      assert.equal(row?.badge, 'linux-seccomp');
      assert.equal(row?.sandboxType, 'linuxSeccomp');
      assert.equal(row?.tty, tty);
      const proxy = row?.policy?.proxy as { httpPort?: number } | undefined;
      assert.ok(typeof proxy?.httpPort === 'number' && proxy.httpPort > 0, JSON.stringify(row?.policy));
      const blocked = snap.blocked.filter((b) => b.processId === processId);
      assert.deepEqual(
        blocked.map((b) => [b.host, b.reason]),
        [['127.0.0.1', 'not_allowed_local']],
      );
      const audit = snap.audit.filter((a) => a.processId === processId);
      assert.deepEqual(audit.map((a) => [a.host, a.decision, a.reason]).sort(), [
        ['127.0.0.1', 'deny', 'not_allowed_local'],
        ['localhost', 'allow', 'allow'],
      ]);
      for (const a of audit) assert.equal(a.metadata['conversation.id'], `conv-${processId}`);
      await panel.request('monitor/unsubscribe', {});
    });
  }
});
