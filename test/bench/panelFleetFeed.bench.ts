/**
 * The fleet panel at the feed rate the issues ask for, which two cores cannot produce with real commands (issue 19:
 * 8 pods × 500 processes/s; issue 16: 2000/s): `corral serve --join` to eight stand-in pods (feedPods.ts: they speak
 * the monitor protocol and send real rows, batched every 25 ms, with no commands behind them), the panel in Chromium
 * on the host. So what is measured is the part the agents' machines do not pay for: the fleet host's relay (link,
 * validation, mirror, its own feed) and the page. The lag counts from each process's start on its pod (its pod's
 * batching included), as the real-pod bench (panelFleet.bench.ts) counts from the start answer. No root needed.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser } from '../browser/harness.js';
import { type FeedPod, realRow, startFeedPod } from './feedPods.js';
import {
  measurePhase,
  openFleetPanel,
  type Serve,
  startServe,
  type Timing,
  waitShown,
} from './panelDriver.js';
import type { BenchRow } from './types.js';

const PODS = 8;

/** Runs `total` processes on each of `pods` at `rate`/s each, all at once. */
async function runOn(pods: FeedPod[], opts: { total: number; rate: number; prefix: string }) {
  const t0 = performance.now();
  const all = await Promise.all(pods.map((p, k) => p.run({ ...opts, prefix: `${opts.prefix}${k + 1}-` })));
  const timings: Timing[] = all.flat();
  return { timings, rate: timings.length / ((performance.now() - t0) / 1000) };
}

export async function run(): Promise<BenchRow[]> {
  const section = (pods: number, rate: number) =>
    `panel: fleet feed, ${pods} stand-in pod${pods > 1 ? 's' : ''} × ${rate}/s`;
  const pods: FeedPod[] = [];
  let serve: Serve | null = null;
  let browser: Browser | null = null;
  try {
    const template0 = await (async () => {
      // A real row of a real server, to send copies of.
      const s = await startServe();
      try {
        return await realRow(s);
      } finally {
        await s.stop();
      }
    })();
    for (let k = 1; k <= PODS; k++) {
      pods.push(await startFeedPod({ ...template0, clientName: `agent-pod-${k}` }, `session-pod-${k}`));
    }
    const tokenFile = join(mkdtempSync(join(tmpdir(), 'corral-bench-feed-')), 'panel-token');
    writeFileSync(tokenFile, 'stand-in-pods-take-any-token', { mode: 0o600 });
    serve = await startServe(
      pods.flatMap((p, k) => [
        '--join',
        `${p.url}#token-file=${encodeURIComponent(tokenFile)}&name=pod-${k + 1}`,
      ]),
    );
    await Promise.all(pods.map((p) => p.subscribed));
    // Warm the host and the page (V8 optimises the relay and the table as they run).
    const warm = await runOn(pods, { total: 400, rate: 1000, prefix: 'warm-' });
    const opened = await openFleetPanel(serve.panelUrl, `pod-${PODS}`);
    browser = opened.browser;
    const { page, cdp } = opened;
    await waitShown(page, [warm.timings.at(-1)!.processId], 120_000);
    const rows: BenchRow[] = [];
    rows.push(
      ...(await measurePhase(
        page,
        cdp,
        { section: section(PODS, 500), rate: PODS * 500, what: 'all pods' },
        () => runOn(pods, { total: 1000, rate: 500, prefix: 'f-' }),
      )),
    );
    rows.push(
      ...(await measurePhase(page, cdp, { section: section(1, 2000), rate: 2000 }, () =>
        runOn(pods.slice(0, 1), { total: 10_000, rate: 2000, prefix: 'g-' }),
      )),
    );
    return rows;
  } catch (e) {
    return [
      { section: section(PODS, 500), metric: 'ERROR', corral: (e as Error).message.slice(0, 120), unit: '' },
    ];
  } finally {
    await browser?.close();
    await serve?.stop();
    for (const p of pods) await p.close();
  }
}
