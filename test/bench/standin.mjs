// The stand-in server of the hot-path bench (hotpath.bench.ts): speaks enough of the exec-server protocol for the
// bench client and spawns nothing, so its figures are what the client and the loopback socket can take. It answers
// initialize and process/start; `head -c N …` gets N bytes of zeros as process/output notifications of 8192 bytes
// (Corral's largest chunk), framed as Corral frames them, with the same backpressure (pause above 8 MiB queued);
// then process/exited and process/closed. Prints its URL on stdout.
import { WebSocketServer } from 'ws';

const CHUNK = 8192;
const HIGH_WATER = 8 << 20;
const zeros = Buffer.alloc(CHUNK).toString('base64');
const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
wss.on('listening', () => process.stdout.write(`ws://127.0.0.1:${wss.address().port}\n`));
wss.on('connection', (ws) => {
  ws.on('message', async (data) => {
    const m = JSON.parse(data.toString());
    if (m.id === undefined) return;
    if (m.method !== 'process/start') {
      ws.send(
        JSON.stringify({ id: m.id, result: m.method === 'initialize' ? { sessionId: 'standin' } : {} }),
      );
      return;
    }
    const { processId, argv } = m.params;
    ws.send(JSON.stringify({ id: m.id, result: { processId } }));
    const c = argv.indexOf('-c');
    const bytes = argv[0]?.endsWith('head') && c > 0 ? Number(argv[c + 1]) : 0;
    const head = `{"method":"process/output","params":{"processId":${JSON.stringify(processId)},"seq":`;
    let seq = 0;
    for (let sent = 0; sent < bytes; sent += CHUNK) {
      const n = Math.min(CHUNK, bytes - sent);
      const chunk = n === CHUNK ? zeros : Buffer.alloc(n).toString('base64');
      const frame = `${head}${++seq},"stream":"stdout","chunk":"${chunk}"}}`;
      // Above the high water mark, wait until this frame is on the socket (the queue ahead of it has drained).
      if (ws.bufferedAmount < HIGH_WATER) ws.send(frame);
      else await new Promise((r) => ws.send(frame, r));
    }
    ws.send(
      `{"method":"process/exited","params":{"processId":${JSON.stringify(processId)},"seq":${++seq},"exitCode":0}}`,
    );
    ws.send(`{"method":"process/closed","params":{"processId":${JSON.stringify(processId)},"seq":${++seq}}}`);
  });
});
