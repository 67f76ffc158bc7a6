// The audit observer reads the server through its narrow AuditSource port (src/audit/source.ts) only: here a plain
// object stands in for the server, and the records come out stamped with the source's clock.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { AuditRecord } from '../../src/audit/events.js';
import { observeServer } from '../../src/audit/observe.js';
import type { AuditSource } from '../../src/audit/source.js';
import { NetworkEvents } from '../../src/network/events.js';
import type { ManagedNetworkSpec } from '../../src/network/managedNetwork.js';
import type { NetworkAuditEvent } from '../../src/protocol/network.js';
import { LOCAL_AGENT } from '../../src/server/core/auth.js';
import { ServerEvents } from '../../src/server/core/events.js';
import { RetentionLedger } from '../../src/server/core/retention.js';
import { Session } from '../../src/server/core/session.js';
import { FakeClock } from '../helpers/clock.js';

function source(): AuditSource & { clock: FakeClock; asked: string[] } {
  const asked: string[] = [];
  return {
    events: new ServerEvents(),
    networkEvents: new NetworkEvents(),
    networkOf(sessionId, processId): ManagedNetworkSpec | undefined {
      asked.push(`${sessionId}/${processId}`);
      return undefined;
    },
    clock: new FakeClock(1_700_000_000_000),
    asked,
  };
}

const decision = (timestamp: string): NetworkAuditEvent => ({
  processId: 'p1',
  sessionId: 's1',
  'event.name': 'codex.network_proxy.policy_decision',
  'event.timestamp': timestamp,
  'network.policy.scope': 'domain',
  'network.policy.decision': 'deny',
  'network.policy.source': 'baseline_policy',
  'network.policy.reason': 'not_allowed',
  'network.transport.protocol': 'http',
  'server.address': 'a.test',
  'server.port': 80,
  'http.request.method': 'GET',
  'client.address': 'unknown',
  'network.policy.override': false,
});

test('audit source: sessions, fs calls and proxy decisions of a stand-in source, stamped on its clock', async () => {
  const src = source();
  const records: AuditRecord[] = [];
  const observer = observeServer(src, { outputBytes: 0, record: (r) => records.push(r) });
  const events = src.events as ServerEvents;
  const session = new Session('s1', 'client-a', events, {
    resumeKey: 'k1',
    owner: LOCAL_AGENT,
    retention: new RetentionLedger().share(() => [][Symbol.iterator]()),
  });
  events.emitSession('created', session);
  events.emitSession('attached', session);
  await src.clock.advance(5_000);
  events.emitSession('detached', session);
  events.emit('fs', {
    method: 'fs/writeFile',
    time: 42,
    params: { path: '/tmp/x', dataBase64: 'YWJj' },
    session,
    error: null,
    refused: false,
  });
  src.networkEvents.emit('audit', decision('not a time'));
  src.networkEvents.emit('audit', decision('2026-01-02T03:04:05.000Z'));
  const t0 = 1_700_000_000_000;
  assert.deepEqual(
    records.map((r) => [r.kind, r.time]),
    [
      ['session', t0],
      ['session', t0 + 5_000],
      ['fs', 42],
      ['network', t0 + 5_000],
      ['network', Date.parse('2026-01-02T03:04:05.000Z')],
    ],
  );
  await src.clock.advance(1_000);
  observer.end();
  assert.deepEqual(records.at(-1), {
    kind: 'session',
    time: t0 + 6_000,
    sessionId: 's1',
    clientName: 'client-a',
    event: 'end',
    truncated: null,
  });
  // Ended: nothing more is recorded, from either bus.
  const n = records.length;
  events.emitSession('attached', session);
  src.networkEvents.emit('audit', decision('not a time'));
  assert.equal(records.length, n);
  assert.equal(src.networkEvents.listenerCount('audit'), 0);
});
