// The fleet's command line (issue 19 item 1): `corral exec-server --panel-token-file` (a panel credential beside the
// agent token, for a fleet host to watch the server) and `corral serve --join URL` (with #token-file=,
// #header=, #name=), and their errors, each naming its flag.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import type { MonitorServer } from '../../src/protocol/monitor.js';
import { CORRAL_BIN, ROOT, startCli } from '../helpers/cli.js';
import { RpcClient } from '../helpers/client.js';
import { tempDir, until } from '../helpers/server.js';

const dir = tempDir('corral-fleet-cli-');
const file = (name: string, text: string, mode = 0o600) => {
  const p = join(dir.path, name);
  writeFileSync(p, text);
  chmodSync(p, mode);
  return p;
};
const AGENT = 'agent-token-0123456789abcdef';
const PANEL = 'panel-token-0123456789abcdef';

/** Runs the CLI to its exit (for the refusals); one still running after 20 s is killed (code null). */
function fails(args: string[]): { code: number | null; stderr: string } {
  const r = spawnSync(process.execPath, [CORRAL_BIN, ...args], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 20_000,
  });
  return { code: r.status, stderr: r.stderr };
}

describe('fleet command line', () => {
  after(() => dir.cleanup());

  test('exec-server --panel-token-file: that token is a panel, the agent token is not', async () => {
    const cli = await startCli([
      'exec-server',
      '--listen',
      'ws://127.0.0.1:0',
      '--ws-token-file',
      file('agent', AGENT),
      '--panel-token-file',
      file('panel', PANEL),
      '--no-audit',
    ]);
    try {
      const url = cli.url!;
      const panel = await RpcClient.open(`${url}/?token=${PANEL}`, 'panel');
      const snap = (await panel.request('monitor/subscribe', {})) as { processes: unknown[] };
      assert.ok(Array.isArray(snap.processes));
      const agent = await RpcClient.open(`${url}/?token=${AGENT}`, 'agent');
      const e = await agent.requestError('monitor/subscribe', {});
      assert.equal(e.code, -32600);
      assert.ok(!cli.stderr().includes(PANEL), 'the panel token is not logged');
      panel.close();
      agent.close();
    } finally {
      await cli.stop();
    }
  });

  test('--panel-token-file refusals name the flag', () => {
    const same = fails([
      'exec-server',
      '--ws-token-file',
      file('a1', AGENT),
      '--panel-token-file',
      file('p1', AGENT),
      '--no-audit',
    ]);
    assert.equal(same.code, 2);
    assert.match(same.stderr, /--panel-token-file: the panel token must differ from the agent token/);
    const open = fails(['exec-server', '--panel-token-file', file('p2', PANEL, 0o644), '--no-audit']);
    assert.equal(open.code, 2);
    assert.match(open.stderr, /--panel-token-file: .* can be read by others/);
    const none = fails(['exec-server', '--ws-auth', 'none', '--panel-token-file', file('p3', PANEL)]);
    assert.match(none.stderr, /--ws-auth none and --panel-token-file exclude each other/);
  });

  test('serve --join refusals name the flag and the field', () => {
    const noToken = fails(['serve', '--join', 'ws://127.0.0.1:9/', '--no-audit']);
    assert.equal(noToken.code, 2);
    assert.match(noToken.stderr, /--join: the server's panel token is missing/);
    const badHeader = fails([
      'serve',
      '--join',
      `ws://127.0.0.1:9/#token-file=${file('p5', PANEL)}&header=Upgrade:x`,
      '--no-audit',
    ]);
    assert.match(
      badHeader.stderr,
      /--join: headers\.Upgrade: this header belongs to the WebSocket handshake/,
    );
    const badOption = fails([
      'serve',
      '--join',
      `ws://127.0.0.1:9/#token-file=${file('p6', PANEL)}&colour=red`,
      '--no-audit',
    ]);
    assert.match(badOption.stderr, /--join: unknown join option colour/);
    const badFile = fails([
      'serve',
      '--join',
      `ws://127.0.0.1:9/#token-file=${file('p4', PANEL, 0o644)}`,
      '--no-audit',
    ]);
    assert.match(badFile.stderr, /--join token-file: .* can be read by others/);
  });

  test('serve --join refuses a credential on the command line: every local user can read argv', () => {
    // /proc/PID/cmdline (ps) is readable by every user of the machine: a token there is everyone's.
    const inArgv = fails(['serve', '--join', `ws://127.0.0.1:9/?token=${PANEL}`, '--no-audit']);
    assert.equal(inArgv.code, 2, `exited ${inArgv.code}: ${inArgv.stderr.slice(0, 300)}`);
    assert.match(inArgv.stderr, /--join: .*\?token=.*every local user.*#token-file=/);
    assert.ok(!inArgv.stderr.includes(PANEL), 'the refusal does not repeat the token');
  });

  test('serve --join watches the server: its credential from a file, a header and a name from the fragment', async () => {
    const remote = await startCli([
      'exec-server',
      '--listen',
      'ws://127.0.0.1:0',
      '--ws-token-file',
      file('agent2', AGENT),
      '--panel-token-file',
      file('panel2', PANEL),
      '--no-audit',
    ]);
    const host = await startCli([
      'serve',
      '--no-audit',
      '--join',
      `${remote.url}/#token-file=${file('panel3', PANEL)}&header=X-Extra:one&name=the-remote`,
    ]);
    try {
      const panelLine = (await host.lines.next()).value as string;
      const token = /#token=(.+)$/.exec(panelLine)![1]!;
      const port = new URL(host.url!.replace(/^exec-server: /, '')).port;
      const panel = await RpcClient.open(`ws://127.0.0.1:${port}/?token=${token}`, 'panel');
      let servers: MonitorServer[] = [];
      await until(
        async () => {
          servers = ((await panel.request('fleet/list', {})) as { servers: MonitorServer[] }).servers;
          return servers[0]?.state === 'connected';
        },
        15_000,
        'joined',
      );
      assert.equal(servers[0]!.name, 'the-remote');
      assert.ok(!JSON.stringify(servers).includes(PANEL));
      panel.close();
    } finally {
      await host.stop();
      await remote.stop();
    }
  });
});
