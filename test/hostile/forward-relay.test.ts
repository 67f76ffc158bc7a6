/**
 * The forward relay (src/remote/forward.ts, issue 35) fed hostile traffic from the harness side of the registry
 * stand-in: malformed and binary frames pass through unchanged and in order (the relay parses nothing); 5000 frames
 * arrive in order; a destination that never completes its handshake gets nothing while the harness's held frames stay
 * bounded (past MAX_PENDING_BYTES the link is closed) and the forwarder serves the next link; over Noise the same
 * bound resets the stream and the link serves the next one. Loopback only.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import http from 'node:http';
import type net from 'node:net';
import { after, describe, it } from 'node:test';
import { type RawData, WebSocket, WebSocketServer } from 'ws';
import { MAX_PENDING_BYTES } from '../../src/remote/forward.js';
import { startForwardRig, startNoiseForwardRig } from '../helpers/forwarder.js';
import { until } from '../helpers/server.js';

const ENV = 'env-hostile-forward';

/** A WebSocket destination that takes upgrades and never answers them. */
async function silentDestination(): Promise<{ url: string; close(): void }> {
  const stuck = new Set<net.Socket>();
  const server = http.createServer();
  server.on('upgrade', (_req, socket: net.Socket) => {
    stuck.add(socket); // never answered
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `ws://127.0.0.1:${(server.address() as net.AddressInfo).port}/`,
    close() {
      for (const sock of stuck) sock.destroy();
      server.close();
    },
  };
}

async function rig(connect: string) {
  const { registry, fwd } = await startForwardRig(ENV, connect, 20);
  return {
    registry,
    fwd,
    async harness() {
      await registry.waitForExecutor(ENV);
      const ws = new WebSocket(registry.harnessUrl(ENV), { maxPayload: 64 * 1024 * 1024 });
      await once(ws, 'open');
      return ws;
    },
    async close() {
      fwd.stop();
      await fwd.done.catch(() => {});
      await registry.close();
    },
  };
}

describe('forward relay under hostile frames', () => {
  const cleanups: (() => Promise<void>)[] = [];
  after(async () => {
    for (const f of cleanups.reverse()) await f();
  });

  it('malformed, binary, huge and 5000 small frames reach the destination unchanged and in order', async () => {
    const got: { data: string; binary: boolean }[] = [];
    const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, maxPayload: 64 * 1024 * 1024 });
    wss.on('connection', (ws) =>
      ws.on('message', (d: RawData, binary) => got.push({ data: d.toString('latin1'), binary })),
    );
    await once(wss, 'listening');
    const r = await rig(`ws://127.0.0.1:${(wss.address() as net.AddressInfo).port}/`);
    cleanups.push(async () => {
      await r.close();
      wss.close();
    });
    const h = await r.harness();
    const frames: { data: string | Buffer; binary: boolean }[] = [
      { data: '{"jsonrpc":', binary: false },
      { data: `${'['.repeat(100_000)}`, binary: false },
      // Binary stays binary (the stand-in relay re-encodes frames as UTF-8, so the bytes here are valid UTF-8).
      { data: Buffer.from('\u0000bin\u00ff\u2713'), binary: true },
      { data: 'x'.repeat(4 * 1024 * 1024), binary: false },
      ...Array.from({ length: 5000 }, (_, i) => ({ data: `{"i":${i}}`, binary: false })),
    ];
    for (const f of frames) h.send(f.data, { binary: f.binary });
    await until(() => got.length === frames.length, 30_000, 'every frame at the destination');
    frames.forEach((f, i) => {
      const want =
        typeof f.data === 'string' ? Buffer.from(f.data).toString('latin1') : f.data.toString('latin1');
      assert.equal(got[i]!.binary, f.binary, `frame ${i}`);
      assert.equal(got[i]!.data, want, `frame ${i}`);
    });
    h.close();
  });

  it('a destination that never answers its handshake: held frames are bounded, the link closed, the next one served', async () => {
    const dest = await silentDestination();
    const r = await rig(dest.url);
    cleanups.push(async () => {
      await r.close();
      dest.close();
    });
    const h = await r.harness();
    const closed = once(h, 'close');
    const chunk = 'y'.repeat(8 * 1024 * 1024);
    for (let sent = 0; sent <= MAX_PENDING_BYTES + chunk.length; sent += chunk.length) {
      if (h.readyState !== h.OPEN) break;
      h.send(chunk);
    }
    await closed;
    // The forwarder dials a new link and serves it: the registry sees an idle executor again.
    await r.registry.waitForExecutor(ENV);
  });

  it('noise: a destination that never answers: the held messages are bounded (the stream reset), the link serves the next stream', async () => {
    const dest = await silentDestination();
    const { registry, fwd } = await startNoiseForwardRig(ENV, dest.url, 20);
    cleanups.push(async () => {
      fwd.stop();
      await fwd.done.catch(() => {});
      await registry.close();
      dest.close();
    });
    await registry.waitForExecutor(ENV);
    const h = new WebSocket(registry.harnessUrl(ENV));
    await once(h, 'open');
    const closed = once(h, 'close');
    // The stand-in harness takes messages of at most 256 KiB; each is one JSON-RPC message inside the stream.
    const chunk = JSON.stringify({ method: 'x', params: 'y'.repeat(200 * 1024) });
    for (let sent = 0; sent <= MAX_PENDING_BYTES + chunk.length; sent += chunk.length) {
      if (h.readyState !== h.OPEN) break;
      h.send(chunk);
    }
    const [code] = (await closed) as [number];
    assert.equal(code, 1011); // the stand-in closes the harness's socket when the executor resets its stream
    assert.ok(registry.resets.some((r) => r.reason === 'noise_relay_protocol_error'));
    // The same link serves the next stream (a new handshake is answered).
    const next = await registry.handshake({});
    assert.ok(next.transport, `the next stream was not served: ${next.reset}`);
    assert.equal(registry.requests.filter((r) => r.kind === 'rendezvous').length, 1);
  });
});
