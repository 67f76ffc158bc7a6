// issue 33, item 4: `arg0` inside a Linux sandbox. bubblewrap below 0.9 (Debian's is 0.8) has no --argv0, so a
// command that dispatches on argv[0] (busybox-style tools, Codex's apply_patch trick) saw its path instead: the
// in-sandbox exec shim (the sandbox launcher, `--argv0 NAME`) now execs it under the arg0 asked for. Under bwrap with
// pipes and with a PTY, and under the Landlock backend (useLegacyLandlock) with pipes and with a PTY (through the
// launcher, which takes --argv0 too).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { RpcClient } from '../helpers/client.js';
import { needsSandbox } from '../helpers/native.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { type Fixture, fixture, PATH, seedParam, special } from './sandbox-util.js';

let f: Fixture;
let ts: TestServer;
let c: RpcClient & { sessionId: string };
let n = 0;
before(async () => {
  f = await fixture();
  ts = await startTestServer({ launcher: { sandbox: { tmpdir: f.T } } });
  c = await ts.client('arg0');
});
after(async () => {
  await ts.close();
  await f.close();
});

async function arg0Of(o: { tty: boolean; landlock: boolean; arg0: string | null }): Promise<string> {
  const processId = `arg0-${++n}`;
  await c.request('process/start', {
    processId,
    argv: ['/bin/sh', '-c', 'echo "arg0=$0"'],
    cwd: f.W,
    env: { PATH, TERM: 'dumb' },
    tty: o.tty,
    arg0: o.arg0,
    sandbox: seedParam({
      cwd: f.W,
      entries: [special('root', 'read'), special('current_working_directory', 'write')],
      useLegacyLandlock: o.landlock,
    }),
  });
  const events = await c.collect(processId, 20_000);
  const exited = events.find((e) => e.method === 'process/exited');
  const out = c.output(processId, o.tty ? 'pty' : 'stdout') + c.output(processId, 'stderr');
  assert.equal(exited?.params.exitCode, 0, out);
  return /arg0=(\S*)/.exec(out.replace(/\r/g, ''))?.[1] ?? out;
}

describe('arg0 in a Linux sandbox', { skip: needsSandbox }, () => {
  for (const landlock of [false, true]) {
    for (const tty of [false, true]) {
      test(`${landlock ? 'Landlock' : 'bwrap'}, ${tty ? 'PTY' : 'pipes'}: a custom arg0 is the command's argv[0]`, async () => {
        assert.equal(await arg0Of({ tty, landlock, arg0: 'apply_patch' }), 'apply_patch');
        // Without one, the program as given.
        assert.equal(await arg0Of({ tty, landlock, arg0: null }), '/bin/sh');
      });
    }
  }
});
