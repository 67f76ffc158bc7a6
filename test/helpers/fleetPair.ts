// Two real servers for the fleet approvals tests: B asks for approvals (loopback only, a stub resolver) and keeps
// project rules in a file; A, with rules of its own and the same launcher, joins B as `server-b` (s1). A panel and an
// agent of each; A's panel subscribed to approvals once B is ready.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { type Host, startHost } from '../../src/app/host.js';
import type { MonitorServer } from '../../src/protocol/monitor.js';
import { loopbackOnlyDialer, startOrigin, stubResolver } from '../integration/network-helpers.js';
import { RpcClient } from './client.js';
import { until } from './server.js';

type Client = RpcClient & { sessionId: string };

export interface FleetPair {
  origin: Awaited<ReturnType<typeof startOrigin>>;
  a: Host;
  b: Host;
  panelA: Client;
  panelB: Client;
  agentA: Client;
  agentB: Client;
  /** Closes it all; no dial left the machine. */
  close(): Promise<void>;
}

/** Starts the pair, keeping its rules under `dir`. */
export async function startFleetPair(dir: string): Promise<FleetPair> {
  const offMachine: string[] = [];
  const options = (name: string) => ({
    server: {
      launcher: { resolver: stubResolver, dialer: loopbackOnlyDialer(offMachine) },
      approvals: { timeoutMs: 30_000 },
    },
    resumeGraceMs: 0,
    approvalRules: join(dir, `${name}-rules`, 'approval-rules.db'),
  });
  const open = (h: Host, name: string) =>
    RpcClient.open(`${h.listener.url}/?token=${encodeURIComponent(h.tokens.panel)}`, name);
  const origin = await startOrigin();
  const b = await startHost(options('b'));
  const a = await startHost({
    ...options('a'),
    join: [{ url: b.listener.url, token: b.tokens.panel, name: 'server-b' }],
    fleet: { backoffMs: [50, 400] },
  });
  const pair: FleetPair = {
    origin,
    a,
    b,
    panelA: await open(a, 'panel-a'),
    panelB: await open(b, 'panel-b'),
    agentA: await RpcClient.open(a.execUrl, 'agent-a'),
    agentB: await RpcClient.open(b.execUrl, 'agent-b'),
    async close() {
      for (const c of [pair.panelA, pair.panelB, pair.agentA, pair.agentB]) c.close();
      await a.shutdown();
      await b.shutdown();
      await origin.close();
      assert.deepEqual(offMachine, [], 'no dial may ever leave the machine');
    },
  };
  await until(
    async () =>
      ((await pair.panelA.request('fleet/list', {})) as { servers: MonitorServer[] }).servers[0]?.ready ===
      true,
    15_000,
    'B joined and ready',
  );
  await pair.panelA.request('approvals/subscribe', {});
  return pair;
}
