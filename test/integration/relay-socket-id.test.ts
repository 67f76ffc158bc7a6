/**
 * How the splice relay finds the sockets of a tunnel (src/platform/native/relay.c find_sockets): Node does not say a
 * socket's fd, so the proxy names each socket by its addresses and a keep-alive mark it has just set. This server also
 * holds sockets inside sandboxes' network namespaces, where a hostile sandbox can give its connection exactly the
 * addresses of another one (it picks its source port). Here the twin is made for real: a network namespace of its own
 * (unshare -n), a connection there from the same source port to the same port as a connection in ours, both held by
 * this process. The relay must take the marked socket and never the twin; a name that matches no socket, or more than
 * one, is refused (the tunnel then goes through Node streams).
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { constants } from 'node:os';
import { after, before, describe, test } from 'node:test';
import { type RelaySocketId, spliceRelay } from '../../src/platform/relay.js';
import { NetnsDialer, type NetnsProcess, netnsAvailable, spawnInNetns } from '../helpers/fleet/netns.js';
import { waitFor } from './network-helpers.js';

const ns = netnsAvailable();
const skip = spliceRelay === null ? 'the native addon is not loaded' : !ns.ok ? ns.reason : false;

/** A listening server on 127.0.0.1 whose accepted sockets are collected. */
async function listen(port = 0): Promise<{ server: net.Server; port: number; accepted: net.Socket[] }> {
  const accepted: net.Socket[] = [];
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => {});
    accepted.push(s);
  });
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', () => r()));
  return { server, port: (server.address() as net.AddressInfo).port, accepted };
}

async function connect(port: number, localPort?: number): Promise<net.Socket> {
  const s = net.connect({ port, host: '127.0.0.1', localPort, allowHalfOpen: true });
  s.on('error', () => {});
  await new Promise<void>((r, j) => s.once('connect', r).once('error', j));
  return s;
}

function idOf(s: net.Socket, mark: number): RelaySocketId {
  return [mark, s.localAddress!, s.localPort!, s.remoteAddress!, s.remotePort!];
}

function collect(s: net.Socket): { text(): string } {
  let got = '';
  s.on('data', (d: Buffer) => {
    got += d.toString();
  });
  return { text: () => got };
}

describe('the splice relay finds the socket it is named, never a twin in another network namespace', {
  skip,
}, () => {
  let pod: NetnsProcess;
  let dialer: NetnsDialer;
  let ours: Awaited<ReturnType<typeof listen>>;
  let other: Awaited<ReturnType<typeof listen>>;
  /** In our namespace: client → ours.port, from port S. */
  let client: net.Socket;
  /** In the pod's namespace, held by this process too: the same addresses (127.0.0.1:S → 127.0.0.1:ours.port). */
  let twin: net.Socket;
  let twinPeerGot: { text(): string };

  before(async () => {
    ours = await listen();
    other = await listen();
    client = await connect(ours.port);
    // A listener on the same port inside the pod, which prints what reaches it (a process of the pod's own).
    pod = await spawnInNetns([
      process.execPath,
      '-e',
      `const s = require('node:net').createServer((c) => c.on('data', (d) => process.stdout.write('pod got ' + d + '\\n')));
       s.listen(${ours.port}, '127.0.0.1', () => console.log('listening'));`,
    ]);
    dialer = await NetnsDialer.enter(pod.proc.pid!);
    twin = await dialer.dial(ours.port, '127.0.0.1', client.localPort);
    twin.on('error', () => {});
    let podOut = '';
    pod.proc.stdout.on('data', (d) => {
      podOut += d;
    });
    twinPeerGot = { text: () => podOut };
    assert.deepEqual(
      [twin.localAddress, twin.localPort, twin.remoteAddress, twin.remotePort],
      [client.localAddress, client.localPort, client.remoteAddress, client.remotePort],
      'the twin has exactly the addresses of our client socket',
    );
  });

  after(async () => {
    client?.destroy();
    twin?.destroy();
    dialer?.close();
    pod?.proc.kill('SIGKILL');
    await pod?.exited;
    ours?.server.close();
    other?.server.close();
    for (const s of [...(ours?.accepted ?? []), ...(other?.accepted ?? [])]) s.destroy();
  });

  test('a socket that carries no mark is not found (ENOENT), whatever its addresses', async () => {
    const b = await connect(other.port);
    try {
      assert.throws(() => spliceRelay!.open(idOf(client, 20001), idOf(b, 20001), null, null, () => {}), {
        errno: constants.errno.ENOENT,
      });
    } finally {
      b.setKeepAlive(false);
      b.destroy();
    }
  });

  test('two sockets with the name (the twin marked too) are refused (ENOTUNIQ)', async () => {
    const b = await connect(other.port);
    client.setKeepAlive(true, 20002_000);
    twin.setKeepAlive(true, 20002_000);
    b.setKeepAlive(true, 20002_000);
    try {
      assert.throws(() => spliceRelay!.open(idOf(client, 20002), idOf(b, 20002), null, null, () => {}), {
        errno: 76, // ENOTUNIQ (Linux; not in Node's table)
      });
    } finally {
      for (const s of [client, twin, b]) s.setKeepAlive(false);
      b.destroy();
    }
  });

  test('the marked socket is relayed, its head first; the twin with the same addresses is not touched', async () => {
    await waitFor(() => ours.accepted.length === 1, 'our server accepted the client');
    const originSide = ours.accepted[0]!; // the far end of `client`
    const b = await connect(other.port);
    await waitFor(() => other.accepted.length >= 1, 'the other server accepted');
    const far = other.accepted.at(-1)!; // the far end of `b`
    const farGot = collect(far);
    const originGot = collect(originSide);
    const mark = 20003;
    client.setKeepAlive(true, mark * 1000);
    b.setKeepAlive(true, mark * 1000);
    let done: number | undefined;
    const handle = spliceRelay!.open(
      idOf(client, mark),
      idOf(b, mark),
      Buffer.from('head-to-b|'),
      null,
      (err) => {
        done = err;
      },
    );
    // As the proxy does: the relay holds duplicates, our sockets are closed and the connections stay up.
    client.destroy();
    b.destroy();
    try {
      originSide.write('from-origin');
      far.write('from-far');
      await waitFor(
        () => farGot.text() === 'head-to-b|from-origin',
        `far end got ${JSON.stringify(farGot.text())}`,
      );
      await waitFor(() => originGot.text() === 'from-far', `origin got ${JSON.stringify(originGot.text())}`);
      // The twin is still ours, untouched: what it sends reaches its own peer in the pod, and only that.
      twin.write('twin-bytes');
      await waitFor(
        () => twinPeerGot.text().includes('pod got twin-bytes'),
        'the pod hears its own connection',
      );
      assert.equal(farGot.text(), 'head-to-b|from-origin');
      assert.doesNotMatch(twinPeerGot.text(), /from-origin|from-far|head-to-b/);
      // Both ends closing ends the relay cleanly.
      originSide.end();
      far.end();
      await waitFor(() => done !== undefined, 'the relay ended');
      assert.equal(done, 0);
    } finally {
      if (done === undefined) spliceRelay!.close(handle);
    }
  });
});
