// The panel's process table (no DOM): after any sequence of inserts, updates and filter changes, its counts, its
// filtered view and its order are exactly what a full recomputation gives.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type Filter, ProcessTable, type Row } from '../../renderer/processTable.js';
import type { MonitorProcess } from '../../src/protocol/monitor.js';
import { monitorProcess } from '../helpers/monitorRows.js';

/** A small deterministic PRNG (mulberry32). */
function rng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const proc = monitorProcess;

function expected(rows: MonitorProcess[], f: Filter) {
  const running = (p: MonitorProcess) => p.state === 'running' || p.state === 'starting';
  const failed = (p: MonitorProcess) => !running(p) && p.exitCode !== null && p.exitCode !== 0;
  const text = f.text.trim().toLowerCase();
  const view = rows
    .map((p, ord) => ({ p, ord }))
    .filter(({ p }) => {
      if (f.server !== null && (p.server ?? '') !== f.server) return false;
      if (f.client !== null && p.clientName !== f.client) return false;
      if (f.state === 'running' && !running(p)) return false;
      if (f.state === 'exited' && running(p)) return false;
      if (f.state === 'failed' && !failed(p)) return false;
      if (
        text &&
        !`${p.argv.join(' ')}\n${p.cwd}\n${p.processId}\n${p.clientName}\n${p.server ?? ''}`
          .toLowerCase()
          .includes(text)
      )
        return false;
      return true;
    })
    .sort((a, b) => a.p.startedAt - b.p.startedAt || a.ord - b.ord)
    .map(({ p }) => `${p.server ?? ''}/${p.sessionId}/${p.processId}`);
  return {
    view,
    counts: {
      total: rows.length,
      running: rows.filter(running).length,
      failed: rows.filter(failed).length,
      ok: rows.filter((p) => !running(p) && p.exitCode === 0).length,
      stale: rows.filter((p) => p.stale === true).length,
    },
    clients: new Map(
      [...new Set(rows.map((p) => p.clientName))].map((c) => [
        c,
        {
          total: rows.filter((p) => p.clientName === c).length,
          running: rows.filter((p) => p.clientName === c && running(p)).length,
        },
      ]),
    ),
  };
}

const viewOf = (t: ProcessTable) =>
  Array.from({ length: t.viewSize }, (_, i) => t.at(i, false)!).map(
    (r: Row) => `${r.server}/${r.sessionId}/${r.processId}`,
  );

test('counts, filtered view and order stay exact through random inserts, updates and filter changes', () => {
  const rand = rng(42);
  const t = new ProcessTable();
  const truth = new Map<string, MonitorProcess>();
  const order: string[] = [];
  const filters: Filter[] = [
    { server: null, client: null, state: '', text: '' },
    { server: null, client: null, state: 'running', text: '' },
    { server: null, client: null, state: 'failed', text: '' },
    { server: 'pod-2', client: null, state: 'exited', text: '' },
    { server: null, client: 'agent-b', state: '', text: 'ECHO P1' },
  ];
  let f = filters[0]!;
  for (let step = 0; step < 4000; step++) {
    const r = rand();
    if (r < 0.45 || truth.size === 0) {
      const id = `p${truth.size}`;
      const p = proc({
        processId: id,
        server: rand() < 0.3 ? 'pod-2' : undefined,
        sessionId: rand() < 0.5 ? 's1' : 's2',
        clientName: rand() < 0.5 ? 'agent-a' : 'agent-b',
        // Mostly in order, sometimes late (a page of an older snapshot).
        startedAt: 1000 + truth.size * 10 - (rand() < 0.1 ? Math.floor(rand() * 500) : 0),
      });
      const key = `${p.server ?? ''}/${p.sessionId}/${p.processId}`;
      truth.set(key, { ...p });
      order.push(key);
      t.upsert({ ...p });
    } else if (r < 0.95) {
      const key = order[Math.floor(rand() * order.length)]!;
      const old = truth.get(key)!;
      const exitCode = rand() < 0.2 ? 1 : 0;
      const next: MonitorProcess = {
        ...old,
        state: old.state === 'running' ? 'exited' : 'closed',
        exitCode,
        bytesOut: old.bytesOut + 10,
        stale: rand() < 0.05,
      };
      truth.set(key, next);
      t.upsert({ ...next });
    } else {
      f = filters[Math.floor(rand() * filters.length)]!;
      t.setFilter(f);
    }
    // The search text is built ahead while the page is idle, a part at a time, rows arriving meanwhile.
    if (step % 13 === 0) t.prepareSearch(() => rand() < 0.05);
    if (step % 97 === 0 || step === 3999) {
      const rows = order.map((k) => truth.get(k)!);
      const want = expected(rows, f);
      assert.deepEqual({ ...t.counts }, want.counts, `counts at step ${step}`);
      assert.deepEqual(viewOf(t), want.view, `view at step ${step} (${JSON.stringify(f)})`);
      for (const [c, e] of want.clients) assert.deepEqual(t.byClient.get(c), e, `client ${c}`);
    }
  }
  // Newest first is the same list reversed; indexOf finds each row where at() has it.
  const newest = Array.from({ length: t.viewSize }, (_, i) => t.at(i, true)!);
  assert.deepEqual(
    newest.map((r) => r.key),
    Array.from({ length: t.viewSize }, (_, i) => t.at(t.viewSize - 1 - i, false)!.key),
  );
  for (let i = 0; i < newest.length; i += 37) assert.equal(t.indexOf(newest[i]!), i);
  // Prepared to the end: every row has its search text.
  assert.equal(
    t.prepareSearch(() => false),
    true,
  );
  for (const r of t.rows.values()) assert.ok(r.hay?.includes(r.processId), `${r.key} prepared`);
});

test('rows of the same server, session and id are one row; other servers with the same ids are not', () => {
  const t = new ProcessTable();
  t.upsert(proc({ processId: 'x', sessionId: 's' }));
  t.upsert(proc({ processId: 'x', sessionId: 's', server: 'pod-1' }));
  t.upsert(proc({ processId: 'x', sessionId: 's', server: 'pod-1', state: 'closed', exitCode: 0 }));
  assert.equal(t.size, 2);
  assert.deepEqual({ ...t.counts }, { total: 2, running: 1, ok: 1, failed: 0, stale: 0 });
  t.setFilter({ server: 'pod-1' });
  assert.deepEqual(viewOf(t), ['pod-1/s/x']);
});

test('preparing the search text of new rows costs those rows only, not a walk over the rows already prepared', () => {
  const t = new ProcessTable();
  t.upsertAll(Array.from({ length: 20_000 }, (_, i) => proc({ processId: `old-${i}` })));
  let asked = 0;
  assert.equal(
    t.prepareSearch(() => {
      asked++;
      return false;
    }),
    true,
  );
  // 20 000 rows: asked once per step of rows, not once per row.
  assert.ok(asked <= 20_000 / 32, `stop asked ${asked} times for 20 000 rows`);
  // A batch of 10 new rows after that: a question or two, not 20 010.
  t.upsertAll(Array.from({ length: 10 }, (_, i) => proc({ processId: `new-${i}` })));
  asked = 0;
  assert.equal(
    t.prepareSearch(() => {
      asked++;
      return false;
    }),
    true,
  );
  assert.ok(asked <= 2, `stop asked ${asked} times for 10 new rows`);
  for (const r of t.rows.values()) assert.ok(r.hay?.includes(r.processId), `${r.key} prepared`);
  // Stopped at once, nothing is lost: the rest is prepared by the next call.
  t.upsertAll(Array.from({ length: 100 }, (_, i) => proc({ processId: `more-${i}` })));
  assert.equal(
    t.prepareSearch(() => true),
    false,
  );
  assert.equal(
    t.prepareSearch(() => false),
    true,
  );
  for (const r of t.rows.values()) assert.ok(r.hay?.includes(r.processId), `${r.key} prepared`);
});

test('a filter that narrows the current one (a key typed, a state or client picked) tests only the rows shown; the view stays exact through typing, backspaces and rows streaming in', () => {
  const rand = rng(7);
  const t = new ProcessTable();
  const truth = new Map<string, MonitorProcess>();
  const order: string[] = [];
  let tested = 0;
  const matches = t.matches.bind(t);
  t.matches = (r) => {
    tested++;
    return matches(r);
  };
  const add = () => {
    const id = `p${truth.size}`;
    const p = proc({
      processId: id,
      server: rand() < 0.3 ? 'pod-2' : undefined,
      clientName: rand() < 0.5 ? 'agent-a' : 'agent-b',
      argv: ['/bin/echo', `Echo ${id}`, rand() < 0.2 ? 'zed' : 'plain'],
      startedAt: 1000 + truth.size * 10 - (rand() < 0.1 ? Math.floor(rand() * 500) : 0),
    });
    const key = `${p.server ?? ''}/${p.sessionId}/${p.processId}`;
    truth.set(key, { ...p });
    order.push(key);
    t.upsert({ ...p });
  };
  const finish = () => {
    const key = order[Math.floor(rand() * order.length)]!;
    const old = truth.get(key)!;
    const next: MonitorProcess = {
      ...old,
      state: old.state === 'running' ? 'exited' : 'closed',
      exitCode: rand() < 0.3 ? 2 : 0,
    };
    truth.set(key, next);
    t.upsert({ ...next });
  };
  for (let i = 0; i < 300; i++) add();
  let f: Filter = { server: null, client: null, state: '', text: '' };
  const keys = 'p123 echozedPLAIN';
  let narrowed = 0;
  for (let step = 0; step < 3000; step++) {
    const r = rand();
    const prev = f;
    const shownBefore = t.viewSize;
    if (r < 0.35) f = { ...f, text: f.text + keys[Math.floor(rand() * keys.length)]! };
    else if (r < 0.55) f = { ...f, text: f.text.slice(0, -1) };
    else if (r < 0.62)
      f = { ...f, state: (['', 'running', 'exited', 'failed'] as const)[Math.floor(rand() * 4)]! };
    else if (r < 0.66) f = { ...f, client: [null, 'agent-a', 'agent-b'][Math.floor(rand() * 3)]! };
    else if (r < 0.7) f = { ...f, server: [null, '', 'pod-2'][Math.floor(rand() * 3)]! };
    else if (r < 0.8) add();
    else finish();
    if (f !== prev) {
      tested = 0;
      t.setFilter(f);
      const was = { ...prev, text: prev.text.trim().toLowerCase() };
      const now = { ...f, text: f.text.trim().toLowerCase() };
      const same = JSON.stringify(was) === JSON.stringify(now);
      const narrows =
        (was.server === null || was.server === now.server) &&
        (was.client === null || was.client === now.client) &&
        (was.state === '' || was.state === now.state || (was.state === 'exited' && now.state === 'failed')) &&
        now.text.includes(was.text);
      const all = now.server === null && now.client === null && now.state === '' && now.text === '';
      if (same || all) assert.equal(tested, 0, `step ${step}: ${JSON.stringify(now)} tested ${tested} rows`);
      else if (narrows) {
        narrowed++;
        assert.equal(
          tested,
          shownBefore,
          `step ${step}: narrowing to ${JSON.stringify(now)} tests the shown rows`,
        );
      }
      assert.deepEqual(
        viewOf(t),
        expected(
          order.map((k) => truth.get(k)!),
          f,
        ).view,
        `view at step ${step} (${JSON.stringify(prev)} → ${JSON.stringify(f)})`,
      );
    }
    if (step % 50 === 0)
      assert.deepEqual(
        viewOf(t),
        expected(
          order.map((k) => truth.get(k)!),
          f,
        ).view,
        `view at step ${step}`,
      );
  }
  assert.ok(narrowed > 300, `${narrowed} narrowing filters tried`);
});
