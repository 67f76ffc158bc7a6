/**
 * What a command used (issue 37, item 1; src/process/usage.ts): read at exit from its own cgroup, else from the
 * rusage of its reap. A memory hog under a 64 MiB limit reports the OOM kill in limitEvents and a peak of the limit's
 * order; a CPU loop of about a second reports its user CPU within 20 %; a pooled cgroup's next command does not
 * inherit the last one's CPU or peaks.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { verifyCommand } from '../../src/audit/cli.js';
import { AuditTrail } from '../../src/audit/trail.js';
import { cgroupHost } from '../../src/process/cgroup.js';
import { ManagedProcess, type ProcessEventSink } from '../../src/process/managedProcess.js';
import { nativeLoadError } from '../../src/process/spawner.js';
import { processUsage } from '../../src/process/usage.js';
import type { ProcessUsage } from '../../src/protocol/exec.js';
import { startTestServer } from '../helpers/server.js';
import { startAuditedServer } from './audit-helpers.js';

const host = cgroupHost();
const noCgroup =
  host.status.enforced.length < 2
    ? `no cgroup with pids and memory limits here: ${host.status.problem}`
    : false;
const noNative = nativeLoadError ? `no native spawner: ${nativeLoadError}` : false;

/** A CPU loop in the child itself: busy until it has used `ms` of CPU (not wall time: the machine is shared). */
const cpuLoop = (ms: number) =>
  `const s=process.cpuUsage();while(true){const u=process.cpuUsage(s);if((u.user+u.system)/1000>=${ms})break;}` +
  `const u=process.cpuUsage();console.log(JSON.stringify(u))`;

/** Runs argv to its close; resolves with its usage and exit code. */
function run(
  argv: string[],
  resources: ConstructorParameters<typeof ManagedProcess>[5] = null,
): Promise<{ usage: ProcessUsage | null; exitCode: number; output: string }> {
  return new Promise((resolve, reject) => {
    let output = '';
    const sink: ProcessEventSink = {
      output: (_p, _seq, _stream, data) => {
        output += data.toString();
      },
      exited: () => {},
      closed: (p) => resolve({ usage: p.usage, exitCode: p.exitCode!, output }),
    };
    const proc = new ManagedProcess(
      {
        processId: 'p',
        sessionId: 's',
        clientName: 'test',
        argv,
        cwd: '/tmp',
        tty: false,
        pipeStdin: false,
      },
      {
        spec: { file: argv[0]!, argv, env: { PATH: '/usr/bin:/bin' }, cwd: '/tmp' },
        sandboxType: 'none',
        cleanup: () => {},
      },
      sink,
      () => false,
      undefined,
      resources,
    );
    try {
      proc.start();
    } catch (e) {
      reject(e);
    }
  });
}

describe('usage from the rusage of the reap (no cgroup)', { skip: noNative }, () => {
  test('a CPU loop of about a second reports its user CPU within 20 %', async () => {
    const r = await run([process.execPath, '-e', cpuLoop(1000)]);
    assert.equal(r.exitCode, 0);
    const own = JSON.parse(r.output) as { user: number; system: number };
    assert.ok(r.usage, 'usage is reported');
    assert.equal(r.usage.source, 'rusage');
    const ownUserMs = own.user / 1000;
    assert.ok(
      Math.abs(r.usage.cpuUserMs! - ownUserMs) <= ownUserMs * 0.2,
      `cpuUserMs ${r.usage.cpuUserMs} against the child's own ${ownUserMs}`,
    );
    assert.ok(r.usage.cpuUserMs! + r.usage.cpuSystemMs! >= 1000 * 0.8);
    assert.ok(r.usage.peakMemoryBytes! > 1024 * 1024, 'max RSS of a node process');
    assert.equal(r.usage.peakPids, null, 'rusage cannot say');
    assert.deepEqual(r.usage.limitEvents, {});
    assert.ok(r.usage.wallMs >= r.usage.cpuUserMs! * 0.5);
  });
});

describe('usage from the command cgroup', { skip: noCgroup || noNative }, () => {
  const limits = { pidsMax: 256, memoryMaxBytes: 64 * 1024 * 1024 };

  test('a memory hog under a 64 MiB limit: limitEvents.memory, peak of the limit order', async () => {
    // Grows by 8 MiB steps, touching every page, until the limit kills it.
    const hog =
      'const a=[];for(let i=0;i<64;i++){const b=Buffer.alloc(8*1024*1024,1);a.push(b);}console.log("survived")';
    const r = await run([process.execPath, '--max-old-space-size=2048', '-e', hog], {
      cgroups: host,
      limits,
    });
    assert.equal(r.exitCode, 137, r.output);
    const u = r.usage!;
    assert.equal(u.source, host.status.version === 'v2' ? 'cgroup-v2' : 'cgroup-v1');
    assert.ok((u.limitEvents.memory ?? 0) >= 1, JSON.stringify(u));
    assert.ok(u.peakMemoryBytes !== null, JSON.stringify(u));
    assert.ok(u.peakMemoryBytes >= 32 * 1024 * 1024, `peak ${u.peakMemoryBytes}`);
    assert.ok(u.peakMemoryBytes <= 80 * 1024 * 1024, `peak ${u.peakMemoryBytes}`);
  });

  test('a CPU loop in a (pooled) cgroup: user CPU within 20 %, and the next command starts from zero', async () => {
    const first = await run([process.execPath, '-e', cpuLoop(600)], { cgroups: host, limits });
    const own = JSON.parse(first.output) as { user: number };
    assert.ok(first.usage);
    const ownUserMs = own.user / 1000;
    assert.ok(
      Math.abs(first.usage.cpuUserMs! - ownUserMs) <= ownUserMs * 0.2,
      `cpuUserMs ${first.usage.cpuUserMs} against ${ownUserMs}`,
    );
    const second = await run(['/bin/true'], { cgroups: host, limits });
    assert.ok(second.usage);
    assert.ok(second.usage.cpuUserMs! < 100, `the pooled cgroup's next command: ${second.usage.cpuUserMs}`);
    if (second.usage.peakMemoryBytes !== null)
      assert.ok(
        second.usage.peakMemoryBytes < 32 * 1024 * 1024,
        `not the hog's peak: ${second.usage.peakMemoryBytes}`,
      );
    assert.deepEqual(second.usage.limitEvents, {});
  });
});

test('process/exited carries usage, and the panel row has it', { skip: noNative }, async () => {
  const ts = await startTestServer();
  try {
    const c = await ts.client();
    await c.request('process/start', {
      processId: 'u1',
      argv: [process.execPath, '-e', cpuLoop(200)],
      cwd: '/tmp',
      env: { PATH: '/usr/bin:/bin' },
      tty: false,
      limits: { memoryMaxBytes: 64 * 1024 * 1024 },
    });
    const events = await c.collect('u1', 20_000);
    const exited = events.find((e) => e.method === 'process/exited')!;
    const usage = exited.params.usage as ProcessUsage;
    assert.ok(usage, JSON.stringify(exited.params));
    assert.ok(['cgroup-v2', 'cgroup-v1', 'rusage'].includes(usage.source));
    assert.ok(usage.cpuUserMs! + usage.cpuSystemMs! >= 150, JSON.stringify(usage));
    if (usage.source !== 'rusage') assert.ok(usage.peakMemoryBytes! > 1024 * 1024, JSON.stringify(usage));
    assert.deepEqual(usage.limitEvents, {});
  } finally {
    await ts.close();
  }
});

test('usage is in the audit row, survives a restart, and the real server chain verifies', {
  skip: noNative,
}, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'corral-usage-'));
  const dbPath = join(dir, 'state', 'audit.db');
  try {
    const ts = await startAuditedServer({ dbPath });
    const c = await ts.agent();
    await c.request('process/start', {
      processId: 'u2',
      argv: [process.execPath, '-e', cpuLoop(150)],
      cwd: '/tmp',
      env: { PATH: '/usr/bin:/bin' },
      tty: false,
    });
    const events = await c.collect('u2', 20_000);
    const live = events.find((e) => e.method === 'process/exited')!.params.usage as ProcessUsage;
    const sid = ts.publicId(c);
    await ts.close();
    // A new trail on the same file: what the History view reads after a restart.
    const trail = await AuditTrail.open({ dbPath });
    try {
      const stored = await trail.process(sid, 'u2');
      assert.deepEqual(stored.process?.usage, live);
    } finally {
      await trail.close();
    }
    const lines: string[] = [];
    const io = { out: { write: (t: string) => lines.push(t) > 0 }, err: { write: () => true } };
    assert.equal(verifyCommand(['--db', dbPath], io as never), 0, lines.join(''));
    assert.match(lines.join(''), /the chain holds/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('processUsage: nothing to say is null; the cgroup wins, rusage fills CPU and io where v1 has none', () => {
  assert.equal(processUsage(5, null, null), null);
  const ru = { userUs: 1_234_567, systemUs: 10_000, maxRssBytes: 4096, inBlocks: 2, outBlocks: 4 };
  const v1 = {
    version: 'v1' as const,
    cpuUserUs: null,
    cpuSystemUs: null,
    peakMemoryBytes: 1000,
    peakPids: null,
    ioReadBytes: null,
    ioWriteBytes: null,
    oomKills: 1,
    pidsRefused: 0,
  };
  assert.deepEqual(processUsage(5, v1, ru), {
    source: 'cgroup-v1',
    wallMs: 5,
    cpuUserMs: 1234.6,
    cpuSystemMs: 10,
    peakMemoryBytes: 1000,
    peakPids: null,
    ioReadBytes: 1024,
    ioWriteBytes: 2048,
    limitEvents: { memory: 1 },
  });
  assert.equal(processUsage(5, v1, null)!.cpuUserMs, null);
});
