/**
 * `corral selftest` (issue 37, item 5; src/selftest/selftest.ts) on this machine: every case of the battery holds or
 * does not apply (with a reason), the scratch directory is gone afterwards, loopback only; and with a known hole
 * re-introduced (the case's protection taken away: `hole`), the matching case reports broken and the command exits 1.
 * The old code (cca01b7) had no selftest: every test here fails there.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { type FSWatcher, mkdtempSync, readdirSync, readFileSync, rmSync, watch } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { selftestPointer } from '../../src/selftest/lastResult.js';
import { CASE_NAMES, runSelftest, selftestCommand } from '../../src/selftest/selftest.js';
import { CORRAL_BIN, ROOT } from '../helpers/cli.js';
import { needsSandbox } from '../helpers/native.js';

const scratches = () => readdirSync(tmpdir()).filter((n) => n.startsWith('corral-selftest-'));

describe('corral selftest', { skip: needsSandbox }, () => {
  test('on this machine: every case held or not applicable with a reason; nothing left behind', async () => {
    const before = new Set(scratches());
    const r = await runSelftest();
    assert.deepEqual(
      r.cases.map((c) => c.name),
      [...CASE_NAMES],
    );
    for (const c of r.cases) {
      assert.ok(c.status === 'held' || c.status === 'not-applicable', `${c.name}: ${c.status}: ${c.detail}`);
      assert.ok(c.detail.length > 0, `${c.name} says why`);
    }
    assert.equal(r.ok, true);
    assert.deepEqual(
      scratches().filter((n) => !before.has(n)),
      [],
      'the scratch directory is removed',
    );
  });

  for (const hole of [
    'write-outside-workspace',
    'loopback-spellings',
    'dns-to-host',
    'leave-cgroup',
    'socks-nul-oversize-names',
    'relay-in-sandbox',
    'fs-races',
  ] as const) {
    test(`a hole re-introduced (${hole}): that case reports broken, the command exits 1`, async () => {
      const dir = mkdtempSync(join(tmpdir(), 'corral-selftest-test-'));
      try {
        let out = '';
        const code = await selftestCommand({
          json: true,
          sandbox: {},
          hole,
          out: {
            write: (s: string) => {
              out += s;
              return true;
            },
          } as never,
          savePath: join(dir, 'selftest.json'),
        });
        const r = JSON.parse(out) as { ok: boolean; cases: { name: string; status: string }[] };
        const c = r.cases.find((x) => x.name === hole)!;
        if (c.status === 'not-applicable') return; // e.g. no cgroups here: nothing to break
        assert.equal(c.status, 'broken', JSON.stringify(c));
        assert.equal(code, 1);
        assert.equal(r.ok, false);
        for (const other of r.cases.filter((x) => x.name !== hole))
          assert.notEqual(other.status, 'broken', `${other.name} stays held`);
        // The last result is kept for the panel.
        assert.equal(
          (JSON.parse(readFileSync(join(dir, 'selftest.json'), 'utf8')) as { ok: boolean }).ok,
          false,
        );
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }

  test('corral selftest --json through the CLI: exit 0, one JSON report', () => {
    const state = mkdtempSync(join(tmpdir(), 'corral-selftest-state-'));
    try {
      const r = spawnSync(process.execPath, [CORRAL_BIN, 'selftest', '--json'], {
        cwd: ROOT,
        encoding: 'utf8',
        env: { ...process.env, XDG_STATE_HOME: state },
        timeout: 120_000,
      });
      assert.equal(r.status, 0, r.stderr + r.stdout);
      const report = JSON.parse(r.stdout) as { ok: boolean; cases: unknown[] };
      assert.equal(report.ok, true);
      assert.equal(report.cases.length, CASE_NAMES.length);
      assert.ok(readFileSync(join(state, 'corral', 'selftest.json'), 'utf8').includes('"ok":true'));
    } finally {
      rmSync(state, { recursive: true, force: true });
    }
  });
});

test('corral selftest and corral doctor interrupted in the middle (SIGINT, SIGTERM): 128 + the signal, no scratch left', {
  skip: needsSandbox,
}, async () => {
  for (const [command, signal, code] of [
    ['selftest', 'SIGINT', 130],
    ['doctor', 'SIGTERM', 143],
  ] as const) {
    const tmp = mkdtempSync(join(tmpdir(), 'corral-probe-interrupted-'));
    let watcher: FSWatcher | undefined;
    try {
      const env: NodeJS.ProcessEnv = { ...process.env, TMPDIR: tmp, XDG_STATE_HOME: join(tmp, 'state') };
      delete env.XDG_RUNTIME_DIR;
      let seen = (): void => {};
      const made = new Promise<void>((resolve) => {
        seen = resolve;
      });
      watcher = watch(tmp, (_e, name) => {
        if (String(name).startsWith(`corral-${command}-`)) seen();
      });
      const child = spawn(process.execPath, [CORRAL_BIN, command, '--json'], {
        cwd: ROOT,
        env,
        stdio: 'ignore',
      });
      const exited = new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
      // The probe's scratch exists: interrupt it now (or the probe ended first, which the code below reports).
      const first = await Promise.race([made.then(() => 'made'), exited.then((c) => `exited ${c} first`)]);
      assert.equal(first, 'made', command);
      child.kill(signal);
      assert.equal(await exited, code, `${command} on ${signal}`);
      assert.deepEqual(
        readdirSync(tmp).filter((n) => n.startsWith('corral-')),
        [],
        `${command}: its scratch is left`,
      );
    } finally {
      watcher?.close(); // however the test ends
      rmSync(tmp, { recursive: true, force: true });
    }
  }
});

test('corral doctor points at the last self-test result, or says it never ran', () => {
  assert.match(selftestPointer(null), /never run here/);
  const r = {
    time: '2026-12-05T00:00:00.000Z',
    ok: false,
    cases: [{ name: 'loopback-spellings', status: 'broken' as const, detail: 'x' }],
  };
  assert.match(selftestPointer(r), /BROKEN at 2026-12-05T00:00:00.000Z: loopback-spellings/);
  assert.match(selftestPointer({ ...r, ok: true, cases: [] }), /held at/);
});
