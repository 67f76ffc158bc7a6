// src/server/connection/peerProcess.ts: a connection's peer socket found in /proc/net/tcp{,6} for IPv4, IPv6 and a v4 client of
// a dual-stack listener, and the refusal when a "sandboxed command" holds it (here: this very process).
import assert from 'node:assert/strict';
import { connect, createServer, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { peerSocketInode, procNetAddress, sandboxedPeer } from '../../src/server/connection/peerProcess.js';

async function pair(listenHost: string, connectHost: string): Promise<{ accepted: Socket; close(): void }> {
  const srv = createServer();
  const accepted = new Promise<Socket>((resolve) => srv.once('connection', resolve));
  await new Promise<void>((resolve) => srv.listen(0, listenHost, resolve));
  const port = (srv.address() as { port: number }).port;
  const client = connect(port, connectHost);
  await new Promise((resolve) => client.once('connect', resolve));
  const s = await accepted;
  return {
    accepted: s,
    close() {
      client.destroy();
      s.destroy();
      srv.close();
    },
  };
}

describe('the peer of a connection (src/server/connection/peerProcess.ts)', () => {
  it('addresses as /proc/net prints them', () => {
    assert.deepEqual(procNetAddress('127.0.0.1')?.[0], { file: 'tcp', hex: '0100007F' });
    assert.deepEqual(procNetAddress('::ffff:127.0.0.1')?.[0], { file: 'tcp', hex: '0100007F' });
    assert.deepEqual(procNetAddress('::1'), [{ file: 'tcp6', hex: '00000000000000000000000001000000' }]);
    for (const bad of ['', 'x', '1.2.3', ':::', 'fe80::1::2']) assert.equal(procNetAddress(bad), null, bad);
  });

  for (const [listen, dial] of [
    ['127.0.0.1', '127.0.0.1'],
    ['::1', '::1'],
    ['::', '127.0.0.1'],
  ] as const) {
    it(`finds the peer's socket: listening on ${listen}, dialled at ${dial}`, async (t) => {
      let p: Awaited<ReturnType<typeof pair>>;
      try {
        p = await pair(listen, dial);
      } catch (e) {
        t.skip(`no ${listen} here: ${(e as Error).message}`);
        return;
      }
      try {
        const inode = await peerSocketInode(p.accepted);
        assert.match(inode ?? '', /^\d+$/);
        // This process holds the client end: as a "sandboxed command", it is refused; as nothing of ours, not.
        const mine = {
          *commands() {
            yield { pid: process.pid, sandboxed: true };
          },
          cgroupBases: [],
        };
        assert.match((await sandboxedPeer(p.accepted, mine)) ?? '', /sandboxed command/);
        const plain = {
          *commands() {
            yield { pid: process.pid, sandboxed: false };
          },
          cgroupBases: [],
        };
        assert.equal(await sandboxedPeer(p.accepted, plain), null);
        assert.equal(await sandboxedPeer(p.accepted, { *commands() {}, cgroupBases: [] }), null);
      } finally {
        p.close();
      }
    });
  }

  it('ends that are missing, or no socket of them, are not looked up', async () => {
    const mine = {
      *commands() {
        yield { pid: process.pid, sandboxed: true };
      },
      cgroupBases: [],
    };
    assert.equal(await sandboxedPeer({}, mine), null);
    assert.equal(
      await peerSocketInode({
        remoteAddress: '127.0.0.1',
        remotePort: 1,
        localAddress: '127.0.0.1',
        localPort: 1,
      }),
      null,
    );
  });
});
