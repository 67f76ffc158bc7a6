/**
 * Tunnels of the managed proxy (src/network/tunnel.ts) on both of their paths: the native splice relay between two
 * plain sockets, and Node streams (CORRAL_PROXY_SPLICE=0, or no addon). Real sockets on loopback: bytes both ways at
 * once, half-close in each direction, resets, the proxy closing under a live tunnel, and no fd left behind.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { readdirSync } from 'node:fs';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { tunnelStats } from '../../src/network/tunnel.js';
import { spliceRelay as nativeRelay } from '../../src/platform/relay.js';
import { type ProxyFixture, startEcho, startProxy, waitFor } from './network-helpers.js';

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

interface Origin {
  port: number;
  sockets: Set<net.Socket>;
  close(): Promise<void>;
}

async function startOrigin(onConnection: (s: net.Socket) => void): Promise<Origin> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => {});
    onConnection(s);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as net.AddressInfo).port,
    sockets,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

/** A client socket through the proxy's CONNECT to 127.0.0.1:port, `first` sent in the same write as the request. */
async function connectTunnel(
  proxyPort: number,
  port: number,
  first?: Buffer,
): Promise<{ socket: net.Socket; received: Buffer[]; ended: Promise<void>; closed: Promise<void> }> {
  const socket = net.connect({ port: proxyPort, host: '127.0.0.1', allowHalfOpen: true });
  const request = Buffer.from(`CONNECT 127.0.0.1:${port} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`);
  socket.write(first ? Buffer.concat([request, first]) : request);
  const received: Buffer[] = [];
  let head: Buffer | null = Buffer.alloc(0);
  const ended = new Promise<void>((r) => socket.once('end', r));
  const closed = new Promise<void>((r) => socket.once('close', () => r()));
  socket.on('error', () => {});
  await new Promise<void>((resolve, reject) => {
    socket.on('data', (d: Buffer) => {
      if (head === null) {
        received.push(d);
        return;
      }
      head = Buffer.concat([head, d]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      const status = head.subarray(0, end).toString();
      if (!status.startsWith('HTTP/1.1 200')) reject(new Error(`CONNECT answered ${status}`));
      if (head.length > end + 4) received.push(head.subarray(end + 4));
      head = null;
      resolve();
    });
    socket.once('close', () => reject(new Error('closed before the CONNECT answer')));
  });
  return { socket, received, ended, closed };
}

const fdCount = () => readdirSync('/proc/self/fd').length;

for (const mode of ['splice', 'streams'] as const) {
  describe(`proxy tunnels through ${mode === 'splice' ? 'the native splice relay' : 'Node streams'}`, () => {
    const skip =
      mode === 'splice' && nativeRelay === null ? 'the native addon is not built (npm run install)' : false;
    let fx: ProxyFixture;
    let echo: Awaited<ReturnType<typeof startEcho>>;
    let saved: string | undefined;
    before(async () => {
      saved = process.env.CORRAL_PROXY_SPLICE;
      process.env.CORRAL_PROXY_SPLICE = mode === 'splice' ? '1' : '0';
      fx = await startProxy({ allow_local_binding: true, domains: { '127.0.0.1': 'allow' } });
      echo = await startEcho();
    });
    after(async () => {
      await fx.close();
      await echo.close();
      if (saved === undefined) delete process.env.CORRAL_PROXY_SPLICE;
      else process.env.CORRAL_PROXY_SPLICE = saved;
    });

    /** Runs fn and checks that its tunnels took this describe's path. */
    async function onPath(tunnels: number, fn: () => Promise<void>): Promise<void> {
      const before = tunnelStats();
      await fn();
      const now = tunnelStats();
      if (mode === 'splice') assert.equal(now.spliced - before.spliced, tunnels, 'spliced tunnels');
      else assert.equal(now.piped - before.piped, tunnels, 'piped tunnels');
    }

    test('8 MiB each way at once through an echo origin, pipelined first bytes included; FIN forwarded both ways', {
      skip,
    }, async () => {
      await onPath(1, async () => {
        const first = randomBytes(1000);
        const rest = randomBytes(8 * 1024 * 1024);
        const t = await connectTunnel(fx.proxy.httpPort, echo.port, first);
        // write in pieces so that both directions are busy at the same time
        for (let off = 0; off < rest.length; off += 256 * 1024) {
          if (!t.socket.write(rest.subarray(off, off + 256 * 1024)))
            await new Promise((r) => t.socket.once('drain', r));
        }
        t.socket.end(); // our FIN reaches the echo origin, which then ends its side: that FIN must reach us
        await t.ended;
        assert.equal(sha(Buffer.concat(t.received)), sha(Buffer.concat([first, rest])));
        await t.closed;
      });
    });

    test('64 tunnels at once, 512 KiB each way each, all intact', { skip }, async () => {
      await onPath(64, async () => {
        await Promise.all(
          Array.from({ length: 64 }, async () => {
            const data = randomBytes(512 * 1024);
            const t = await connectTunnel(fx.proxy.httpPort, echo.port);
            t.socket.end(data);
            await t.ended;
            assert.equal(sha(Buffer.concat(t.received)), sha(data));
            await t.closed;
          }),
        );
      });
    });

    test('half-close from the client: the origin answers after our FIN and the answer arrives', {
      skip,
    }, async () => {
      const digest = await startOrigin((s) => {
        const h = createHash('sha256');
        s.on('data', (d) => h.update(d));
        s.on('end', () => s.end(`${h.digest('hex')}\n`));
      });
      try {
        await onPath(1, async () => {
          const body = randomBytes(3 * 1024 * 1024 + 17);
          const t = await connectTunnel(fx.proxy.httpPort, digest.port);
          t.socket.end(body);
          await t.ended;
          assert.equal(Buffer.concat(t.received).toString(), `${sha(body)}\n`);
        });
      } finally {
        await digest.close();
      }
    });

    test('half-close from the origin: its FIN arrives and the client can still send', { skip }, async () => {
      let fromClient = '';
      let originEnded!: () => void;
      const originGotEnd = new Promise<void>((r) => {
        originEnded = r;
      });
      const early = await startOrigin((s) => {
        s.end('bye\n'); // FIN right away, keep reading
        s.on('data', (d) => {
          fromClient += d.toString();
        });
        s.on('end', () => originEnded());
      });
      try {
        await onPath(1, async () => {
          const t = await connectTunnel(fx.proxy.httpPort, early.port);
          await t.ended;
          assert.equal(Buffer.concat(t.received).toString(), 'bye\n');
          t.socket.end('still here\n');
          await originGotEnd;
          assert.equal(fromClient, 'still here\n');
          await t.closed;
        });
      } finally {
        await early.close();
      }
    });

    test('an origin that resets the connection closes the client side too', { skip }, async () => {
      const resetting = await startOrigin((s) => {
        s.once('data', () => s.resetAndDestroy());
      });
      try {
        await onPath(1, async () => {
          const t = await connectTunnel(fx.proxy.httpPort, resetting.port);
          t.socket.write('hello');
          await t.closed;
          assert.equal(t.socket.destroyed, true);
        });
      } finally {
        await resetting.close();
      }
    });

    test('closing the proxy closes a live tunnel at both ends, and no fd is left open', {
      skip,
    }, async () => {
      const holding = await startOrigin(() => {});
      const own = await startProxy({ allow_local_binding: true, domains: { '127.0.0.1': 'allow' } });
      const fds = fdCount();
      try {
        const tunnels = await Promise.all(
          Array.from({ length: 8 }, () => connectTunnel(own.proxy.httpPort, holding.port)),
        );
        await waitFor(() => holding.sockets.size === 8, 'the origin sees 8 connections');
        for (const t of tunnels) t.socket.write('x');
        if (mode === 'splice') await waitFor(() => tunnelStats().activeRelays >= 8, '8 relays running');
        const originSockets = [...holding.sockets];
        const toldEnd = (s: net.Socket) =>
          new Promise<void>((r) => {
            s.once('end', () => r());
            s.once('close', () => r());
          });
        const originTold = originSockets.map(toldEnd);
        const clientTold = tunnels.map((t) => toldEnd(t.socket));
        for (const s of originSockets) s.resume(); // read, so that the proxy's FIN or reset is seen
        await own.close();
        // Both ends are told: a FIN (they are half-open sockets, which then stay open until they end too) or a reset.
        await Promise.all(clientTold);
        await Promise.all(originTold);
        if (mode === 'splice') await waitFor(() => tunnelStats().activeRelays === 0, 'no relay running');
        for (const t of tunnels) t.socket.destroy();
        for (const s of originSockets) s.destroy();
        await waitFor(() => fdCount() <= fds, `fds back to ${fds} (now ${fdCount()})`);
      } finally {
        await holding.close();
      }
    });
  });
}
