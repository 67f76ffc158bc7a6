import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { invalidRequest } from '../../src/protocol/errors.js';
import { Deferred, type Dispatcher, RpcConnection, type Transport } from '../../src/rpc/connection.js';

function setup(handlers: Record<string, (params: unknown) => unknown> = {}) {
  const sent: string[] = [];
  const closes: number[] = [];
  const transport: Transport = {
    peer: '127.0.0.1:5555',
    write(messages, onWritten) {
      for (const m of messages) sent.push(m.toString());
      onWritten();
    },
    close: (code) => closes.push(code),
  };
  const dispatcher: Dispatcher = {
    request(method, params) {
      const h = handlers[method];
      if (!h) throw invalidRequest(`no ${method}`);
      return h(params);
    },
    notification: (method) => method === 'ok/notify',
    closed() {},
  };
  return { conn: new RpcConnection(transport, dispatcher), sent, closes };
}

const tick = () => new Promise((r) => setImmediate(r));

describe('RpcConnection dialect (protocol.md §3)', () => {
  it('results are {"id","result"}, errors {"error":{code,message},"id"}; ids echo unchanged; no jsonrpc', async () => {
    const { conn, sent } = setup({
      echo: (p) => p,
      fail: () => {
        throw invalidRequest('nope');
      },
    });
    conn.receive('{"jsonrpc":"2.0","id":"abc-1","method":"echo","params":{"a":1}}');
    conn.receive('{"id":7,"method":"fail"}');
    conn.receive('{"id":8,"method":"echo"}');
    await tick();
    assert.deepEqual(sent, [
      '{"id":"abc-1","result":{"a":1}}',
      '{"error":{"code":-32600,"message":"nope"},"id":7}',
      '{"id":8,"result":{}}',
    ]);
  });

  it('unparseable text and non-messages → id -1, -32600, failed to parse … <peer>: …; stays open', () => {
    const { conn, sent, closes } = setup();
    for (const bad of ['{', '[1,2,3]', '"str"', '{"id":77}', '3', 'null']) conn.receive(bad);
    assert.equal(sent.length, 6);
    for (const s of sent) {
      const m = JSON.parse(s) as { id: number; error: { code: number; message: string } };
      assert.equal(m.id, -1);
      assert.equal(m.error.code, -32600);
      assert.ok(
        m.error.message.startsWith(
          'failed to parse websocket JSON-RPC message from exec-server websocket 127.0.0.1:5555: ',
        ),
      );
      assert.ok(s.startsWith('{"error":'));
    }
    assert.deepEqual(closes, []);
    assert.equal(conn.closed, false);
  });

  it('client responses and rejected notifications close with 1002 and no reply', () => {
    for (const msg of [
      '{"id":1,"result":{}}',
      '{"id":1,"error":{"code":1,"message":"x"}}',
      '{"method":"bad"}',
    ]) {
      const { conn, sent, closes } = setup();
      conn.receive(msg);
      assert.deepEqual(sent, []);
      assert.deepEqual(closes, [1002]);
      assert.equal(conn.closed, true);
      conn.receive('{"id":2,"method":"echo"}');
      assert.deepEqual(sent, [], 'nothing is handled after close');
    }
    const { conn, closes } = setup();
    conn.receive('{"method":"ok/notify"}');
    assert.deepEqual(closes, []);
    assert.equal(conn.closed, false);
  });

  it('requests run one at a time in arrival order; a Deferred does not hold up later requests', async () => {
    let releaseSlow!: (v: unknown) => void;
    let releaseParked!: (v: unknown) => void;
    const order: string[] = [];
    const { conn, sent } = setup({
      slow: () => {
        order.push('slow:start');
        return new Promise((r) => {
          releaseSlow = r;
        }).then((v) => {
          order.push('slow:end');
          return v;
        });
      },
      after: () => {
        order.push('after');
        return { ok: true };
      },
      park: () =>
        new Deferred(
          new Promise((r) => {
            releaseParked = r;
          }),
        ),
    });
    conn.receive('{"id":1,"method":"slow"}');
    conn.receive('{"id":2,"method":"after"}');
    await tick();
    assert.deepEqual(order, ['slow:start'], 'the second request waits for the first');
    releaseSlow({ n: 1 });
    await tick();
    await tick();
    assert.deepEqual(order, ['slow:start', 'slow:end', 'after']);
    conn.receive('{"id":3,"method":"park"}');
    conn.receive('{"id":4,"method":"after"}');
    await tick();
    assert.deepEqual(sent, [
      '{"id":1,"result":{"n":1}}',
      '{"id":2,"result":{"ok":true}}',
      '{"id":4,"result":{"ok":true}}',
    ]);
    releaseParked({ chunks: [] });
    await tick();
    assert.equal(sent.at(-1), '{"id":3,"result":{"chunks":[]}}');
  });

  it('non-RpcError exceptions become -32603 with their message', () => {
    const { conn, sent } = setup({
      boom: () => {
        throw new Error('kaput');
      },
    });
    conn.receive('{"id":1,"method":"boom"}');
    assert.deepEqual(sent, ['{"error":{"code":-32603,"message":"kaput"},"id":1}']);
  });
});
