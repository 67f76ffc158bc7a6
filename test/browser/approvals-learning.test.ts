// Approvals v2 in Chromium (issue 36, the parts left): the Projects card turns learning mode on for a workspace
// (the banner over every view says so while it is on), shows the proposal it saw (with path prefixes), accepts the
// checked endpoints as project rules (an unchecked one is left out); the repository file's state (new → accepted);
// a card shows its request's path and offers "Wait until the process exits" (no countdown, the exit ends it).
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, realpathSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import type {
  ApprovalsState,
  LearningState,
  RepoPolicyState,
  RulesResult,
} from '../../src/protocol/approvals.js';
import type { StartResult } from '../../src/protocol/exec.js';
import { askingNetwork, curlCode } from '../helpers/approvalsCli.js';
import { shellStart } from '../helpers/registry-contract.js';
import { until } from '../helpers/server.js';
import { approvalsPanelRig } from './approvalsPanelRig.js';
import { visibleText } from './harness.js';

describe('learning mode, the repository file and waiting in the browser panel', {
  skip: existsSync('/usr/bin/curl') ? false : 'curl is not installed',
}, () => {
  let work = '';
  const rig = approvalsPanelRig('corral-approvals-learning-ui-', (dir) => {
    work = join(dir, 'repo');
    mkdirSync(join(work, '.git'), { recursive: true });
    mkdirSync(join(work, '.corral'), { recursive: true });
    writeFileSync(
      join(work, '.corral', 'network.json'),
      JSON.stringify({ endpoints: [{ host: '127.0.0.1' }] }),
    );
  });

  const learning = async () =>
    (await rig.panel.request<{ learning: LearningState[] }>('approvals/learning', {})).learning;
  const url = (path: string) => `http://127.0.0.1:${rig.origin.port}${path}`;

  test('learning on from the Projects card, its proposal accepted in part; the file accepted', async () => {
    const page = rig.browser.page;
    await page.locator('.nav-item[data-view="approvals"]').click();
    await page.locator('[data-testid="project-input"]').fill(realpathSync(work));
    await page.locator('[data-action="add-project"]').click();
    const row = page.locator(`.project-row[data-workspace="${realpathSync(work)}"]`);
    await row.waitFor({ timeout: 10_000 });
    // The repository file: new, then accepted from the card.
    const repo = row.locator('[data-field="repo"]');
    await until(async () => (await repo.getAttribute('data-acceptance')) === 'new', 10_000, 'shown new');
    await row.locator('[data-action="repo-accept"]').click();
    await until(async () => (await repo.getAttribute('data-acceptance')) === 'accepted', 10_000, 'accepted');
    const state = await rig.panel.request<RepoPolicyState>('approvals/repoPolicy', { workspace: work });
    assert.equal(state.acceptance, 'accepted');

    // Learning on: the server's session, and the banner over every view.
    await row.locator('[data-action="learning-toggle"]').click();
    await until(async () => (await learning()).some((l) => l.active), 10_000, 'learning on');
    const banner = page.locator('[data-testid="learning-banner"]');
    await banner.waitFor({ timeout: 10_000 });
    assert.match(await visibleText(banner), new RegExp(`Learning mode is on.*${realpathSync(work)}`, 's'));
    const r = (await rig.agent.request('process/start', {
      ...shellStart(
        'learner',
        [curlCode('a1', url('/a/1')), curlCode('b1', url('/b/1')), curlCode('a2', url('/a/2'))].join('; '),
        work,
      ),
      managedNetwork: askingNetwork(),
    })) as StartResult;
    assert.ok(
      r.warnings?.some((w) => /^learning mode is on/.test(w)),
      JSON.stringify(r.warnings),
    );
    await rig.agent.collect('learner', 30_000);
    assert.match(rig.agent.output('learner', 'stdout'), /a1=200\s+b1=200\s+a2=200/);
    const boxes = row.locator('[data-testid="learning-proposal"] input[type="checkbox"]');
    await until(async () => (await boxes.count()) === 2, 10_000, 'the proposal shown');
    const b = row.locator('input[data-endpoint$=" /b"]');
    assert.equal(await b.isChecked(), true);
    await b.uncheck();
    await row.locator('[data-action="learning-accept"]').click();
    await until(
      async () => (await rig.panel.request<RulesResult>('approvals/rules', {})).rules.length === 1,
      10_000,
      'one rule made',
    );
    const [rule] = (await rig.panel.request<RulesResult>('approvals/rules', {})).rules;
    assert.deepEqual([rule!.host, rule!.method, rule!.pathPrefix], ['127.0.0.1', 'GET', '/a']);
    assert.deepEqual(await learning(), []);
    await banner.waitFor({ state: 'detached', timeout: 10_000 });
    assert.deepEqual(rig.browser.errors, []);
  });

  test('a card shows the path and waits until the process exits', async () => {
    const page = rig.browser.page;
    await rig.agent.request('process/start', {
      ...shellStart('waiting', curlCode('w', url('/b/wait?q=1')), work),
      managedNetwork: askingNetwork(),
    });
    const card = page.locator('[data-testid="approval-prompt"]').first();
    await card.waitFor({ timeout: 15_000 });
    assert.equal(await visibleText(card.locator('[data-field="path"]')), '/b/wait');
    await card.locator('[data-action="wait"]').click();
    const prompt = async () =>
      (await rig.panel.request<ApprovalsState>('approvals/list', {})).pending.find(
        (p) => p.processId === 'waiting',
      );
    await until(async () => (await prompt())?.waitingForExit === true, 10_000, 'waiting on the server');
    await until(
      async () =>
        (await card.locator('[data-testid="approval-countdown"]').textContent()) ===
        'waits until the process exits',
      10_000,
      'the card says it waits',
    );
    assert.equal(await card.locator('[data-action="wait"]').isHidden(), true);
    await rig.agent.request('process/terminate', { processId: 'waiting' });
    await card.waitFor({ state: 'detached', timeout: 15_000 });
    assert.equal(await prompt(), undefined);
    assert.equal(
      (await rig.panel.request<RulesResult>('approvals/rules', {})).rules.length,
      1,
      'nothing more stored',
    );
    assert.deepEqual(rig.browser.errors, []);
  });
});
