/**
 * The last `corral selftest` result as the panel reads it (issue 37, item 5: monitor/selftest, over a real host and a
 * panel WebSocket): none kept, one kept, and the file the reader parses (src/selftest/lastResult.ts) fed huge, wide,
 * deep and malformed input, a FIFO, a directory and a symlink in its place: each reads as no result (null), at once,
 * and the host keeps answering. For panel connections only. The old code (1561683) has no monitor/selftest: every
 * test here fails there.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { type Host, startHost } from '../../src/app/host.js';
import { MonitorSelftestResult, type SelftestReport } from '../../src/protocol/selftest.js';
import { MAX_RESULT_BYTES, selftestResultPath } from '../../src/selftest/lastResult.js';
import { RpcClient } from '../helpers/client.js';

const state = mkdtempSync(join(tmpdir(), 'corral-selftest-result-'));
// The host reads the result where `corral selftest` keeps it: under XDG_STATE_HOME, read at each call.
const savedXdg = process.env.XDG_STATE_HOME;
process.env.XDG_STATE_HOME = state;
const file = selftestResultPath();
mkdirSync(join(state, 'corral'), { recursive: true, mode: 0o700 });

const report: SelftestReport = {
  time: '2026-12-06T00:00:00.000Z',
  ok: false,
  cases: [
    { name: 'loopback-spellings', status: 'held', detail: '7 spellings refused' },
    { name: 'relay-in-sandbox', status: 'broken', detail: 'the relay reached \u001b[31mthe host' },
    { name: 'leave-cgroup', status: 'not-applicable', detail: 'no per-command cgroups here' },
  ],
};

describe('monitor/selftest', () => {
  let host: Host;
  let panel: RpcClient;
  const last = async () => MonitorSelftestResult.parse(await panel.request('monitor/selftest', {})).last;
  const place = (write: () => void) => {
    rmSync(file, { recursive: true, force: true });
    write();
  };

  before(async () => {
    host = await startHost({});
    panel = await RpcClient.open(
      host.execUrl.replace(/\?token=.*/, `?token=${encodeURIComponent(host.tokens.panel)}`),
      'corral-panel',
    );
  });
  after(async () => {
    panel?.close();
    await host?.shutdown();
    if (savedXdg === undefined) delete process.env.XDG_STATE_HOME;
    else process.env.XDG_STATE_HOME = savedXdg;
    rmSync(state, { recursive: true, force: true });
  });

  test('none kept: null; one kept: that report, its time and each case; an agent is refused', async () => {
    place(() => {});
    assert.equal(await last(), null);
    place(() => writeFileSync(file, `${JSON.stringify(report)}\n`, { mode: 0o600 }));
    assert.deepEqual(await last(), report);
    const agent = await RpcClient.open(host.execUrl);
    try {
      assert.equal((await agent.requestError('monitor/selftest', {})).code, -32600);
    } finally {
      agent.close();
    }
  });

  const hostile: [string, () => void][] = [
    [
      'huge: past the bound, valid JSON',
      () => {
        const big = {
          ...report,
          cases: [{ name: 'x', status: 'held', detail: 'd'.repeat(MAX_RESULT_BYTES) }],
        };
        writeFileSync(file, JSON.stringify(big));
      },
    ],
    [
      'huge: a detail past the schema bound',
      () => {
        writeFileSync(
          file,
          JSON.stringify({ ...report, cases: [{ name: 'x', status: 'held', detail: 'd'.repeat(20_000) }] }),
        );
      },
    ],
    [
      'wide: 100 000 cases',
      () => {
        const c = { name: 'x', status: 'held', detail: '' };
        writeFileSync(file, JSON.stringify({ ...report, cases: Array.from({ length: 100_000 }, () => c) }));
      },
    ],
    [
      'wide: 501 cases',
      () => {
        const c = { name: 'x', status: 'held', detail: '' };
        writeFileSync(file, JSON.stringify({ ...report, cases: Array.from({ length: 501 }, () => c) }));
      },
    ],
    [
      'deep: 200 000 nested arrays',
      () => writeFileSync(file, `${'['.repeat(200_000)}${']'.repeat(200_000)}`),
    ],
    [
      'deep: cases nested in cases',
      () => {
        const open = '{"time":"t","ok":true,"cases":[';
        writeFileSync(file, `${open.repeat(10_000)}${']}'.repeat(10_000)}`);
      },
    ],
    ['malformed: truncated JSON', () => writeFileSync(file, JSON.stringify(report).slice(0, 40))],
    ['malformed: NUL bytes', () => writeFileSync(file, Buffer.alloc(4096, 0))],
    ['malformed: not UTF-8', () => writeFileSync(file, Buffer.from([0xff, 0xfe, 0x7b, 0x80, 0x7d]))],
    [
      'malformed: an unknown status',
      () => {
        writeFileSync(
          file,
          JSON.stringify({ ...report, cases: [{ name: 'x', status: 'fine', detail: '' }] }),
        );
      },
    ],
    ['malformed: ok as a string', () => writeFileSync(file, JSON.stringify({ ...report, ok: 'true' }))],
    ['malformed: an array', () => writeFileSync(file, JSON.stringify([report]))],
    ['malformed: empty', () => writeFileSync(file, '')],
    ['a FIFO in its place', () => execFileSync('mkfifo', [file])],
    ['a directory in its place', () => mkdirSync(file)],
    [
      'a symlink in its place (to a valid report)',
      () => {
        const real = join(state, 'elsewhere.json');
        writeFileSync(real, JSON.stringify(report));
        symlinkSync(real, file);
      },
    ],
  ];
  for (const [name, write] of hostile)
    test(`${name}: no result, at once; the host still answers`, async () => {
      place(write);
      const t0 = performance.now();
      assert.equal(await last(), null);
      // Generous: a blocked open (a FIFO) would never answer at all.
      assert.ok(performance.now() - t0 < 30_000);
      assert.ok(await panel.request('host/info', {}));
    });
});
