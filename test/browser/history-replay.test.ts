// History's replay (issue 37, item 4) in Chromium: a PTY session with colours and cursor moves, replayed from the
// audit trail in xterm.js (scrubbed to the end, and played at 50x), ends on the same screen as the live view showed;
// scrubbing back to the start empties it; pipes replay as text with their times.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import type { Locator } from 'playwright-core';
import { type Host, startHost } from '../../src/app/host.js';
import { RpcClient } from '../helpers/client.js';
import { tempDir } from '../helpers/server.js';
import { type Browser, ensureBuilt, openBrowser } from './harness.js';

/** The rows of an xterm's DOM renderer as text, trailing blanks and empty trailing rows dropped. */
async function rows(term: Locator): Promise<string[]> {
  const lines = await term.evaluate((el) =>
    [...el.children].map((r) => (r.textContent ?? '').replace(/\u00a0/g, ' ').trimEnd()),
  );
  while (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  return lines;
}

describe('History replays a stored session', () => {
  const dir = tempDir('corral-replay-ui-');
  const dbPath = join(dir.path, 'state', 'audit.db');
  let host: Host | null = null;
  let browser: Browser | null = null;

  after(async () => {
    await browser?.close();
    await host?.shutdown();
    dir.cleanup();
  });

  test('a PTY session replays to the same final screen as live; pipes replay with times', async () => {
    const panelDir = ensureBuilt();
    host = await startHost({ servePanel: true, panelDir, audit: { dbPath } });
    browser = await openBrowser();
    const page = browser.page;
    await page.goto(host.panelUrl!);
    await page.locator('#conn-status', { hasText: 'connected' }).waitFor({ timeout: 15_000 });
    const agent = await RpcClient.open(host.execUrl, 'replay-agent');
    // Colours, bold, a cursor move up and right that overwrites, erase to end of line, a carriage return rewrite.
    const script =
      "printf '\\033[1;31mred-bold\\033[0m plain\\n'; sleep 0.3; printf 'second line here\\n'; sleep 0.2; " +
      "printf '\\033[1A\\033[7Cover\\033[K\\n'; printf 'progress 10%%\\rprogress 99%%\\n'; " +
      "printf '\\033[32mgreen\\033[0m \\033[2;3Hjump\\n'; sleep 0.5";
    await agent.request('process/start', {
      processId: 'tty',
      argv: ['/bin/sh', '-c', script],
      cwd: dir.path,
      env: { PATH: '/usr/bin:/bin', TERM: 'xterm' },
      tty: true,
    });
    await page.locator('tr[data-process-id="tty"]').click();
    const live = page.locator('[data-testid="process-detail"] .xterm-rows');
    await live.filter({ hasText: 'jump' }).waitFor();
    await agent.collect('tty', 20_000);
    const liveRows = await rows(live);
    assert.ok(
      liveRows.some((l) => l.includes('red-bold plain')),
      liveRows.join('\n'),
    );

    await agent.request('process/start', {
      processId: 'pipes',
      argv: ['/bin/sh', '-c', 'echo first; read go; sleep 0.3; echo second >&2'],
      cwd: dir.path,
      env: { PATH: '/usr/bin:/bin' },
      tty: false,
      pipeStdin: true,
    });
    // The child's pause starts only once the server has "first" (a chunk's time is when the server read it: with the
    // pause right after the first write, a late read of "first" on a loaded machine left 65 ms of its 300).
    await agent.waitFor(
      (n) => n.method === 'process/output' && n.params.processId === 'pipes' && n.params.stream === 'stdout',
      20_000,
    );
    await agent.request('process/write', {
      processId: 'pipes',
      chunk: Buffer.from('go\n').toString('base64'),
    });
    await agent.collect('pipes', 20_000);
    agent.close();

    await page.click('button[data-view="history"]');
    const table = page.getByTestId('history-table');
    await table.locator('tr[data-process-id="tty"]').click();
    const detail = page.getByTestId('history-detail');
    await detail.getByTestId('history-replay').click();
    const replay = detail.getByTestId('replay');
    await replay.waitFor();
    const total = Number(await replay.getAttribute('data-total'));
    assert.ok(total >= 3, `the pauses make separate chunks: ${total}`);
    const scrubber = replay.getByTestId('replay-scrubber');
    const seek = (to: 'end' | 'start') =>
      scrubber.evaluate((el, where) => {
        const input = el as HTMLInputElement;
        input.value = where === 'end' ? input.max : '0';
        input.dispatchEvent(new Event('input'));
      }, to);
    const handle = await replay.elementHandle();
    // Settled is parsed; xterm paints what it parsed at its next animation frame: wait for that one to have run too.
    const settledAt = async (n: number) => {
      await page.waitForFunction(
        ([el, n]) =>
          (el as HTMLElement).dataset.shown === String(n) && (el as HTMLElement).dataset.settled === 'true',
        [handle, n] as const,
      );
      await page.evaluate(
        () => new Promise((painted) => requestAnimationFrame(() => requestAnimationFrame(painted))),
      );
    };
    const term = replay.locator('.xterm-rows');

    await seek('end');
    await settledAt(total);
    assert.deepEqual(await rows(term), liveRows, 'scrubbed to the end: the live screen');
    await browser.screenshot('history-replay-pty');

    await seek('start');
    await settledAt(0);
    assert.deepEqual(await rows(term), [], 'back at the start: nothing yet');

    await replay.getByTestId('replay-speed').selectOption('50');
    await replay.getByTestId('replay-play').click();
    await settledAt(total);
    assert.deepEqual(await rows(term), liveRows, 'played at 50x: the live screen');

    await table.locator('tr[data-process-id="pipes"]').click();
    await detail.getByTestId('history-replay').click();
    const text = detail.getByTestId('replay-text');
    await text.waitFor();
    await detail.getByTestId('replay-scrubber').evaluate((el) => {
      const input = el as HTMLInputElement;
      input.value = input.max;
      input.dispatchEvent(new Event('input'));
    });
    await text.filter({ hasText: 'second' }).waitFor();
    const shown = (await text.textContent()) ?? '';
    const m = /\[(\d+\.\d+)s stdout\] first\n\[(\d+\.\d+)s stderr\] second/.exec(shown);
    assert.ok(m, shown);
    assert.ok(Number(m[2]) - Number(m[1]) >= 0.25, `the 0.3 s pause is in the times: ${shown}`);
    assert.deepEqual(browser.errors, []);
  });
});
