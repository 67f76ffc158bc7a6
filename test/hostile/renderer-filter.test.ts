// The panel's process filter (renderer/processTable.ts) against hostile rows and hostile typing (issue 38): the
// search narrows incrementally (a key that extends the query tests only the rows shown), so what is fed here is what
// could make an incremental view drift from the truth or cost more than one pass: a query as long as a megabyte,
// control characters, lone surrogates, case folding that changes a string's length, argv of 64 KiB and of 2000
// words, a filter state the page never offers, and a query typed and taken back thousands of times while rows
// stream in and change state. After each step the view is exactly what a full recomputation gives.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type Filter, ProcessTable, type StateFilter } from '../../renderer/processTable.js';
import { monitorProcess } from '../helpers/monitorRows.js';

/** A full recomputation: every row the filter lets through, oldest first. */
function truth(t: ProcessTable, f: Filter): string[] {
  const text = f.text.trim().toLowerCase();
  const out: { key: string; startedAt: number; ord: number }[] = [];
  for (const r of t.rows.values()) {
    const running = r.state === 'running' || r.state === 'starting';
    const failed = !running && r.exitCode !== null && r.exitCode !== 0;
    if (f.server !== null && r.server !== f.server) continue;
    if (f.client !== null && r.clientName !== f.client) continue;
    if (f.state === 'running' && !running) continue;
    if (f.state === 'exited' && running) continue;
    if (f.state === 'failed' && !failed) continue;
    const hay = `${r.argv.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(' ')}\n${r.cwd}\n${r.processId}\n${r.clientName}\n${r.server}`;
    if (text !== '' && !hay.toLowerCase().includes(text)) continue;
    out.push({ key: r.key, startedAt: r.startedAt, ord: r.ord });
  }
  return out.sort((a, b) => a.startedAt - b.startedAt || a.ord - b.ord).map((x) => x.key);
}

const viewOf = (t: ProcessTable) => Array.from({ length: t.viewSize }, (_, i) => t.at(i, false)!.key);

const HOSTILE_ARGS = [
  'x'.repeat(64 * 1024),
  '\u0000\u0001\u001b[31m\r\n\t',
  '\ud800 lone \udfff surrogates',
  // Lower-casing changes the length of these (İ is two code units once folded).
  'İSTANBUL ǅ ß ΣΑΣ',
  '<img src=x onerror=alert(1)>',
  'quote \' " \\ $HOME `id`',
];

test('hostile rows and queries: the incrementally narrowed view is exact, a huge query costs one pass', () => {
  const t = new ProcessTable();
  let n = 0;
  const add = (argv: string[], state: 'running' | 'exited' = 'running', exitCode: number | null = null) =>
    t.upsert(
      monitorProcess({
        processId: `h${n}`,
        argv,
        state,
        exitCode,
        clientName: n % 3 === 0 ? 'agent-İ' : 'agent-b',
        server: n % 4 === 0 ? 'pod\u0000x' : undefined,
        startedAt: 1000 + (n++ % 50),
      }),
    );
  for (const a of HOSTILE_ARGS) add(['/bin/echo', a]);
  add(Array.from({ length: 2000 }, (_, i) => `w${i}`));
  for (let i = 0; i < 500; i++)
    add(['/bin/echo', `row ${i}`, HOSTILE_ARGS[i % HOSTILE_ARGS.length]!.slice(0, 40)]);

  const check = (f: Filter, what: string) => {
    t.setFilter(f);
    assert.deepEqual(viewOf(t), truth(t, f), what);
  };
  const base: Filter = { server: null, client: null, state: '', text: '' };
  // A megabyte of query, then the same query grown by a key: no row matches, no quadratic work, no throw.
  const huge = 'x'.repeat(1024 * 1024);
  const t0 = performance.now();
  check({ ...base, text: huge }, 'a 1 MiB query');
  check({ ...base, text: `${huge}y` }, 'a 1 MiB query and a key');
  check({ ...base, text: 'x'.repeat(64 * 1024) }, 'the 64 KiB argument, whole');
  assert.equal(t.viewSize, 1, 'the 64 KiB argument is found');
  assert.ok(performance.now() - t0 < 20_000, 'huge queries cost a pass each, not more');
  // Queries that fold, controls, surrogates, markup, and a query that is only blanks (trimmed to no query).
  for (const q of [
    'i̇stanbul',
    'İ',
    '\u0000',
    '\u001b[31m',
    '\ud800',
    '\udfff surrogates',
    '<img',
    "'\\''",
    '   ',
    'w1999',
    'agent-i̇',
  ])
    check({ ...base, text: q }, `query ${JSON.stringify(q)}`);
  // Filter values the page never offers: an unknown state, servers and clients nothing has.
  check({ ...base, state: 'bogus' as StateFilter }, 'an unknown state');
  check({ ...base, state: 'failed' }, 'failed after an unknown state');
  check({ ...base, server: 'pod\u0000x', client: 'agent-İ' }, 'a server id with a NUL');
  check({ ...base, server: '', client: 'nobody' }, 'a client nothing has');
});

test('a query typed and taken back thousands of times while rows stream in and change: never drifts', () => {
  const t = new ProcessTable();
  const ids: string[] = [];
  let seed = 99;
  const rand = () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed / 0x7fffffff;
  };
  // Σ folds to σ or ς by what follows it: a key can change how the query before it folds.
  const keys = ['r', 'o', 'w', ' ', '1', '2', 'İ', 'ß', 'Σ', 'Α', '\u0000', "'", 'X'];
  let f: Filter = { server: null, client: null, state: '', text: '' };
  for (let step = 0; step < 6000; step++) {
    const r = rand();
    if (r < 0.3) f = { ...f, text: f.text + keys[Math.floor(rand() * keys.length)]! };
    else if (r < 0.5) f = { ...f, text: f.text.slice(0, -1) };
    else if (r < 0.55)
      f = {
        ...f,
        state: (['', 'running', 'exited', 'failed', 'bogus'] as StateFilter[])[Math.floor(rand() * 5)]!,
      };
    else if (r < 0.8) {
      const id = `s${ids.length}`;
      ids.push(id);
      t.upsert(
        monitorProcess({
          processId: id,
          argv: [
            '/bin/echo',
            `row ${ids.length} ${keys[Math.floor(rand() * keys.length)]}${keys[Math.floor(rand() * keys.length)]}`,
          ],
          startedAt: 1000 + ids.length - (rand() < 0.1 ? 40 : 0),
        }),
      );
    } else {
      const id = ids[Math.floor(rand() * ids.length)];
      if (id)
        t.upsert(
          monitorProcess({
            processId: id,
            argv: ['/bin/echo', 'changed'],
            state: 'exited',
            exitCode: rand() < 0.5 ? 0 : 3,
          }),
        );
    }
    t.setFilter(f);
    if (step % 25 === 0) assert.deepEqual(viewOf(t), truth(t, f), `step ${step}: ${JSON.stringify(f)}`);
  }
});
