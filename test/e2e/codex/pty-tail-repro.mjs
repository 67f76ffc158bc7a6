#!/usr/bin/env node
// Diagnosis aid (not a test): does the last PTY output of a process that exits right after writing reach the client?
// It starts `<cli> exec-server`, then N times: a tty process `read line; echo "got:$line"`, writes "hi\n", and waits
// for process/closed. A run whose pty output lacks "got:hi" lost its tail; 0.169 has no process/read to recover it.
//   node test/e2e/codex/pty-tail-repro.mjs dist/cli.js 300
//   CODEX_HOME=<not under /tmp> node test/e2e/codex/pty-tail-repro.mjs <a real codex binary> 300   (for comparison)
import { spawn } from 'node:child_process';
import WebSocket from 'ws';

const [cli = 'dist/cli.js', count = '200'] = process.argv.slice(2);
const N = Number(count);
// A .js file runs under node; anything else is run as is.
const [cmd, args] = cli.endsWith('.js') ? [process.execPath, [cli]] : [cli, []];
const server = spawn(cmd, [...args, 'exec-server', '--listen', 'ws://127.0.0.1:0'], {
  stdio: ['ignore', 'pipe', 'ignore'],
});
const url = await new Promise((resolve) => {
  let out = '';
  server.stdout.on('data', (d) => {
    out += d;
    const m = /ws:\/\/\S+/.exec(out);
    if (m) resolve(m[0]);
  });
});
const ws = new WebSocket(url, { perMessageDeflate: false });
await new Promise((resolve) => ws.once('open', resolve));
let nextId = 0;
const pending = new Map();
const notes = [];
const closedWaiters = new Map();
ws.on('message', (d) => {
  const m = JSON.parse(String(d));
  if (m.id !== undefined && pending.has(m.id)) {
    pending.get(m.id)(m);
    pending.delete(m.id);
    return;
  }
  if (!m.method) return;
  notes.push(m);
  if (m.method === 'process/closed') closedWaiters.get(m.params.processId)?.();
});
const call = (method, params) =>
  new Promise((resolve) => {
    const id = ++nextId;
    pending.set(id, resolve);
    ws.send(JSON.stringify({ id, method, params }));
  });
const of = (pid) => notes.filter((n) => n.params.processId === pid);
const show = (pid) =>
  of(pid)
    .map(
      (n) =>
        `${n.method}#${n.params.seq}${n.params.chunk ? JSON.stringify(Buffer.from(n.params.chunk, 'base64').toString()) : ''}`,
    )
    .join(' ');

await call('initialize', { clientName: 'pty-tail-repro', resumeSessionId: null });
ws.send(JSON.stringify({ method: 'initialized', params: {} }));
let lost = 0;
for (let k = 0; k < N; k++) {
  const pid = `p${k}`;
  const closed = new Promise((resolve) => closedWaiters.set(pid, resolve));
  const started = await call('process/start', {
    processId: pid,
    argv: ['/bin/bash', '-c', 'read line; echo "got:$line"'],
    cwd: 'file:///',
    env: { PATH: '/usr/bin:/bin' },
    tty: true,
    pipeStdin: false,
    arg0: null,
  });
  if (started.error) {
    console.log(`process/start failed: ${JSON.stringify(started.error)}`);
    break;
  }
  const written = Date.now();
  await call('process/write', {
    processId: pid,
    chunk: Buffer.from('hi\n').toString('base64'),
    writeId: '1',
  });
  await closed;
  const ms = Date.now() - written;
  const text = of(pid)
    .filter((n) => n.method === 'process/output')
    .map((n) => Buffer.from(n.params.chunk, 'base64').toString())
    .join('');
  if (!text.includes('got:hi')) {
    lost++;
    console.log(`LOST run ${k} (write→closed ${ms} ms): ${show(pid)}`);
  }
}
console.log(`${lost}/${N} runs lost the pty output written just before exit`);
ws.close();
server.kill();
