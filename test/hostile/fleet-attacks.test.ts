// The hostile joined server of issue 30 item 3, against a fleet host in a process of its own: one monitor/batch row of
// 60 KB holding 30 000 nested arrays (which made JSON.stringify throw out of the mirror and killed the host), rows
// under the 64 KiB cap packed with 21 500 empty objects each (which grew the host to gigabytes), and a variant within
// every per-row bound that only the per-server budget stops. The host stays alive and small, drops the link naming
// why (shown in fleet/list, the Servers view's source), and its own agents' sessions keep working.
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import WebSocket from 'ws';
import { rssOf, stillServes } from '../helpers/hostileJson.js';
import { joinedSocket } from '../helpers/hostileServer.js';
import { hostileFleetRig, joinedRecord } from '../helpers/joinedHost.js';
import { monitorProcess } from '../helpers/monitorRows.js';
import { until } from '../helpers/server.js';

const MiB = 1024 * 1024;
const RSS_CEILING = 350 * MiB;

describe('fleet host against the reported hostile joined server', () => {
  const rig = hostileFleetRig();
  before(() => stillServes(rig.agent, 'before'));

  const server = () => joinedRecord(rig.panel);

  /** The host's link is up and subscribed: the socket it subscribed on. */
  const joined = () => joinedSocket(rig.evil);

  const batch = (ws: WebSocket, processes: unknown[]) =>
    ws.send(JSON.stringify({ method: 'monitor/batch', params: { processes } }));

  const holds = async (word: string) => {
    assert.equal(rig.host.proc.exitCode, null, `the host exited: ${rig.host.stderr().slice(-3000)}`);
    await stillServes(rig.agent, word);
    const rss = rssOf(rig.host.proc.pid!);
    console.log(`${word}: host RSS ${Math.round(rss / MiB)} MiB`);
    assert.ok(rss < RSS_CEILING, `host RSS ${Math.round(rss / MiB)} MiB`);
  };

  test('one row of 30 000 nested arrays: the host lives and drops the link, naming why', async () => {
    const ws = await joined();
    const deep = JSON.parse(`${'['.repeat(30_000)}${']'.repeat(30_000)}`) as unknown;
    // Built by hand: JSON.stringify cannot write it either.
    const row = JSON.stringify(monitorProcess({ processId: 'deep', sessionId: 's', metadata: { x: 1 } }));
    const text = row.replace(
      '"metadata":{"x":1}',
      `"metadata":{"x":${'['.repeat(30_000)}${']'.repeat(30_000)}}`,
    );
    assert.ok(Array.isArray(deep) && text.length > 60_000);
    ws.send(`{"method":"monitor/batch","params":{"processes":[${text}]}}`);
    await until(async () => (await server()).dropped != null, 20_000, 'the link dropped');
    const s = await server();
    assert.match(s.dropped!.reason, /nesting deeper than 64 levels/);
    await holds('after-deep');
  });

  test('the same, nested in policy, in an audit event and in an approval prompt', async () => {
    const nest = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`;
    const row = JSON.stringify(monitorProcess({ processId: 'deep2', sessionId: 's', policy: { x: 1 } }));
    const variants = [
      `{"method":"monitor/batch","params":{"processes":[${row.replace('"policy":{"x":1}', `"policy":{"x":${nest(30_000)}}`)}]}}`,
      `{"method":"monitor/batch","params":{"audit":[{"metadata":${nest(30_000)}}]}}`,
      `{"method":"approvals/requested","params":{"prompt":{"id":${nest(30_000)}}}}`,
    ];
    for (const v of variants) {
      const before = (await server()).dropped?.at ?? 0;
      const ws = await joined();
      ws.send(v);
      await until(async () => ((await server()).dropped?.at ?? 0) > before, 20_000, 'the link dropped');
    }
    await holds('after-deep-variants');
  });

  test('rows of 21 500 empty objects: dropped at the first, the host stays small', async () => {
    const before = (await server()).dropped?.at ?? 0;
    const ws = await joined();
    const objects = Array.from({ length: 21_500 }, () => ({}));
    let sent = 0;
    for (let b = 0; b < 40 && ws.readyState === WebSocket.OPEN; b++) {
      const rows = Array.from({ length: 20 }, (_, i) =>
        monitorProcess({ processId: `empty-${b}-${i}`, sessionId: 's', metadata: { objects } }),
      );
      assert.ok(JSON.stringify(rows[0]).length < 64 * 1024, 'each row is under the row cap');
      batch(ws, rows);
      sent += rows.length;
    }
    await until(async () => ((await server()).dropped?.at ?? 0) > before, 30_000, 'the link dropped');
    const s = await server();
    assert.match(s.dropped!.reason, /metadata or policy has more than 4096 values/);
    assert.ok(sent > 0);
    await holds('after-objects');
  });

  test('rows within every per-row bound, but many: the budget holds, flagged; the link stays', async () => {
    const ws = await joined();
    const argv = Array.from({ length: 8000 }, (_, i) => `a${i % 10}`);
    for (let b = 0; b < 100; b++) {
      const rows = Array.from({ length: 20 }, (_, i) =>
        monitorProcess({ processId: `wide-${b}-${i}`, sessionId: 's', argv }),
      );
      batch(ws, rows);
    }
    // The host handles its messages in order: its answer to this request says every batch before it was handled.
    ws.send('{"id":"after-batches","method":"probe/none"}');
    await until(
      () => rig.evil.framesOf(ws).some((f) => f.includes('"after-batches"')),
      60_000,
      'every batch handled',
    );
    const s = await server();
    assert.equal(s.state, 'connected');
    assert.ok(s.keptBytes! <= s.budgetBytes! + 1024 * 1024, `${s.keptBytes} kept of ${s.budgetBytes}`);
    assert.equal(s.overBudget, true);
    assert.ok(s.processes < 2000, `${s.processes} rows kept of 2000`);
    await holds('after-budget');
  });
});
