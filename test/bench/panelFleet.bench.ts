/**
 * The fleet panel's feed (issue 19): eight Corral pods of the Kubernetes rig (corral exec-server with a panel
 * credential, each in a network namespace of its own, behind the agent-sandbox router stand-in), `corral serve
 * --join` to each of them through the router, the panel in Chromium on the host, and one agent per pod (through the
 * router) starting short processes at 500/s on each, then the same at 100/s on each (800/s: below what two cores
 * saturate at, where the asked 4000/s cannot be started at all — the lag then is the panel's, not a queue's). The pods
 * and all they start run in one CPU group (fleet/nodesGroup.ts: on a cluster they are other nodes). Printed: the
 * achieved rate, the page's lag behind the agents, main-thread CPU per process, long tasks and heap. Root only
 * (namespaces); otherwise one row says why.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser } from '../browser/harness.js';
import { type Fleet, fleetAvailable, startFleet } from '../helpers/fleetRig.js';
import {
  Agent,
  flood,
  measurePhase,
  openFleetPanel,
  type Serve,
  startServe,
  waitShown,
} from './panelDriver.js';
import type { BenchRow } from './types.js';

const PODS = 8;
const PER_POD_RATE = 500;
/** Below what two cores saturate at (the asked rate is not reachable there): the panel's own lag, unqueued. */
const LOW_PER_POD_RATE = 100;
const PER_POD = 1000;

const sectionOf = (perPod: number) => `panel: fleet, ${PODS} pods × ${perPod}/s`;

export async function run(): Promise<BenchRow[]> {
  const avail = fleetAvailable();
  if (!avail.ok)
    return [
      { section: sectionOf(PER_POD_RATE), metric: 'skipped', corral: avail.reason.slice(0, 100), unit: '' },
    ];
  let fleet: Fleet | null = null;
  let serve: Serve | null = null;
  let browser: Browser | null = null;
  const agents: Agent[] = [];
  try {
    fleet = await startFleet({ pods: PODS, panelToken: true, nodesCpuGroup: true });
    const f = fleet;
    // The pods' panel token, as a file (a credential on the command line is refused).
    const tokenFile = join(mkdtempSync(join(tmpdir(), 'corral-bench-fleet-')), 'panel-token');
    writeFileSync(tokenFile, f.panelToken!, { mode: 0o600 });
    const joins = f.pods().flatMap((p) => {
      const r = f.route(p.name);
      // The router's URL without the agent token of its query: the host sends the panel token from the file.
      const url = new URL(r.url);
      url.search = '';
      const fragment = [
        `token-file=${encodeURIComponent(tokenFile)}`,
        ...Object.entries(r.headers).map(([k, v]) => `header=${encodeURIComponent(`${k}:${v}`)}`),
        `name=${p.name}`,
      ].join('&');
      return ['--join', `${url}#${fragment}`];
    });
    serve = await startServe(joins);
    for (const p of f.pods()) {
      const r = f.route(p.name);
      agents.push(await Agent.open(r.url, `agent-${p.name}`, r.headers));
    }
    // Warm the pods (their per-process path is JavaScript V8 optimises as it runs).
    await flood(agents, { total: 400 * PODS, rate: 100_000, inflight: 16, prefix: 'warm-' });
    const opened = await openFleetPanel(serve.panelUrl, `pod-${PODS}`);
    browser = opened.browser;
    const { page, cdp } = opened;
    await waitShown(page, [`warm-${400 * PODS - 1}`], 120_000);
    const measure = (perPod: number, prefix: string) =>
      measurePhase(page, cdp, { section: sectionOf(perPod), rate: perPod * PODS, what: 'all pods' }, () =>
        flood(agents, { total: PER_POD * PODS, rate: perPod * PODS, inflight: 32, prefix }),
      );
    const rows: BenchRow[] = [
      {
        section: sectionOf(PER_POD_RATE),
        metric: "pods' CPU (other nodes on a real cluster)",
        corral:
          f.nodesCpuGroup && 'dir' in f.nodesCpuGroup
            ? 'one CPU group'
            : `shared: ${f.nodesCpuGroup && 'problem' in f.nodesCpuGroup ? f.nodesCpuGroup.problem : 'off'}`.slice(
                0,
                60,
              ),
        unit: '',
      },
    ];
    rows.push(...(await measure(PER_POD_RATE, 'f-')));
    // The same below saturation: the asked 4000/s is more than two cores can start at all.
    rows.push(...(await measure(LOW_PER_POD_RATE, 'g-')));
    return rows;
  } catch (e) {
    return [
      {
        section: sectionOf(PER_POD_RATE),
        metric: 'ERROR',
        corral: (e as Error).message.slice(0, 120),
        unit: '',
      },
    ];
  } finally {
    for (const a of agents) a.close();
    await browser?.close();
    await serve?.stop();
    await fleet?.close();
  }
}
