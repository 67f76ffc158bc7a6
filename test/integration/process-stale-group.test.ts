/**
 * A closed process's pid is free for reuse (pid_max is 32768 on many systems): killing a session (expiry, shutdown)
 * must never signal the process group of a process that has closed, or it kills whichever process group now has that
 * number. Found when a benchmark's server shutdown (thousands of closed processes in one session) SIGKILLed unrelated
 * shells on the machine. The pid is reused on purpose here: as root, /proc/sys/kernel/ns_last_pid picks the next pid.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';
import { alive, startTestServer, until } from '../helpers/server.js';

const PATH = '/usr/local/bin:/usr/bin:/bin';

/** A new process group led by a process with exactly this pid (as root, through ns_last_pid), or null. */
function groupWithPid(pid: number): ChildProcess | null {
  for (let i = 0; i < 50; i++) {
    try {
      writeFileSync('/proc/sys/kernel/ns_last_pid', String(pid - 1));
    } catch {
      return null;
    }
    const c = spawn('/bin/sleep', ['300'], { detached: true, stdio: 'ignore' });
    if (c.pid === pid) return c;
    c.kill('SIGKILL'); // another process took it first: try again
  }
  return null;
}

test('killing a session never signals the process group of a process that has closed (its pid may be reused)', {
  skip:
    process.getuid?.() !== 0 || !existsSync('/proc/sys/kernel/ns_last_pid')
      ? 'needs root and /proc/sys/kernel/ns_last_pid to reuse a pid on purpose'
      : false,
}, async (t) => {
  const ts = await startTestServer();
  t.after(() => ts.close());
  const c = await ts.client();
  await c.request('process/start', {
    processId: 'done',
    argv: ['/bin/true'],
    cwd: '/tmp',
    env: { PATH },
    tty: false,
  });
  await c.collect('done');
  const pid = ts.sessionOf(c).get('done')!.pid;
  const other = groupWithPid(pid);
  if (!other) {
    t.skip(`could not get pid ${pid} again (a busy machine)`);
    return;
  }
  t.after(() => {
    if (other.exitCode === null) other.kill('SIGKILL');
  });
  assert.equal(other.pid, pid);
  // It leads its own process group once its setsid has run.
  const pgid = () => Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[2]);
  await until(() => pgid() === pid, 5000, 'the other process to lead its own group');
  ts.sessionOf(c).killAll(); // what expiry and shutdown do
  // A SIGKILL sent to it shows at once: it is gone, or the signal is pending (it has not run since).
  const pending = () => {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    return ['SigPnd', 'ShdPnd'].some(
      (k) => (BigInt(`0x${new RegExp(`^${k}:\\s+(\\S+)`, 'm').exec(status)?.[1] ?? '0'}`) >> 8n) & 1n,
    );
  };
  assert.ok(
    alive(pid) && !pending(),
    'an unrelated process group that reused the pid of a closed process was killed',
  );
  await ts.close();
  assert.ok(alive(pid) && !pending(), 'killed at shutdown');
});
