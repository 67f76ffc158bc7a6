// The panel shows a client-wrapped command's own sandbox from what the server sends (MonitorProcess.launcherFlags,
// read by src/sandbox/codexWrapped.ts), not from a second parse of the argv in the browser.
import assert from 'node:assert/strict';
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { MonitorSnapshot } from '../../src/protocol/monitor.js';
import { readLauncherArgs } from '../../src/sandbox/codexWrapped.js';
import type { Monitor } from '../../src/server/monitor/monitor.js';
import { servePanel } from '../../src/server/monitor/panel.js';
import { startTestServer, type TestServer, tempDir } from '../helpers/server.js';

let ts: TestServer;
let monitor: Monitor;
const dir = tempDir();

before(async () => {
  ts = await startTestServer({ tokens: true, launcher: { unwrapClientSandbox: 'never' } });
  monitor = servePanel(ts.server);
});
after(async () => {
  monitor.dispose();
  await ts.close();
  dir.cleanup();
});

test('readLauncherArgs: flags in order (--name value, --name=value), a stray argument, the command after --', () => {
  assert.deepEqual(readLauncherArgs(['codex-linux-sandbox', '--a', '1', '--b=2', '--', 'ls', '-l']), {
    flags: [
      { name: 'a', value: '1' },
      { name: 'b', value: '2' },
    ],
    stray: null,
    command: ['ls', '-l'],
  });
  assert.deepEqual(readLauncherArgs(['codex-linux-sandbox', '--a', '1', 'oops', '--', 'ls']), {
    flags: [{ name: 'a', value: '1' }],
    stray: 'oops',
    command: undefined,
  });
  assert.deepEqual(readLauncherArgs(['codex-linux-sandbox', '--last']).flags, [
    { name: 'last', value: null },
  ]);
});

test('the feed sends a client-wrapped process its launcher flags, and null for any other process', async () => {
  const launcher = join(dir.path, 'codex-linux-sandbox');
  writeFileSync(launcher, '#!/bin/sh\nexit 0\n');
  chmodSync(launcher, 0o755);
  const agent = await ts.client('old-codex');
  const panel = await ts.panel();
  try {
    const argv = [
      launcher,
      '--sandbox-policy-cwd',
      dir.path,
      '--sandbox-policy={"type":"read-only"}',
      '--',
      'true',
    ];
    for (const [processId, a] of [
      ['wrapped', argv],
      ['plain', ['/bin/true']],
    ] as const) {
      await agent.request('process/start', { processId, argv: a, cwd: dir.path, env: {}, tty: false });
      await agent.collect(processId);
    }
    const snapshot = await panel.request<MonitorSnapshot>('monitor/subscribe', { output: 'followed' });
    const byId = new Map(snapshot.processes.map((p) => [p.processId, p]));
    assert.equal(byId.get('wrapped')?.badge, 'client-wrapped');
    assert.deepEqual(byId.get('wrapped')?.launcherFlags, [
      { name: 'sandbox-policy-cwd', value: dir.path },
      { name: 'sandbox-policy', value: '{"type":"read-only"}' },
    ]);
    assert.equal(byId.get('plain')?.launcherFlags, null);
  } finally {
    agent.close();
    panel.close();
  }
});
