// A pod that shows what reached it: every request (plain or upgrade) on each port in argv is answered with its name
// ($POD_NAME), port, method, URL and raw headers as JSON (upgrades get the same body on a plain 299 response), so
// tests see exactly what the router forwarded. Prints "ready" once it listens on 127.0.0.1 of its network namespace.
import { createServer } from 'node:http';

const ports = process.argv.slice(2).map(Number);
const describe = (req, port) =>
  JSON.stringify({
    pod: process.env.POD_NAME,
    port,
    method: req.method,
    url: req.url,
    rawHeaders: req.rawHeaders,
  });
let listening = 0;
for (const port of ports) {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(describe(req, port)));
  });
  server.on('upgrade', (req, socket) => {
    const body = describe(req, port);
    socket.end(
      `HTTP/1.1 299 Echo\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
        `connection: close\r\n\r\n${body}`,
    );
  });
  server.listen(port, '127.0.0.1', () => {
    if (++listening === ports.length) process.stdout.write('ready\n');
  });
}
