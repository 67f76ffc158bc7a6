/**
 * `--linux-sandbox-pid-namespace isolate|inherit` (codex exec-server 0.171, issue 35): with isolate (the default) a
 * bwrap sandbox has a pid namespace of its own and cannot see, let alone signal, a process of the server's; with
 * inherit it shares the server's (Codex's meaning: same-user processes can be signalled) and still runs under its
 * filesystem policy. Real bwrap, a real victim process.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { needsSandbox } from '../helpers/native.js';
import { fixtureWithVictim, run, seed } from './sandbox-util.js';

const fv = fixtureWithVictim();

const probe = [
  'sh',
  '-c',
  'if kill -0 "$VICTIM" 2>/dev/null; then echo seen; else echo unseen; fi; echo "pid1=$(cat /proc/1/comm)"; echo x > "$W/../outside" 2>/dev/null || echo ro',
];

describe('the Linux sandbox pid namespace', { skip: needsSandbox }, () => {
  test('isolate (default): the server’s processes do not exist inside', async () => {
    for (const opts of [{ tmpdir: fv.f.T }, { tmpdir: fv.f.T, pidNamespace: 'isolate' as const }]) {
      const r = await run(seed({ cwd: fv.f.W }), probe, {
        cwd: fv.f.W,
        env: { VICTIM: String(fv.victim.pid), W: fv.f.W },
        opts,
      });
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /^unseen$/m);
      assert.doesNotMatch(r.stdout, /pid1=systemd|pid1=init/);
      assert.ok(r.prepared.spec.argv.includes('--unshare-pid'));
      assert.ok(r.prepared.spec.argv.includes('--proc') || !r.prepared.spec.argv.includes('/proc'));
    }
  });

  test('inherit: the sandbox shares the server’s pid namespace and can signal its processes', async () => {
    const r = await run(seed({ cwd: fv.f.W }), probe, {
      cwd: fv.f.W,
      env: { VICTIM: String(fv.victim.pid), W: fv.f.W },
      opts: { tmpdir: fv.f.T, pidNamespace: 'inherit' },
    });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^seen$/m);
    assert.ok(!r.prepared.spec.argv.includes('--unshare-pid'));
    assert.ok(!r.prepared.spec.argv.includes('--proc'));
    // Still a sandbox: the filesystem policy holds (a write outside the workspace fails).
    assert.match(r.stdout, /^ro$/m);
    assert.ok(!existsSync(join(fv.f.W, '..', 'outside')));
    assert.equal(r.prepared.summary?.pidNamespace, 'inherit');
  });
});
