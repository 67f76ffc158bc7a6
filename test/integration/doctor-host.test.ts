/**
 * `corral doctor` as the host's `host/doctor` (what the panel's host info shows): the report is there for a panel
 * connection, made with this server's sandbox options, and matches the protocol's schema. The namespace-less
 * environments are in landlock-fallback.test.ts (the CLI there); this one is the host as it runs here.
 */
import assert from 'node:assert/strict';
import { type FSWatcher, mkdtempSync, readdirSync, rmSync, watch } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { type Host, startHost } from '../../src/app/host.js';
import { DoctorReport } from '../../src/protocol/doctor.js';
import { startCli } from '../helpers/cli.js';
import { RpcClient } from '../helpers/client.js';
import { needsSandbox } from '../helpers/native.js';

let host: Host;
before(async () => {
  host = await startHost({
    server: { launcher: { sandbox: { fallback: 'landlock', acceptWeaker: ['proxy-port'] } } },
  });
});
after(() => host?.shutdown());

test('host/doctor is the doctor report, made with the server sandbox options, for panel connections only', {
  skip: needsSandbox,
}, async () => {
  const url = host.execUrl.replace(/\?token=.*/, `?token=${encodeURIComponent(host.tokens.panel)}`);
  const panel = await RpcClient.open(url, 'corral-panel');
  try {
    const d = DoctorReport.parse(await panel.request('host/doctor', {}));
    assert.deepEqual(d.options, { fallback: 'landlock', acceptWeaker: ['proxy-port'] });
    const ids = d.checks.map((c) => c.id);
    for (const id of [
      'bwrap',
      'landlock',
      'seccomp',
      'cgroup',
      'addon',
      'launcher',
      'planning-watch',
      'panel',
    ])
      assert.ok(ids.includes(id), ids.join(' '));
    // Issue 30: the cgroup mounts every sandbox sees read-only, and the pids budget this host enforces.
    assert.match(
      d.checks.find((c) => c.id === 'cgroup-sandbox')?.detail ?? '',
      /read-only in every sandbox|no cgroup/,
    );
    const budget = d.checks.find((c) => c.id === 'pids-budget')?.detail ?? '';
    const info = (await panel.request('host/info', {})) as {
      resourceLimits: { pidsMax: number | null; dirs: string[] };
    };
    const { pidsMax, dirs } = info.resourceLimits;
    if (pidsMax !== null)
      assert.ok(
        budget.includes(`one command: ${pidsMax} by default; enforced as the pids.max of ${dirs.join(', ')}`),
        budget,
      );
    else assert.match(budget, /no pids cgroup/);
    // The cgroup check is the running server's own setup (not a second probe of the system): its directories.
    const cgroup = d.checks.find((c) => c.id === 'cgroup')?.detail ?? '';
    if (dirs.length > 0) {
      assert.match(cgroup, /each command runs in a cgroup of its own/);
      for (const dir of dirs) assert.ok(cgroup.includes(dir), `${cgroup} lacks ${dir}`);
    } else assert.match(cgroup, /commands run without pids and memory limits/);
    const legacy = d.policies.find((p) => p.policy === 'useLegacyLandlock (workspace-write)');
    assert.equal(legacy?.sandbox, 'landlock', JSON.stringify(d.policies));
    // Asked again: the same report (made once per host).
    assert.deepEqual(DoctorReport.parse(await panel.request('host/doctor', {})), d);
    // An agent connection does not get it.
    const agent = await RpcClient.open(host.execUrl);
    try {
      assert.equal((await agent.requestError('host/doctor', {})).code, -32600);
    } finally {
      agent.close();
    }
  } finally {
    panel.close();
  }
});

test('a host stopped while it makes the doctor report leaves no scratch directory behind', {
  skip: needsSandbox,
}, async () => {
  // The report runs sandboxed starts in a scratch workspace under TMPDIR; a host stopped (SIGTERM) in the middle
  // exits before the report's own cleanup runs, and left `corral-doctor-*` there (the dev machine's /tmp had five).
  const tmp = mkdtempSync(join(tmpdir(), 'corral-doctor-exit-'));
  let watcher: FSWatcher | undefined;
  try {
    const env: NodeJS.ProcessEnv = { ...process.env, TMPDIR: tmp };
    delete env.XDG_RUNTIME_DIR;
    const cli = await startCli(['serve', '--no-audit'], { env });
    try {
      const panelUrl = (await cli.lines.next()).value as string;
      const execUrl = /^exec-server: (\S+)/.exec(cli.url!)?.[1];
      const panelToken = /#token=(\S+)$/.exec(panelUrl)?.[1];
      assert.ok(execUrl && panelToken, `${cli.url}\n${panelUrl}`);
      let seen = (): void => {};
      const made = new Promise<void>((resolve) => {
        seen = resolve;
      });
      watcher = watch(tmp, (_e, name) => {
        if (String(name).startsWith('corral-doctor-')) seen();
      });
      const panel = await RpcClient.open(
        execUrl.replace(/\?token=.*/, `?token=${panelToken}`),
        'corral-panel',
      );
      const answer = panel.request('host/doctor', {}).then(
        () => 'answered before the stop',
        (e: Error) => `failed: ${e.message}`,
      );
      // The report's directory exists: stop the host now (or say why the report never began).
      const first = await Promise.race([made.then(() => null), answer]);
      assert.equal(first, null);
      cli.proc.kill('SIGTERM');
      const { code } = await cli.exited;
      panel.close();
      assert.equal(code, 0, cli.stderr());
      assert.deepEqual(readdirSync(tmp), []);
    } finally {
      await cli.stop();
    }
  } finally {
    watcher?.close(); // however the test ends
    rmSync(tmp, { recursive: true, force: true });
  }
});
