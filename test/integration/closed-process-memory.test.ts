/**
 * What a closed process keeps (src/process/managedProcess.ts, forgetLaunch): a session keeps every process it started
 * (protocol.md §5.3), so a closed one must hold only what it is read and described by — its retained output, exit,
 * usage, argv, the names of its environment variables and its launch's sandbox type, summary and guarantees — not the
 * launch spec (the environment's values), its pipes or its cleanup (issue 32: ~2 KB a process, copied by scavenges).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import v8 from 'node:v8';
import vm from 'node:vm';
import type { PreparedLaunch } from '../../src/process/launch.js';
import { ManagedProcess, type ProcessEventSink } from '../../src/process/managedProcess.js';
import { describeProcess, processJson } from '../../src/server/monitor/monitorDescribe.js';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

const BIG = 'v'.repeat(64 * 1024);

/** Whether `ref`'s object is collected: a full GC after each loop turn, for at most 500 turns. */
async function collected(ref: WeakRef<object>): Promise<boolean> {
  for (let turn = 0; turn < 500; turn++) {
    gc();
    if (ref.deref() === undefined) return true;
    await new Promise((resolve) => setImmediate(resolve));
  }
  return false;
}

/** Starts `argv` with a launch whose env holds BIG; resolves at close with the process and weak refs to the launch. */
function runToClose(tty: boolean) {
  let cleanups = 0;
  const refs: { launch?: WeakRef<object>; env?: WeakRef<object> } = {};
  let jsonWhileOpen = '';
  const closed = new Promise<ManagedProcess>((resolve) => {
    const sink: ProcessEventSink = {
      output: () => {},
      // The panel's feed serialises it while it is open (its fixed part is kept until the close).
      exited: (p) => {
        jsonWhileOpen = processJson(p);
      },
      closed: (p) => resolve(p),
    };
    const env = { PATH: '/usr/bin:/bin', CORRAL_BIG_VALUE: BIG, A_NAME: '1' };
    const launch: PreparedLaunch = {
      spec: { file: '/bin/sh', argv: ['sh', '-c', 'echo out; echo err >&2'], env, cwd: '/tmp' },
      sandboxType: 'linuxSeccomp',
      summary: { sandbox: 'test', writableRoots: ['/tmp'] },
      guarantees: { backend: 'landlock', reason: 'fallback', landlockAbi: 4, weaker: [] },
      cleanup: () => void cleanups++,
    };
    refs.launch = new WeakRef(launch);
    refs.env = new WeakRef(env);
    const info = {
      processId: 'p',
      sessionId: 's',
      clientName: 'test',
      argv: launch.spec.argv,
      cwd: '/tmp',
      tty,
      pipeStdin: !tty,
    };
    new ManagedProcess(info, launch, sink, () => false).start();
  });
  return { closed, refs, cleanups: () => cleanups, jsonWhileOpen: () => jsonWhileOpen };
}

for (const tty of [false, true]) {
  test(`a closed ${tty ? 'terminal' : 'pipe'} process lets its launch spec and environment go, and is still read and described`, {
    skip: process.platform === 'win32' && 'POSIX shell',
  }, async () => {
    const r = runToClose(tty);
    const p = await r.closed;
    assert.equal(p.state, 'closed');
    assert.equal(r.cleanups(), 1, 'the launch is cleaned up once');
    // Read and described as before.
    const text = Buffer.concat(p.read(0, null).map((c) => c.data)).toString();
    assert.match(text, /out/);
    assert.deepEqual(p.envNames, ['A_NAME', 'CORRAL_BIG_VALUE', 'PATH']);
    const d = describeProcess(p);
    assert.deepEqual(d.envKeys, ['A_NAME', 'CORRAL_BIG_VALUE', 'PATH']);
    assert.equal(d.sandboxType, 'linuxSeccomp');
    assert.deepEqual(d.sandboxGuarantees, {
      backend: 'landlock',
      reason: 'fallback',
      landlockAbi: 4,
      weaker: [],
    });
    assert.equal(p.launch.summary?.sandbox, 'test');
    // The feed's JSON of the closed process: what describeProcess says, the fixed members as they were while open.
    const json = JSON.parse(processJson(p));
    assert.deepEqual(json, JSON.parse(JSON.stringify(d)));
    const { state: _s, closedAt: _c, lastSeq: _l, ...fixedThen } = JSON.parse(r.jsonWhileOpen());
    for (const [k, v] of Object.entries(fixedThen)) assert.deepEqual(json[k], v, k);
    assert.deepEqual(JSON.parse(processJson(p)), json, 'the same text again once its fixed part is not kept');
    assert.equal(p.write(Buffer.from('x')), tty ? 'accepted' : 'stdinClosed');
    // The process is alive (held here); what it no longer needs is collectable.
    // (node-pty lets its terminal, which holds the options it spawned with, go once its descriptor has closed: a few
    // loop turns after the exit.)
    assert.equal(await collected(r.refs.env!), true, 'the environment (its values) is not kept');
    assert.equal(
      await collected(r.refs.launch!),
      true,
      'the launch (spec, descriptors, cleanup) is not kept',
    );
    assert.equal(p.exitCode, 0);
  });
}
