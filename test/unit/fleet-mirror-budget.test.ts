// The fleet mirror's budget (src/fleet/mirror.ts): what it counts as kept is what it keeps (charged on keeping,
// credited on forgetting, through upserts, snapshots, session changes, network rings, prompts and decisions), never
// above the budget, flagged when rows were forgotten or refused; unknown subtrees past their bound throw the
// JsonBoundError that drops the link.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { DEFAULT_LIMITS, type Relay, ServerMirror, VALUE_BYTES } from '../../src/fleet/mirror.js';
import { JsonBoundError, measureJson } from '../../src/protocol/boundedJson.js';
import { monitorProcess, wirePrompt } from '../helpers/monitorRows.js';

const relay: Relay = {
  relayProcess() {},
  relaySession() {},
  relayNetwork() {},
  relayServer() {},
  relayOutput() {},
};

const cost = (row: unknown) => {
  const m = measureJson(row, { maxDepth: 64, maxValues: 1e9 });
  return m.bytes + VALUE_BYTES * m.values;
};

/** What the mirror keeps, costed again from scratch. */
function recount(m: ServerMirror): number {
  let n = 0;
  for (const r of [
    ...m.processes.values(),
    ...m.sessions.values(),
    ...m.blocked,
    ...m.audit,
    ...m.prompts.values(),
    ...m.decisions,
    ...m.approvalAudit,
  ])
    n += cost(r);
  return n;
}

const session = (sessionId: string) => ({
  sessionId,
  clientName: 'c',
  attached: true,
  detachedAt: null,
  expiresAt: null,
  processCount: 0,
  self: false,
});
const blocked = (id: number) => ({
  id,
  processId: 'p',
  sessionId: null,
  host: 'h',
  port: 1,
  reason: 'r',
  method: null,
  protocol: 'http',
  mode: null,
  decision: null,
  source: null,
  client: null,
  timestamp: 1,
  blockedTotal: 1,
});

describe('fleet mirror budget', () => {
  test('kept is what is kept, through every change, and stays within the budget', () => {
    const keptBytes = 400_000;
    const m = new ServerMirror('s1', relay, { ...DEFAULT_LIMITS, keptBytes });
    const argv = Array.from({ length: 500 }, (_, i) => `arg-${i}`);
    for (let i = 0; i < 200; i++) {
      m.batch({
        processes: [
          monitorProcess({ processId: `p${i}`, argv, state: i % 3 ? 'running' : 'closed' }),
          monitorProcess({ processId: `p${i}`, argv, state: 'closed' }), // the same row again: replaced
        ],
        sessions: [{ kind: 'created', session: session(`s${i % 7}`) }],
        blocked: [blocked(i)],
        audit: [],
        servers: [],
      });
      assert.ok(m.kept <= keptBytes, `${m.kept} kept`);
      assert.equal(m.kept, recount(m));
    }
    assert.equal(m.overBudget, true);
    m.batch({
      processes: [],
      sessions: [{ kind: 'expired', session: session('s1') }],
      blocked: [],
      audit: [],
      servers: [],
    });
    m.snapshot({
      processes: [monitorProcess({ processId: 'fresh' })],
      sessions: [session('only')],
      blocked: [blocked(1)],
      audit: [],
      hosts: [],
      dropped: { output: 0, network: 0, evicted: 0, forgottenProcesses: 0 },
      limits: { blockedRing: 1, auditRing: 1, finishedProcesses: 1, subscriberHighWaterBytes: 1 },
      networkWired: true,
      previewWired: false,
      serverTime: 1,
    });
    assert.equal(m.kept, recount(m));
    const prompt = wirePrompt({
      id: 'q',
      sessionId: 's',
      command: ['x'],
      cwd: '/',
      host: 'h',
      port: 1,
      protocol: 'http',
      method: 'GET',
      requestedAt: 1,
      expiresAt: 2,
      timeoutMs: 1,
    });
    m.prompt(prompt as never);
    assert.equal(m.kept, recount(m));
    m.resolved('q');
    m.prompt(prompt as never);
    m.disconnected();
    assert.equal(m.kept, recount(m));
  });

  test('metadata or policy past its bound throws the error that drops the link', () => {
    const m = new ServerMirror('s1', relay);
    const objects = Array.from({ length: 21_500 }, () => ({}));
    assert.throws(
      () =>
        m.batch({
          processes: [monitorProcess({ processId: 'x', metadata: { objects } })],
          sessions: [],
          blocked: [],
          audit: [],
          servers: [],
        }),
      (e) => e instanceof JsonBoundError && /more than 4096 values/.test(e.message),
    );
    let deep: unknown = 1;
    for (let i = 0; i < 30_000; i++) deep = [deep];
    assert.throws(
      () =>
        m.batch({
          processes: [monitorProcess({ processId: 'y', policy: { deep } })],
          sessions: [],
          blocked: [],
          audit: [],
          servers: [],
        }),
      (e) => e instanceof JsonBoundError && /nesting deeper than 12/.test(e.message),
    );
    assert.equal(m.processes.size, 0);
    assert.equal(m.kept, 0);
  });
});
