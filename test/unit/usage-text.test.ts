/** The panel's line for what a process used (renderer/views/usage.ts): every figure, nulls left out, the source said. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { byCpu, cpuCell, usageText } from '../../renderer/views/usage.js';

test('usageText: figures, nulls left out, limit events and the source', () => {
  assert.equal(
    usageText({
      source: 'cgroup-v1',
      wallMs: 1500,
      cpuUserMs: 1020.4,
      cpuSystemMs: 30,
      peakMemoryBytes: 64 * 1024 * 1024,
      peakPids: null,
      ioReadBytes: 0,
      ioWriteBytes: 4096,
      limitEvents: { memory: 1 },
    }),
    'CPU 1.02 s user, 30 ms sys · peak 64.0 MiB · io 0 B in / 4.0 KiB out · OOM 1 (cgroup-v1)',
  );
  assert.equal(
    usageText({
      source: 'rusage',
      wallMs: 5,
      cpuUserMs: null,
      cpuSystemMs: null,
      peakMemoryBytes: null,
      peakPids: null,
      ioReadBytes: null,
      ioWriteBytes: null,
      limitEvents: {},
    }),
    'CPU – user, – sys (rusage)',
  );
});

test('byCpu: most CPU first, rows without usage last in their order; cpuCell', () => {
  const u = (ms: number | null) =>
    ms === null
      ? null
      : {
          source: 'rusage' as const,
          wallMs: 1,
          cpuUserMs: ms,
          cpuSystemMs: 0,
          peakMemoryBytes: null,
          peakPids: null,
          ioReadBytes: null,
          ioWriteBytes: null,
          limitEvents: {},
        };
  const items = [
    { type: 'process', id: 1, usage: u(5) },
    { type: 'process', id: 2, usage: null },
    { type: 'process', id: 3, usage: u(2000) },
    { type: 'process', id: 4, usage: u(null) },
  ];
  assert.deepEqual(
    byCpu(items).map((i) => i.id),
    [3, 1, 2, 4],
  );
  assert.equal(cpuCell(u(2000)), '2.00 s');
  assert.equal(cpuCell(null), '–');
});
