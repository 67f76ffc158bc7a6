// `corral serve` and `npm start` as a user runs them: real processes, real sockets.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { RpcClient } from '../helpers/client.js';
import { alive, until } from '../helpers/server.js';
import { ensureBuilt, ROOT } from './harness.js';

interface Running {
  child: ChildProcess;
  stdout: string[];
  stderr: string[];
  exit: Promise<number | null>;
}

function run(args: string[]): Running {
  const child = spawn(process.execPath, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  const stdout: string[] = [];
  const stderr: string[] = [];
  const lines = (into: string[]) => {
    let buf = '';
    return (d: Buffer) => {
      buf += d.toString();
      const parts = buf.split('\n');
      buf = parts.pop()!;
      into.push(...parts);
    };
  };
  child.stdout!.on('data', lines(stdout));
  child.stderr!.on('data', lines(stderr));
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, stdout, stderr, exit };
}

describe('serve and start', () => {
  const started: Running[] = [];
  after(() => {
    for (const r of started) if (r.child.exitCode === null) r.child.kill('SIGKILL');
  });

  test('`corral serve` prints the exec-server and panel URLs, serves both, and kills children on SIGTERM', async () => {
    ensureBuilt();
    const r = run([join(ROOT, 'bin', 'corral.js'), 'serve']);
    started.push(r);
    await until(() => r.stdout.length >= 2, 15_000, 'serve output');
    const [execLine, panelLine] = r.stdout;
    const execUrl = /^exec-server: (ws:\/\/127\.0\.0\.1:\d+\/\?token=[\w-]+)$/.exec(execLine!)?.[1];
    const panelUrl = /^panel: (http:\/\/127\.0\.0\.1:\d+\/panel\/#token=[\w-]+)$/.exec(panelLine!)?.[1];
    assert.ok(execUrl, execLine);
    assert.ok(panelUrl, panelLine);
    assert.equal(new URL(execUrl).port, new URL(panelUrl).port, 'one port for both');
    // Two credentials: the agent's token is not the panel's.
    const panelToken = new URL(panelUrl).hash.replace('#token=', '');
    assert.notEqual(new URL(execUrl).searchParams.get('token'), panelToken);

    const page = await fetch(panelUrl.replace(/#.*/, ''));
    assert.equal(page.status, 200);
    assert.match(await page.text(), /<script defer src="app.js">/);
    // Without the token: 401.
    await assert.rejects(RpcClient.connect(execUrl.replace(/\?token=.*/, '')), /HTTP 401/);

    const c = await RpcClient.open(execUrl, 'serve-test');
    await c.request('process/start', {
      processId: 'k',
      argv: ['/bin/sleep', '300'],
      cwd: '/tmp',
      env: {},
      tty: false,
    });
    const panel = await RpcClient.open(execUrl.replace(/\?token=.*/, `?token=${panelToken}`), 'serve-panel');
    const snap = (await panel.request('monitor/subscribe', {})) as {
      processes: { processId: string; pid: number }[];
    };
    const pid = snap.processes.find((p) => p.processId === 'k')!.pid;
    assert.ok(alive(pid));
    r.child.kill('SIGTERM');
    assert.equal(await r.exit, 0);
    assert.equal(alive(pid), false, 'the child died with the host');
  });

  test('`npm start` without the Electron binary says so in one line and serves the panel', async () => {
    const r = run([join(ROOT, 'scripts', 'start.mjs')]);
    started.push(r);
    await until(() => r.stdout.some((l) => l.startsWith('panel: ')), 15_000, 'panel URL');
    const notes = r.stderr.filter((l) => l.includes('Electron'));
    assert.equal(notes.length, 1, r.stderr.join('\n'));
    assert.match(notes[0]!, /^corral: the Electron binary is not installed .*; starting the headless host/);
    const panelUrl = r.stdout.find((l) => l.startsWith('panel: '))!.slice('panel: '.length);
    assert.equal((await fetch(panelUrl.replace(/#.*/, ''))).status, 200);
    r.child.kill('SIGTERM');
    assert.equal(await r.exit, 0);
  });

  test('`npm run desktop` without the Electron binary fails in one line', async () => {
    const r = run([join(ROOT, 'scripts', 'start.mjs'), '--desktop']);
    started.push(r);
    assert.equal(await r.exit, 1);
    assert.equal(r.stderr.filter((l) => l.trim() !== '').length, 1, r.stderr.join('\n'));
    assert.match(r.stderr[0]!, /^corral: cannot start the desktop app: the Electron binary is not installed/);
  });
});
