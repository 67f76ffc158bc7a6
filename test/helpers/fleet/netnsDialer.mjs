// Runs inside a pod's network namespace (started by `nsenter --net=/proc/PID/ns/net`): for each request on the IPC
// channel, connects to host:port *in this namespace* and hands the connected socket back to the parent (Node passes
// it as a file descriptor over the channel), so the router holds a socket into the pod without a relay.
// Request: { id, host, port, localPort? }. Answer: { id, ok: true } with the socket, or { id, ok: false, code }.
import { connect } from 'node:net';

process.on('disconnect', () => process.exit(0));
process.on('message', ({ id, host, port, localPort }) => {
  const socket = connect({ host, port, localPort });
  socket.once('connect', () => {
    socket.pause();
    process.send({ id, ok: true }, socket); // closed here once sent (keepOpen: false)
  });
  socket.once('error', (e) => process.send({ id, ok: false, code: e.code ?? 'EIO' }));
});
process.send({ ready: true });
