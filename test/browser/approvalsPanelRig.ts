/**
 * The rig of an approvals suite in Chromium, set up before its tests and closed after them: a headless host serving
 * a private build of the panel, keeping project rules in its temp dir, proxies that dial only loopback; an origin on
 * loopback; the browser on the panel (connected); an agent and a panel client.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { type Host, startHost } from '../../src/app/host.js';
import { RpcClient } from '../helpers/client.js';
import { tempDir } from '../helpers/server.js';
import { loopbackOnlyDialer, startOrigin, stubResolver } from '../integration/network-helpers.js';
import { type Browser, openBrowser } from './harness.js';
import { privateBuild } from './panelBuild.js';

export function approvalsPanelRig(prefix: string, setup: (dir: string) => void = () => {}) {
  const tmp = tempDir(prefix);
  const rig = {
    tmp,
    offMachine: [] as string[],
    host: undefined as unknown as Host,
    browser: undefined as unknown as Browser,
    agent: undefined as unknown as RpcClient & { sessionId: string },
    panel: undefined as unknown as RpcClient & { sessionId: string },
    origin: undefined as unknown as Awaited<ReturnType<typeof startOrigin>>,
  };
  before(async () => {
    setup(tmp.path);
    const panelDir = join(await privateBuild(), 'renderer');
    rig.origin = await startOrigin();
    rig.host = await startHost({
      servePanel: true,
      panelDir,
      resumeGraceMs: 60_000,
      server: { launcher: { resolver: stubResolver, dialer: loopbackOnlyDialer(rig.offMachine) } },
      approvalRules: join(tmp.path, 'rules', 'approval-rules.db'),
    });
    rig.browser = await openBrowser();
    rig.agent = await RpcClient.open(rig.host.execUrl, 'codex-agent');
    rig.panel = await RpcClient.open(
      `${rig.host.listener.url}/?token=${encodeURIComponent(rig.host.tokens.panel)}`,
      'observer',
    );
    await rig.browser.page.goto(rig.host.panelUrl!);
    await rig.browser.page.locator('#conn-status', { hasText: 'connected' }).waitFor({ timeout: 15_000 });
  });
  after(async () => {
    rig.agent?.close();
    rig.panel?.close();
    await rig.browser?.close();
    await rig.host?.shutdown();
    await rig.origin?.close();
    tmp.cleanup();
    assert.deepEqual(rig.offMachine, []);
  });
  return rig;
}
