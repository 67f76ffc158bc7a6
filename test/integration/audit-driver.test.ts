// Corral whose SQLite driver does not load (a binding built for another Node ABI, as in Electron without a rebuild,
// or better-sqlite3 missing): the server still starts, without an audit trail, warns once why and how to fix it, and
// the panel's audit/* say so; `--audit-db` given explicitly fails naming the flag; the export says why.
import assert from 'node:assert/strict';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { RpcClient } from '../helpers/client.js';
import { tempDir, until } from '../helpers/server.js';
import { type BrokenDriver, brokenSqliteInstall, OTHER_ABI, OUR_ABI, runCli } from './audit-driver-rig.js';

const FIX: Record<BrokenDriver, RegExp> = {
  'other-abi': new RegExp(
    `NODE_MODULE_VERSION ${OTHER_ABI}\\b.*to fix it, rebuild it for this Node \\(ABI ${OUR_ABI}\\): \`npm rebuild better-sqlite3\``,
  ),
  missing:
    /Cannot find module 'better-sqlite3'.*to fix it, install Corral's dependencies \(`npm ci` in its directory\)/,
};

describe('without a loadable SQLite driver', () => {
  const cleanups: (() => void)[] = [];
  after(() => {
    for (const c of cleanups) c();
  });
  const install = (kind: BrokenDriver) => {
    const i = brokenSqliteInstall(kind);
    cleanups.push(i.cleanup);
    return i.cli;
  };
  const state = () => {
    const d = tempDir('corral-nosqlite-state-');
    cleanups.push(d.cleanup);
    return join(d.path, 'xdg-state');
  };

  for (const kind of ['other-abi', 'missing'] as const) {
    test(`${kind}: serve starts without a trail, warns once why and how to fix it; audit/info and audit/query say so`, async () => {
      const cli = install(kind);
      const xdg = state();
      const serve = runCli(cli, ['serve'], { ...process.env, XDG_STATE_HOME: xdg });
      try {
        await until(
          () => serve.stdout.some((l) => l.startsWith('panel: ')) || serve.child.exitCode !== null,
          20_000,
          'serve to print its URLs',
        );
        assert.ok(serve.child.exitCode === null, `serve exited: ${serve.stderr()}`);
        const warnings = serve.stderr().match(/audit trail unavailable[^\n]*/g) ?? [];
        assert.equal(warnings.length, 1, serve.stderr());
        assert.match(warnings[0]!, /nothing is stored: better-sqlite3 cannot be loaded \(/);
        assert.match(warnings[0]!, FIX[kind]);
        assert.doesNotMatch(serve.stderr(), /audit trail: \//, 'no database is announced');

        // An agent still runs commands.
        const exec = new URL(serve.stdout.find((l) => l.startsWith('exec-server: '))!.slice(13));
        const agent = await RpcClient.open(exec.href, 'agent');
        await agent.request('process/start', {
          processId: 'p',
          argv: ['/bin/echo', 'still-works'],
          cwd: '/tmp',
          env: {},
          tty: false,
        });
        await agent.collect('p');
        assert.match(agent.output('p'), /still-works/);
        agent.close();

        const panelUrl = new URL(serve.stdout.find((l) => l.startsWith('panel: '))!.slice(7));
        const token = new URLSearchParams(panelUrl.hash.slice(1)).get('token')!;
        const panel = await RpcClient.open(
          `ws://${panelUrl.host}/?token=${encodeURIComponent(token)}`,
          'panel',
        );
        const info = await panel.request<{
          enabled: boolean;
          path: string | null;
          unavailable: string | null;
        }>('audit/info', {});
        assert.equal(info.enabled, false);
        assert.match(info.unavailable ?? '', FIX[kind]);
        const e = await panel.requestError('audit/query', {});
        assert.equal(e.code, -32600);
        assert.match(e.message, /audit trail is unavailable on this server: better-sqlite3 cannot be loaded/);
        assert.match(e.message, FIX[kind]);
        panel.close();
      } finally {
        await serve.stop();
      }
      assert.equal(existsSync(xdg), false, 'no directory or file was created for a database');
    });
  }

  test('--audit-db given explicitly: exec-server and serve refuse to start, naming the flag and why', async () => {
    const cli = install('other-abi');
    const xdg = state();
    const db = join(xdg, 'mine', 'audit.db');
    for (const command of [['exec-server', '--listen', 'ws://127.0.0.1:0'], ['serve']]) {
      const r = runCli(cli, [...command, '--audit-db', db], { ...process.env, XDG_STATE_HOME: xdg });
      assert.equal(await r.exit, 1, `${command[0]}: ${r.stderr()}`);
      assert.match(
        r.stderr(),
        new RegExp(`--audit-db ${db}: the audit trail is unavailable: better-sqlite3 cannot be loaded`),
      );
      assert.match(r.stderr(), FIX['other-abi']);
      assert.deepEqual(r.stdout, [], `${command[0]} printed no URL`);
    }
    assert.equal(existsSync(xdg), false, 'nothing was created');
  });

  test('corral audit export says why it cannot read the database', async () => {
    const cli = install('missing');
    const d = tempDir('corral-nosqlite-export-');
    cleanups.push(d.cleanup);
    const db = join(d.path, 'audit.db');
    // Any file will do: the driver fails before the file is looked at.
    writeFileSync(db, '');
    const r = runCli(cli, ['audit', 'export', '--db', db, '--format', 'jsonl'], process.env);
    assert.equal(await r.exit, 1);
    assert.match(r.stderr(), /^corral: better-sqlite3 cannot be loaded/m);
    assert.match(r.stderr(), FIX.missing);
  });
});
