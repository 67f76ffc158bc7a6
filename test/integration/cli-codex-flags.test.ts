/**
 * codex 0.171's flags through the real command line (issue 35): `corral exec-server --linux-sandbox-pid-namespace
 * inherit` (with -c / --enable / --strict-config beside it) reaches the sandbox of a process/start: a sandboxed
 * command can signal a process of the server's user, and cannot without the flag (isolate, the default).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { startCli } from '../helpers/cli.js';
import { RpcClient } from '../helpers/client.js';
import { needsSandbox } from '../helpers/native.js';
import { fixtureWithVictim, seedParam } from './sandbox-util.js';

const fv = fixtureWithVictim();

async function probe(flags: string[]): Promise<string> {
  const cli = await startCli(['exec-server', '--listen', 'ws://127.0.0.1:0', '--no-audit', ...flags]);
  try {
    const c = await RpcClient.open(cli.url!, 'cli-flags');
    await c.request('process/start', {
      processId: 'p',
      argv: ['/bin/sh', '-c', 'if kill -0 "$VICTIM" 2>/dev/null; then echo seen; else echo unseen; fi'],
      cwd: fv.f.W,
      env: { PATH: '/usr/bin:/bin', VICTIM: String(fv.victim.pid) },
      tty: false,
      arg0: null,
      sandbox: seedParam({ cwd: fv.f.W }),
    });
    await c.collect('p', 20_000);
    const out = c.output('p');
    c.close();
    return out.trim();
  } finally {
    await cli.stop();
  }
}

describe('exec-server with codex 0.171 flags', { skip: needsSandbox }, () => {
  test('--linux-sandbox-pid-namespace inherit reaches the sandbox; the default isolates', async () => {
    assert.equal(
      await probe([
        '--linux-sandbox-pid-namespace',
        'inherit',
        '-c',
        'features.unified_exec=false',
        '--enable',
        'shell_tool',
        '--strict-config',
      ]),
      'seen',
    );
    assert.equal(await probe([]), 'unseen');
  });
});
