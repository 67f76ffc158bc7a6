/**
 * A sandboxed start's policy summary reaches the audit trail and the panel as one redacted text (issue 32:
 * protocol/monitor.ts redactedJson, made once per launch summary): the row in the audit database and the process the
 * monitor's snapshot describes must carry the same policy, for two Landlock starts and an unsandboxed one beside
 * them; the second start under the same policy has its own summary (its ruleset reused), not the first one's.
 */
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { AuditProcessResult } from '../../src/protocol/audit.js';
import type { MonitorSnapshot } from '../../src/protocol/monitor.js';
import { landlockSupport } from '../../src/sandbox/linux/landlockNative.js';
import type { Monitor } from '../../src/server/monitor/monitor.js';
import { servePanel } from '../../src/server/monitor/panel.js';
import type { RpcClient } from '../helpers/client.js';
import { tempDir, until } from '../helpers/server.js';
import { type AuditedServer, run, startAuditedServer } from './audit-helpers.js';
import { seed, special } from './sandbox-util.js';

const support = landlockSupport();
const dir = tempDir('corral-audit-policy-');
let as: AuditedServer;
let monitor: Monitor;
let agent: RpcClient & { sessionId: string };
let panel: RpcClient & { sessionId: string };

before(async () => {
  as = await startAuditedServer({ dbPath: join(dir.path, 'audit.db') });
  monitor = servePanel(as.server);
  agent = await as.agent('policy');
  panel = await as.panel();
});
after(async () => {
  monitor?.dispose();
  await as?.close();
  dir.cleanup();
});

test("the audit row and the monitor agree on each start's policy", {
  skip: support.abi === 0 ? `no Landlock here: ${support.missing}` : false,
}, async () => {
  const ws = join(dir.path, 'ws');
  mkdirSync(join(ws, '.git'), { recursive: true });
  const sandbox = seed({
    cwd: ws,
    entries: [special('root', 'read'), special('current_working_directory', 'write')],
    useLegacyLandlock: true,
  });
  await run(agent, 'll-1', ['/bin/true'], { cwd: ws, sandbox });
  await run(agent, 'll-2', ['/bin/true'], { cwd: ws, sandbox });
  await run(agent, 'plain', ['/bin/true'], { cwd: ws });
  const snap = await panel.request<MonitorSnapshot>('monitor/subscribe', { output: 'followed' });
  const shown = (id: string) => snap.processes.find((p) => p.processId === id)?.policy;
  const stored = async (id: string) => {
    const at = { sessionId: as.publicId(agent), processId: id };
    await until(async () => (await panel.request<AuditProcessResult>('audit/process', at)).process !== null);
    return (await panel.request<AuditProcessResult>('audit/process', at)).process?.policy;
  };
  for (const id of ['ll-1', 'll-2']) {
    const p = await stored(id);
    assert.equal((p as Record<string, unknown>)?.backend, 'landlock', JSON.stringify(p));
    assert.deepEqual(shown(id), p, `${id}: the monitor shows what the audit trail stored`);
  }
  // Each start its own summary: the first built its ruleset (a fresh server), and keeps saying so after the second
  // start, which reused it, or built it again when something the plan looked at changed meanwhile (the frozen /tmp's
  // entries: other test files create and remove theirs there).
  assert.equal((await stored('ll-1'))?.landlockRuleset, 'built');
  assert.equal(shown('ll-1')?.landlockRuleset, 'built');
  assert.ok(['reused', 'built'].includes((await stored('ll-2'))?.landlockRuleset as string));
  assert.equal(await stored('plain'), null);
  assert.equal(shown('plain'), null);
  await panel.request('monitor/unsubscribe', {});
});
