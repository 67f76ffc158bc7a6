/**
 * Issue 30, item 7: a fork bomb in one session must not starve the others when the server runs as an unprivileged
 * user whose RLIMIT_NPROC is below a command's pids.max. On 42e683e, with the server as uid 65534 and RLIMIT_NPROC
 * 400, one command's bomb took the uid's last process (its pids.max was 4096) and every other session's
 * process/start failed with EAGAIN. Now all commands together stay below what the uid may have (the commands' parent
 * cgroup's pids.max, or, without a writable cgroup, each child's RLIMIT_NPROC below the server's).
 *
 * The bomb is bounded: it spawns `sleep` until it cannot (the limits stop it), every sleep ends by a deadline, the
 * bomb itself stops at that deadline, the test terminates it, and at the end every process left in its session is
 * SIGKILLed by pid (never anything else of uid 65534: other tests may run servers as that user).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync } from 'node:fs';
import { after, describe, test } from 'node:test';
import type { RpcClient } from '../helpers/client.js';
import { until } from '../helpers/server.js';
import {
  type HostileServer,
  NOBODY,
  PATH,
  PY,
  runAgent,
  scratch,
  startServer,
  whySkip,
} from './sandbox-harness.js';

const NPROC = 400;
const PRLIMIT = '/usr/bin/prlimit';
const BOMB_SECONDS = 25;
const OTHERS = 10;

/** Spawns `sleep` (posix_spawn: no copy of itself) until it cannot, until its deadline; says when it first could not. */
const BOMB = `
import os, sys, time
end = time.time() + float(sys.argv[1])
print('pid', os.getpid(), flush=True)
n, saturated = 0, False
while time.time() < end:
    try:
        os.posix_spawn('/bin/sleep', ['sleep', str(max(1, int(end - time.time())))], {})
        n += 1
    except OSError as e:
        if not saturated:
            print('saturated', n, e.errno, flush=True)
            saturated = True
        time.sleep(0.02)
print('done', n, flush=True)
`;

/** A cgroup of its own for the server, delegated to uid 65534 (v1: in the pids and memory hierarchies), or why not. */
function delegatedCgroup(): { dirs: string[]; entries: string[] } | string {
  const name = `corral-forkbomb-test-${process.pid}`;
  if (existsSync('/sys/fs/cgroup/cgroup.controllers')) {
    const dir = `/sys/fs/cgroup/${name}`;
    const enabled = readFileSync('/sys/fs/cgroup/cgroup.subtree_control', 'utf8');
    if (!/\bpids\b/.test(enabled)) return 'cgroup v2 without the pids controller enabled at the root';
    mkdirSync(dir);
    for (const f of ['', '/cgroup.procs', '/cgroup.subtree_control', '/cgroup.threads'])
      chownSync(`${dir}${f}`, NOBODY, NOBODY);
    return { dirs: [dir], entries: [`${dir}/cgroup.procs`] };
  }
  const dirs: string[] = [];
  for (const c of ['pids', 'memory']) {
    const mount = `/sys/fs/cgroup/${c}`;
    if (!existsSync(`${mount}/cgroup.procs`)) return `no cgroup v1 ${c} hierarchy at ${mount}`;
    dirs.push(`${mount}/${name}`);
  }
  for (const d of dirs) {
    mkdirSync(d);
    execFileSync('chown', ['-R', `${NOBODY}:${NOBODY}`, d]);
  }
  return { dirs, entries: dirs.map((d) => `${d}/cgroup.procs`) };
}

/** Pids of the processes in session `sid`. */
function sessionMembers(sid: number): number[] {
  const out: number[] = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(f[3]) === sid) out.push(Number(p));
    } catch {
      // gone
    }
  }
  return out;
}

function skip(): string | false {
  const why = whySkip('nobody');
  if (why) return why;
  if (!existsSync(PRLIMIT)) return `${PRLIMIT} (util-linux) is missing`;
  return false;
}

for (const mode of ['cgroup', 'no cgroup'] as const) {
  describe(`a fork bomb as uid 65534 with RLIMIT_NPROC ${NPROC} (${mode})`, { skip: skip() }, () => {
    const bombs: number[] = [];
    let cleanupCgroup: (() => Promise<void>) | null = null;
    let server: HostileServer | null = null;
    const s = scratch('nobody');
    after(async () => {
      for (const sid of bombs) for (const pid of sessionMembers(sid)) killQuietly(pid);
      await server?.close();
      await cleanupCgroup?.();
      s.cleanup();
    });

    test('the other sessions keep starting commands while it runs', { timeout: 120_000 }, async (t) => {
      const T = s.mk('tmpdir');
      const W = s.mk('ws');
      let wrap = [PRLIMIT, `--nproc=${NPROC}`, '--'];
      let env: Record<string, string> = { CORRAL_CGROUPS: '0' };
      if (mode === 'cgroup') {
        const cg = delegatedCgroup();
        if (typeof cg === 'string') {
          t.skip(cg);
          return;
        }
        cleanupCgroup = async () => {
          const members = (d: string) =>
            (readFileSync(`${d}/cgroup.procs`, 'utf8').match(/\d+/g) ?? []).map(Number);
          for (const d of cg.dirs) {
            for (const pid of members(d)) killQuietly(pid);
            // A killed process leaves its cgroup when it is reaped: remove the group only once it is empty.
            await until(() => members(d).length === 0, 10_000).catch(() => {});
            removeTree(d);
          }
        };
        const enter = cg.entries.map((_, i) => `echo $$ > "$${i + 1}" && `).join('');
        wrap = [
          '/bin/sh',
          '-c',
          `${enter}shift ${cg.entries.length} && exec "$@"`,
          'sh',
          ...cg.entries,
          ...wrap,
        ];
        env = {};
      }
      // The suite's CORRAL_NATIVE=0 run: the server's children then start through child_process (a bash prologue).
      if (process.env.CORRAL_NATIVE) env.CORRAL_NATIVE = process.env.CORRAL_NATIVE;
      server = await startServer({ who: 'nobody', tmpdir: T, wrap, env });
      const bomber = await server.client();
      const bombId = `fork-bomb-${process.pid}`;
      await bomber.request('process/start', {
        processId: bombId,
        argv: [PY, '-c', BOMB, String(BOMB_SECONDS)],
        cwd: W,
        env: { PATH },
        tty: false,
        arg0: null,
        sandbox: null,
      });
      await until(
        () => /^saturated \d+ 11$/m.test(bomber.output(bombId, 'stdout')),
        BOMB_SECONDS * 1000,
        'the bomb to reach its limit (EAGAIN)',
      );
      bombs.push(Number(/^pid (\d+)$/m.exec(bomber.output(bombId, 'stdout'))?.[1] ?? 0));
      // While it holds all it could get: ten other sessions each start a command.
      const others: (RpcClient & { sessionId: string })[] = [];
      for (let i = 0; i < OTHERS; i++) others.push(await server.client());
      const runs = await Promise.all(
        others.map((c) =>
          runAgent(c, {
            argv: ['/bin/echo', 'ok'],
            cwd: W,
            tty: false,
            sandbox: null,
            timeoutMs: 20_000,
          }).then(
            (r) => r,
            (e: Error) => ({ exitCode: -1, output: `start failed: ${e.message}`, sandboxType: '' }),
          ),
        ),
      );
      assert.ok(
        /^saturated \d+ 11$/m.test(bomber.output(bombId, 'stdout')) &&
          !/^done/m.test(bomber.output(bombId, 'stdout')),
        'the bomb was still holding its processes',
      );
      assert.deepEqual(
        runs.map((r) => `${r.exitCode} ${r.output.trim()}`),
        runs.map(() => '0 ok'),
      );
      await bomber.request('process/terminate', { processId: bombId });
      await bomber.collect(bombId, 30_000);
      if (mode === 'no cgroup') {
        // Every child, pipes and terminal alike, got an RLIMIT_NPROC (soft and hard) below the server's.
        for (const tty of [false, true]) {
          const r = await runAgent(bomber, {
            argv: ['/bin/grep', 'Max processes', '/proc/self/limits'],
            cwd: W,
            tty,
            sandbox: null,
          });
          const [soft, hard] = (/Max processes\s+(\d+)\s+(\d+)/.exec(r.output) ?? []).slice(1).map(Number);
          assert.ok(soft! < NPROC && hard === soft, `${tty ? 'tty' : 'pipes'}: ${r.output}`);
        }
      }
    });
  });
}

function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // gone
  }
}

function removeTree(dir: string): void {
  for (const sub of readdirSync(dir, { withFileTypes: true }))
    if (sub.isDirectory()) removeTree(`${dir}/${sub.name}`);
  try {
    rmdirSync(dir);
  } catch {
    // still busy: the test reports what it found; nothing else uses this name
  }
}
