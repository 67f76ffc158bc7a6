// A monitor subscriber without a browser, in a process of its own (so that its work does not share the bench's
// event loop with the agent it measures): subscribes with the panel token from argv[2] and reads every frame.
// Prints "ready" once subscribed; exits when stdin closes.
import WebSocket from 'ws';

const u = new URL(process.argv[2]);
const token = /token=([^&]+)/.exec(u.hash)[1];
const ws = new WebSocket(`ws://${u.host}/?token=${token}`, { perMessageDeflate: false });
let id = 0;
const pending = new Map();
let frames = 0;
ws.on('message', (d) => {
  frames++;
  const m = /^\{"id":(\d+)/.exec(d.toString('utf8', 0, 24));
  if (m) pending.get(Number(m[1]))?.();
});
const request = (method, params) =>
  new Promise((r) => {
    pending.set(++id, r);
    ws.send(JSON.stringify({ id, method, params }));
  });
ws.once('open', async () => {
  await request('initialize', { clientName: 'lean-subscriber' });
  ws.send('{"method":"initialized","params":{}}');
  await request('monitor/subscribe', { output: 'followed' });
  process.stdout.write('ready\n');
});
process.stdin.on('end', () => {
  process.stderr.write(`lean subscriber: ${frames} frames\n`);
  process.exit(0);
});
process.stdin.resume();
