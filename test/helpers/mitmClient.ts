/** A client of the managed proxy's TLS interception: CONNECT, TLS over the tunnel, one raw request. */
import net from 'node:net';
import tls from 'node:tls';

/** CONNECT through the proxy; resolves with the raw socket after the proxy's answer head (and that head). */
export async function connectVia(
  proxyPort: number,
  authority: string,
): Promise<{ socket: net.Socket; head: string }> {
  const socket = net.connect(proxyPort, '127.0.0.1');
  await new Promise<void>((r, j) => socket.once('connect', () => r()).once('error', j));
  socket.write(`CONNECT ${authority} HTTP/1.1\r\nhost: ${authority}\r\n\r\n`);
  let buf = Buffer.alloc(0);
  return new Promise((resolve, reject) => {
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      socket.off('data', onData);
      socket.pause();
      const rest = buf.subarray(end + 4);
      if (rest.length > 0) socket.unshift(rest);
      resolve({ socket, head: buf.subarray(0, end).toString('latin1') });
    };
    socket.on('data', onData);
    socket.once('error', reject);
  });
}

const contexts = new Map<string, tls.SecureContext>();

/** TLS over `socket` to `servername` trusting only `ca`; the peer's certificate is returned with the stream. */
export function tlsOver(socket: net.Socket, host: string, ca: string | Buffer): Promise<tls.TLSSocket> {
  // A bundle of every system root takes ~70 ms to parse: once per bundle, not per connection.
  const key = ca.toString();
  let secureContext = contexts.get(key);
  if (!secureContext) {
    secureContext = tls.createSecureContext({ ca });
    contexts.set(key, secureContext);
  }
  return new Promise((resolve, reject) => {
    const s = tls.connect({
      socket,
      secureContext,
      ...(net.isIP(host) ? { host } : { servername: host, host }),
      ALPNProtocols: ['http/1.1'],
    });
    s.once('secureConnect', () => resolve(s));
    s.once('error', reject);
  });
}

/** Sends a raw request (`connection: close` added) and reads the whole answer. */
export function exchange(s: tls.TLSSocket | net.Socket, head: string, body = ''): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    s.on('data', (d: Buffer) => chunks.push(d));
    s.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
    s.on('error', () => {});
    s.write(`${head}connection: close\r\n\r\n${body}`);
  });
}

/**
 * A SOCKS5 CONNECT by name (no auth) through the proxy's SOCKS port; resolves with the socket (paused) and the
 * bytes of the greeting answer and the reply (12 when the reply came; fewer if the proxy closed).
 */
export async function socksConnect(
  socksPort: number,
  host: string,
  port: number,
): Promise<{ s: net.Socket; reply: Buffer }> {
  const s = net.connect(socksPort, '127.0.0.1');
  await new Promise<void>((r) => s.once('connect', () => r()));
  const name = Buffer.from(host);
  s.write(Buffer.from([5, 1, 0]));
  s.write(
    Buffer.concat([Buffer.from([5, 1, 0, 3, name.length]), name, Buffer.from([port >> 8, port & 255])]),
  );
  let got = Buffer.alloc(0);
  await new Promise<void>((r) => {
    const on = (d: Buffer) => {
      got = Buffer.concat([got, d]);
      if (got.length >= 12) {
        s.off('data', on);
        s.pause();
        r();
      }
    };
    s.on('data', on);
    s.on('close', () => r());
  });
  return { s, reply: got };
}
