/**
 * The fixture of the approval tests: a server with agent and panel tokens whose proxies resolve through the stub
 * resolver and dial only loopback, a loopback origin, and a panel client subscribed to approvals.
 */
import assert from 'node:assert/strict';
import type { ApprovalsSubscribeResult } from '../../src/protocol/approvals.js';
import { loopbackOnlyDialer, startOrigin, stubResolver } from '../integration/network-helpers.js';
import type { RpcClient } from './client.js';
import { startTestServer, type TestServer } from './server.js';

export interface ApprovalsFixture {
  ts: TestServer;
  origin: Awaited<ReturnType<typeof startOrigin>>;
  panel: RpcClient & { sessionId: string };
  subscribed: ApprovalsSubscribeResult;
  /** Closes everything and asserts no dial left the machine. */
  close(): Promise<void>;
}

export async function startApprovalsFixture(timeoutMs = 15_000): Promise<ApprovalsFixture> {
  const offMachine: string[] = [];
  const origin = await startOrigin();
  const ts = await startTestServer({
    tokens: true,
    launcher: { resolver: stubResolver, dialer: loopbackOnlyDialer(offMachine) },
    approvals: { timeoutMs },
  });
  const panel = await ts.panel();
  const subscribed = await panel.request<ApprovalsSubscribeResult>('approvals/subscribe', {});
  return {
    ts,
    origin,
    panel,
    subscribed,
    async close() {
      panel.close();
      await ts.close();
      await origin.close();
      assert.deepEqual(offMachine, [], 'no dial may ever leave the machine');
    },
  };
}
