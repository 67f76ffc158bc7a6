// Policy time on the server's clock (issue 31): timeouts, backoffs, pings and caches that used to be real timers now
// move with a fake clock, so each is tested at its production value without waiting it out. Sockets are real
// (loopback); only time is fake.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, test } from 'node:test';
import { WebSocketServer } from 'ws';
import { MAX_PAYLOAD, RemoteLink } from '../../src/fleet/link.js';
import { bearerAuth } from '../../src/remote/auth.js';
import { REGISTRY_REQUEST_TIMEOUT_MS, RegistryClient } from '../../src/remote/registry.js';
import { type Dispatcher, OutboundRequestError, RpcConnection } from '../../src/rpc/connection.js';
import { Readiness } from '../../src/server/connection/health.js';
import { silentLogger } from '../../src/server/core/log.js';
import { FakeClock } from '../helpers/clock.js';
import { until } from '../helpers/server.js';

const listening = (s: Server) =>
  new Promise<number>((resolve) =>
    s.listen(0, '127.0.0.1', () => resolve((s.address() as AddressInfo).port)),
  );

describe('the fake clock', () => {
  test('an interval runs each time it falls due until cleared; clearTimeout clears either kind', async () => {
    const clock = new FakeClock(0);
    const runs: number[] = [];
    const every = clock.setInterval(() => runs.push(clock.now()), 1000);
    const once = clock.setTimeout(() => runs.push(-1), 1500);
    clock.clearTimeout(once);
    await clock.advance(3500);
    assert.deepEqual(runs, [1000, 2000, 3000]);
    clock.clearTimeout(every);
    await clock.advance(5000);
    assert.deepEqual(runs, [1000, 2000, 3000]);
    assert.equal(clock.pending, 0);
  });

  test('an interval that clears itself in its run runs once', async () => {
    const clock = new FakeClock(0);
    let n = 0;
    const t = clock.setInterval(() => {
      n++;
      clock.clearTimeout(t);
    }, 10);
    await clock.advance(100);
    assert.equal(n, 1);
    assert.equal(clock.pending, 0);
  });
});

describe('policy time on the clock', () => {
  test('readiness: an evaluation is reused for cacheMs of clock time, and a check that never settles fails at timeoutMs', async () => {
    const clock = new FakeClock();
    let runs = 0;
    const r = new Readiness({ clock, cacheMs: 1000, timeoutMs: 5000 });
    r.register('counted', () => {
      runs++;
      return true;
    });
    assert.equal((await r.evaluate()).ready, true);
    await r.evaluate();
    assert.equal(runs, 1, 'cached');
    await clock.advance(1000);
    await r.evaluate();
    assert.equal(runs, 2, 'evaluated again once cacheMs passed on the clock');

    const reasons: string[] = [];
    const hung = new Readiness({
      clock,
      cacheMs: 0,
      timeoutMs: 5000,
      onFailure: (n, why) => reasons.push(`${n}: ${why}`),
    });
    hung.register('stuck', () => new Promise<boolean>(() => {}));
    const report = hung.evaluate();
    let settled = false;
    void report.then(() => {
      settled = true;
    });
    await clock.whenPending(1);
    await clock.advance(4999);
    assert.equal(settled, false, 'not failing before timeoutMs');
    await clock.advance(1);
    assert.deepEqual(await report, { ready: false, failing: ['stuck'] });
    assert.deepEqual(reasons, ['stuck: no answer within 5000 ms']);
  });

  test('a request to the client (an approval prompt) times out on the connection clock', async () => {
    const clock = new FakeClock();
    const dispatcher: Dispatcher = { request: () => null, notification: () => false, closed() {} };
    const sent: string[] = [];
    const conn = new RpcConnection(
      {
        peer: 'test',
        write(m, done) {
          sent.push(...m.map(String));
          done();
        },
        close() {},
      },
      dispatcher,
      clock,
    );
    const answer = conn.request('item/permissions/requestApproval', {}, 120_000);
    const failed = answer.catch((e: unknown) => e);
    await clock.advance(119_999);
    assert.equal(sent.length, 1);
    await clock.advance(1);
    const e = await failed;
    assert.ok(e instanceof OutboundRequestError);
    assert.match(e.message, /no answer within 120000 ms/);
    assert.equal(clock.pending, 0);
  });

  test('the registry client gives up on a silent registry at its deadline of clock time', async () => {
    const clock = new FakeClock();
    const silent = createServer(() => {}); // accepts the POST, never answers
    const port = await listening(silent);
    try {
      const client = new RegistryClient(
        `http://127.0.0.1:${port}`,
        'env-clock',
        bearerAuth('bearer-secret-0123456789'),
        {
          clock,
        },
      );
      const failed = client.register().then(
        () => new Error('registered'),
        (e: Error) => e,
      );
      await clock.whenPending(1);
      await clock.advance(REGISTRY_REQUEST_TIMEOUT_MS - 1);
      let done = false;
      void failed.then(() => {
        done = true;
      });
      await new Promise((r) => setImmediate(r));
      assert.equal(done, false);
      await clock.advance(1);
      assert.match(
        (await failed).message,
        new RegExp(`did not answer within ${REGISTRY_REQUEST_TIMEOUT_MS} ms`),
      );
    } finally {
      silent.closeAllConnections();
      silent.close();
    }
  });

  test('a fleet link: its initialize times out, and the retry waits out its backoff, both on the clock', async () => {
    const clock = new FakeClock();
    // A joined "server" that accepts the WebSocket and never answers.
    const http = createServer();
    const wss = new WebSocketServer({ server: http });
    const upgrades: number[] = [];
    wss.on('connection', () => upgrades.push(clock.now()));
    const port = await listening(http);
    const states: string[] = [];
    const link = new RemoteLink(
      { url: `ws://127.0.0.1:${port}/`, token: 'panel-token', headers: {} },
      {
        changed: () => states.push(link.state),
        ready: async () => {},
        notification() {},
        rejected() {},
      },
      {
        log: silentLogger,
        clock,
        requestTimeoutMs: 15_000,
        backoffMs: [250, 10_000],
        maxPayload: MAX_PAYLOAD,
      },
    );
    try {
      link.start();
      await until(() => upgrades.length === 1, 10_000, 'the link to connect');
      await clock.whenPending(1); // initialize's timeout
      await clock.advance(14_999);
      assert.equal(link.state, 'connecting');
      await clock.advance(1);
      await until(() => link.state === 'disconnected', 5000, 'the link to give up on initialize');
      assert.match(link.lastError ?? '', /initialize: the server did not answer in time/);
      const wait = link.retryAt! - clock.now();
      assert.ok(wait >= 200 && wait <= 300, `first backoff ${wait} ms (250 ± 20 %)`);
      await clock.advance(wait - 1);
      assert.equal(upgrades.length, 1, 'no retry before the backoff');
      await clock.advance(2); // retryAt is the delay rounded to the ms
      await until(() => upgrades.length === 2, 10_000, 'the retry');
    } finally {
      link.stop();
      for (const c of wss.clients) c.terminate();
      wss.close();
      http.close();
    }
  });
});
