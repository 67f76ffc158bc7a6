// The hot-path bench's attribution of slow starts (test/bench/slowStarts.ts), on a trace written the way tracefs
// writes sched_switch and sched_process_fork lines.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { attribute, type Roles } from '../bench/slowStarts.js';

const at = (us: number) => (us / 1e6).toFixed(6);
const sw = (cpu: number, us: number, prev: [string, number], next: [string, number]) =>
  `${`${prev[0]}-${prev[1]}`.padStart(16)} [00${cpu}] d..2. ${at(us)}: sched_switch: prev_comm=${prev[0]} prev_pid=${prev[1]} prev_prio=120 prev_state=S ==> next_comm=${next[0]} next_pid=${next[1]} next_prio=120`;
const fork = (cpu: number, us: number, parent: number, child: number) =>
  `            node-${parent}    [00${cpu}] ..... ${at(us)}: sched_process_fork: comm=node pid=${parent} child_comm=node child_pid=${child}`;
const IDLE0: [string, number] = ['swapper/0', 0];
const IDLE1: [string, number] = ['swapper/1', 0];

const roles: Roles = {
  serverPid: 10,
  serverTids: new Set([10, 11, 12]),
  clientPid: 20,
  clientTids: new Set([20, 21]),
};

test('each slow start is put down to the task that ran longest besides its own; the others are left out', () => {
  const B = 100_000_000;
  const windows = [0, 1, 2, 3].map((i) => ({ t0: B + i * 2000, t1: B + i * 2000 + 1000 }));
  // Slow 1 (5 ms): the command (forked by the server) runs 1 ms, then a V8 thread of the server 4 ms on CPU 0
  // while CPU 1 is idle. Slow 2 (5 ms): another process (a name with dashes) 3 ms on CPU 1; the client's main
  // thread 2 ms on CPU 0 (its own: not a cause). Slow 3 (3 ms): the server's audit thread 2 ms.
  const s1 = B + 10_000;
  const s2 = B + 20_000;
  const s3 = B + 30_000;
  windows.push({ t0: s1, t1: s1 + 5000 }, { t0: s2, t1: s2 + 5000 }, { t0: s3, t1: s3 + 3000 });
  const trace = [
    '# tracer: nop',
    sw(0, B - 10, IDLE0, IDLE0),
    sw(1, B - 10, IDLE1, IDLE1),
    fork(0, s1 + 10, 10, 30),
    sw(0, s1 + 20, IDLE0, ['node', 30]),
    sw(0, s1 + 1000, ['true', 30], ['node', 11]),
    sw(0, s1 + 5000, ['node', 11], IDLE0),
    sw(1, s2, IDLE1, ['tokio-rt-worker', 105]),
    sw(1, s2 + 3000, ['tokio-rt-worker', 105], IDLE1),
    sw(0, s2, IDLE0, ['node', 20]),
    sw(0, s2 + 2000, ['node', 20], IDLE0),
    sw(0, s2 + 6000, IDLE0, IDLE0),
    sw(1, s2 + 6000, IDLE1, IDLE1),
    sw(1, s3 + 500, IDLE1, ['corral-audit', 12]),
    sw(1, s3 + 2500, ['corral-audit', 12], IDLE1),
    'garbage line',
  ].join('\n');
  const r = attribute(trace, windows, roles);
  assert.equal(r.starts, 7);
  assert.equal(r.medianMs, 1);
  assert.equal(r.slow, 3);
  const by = new Map(r.causes.map((c) => [c.what.split(' (')[0]!.split(':')[0]!, c]));
  const server = by.get("the server's other threads");
  assert.ok(server, JSON.stringify(r.causes));
  assert.equal(server.starts, 1);
  assert.equal(server.ranMs, 4);
  // CPU 1 idle the whole 5 ms, CPU 0 only the 20 µs before the command ran.
  assert.equal(server.idleMs, 5.02);
  // The audit worker apart, by its thread's name.
  const audit = by.get("the server's audit thread");
  assert.ok(audit, JSON.stringify(r.causes));
  assert.equal(audit.starts, 1);
  assert.equal(audit.ranMs, 2);
  const other = r.causes.find((c) => c.what === 'another process: tokio-rt-worker');
  assert.ok(other, JSON.stringify(r.causes));
  assert.equal(other.ranMs, 3);
  // CPU 1 idle 2 ms after the other process, CPU 0 idle 3 ms after the client.
  assert.equal(other.idleMs, 5);
});

test('a slow start during which nothing else ran long is its own work', () => {
  const B = 5_000_000;
  const windows = [
    { t0: B, t1: B + 100 },
    { t0: B + 200, t1: B + 300 },
    { t0: B + 1000, t1: B + 2000 },
  ];
  const trace = [
    sw(0, B - 1, IDLE0, ['node', 10]),
    // A kworker runs 100 µs of the slow start's 1000: under 30 %.
    sw(1, B + 1000, IDLE1, ['kworker/1:2', 77]),
    sw(1, B + 1100, ['kworker/1:2', 77], IDLE1),
    sw(0, B + 2500, ['node', 10], IDLE0),
  ].join('\n');
  const r = attribute(trace, windows, roles);
  assert.equal(r.slow, 1);
  assert.equal(r.causes.length, 1);
  assert.match(r.causes[0]!.what, /^none ran 30 %/);
  assert.equal(r.causes[0]!.ranMs, 0);
});
