/**
 * Nothing outlives the server (README, "Nothing outlives the server"): one server runs every kind of child at once —
 * a pipe process with a background grandchild, `setsid` and `nohup` descendants of a pipe process, a tty process with
 * `nohup` and `setsid` descendants, and sandboxed pipe and tty processes with `setsid` descendants — and is SIGKILLed.
 * Every one of those processes must be gone soon after, with cgroups (the group watchdog empties them) and without
 * (CORRAL_CGROUPS=0: the group watchdog kills the registered process groups; a sandbox's pid namespace goes with its
 * outer bwrap). The watchdog is the addon's: without it (CORRAL_NATIVE=0) nothing can act after a SIGKILL, and the
 * server says so at start.
 */
import assert from 'node:assert/strict';
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { groupWatchdog, groupWatchdogAbsence } from '../../src/platform/watchdog.js';
import { cgroupHost } from '../../src/process/cgroup.js';
import { CORRAL_BIN } from '../helpers/cli.js';
import { RpcClient } from '../helpers/client.js';
import { until } from '../helpers/server.js';
import { pidsMatching, seed, workspaceEntries } from './sandbox-util.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PATH = '/usr/local/bin:/usr/bin:/bin';
const noWatchdog = groupWatchdog
  ? false
  : `needs the group watchdog of the native addon: ${groupWatchdogAbsence}`;
const noCgroups =
  cgroupHost().status.enforced.length < 2 ? `no usable cgroups here: ${cgroupHost().status.problem}` : false;
const noBwrap = existsSync('/usr/bin/bwrap') ? false : 'bubblewrap is not installed';

const servers: ChildProcessWithoutNullStreams[] = [];
after(() => {
  for (const s of servers) if (s.exitCode === null && s.signalCode === null) s.kill('SIGKILL');
});

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    return '';
  }
}

/** The sleep processes themselves (not the shells or bwraps whose command lines hold the same text). */
const sleepsOf = (needle: string) => pidsMatching(needle).filter((p) => cmdline(p).startsWith(needle));

async function startServer(env: NodeJS.ProcessEnv) {
  const proc = spawn(process.execPath, [CORRAL_BIN, 'exec-server', '--listen', 'ws://127.0.0.1:0'], {
    cwd: ROOT,
    env,
    stdio: 'pipe',
  });
  servers.push(proc);
  let err = '';
  proc.stderr.on('data', (d) => {
    err += d;
  });
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const first = await createInterface({ input: proc.stdout })[Symbol.asyncIterator]().next();
  if (first.done) throw new Error(`the server printed nothing: ${err}`);
  return { proc, url: first.value as string, exited };
}

describe('a SIGKILLed server takes every kind of child along', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync('/var/tmp/corral-death-it-');
    mkdirSync(join(dir, 'ws'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  for (const cgroups of ['1', '0'] as const) {
    it(`pipes, setsid and nohup descendants, tty, sandboxed pipe and tty (CORRAL_CGROUPS=${cgroups})`, {
      skip: noWatchdog || noBwrap || (cgroups === '1' && noCgroups),
    }, async () => {
      const server = await startServer({ ...process.env, CORRAL_CGROUPS: cgroups, TMPDIR: dir });
      const c = await RpcClient.open(server.url);
      const ws = join(dir, 'ws');
      const sandbox = seed({
        cwd: ws,
        entries: workspaceEntries(),
      });
      // A distinct sleep duration per process, so that each one is found by its command line.
      const tag = `9${process.pid % 1000}${cgroups}`;
      // Without cgroups a descendant of an unsandboxed command that leaves its process group and session (setsid) is
      // found by nothing: only the cgroup knows it (README). Sandboxed ones are in the sandbox's pid namespace.
      const setsidEscape = (n: string) => (cgroups === '1' ? `setsid sleep ${tag}${n} & ` : '');
      const kinds: [string, string, boolean, object][] = [
        ['pipe', `sleep ${tag}01 & wait`, false, {}],
        ['pipe-escapes', `${setsidEscape('02')}nohup sleep ${tag}03 >/dev/null 2>&1 & wait`, false, {}],
        ['tty', `nohup sleep ${tag}04 >/dev/null 2>&1 & ${setsidEscape('05')}wait`, true, {}],
        ['sandboxed', `sleep ${tag}06 & setsid sleep ${tag}07 & wait`, false, { sandbox }],
        [
          'sandboxed-tty',
          `nohup sleep ${tag}08 >/dev/null 2>&1 & setsid sleep ${tag}09 & wait`,
          true,
          { sandbox },
        ],
      ];
      const sleeps = cgroups === '1' ? 9 : 7;
      for (const [processId, script, tty, extra] of kinds) {
        await c.request('process/start', {
          processId,
          argv: ['/bin/sh', '-c', script],
          cwd: ws,
          env: { PATH },
          tty,
          ...extra,
        });
      }
      const needle = `sleep ${tag}`;
      await until(() => sleepsOf(needle).length === sleeps, 10_000, 'every sleep to run');
      try {
        server.proc.kill('SIGKILL');
        await server.exited;
        await until(
          () => pidsMatching(needle).length === 0,
          5000,
          'every descendant to die with the server',
        ).catch((e) => {
          const left = pidsMatching(needle).map(cmdline);
          throw new Error(`${e.message}: ${JSON.stringify(left)}`);
        });
      } finally {
        for (const p of pidsMatching(needle)) process.kill(p, 'SIGKILL');
      }
      assert.deepEqual(pidsMatching(needle), []);
      c.close();
    });
  }
});
