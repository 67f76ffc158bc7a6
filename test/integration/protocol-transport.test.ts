// Conformance: transport and message dialect (protocol.md §2, §3; checklist items 1–5, 7, 8, 25; token and Origin).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import WebSocket from 'ws';
import { tokenAuth } from '../../src/server/core/auth.js';
import { b64, RpcClient } from '../helpers/client.js';
import { httpGet, upgradeStatus } from '../helpers/http.js';
import { startTestServer, type TestServer, tempDir } from '../helpers/server.js';

/** The next raw frame a client receives after `n` frames already seen. */
async function frameAt(c: RpcClient, n: number, timeoutMs = 5000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  while (c.frames.length <= n) {
    if (Date.now() > deadline) throw new Error(`no frame #${n}`);
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setTimeout(r, 5));
  }
  return c.frames[n]!;
}

/** Sends a raw message and returns the next frame the server sends back. */
async function roundTrip(c: RpcClient, msg: string | Buffer): Promise<Record<string, unknown>> {
  const n = c.frames.length;
  c.ws.send(msg);
  return JSON.parse(await frameAt(c, n)) as Record<string, unknown>;
}

describe('protocol transport (§2)', () => {
  let ts: TestServer;
  before(async () => {
    ts = await startTestServer();
  });
  after(() => ts.close());

  it('1: upgrade on / works, other path → 404, /readyz → 200, plain GET / → 400', async () => {
    assert.equal(await upgradeStatus(`${ts.url}/`), 101);
    assert.equal(await upgradeStatus(`${ts.url}/other`), 404);
    assert.equal(await httpGet(`${ts.url}/readyz`), 200);
    assert.equal(await httpGet(`${ts.url}/`), 400);
    assert.equal(await httpGet(`${ts.url}/nope`), 404);
  });

  it('1: a permessage-deflate offer is declined and the connection works', async () => {
    const c = await RpcClient.connect(ts.url, { perMessageDeflate: true });
    try {
      assert.equal(c.ws.extensions, '');
      const r = (await c.request('initialize', { clientName: 't' })) as { sessionId: string };
      assert.match(r.sessionId, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    } finally {
      c.close();
    }
  });

  it('1: a handshake with Origin: https://evil.example → 403', async () => {
    assert.equal(await upgradeStatus(ts.url, { origin: 'https://evil.example' }), 403);
    assert.equal(await upgradeStatus(ts.url, { headers: { Origin: 'null' } }), 403);
  });

  it('answers pings with pongs', async () => {
    const c = await RpcClient.connect(ts.url);
    try {
      const pong = new Promise<Buffer>((r) => c.ws.once('pong', r));
      c.ws.ping('abc');
      assert.equal((await pong).toString(), 'abc');
    } finally {
      c.close();
    }
  });

  it('2: a binary frame carrying a valid request is answered', async () => {
    const c = await RpcClient.connect(ts.url);
    try {
      const r = await roundTrip(
        c,
        Buffer.from(JSON.stringify({ id: 5, method: 'initialize', params: { clientName: 'bin' } })),
      );
      assert.equal(r.id, 5);
      assert.equal(typeof (r.result as { sessionId: string }).sessionId, 'string');
    } finally {
      c.close();
    }
  });

  it('3: initialize without jsonrpc → {"id":"abc-1","result":{"sessionId"}} in that member order', async () => {
    const c = await RpcClient.connect(ts.url);
    try {
      const n = c.frames.length;
      c.ws.send('{"id":"abc-1","method":"initialize","params":{"clientName":"t"}}');
      const text = await frameAt(c, n);
      assert.match(text, /^\{"id":"abc-1","result":\{"sessionId":"[0-9a-f-]{36}"\}\}$/);
      assert.ok(!text.includes('jsonrpc'));
    } finally {
      c.close();
    }
  });

  it('3: a jsonrpc member from the client is accepted and never echoed', async () => {
    const c = await RpcClient.connect(ts.url);
    try {
      const n = c.frames.length;
      c.ws.send('{"jsonrpc":"2.0","id":9,"method":"initialize","params":{"clientName":"t"}}');
      const text = await frameAt(c, n);
      assert.match(text, /^\{"id":9,"result":/);
      assert.ok(!text.includes('jsonrpc'));
    } finally {
      c.close();
    }
  });

  it('4: malformed text, [1,2,3], "str" and {"id":77} → id -1, -32600, failed to parse…; connection stays open', async () => {
    const c = await RpcClient.connect(ts.url);
    try {
      const port = (c.ws as unknown as { _socket: { localPort: number } })._socket.localPort;
      const prefix = `failed to parse websocket JSON-RPC message from exec-server websocket 127.0.0.1:${port}: `;
      for (const bad of ['{not json', '[1,2,3]', '"str"', '{"id":77}', '42', 'null']) {
        const text = await (async () => {
          const n = c.frames.length;
          c.ws.send(bad);
          return frameAt(c, n);
        })();
        assert.match(text, /^\{"error":\{"code":-32600,"message":".*"\},"id":-1\}$/, bad);
        const msg = (JSON.parse(text) as { error: { message: string } }).error.message;
        assert.ok(msg.startsWith(prefix), `${bad}: ${msg}`);
        assert.ok(msg.length > prefix.length, `${bad}: serde text after the prefix`);
        assert.ok(!text.includes('"data"'));
      }
      assert.equal(c.ws.readyState, WebSocket.OPEN);
      const r = (await c.request('initialize', { clientName: 't' })) as { sessionId: string };
      assert.equal(typeof r.sessionId, 'string');
    } finally {
      c.close();
    }
  });

  it('5: an unknown method before initialize → -32601 exact text; a notification name as request → -32601', async () => {
    const c = await RpcClient.connect(ts.url);
    try {
      const n = c.frames.length;
      c.ws.send('{"id":1,"method":"bogus/method","params":{}}');
      assert.equal(
        await frameAt(c, n),
        '{"error":{"code":-32601,"message":"exec-server stub does not implement `bogus/method` yet"},"id":1}',
      );
      for (const m of [
        'initialized',
        'process/output',
        'process/exited',
        'environment/info',
        'http/request',
      ]) {
        const e = await c.requestError(m, {});
        assert.equal(e.code, -32601, m);
        assert.equal(e.message, `exec-server stub does not implement \`${m}\` yet`);
      }
    } finally {
      c.close();
    }
  });

  it('7: a second initialize → -32600 and the connection stays open', async () => {
    const c = await RpcClient.open(ts.url);
    try {
      const e = await c.requestError('initialize', { clientName: 'again' });
      assert.equal(e.code, -32600);
      assert.equal(e.message, 'initialize may only be sent once per connection');
      const r = await c.request('process/terminate', { processId: 'none' });
      assert.deepEqual(r, { running: false });
    } finally {
      c.close();
    }
  });

  for (const [name, msg, init] of [
    ['bogus/notification', '{"method":"bogus/notification","params":{}}', true],
    ['a client result', '{"id":1,"result":{}}', true],
    ['a client error', '{"id":1,"error":{"code":-1,"message":"x"}}', true],
    ['initialized before initialize', '{"method":"initialized","params":{}}', false],
    ['bogus/notification before initialize', '{"method":"bogus/notification"}', false],
  ] as const) {
    it(`8: ${name} → the connection is closed (1002) with no reply`, async () => {
      const c = init ? await RpcClient.open(ts.url) : await RpcClient.connect(ts.url);
      const n = c.frames.length;
      c.ws.send(msg);
      assert.equal(await c.waitClose(), 1002);
      assert.equal(c.frames.length, n, 'no reply frame');
    });
  }

  it('initialized params may be {}, null or absent, and a repeat is ignored', async () => {
    for (const tail of [',"params":{}', ',"params":null', '']) {
      const c = await RpcClient.connect(ts.url);
      try {
        await c.request('initialize', { clientName: 't' });
        c.ws.send(`{"method":"initialized"${tail}}`);
        c.ws.send(`{"method":"initialized"${tail}}`);
        assert.deepEqual(await c.request('process/terminate', { processId: 'x' }), { running: false });
        assert.equal(c.ws.readyState, WebSocket.OPEN);
      } finally {
        c.close();
      }
    }
  });

  it('the close handshake echoes the client code', async () => {
    const c = await RpcClient.connect(ts.url);
    c.ws.close(4001);
    assert.equal(await c.waitClose(), 4001);
  });

  it('25: an inbound message of 11 MiB (fs/writeFile) is accepted; one of 17 MiB → close 1009', async () => {
    const dir = tempDir();
    const c = await RpcClient.open(ts.url);
    try {
      const data = Buffer.alloc(11 * 1024 * 1024, 7);
      const path = `${dir.path}/big.bin`;
      assert.deepEqual(await c.request('fs/writeFile', { path, dataBase64: data.toString('base64') }), {});
      const back = (await c.request('fs/readFile', { path })) as { dataBase64: string };
      assert.ok(Buffer.from(back.dataBase64, 'base64').equals(data));
      const n = c.frames.length;
      c.ws.send(
        JSON.stringify({
          id: 99,
          method: 'fs/writeFile',
          params: { path, dataBase64: 'A'.repeat(17 * 1024 * 1024) },
        }),
      );
      assert.equal(await c.waitClose(10_000), 1009);
      assert.equal(c.frames.length, n);
    } finally {
      c.close();
      dir.cleanup();
    }
  });

  it('pipelined requests are answered by id, in order', async () => {
    const c = await RpcClient.open(ts.url);
    try {
      const rs = await Promise.all(
        Array.from(
          { length: 5 },
          () => c.request('fs/getMetadata', { path: '/' }) as Promise<{ isDirectory: boolean }>,
        ),
      );
      for (const r of rs) assert.equal(r.isDirectory, true);
      const ids = c.frames.slice(-5).map((f) => (JSON.parse(f) as { id: number }).id);
      assert.deepEqual(
        ids,
        [...ids].sort((a, b) => a - b),
      );
    } finally {
      c.close();
    }
  });

  it('process/write with a chunk field that is not a string → -32602 serde text', async () => {
    const c = await RpcClient.open(ts.url);
    try {
      const e = await c.requestError('process/write', { processId: 'x', chunk: 7 });
      assert.equal(e.code, -32602);
      assert.match(e.message, /^invalid type: integer `7`, expected a string/);
      const ok = (await c.request('process/write', { processId: 'x', chunk: b64('hi') })) as {
        status: string;
      };
      assert.equal(ok.status, 'unknownProcess');
    } finally {
      c.close();
    }
  });
});

describe('protocol transport: token and Origin allow-list', () => {
  let ts: TestServer;
  const token = 's3cret-token-value';
  before(async () => {
    ts = await startTestServer({
      listen: { auth: tokenAuth(token), allowedOrigins: ['http://127.0.0.1:5173'] },
    });
  });
  after(() => ts.close());

  it('Bearer header, X-Corral-Token and ?token= are accepted; wrong or missing → 401', async () => {
    assert.equal(await upgradeStatus(ts.url, { headers: { Authorization: `Bearer ${token}` } }), 101);
    assert.equal(await upgradeStatus(ts.url, { headers: { 'X-Corral-Token': token } }), 101);
    assert.equal(await upgradeStatus(ts.url, { headers: { 'X-Corral-Token': `${token}x` } }), 401);
    // The first credential presented is the one checked: a wrong header is not rescued by a right query.
    assert.equal(
      await upgradeStatus(`${ts.url}/?token=${token}`, { headers: { Authorization: 'Bearer wrong' } }),
      401,
    );
    assert.equal(await upgradeStatus(ts.url, { headers: { Authorization: `Basic ${token}` } }), 401);
    assert.equal(await upgradeStatus(`${ts.url}/?token=${token}`), 101);
    assert.equal(await upgradeStatus(ts.url), 401);
    assert.equal(await upgradeStatus(ts.url, { headers: { Authorization: 'Bearer wrong' } }), 401);
    assert.equal(await upgradeStatus(`${ts.url}/?token=${token}x`), 401);
    assert.equal(await upgradeStatus(`${ts.url}/?token=`), 401);
  });

  it('an allow-listed Origin (with the token) is accepted; others → 403', async () => {
    assert.equal(await upgradeStatus(`${ts.url}/?token=${token}`, { origin: 'http://127.0.0.1:5173' }), 101);
    assert.equal(await upgradeStatus(`${ts.url}/?token=${token}`, { origin: 'http://127.0.0.1:5174' }), 403);
  });

  it('/readyz needs no token', async () => {
    assert.equal(await httpGet(`${ts.url}/readyz`), 200);
  });
});
