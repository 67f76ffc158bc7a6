/**
 * The Noise transport's parsers and handshake fed hostile input (src/remote/relayFrame.ts, noiseChannel.ts,
 * noiseStream.ts, noiseExecutor.ts, registry.ts): huge, deep, truncated, bit-flipped, replayed, reordered and
 * wrong-key frames; a registry answering nonsense; a harness key the registry did not vouch for. Nothing throws
 * anything but the module's own errors, nothing crashes, no authorization or token appears in what is logged.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, describe, it } from 'node:test';
import type { WebSocket } from 'ws';
import { noAuth } from '../../src/remote/auth.js';
import {
  decodePublicKey,
  generateIdentity,
  HANDSHAKE_REQUEST_OVERHEAD,
  InitiatorHandshake,
  NoiseChannelError,
  noiseChannelPrologue,
  PendingResponderHandshake,
  publicKeyJson,
} from '../../src/remote/noiseChannel.js';
import { serveNoiseLink } from '../../src/remote/noiseExecutor.js';
import {
  JsonRpcMessageDecoder,
  NoiseStreamError,
  OrderedCiphertextFrames,
} from '../../src/remote/noiseStream.js';
import { RegistryClient, RegistryError } from '../../src/remote/registry.js';
import {
  decodeRelayFrame,
  encodeRelayFrame,
  MAX_RELAY_FRAME_BYTES,
  RelayFrameError,
  relayData,
  relayHandshake,
  validateRelayFrame,
} from '../../src/remote/relayFrame.js';
import { startNoiseRegistry } from '../helpers/noiseRegistry.js';

const executor = generateIdentity();
const harness = generateIdentity();
const executorKey = { dh: executor.dh.publicKey, kem: executor.kem.publicKey };
const prologue = noiseChannelPrologue('env', 'reg-1', 'stream-1');

function pair(payload = 'authz-token-secret') {
  const { handshake, request } = InitiatorHandshake.start(
    harness,
    executorKey,
    prologue,
    Buffer.from(payload),
  );
  const pending = PendingResponderHandshake.readRequest(executor, prologue, request);
  const { transport: exec, response } = pending.complete();
  return { harnessT: handshake.finish(response), exec, request, response, pending };
}

const ownError = (e: unknown) =>
  e instanceof NoiseChannelError || e instanceof RelayFrameError || e instanceof NoiseStreamError;

describe('relay frames: the hand protobuf codec', () => {
  it('round-trips every body, and Codex validate() texts', () => {
    const f = relayData('s', 7, Buffer.from('x'));
    const back = decodeRelayFrame(encodeRelayFrame(f));
    assert.equal(validateRelayFrame(back).kind, 'data');
    assert.deepEqual(Buffer.from(encodeRelayFrame(back)), Buffer.from(encodeRelayFrame(f)));
    assert.throws(
      () => validateRelayFrame({ ...f, version: 2 }),
      /unsupported relay message frame version 2/,
    );
    assert.throws(() => validateRelayFrame({ ...f, streamId: ' s' }), /not canonical/);
    assert.throws(() => validateRelayFrame({ ...f, streamId: 'x'.repeat(129) }), /too long/);
    assert.throws(() => validateRelayFrame({ ...f, body: null }), /missing body/);
    assert.throws(() => validateRelayFrame(relayHandshake('s', new Uint8Array(0))), /missing payload/);
  });

  it('huge, deep, truncated and random input: only RelayFrameError, never a crash or a hang', () => {
    assert.throws(() => decodeRelayFrame(new Uint8Array(MAX_RELAY_FRAME_BYTES + 1)), RelayFrameError);
    // "Deep": a body nested in a body nested in … (protobuf has no depth the codec follows: one level, then bytes).
    let deep: Uint8Array = encodeRelayFrame(relayData('s', 1, Buffer.from('p')));
    for (let i = 0; i < 2000 && deep.length < 200_000; i++)
      deep = Uint8Array.from([0x2a, ...varintBytes(deep.length), ...deep]);
    try {
      decodeRelayFrame(deep);
    } catch (e) {
      assert.ok(e instanceof RelayFrameError);
    }
    // A length that claims 2^32 bytes, a varint of 11 bytes, groups.
    for (const bad of [
      [0x12, 0xff, 0xff, 0xff, 0xff, 0x0f],
      [0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
      [0x0b],
      [0x00, 0x01],
    ])
      assert.throws(() => decodeRelayFrame(Uint8Array.from(bad)), RelayFrameError);
    const good = encodeRelayFrame(relayData('stream', 3, randomBytes(100)));
    for (let cut = 0; cut < good.length; cut++) {
      try {
        validateRelayFrame(decodeRelayFrame(good.subarray(0, cut)));
      } catch (e) {
        assert.ok(ownError(e), String(e));
      }
    }
    for (let i = 0; i < 3000; i++) {
      try {
        decodeRelayFrame(randomBytes(1 + (i % 300)));
      } catch (e) {
        assert.ok(ownError(e), String(e));
      }
    }
  });
});

function varintBytes(n: number): number[] {
  const out: number[] = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  out.push(n);
  return out;
}

describe('hybrid IK handshake', () => {
  it('completes both ways with the same handshake hash; the authorization arrives in msg 1', () => {
    const { harnessT, exec, pending } = pair();
    assert.deepEqual(harnessT.handshakeHash, exec.handshakeHash);
    assert.equal(Buffer.from(pending.payload).toString(), 'authz-token-secret');
    assert.deepEqual(
      publicKeyJson(pending.initiatorPublicKey),
      publicKeyJson({ dh: harness.dh.publicKey, kem: harness.kem.publicKey }),
    );
    assert.equal(Buffer.from(exec.decrypt(harnessT.encrypt(Buffer.from('hi')))).toString(), 'hi');
  });

  it('every bit flip, every truncation of msg 1 and msg 2 is refused with a NoiseChannelError', () => {
    const { request } = InitiatorHandshake.start(harness, executorKey, prologue, Buffer.from('a'));
    // Flip one bit in each region (skem ct, e, s, ss payload) and at random.
    const spots = [0, 500, 1088, 1100, 1088 + 32 + 10, 2400, 3000, request.length - 1];
    for (let i = 0; i < 20; i++) spots.push(Math.floor(Math.random() * request.length));
    for (const at of spots) {
      const bad = Uint8Array.from(request);
      bad[at]! ^= 0x01;
      assert.throws(
        () => PendingResponderHandshake.readRequest(executor, prologue, bad),
        NoiseChannelError,
        `bit at ${at}`,
      );
    }
    for (const cut of [0, 1, 1087, HANDSHAKE_REQUEST_OVERHEAD - 1, request.length - 1])
      assert.throws(
        () => PendingResponderHandshake.readRequest(executor, prologue, request.subarray(0, cut)),
        NoiseChannelError,
      );
    assert.throws(
      () => PendingResponderHandshake.readRequest(executor, prologue, new Uint8Array(70_000)),
      /too large/,
    );
    // A request for another stream (prologue) or another executor key: refused.
    assert.throws(
      () =>
        PendingResponderHandshake.readRequest(
          executor,
          noiseChannelPrologue('env', 'reg-1', 'stream-2'),
          request,
        ),
      NoiseChannelError,
    );
    assert.throws(
      () => PendingResponderHandshake.readRequest(generateIdentity(), prologue, request),
      NoiseChannelError,
    );
    // msg 2 flipped or cut: the harness refuses it.
    const { handshake, request: r2 } = InitiatorHandshake.start(
      harness,
      executorKey,
      prologue,
      Buffer.from('a'),
    );
    const { response } = PendingResponderHandshake.readRequest(executor, prologue, r2).complete();
    for (const at of [0, 1088, 2200, response.length - 1]) {
      const bad = Uint8Array.from(response);
      bad[at]! ^= 0x80;
      assert.throws(() => handshake.finish(bad), NoiseChannelError);
    }
    assert.throws(() => handshake.finish(response.subarray(0, 100)), NoiseChannelError);
  });

  it('registry keys: wrong suite, extra fields, bad base64, wrong lengths are refused', () => {
    const good = publicKeyJson(executorKey);
    assert.deepEqual(decodePublicKey(good).dh, executorKey.dh);
    for (const bad of [
      { ...good, suite: 'Noise_IK_25519_AESGCM_SHA256' },
      { ...good, extra: 1 },
      { ...good, x25519_public_key: `${good.x25519_public_key}AAAA` },
      { ...good, x25519_public_key: '!!!!' },
      { ...good, mlkem768_public_key: 'A'.repeat(10_000_000) },
      null,
      [good],
    ])
      assert.throws(() => decodePublicKey(bad), NoiseChannelError);
  });

  it('transport: replayed, reordered, forged and bit-flipped records are refused; the stream keeps its place', () => {
    const { harnessT, exec } = pair();
    const a = harnessT.encrypt(Buffer.from('one'));
    const b = harnessT.encrypt(Buffer.from('two'));
    assert.throws(() => exec.decrypt(b), NoiseChannelError); // out of order
    const flipped = Uint8Array.from(a);
    flipped[0]! ^= 1;
    assert.throws(() => exec.decrypt(flipped), NoiseChannelError);
    assert.equal(Buffer.from(exec.decrypt(a)).toString(), 'one'); // a failure did not move the nonce
    assert.throws(() => exec.decrypt(a), NoiseChannelError); // replay
    assert.equal(Buffer.from(exec.decrypt(b)).toString(), 'two');
    assert.throws(() => exec.decrypt(new Uint8Array(5)), /too short/);
  });

  it('reorder window and reassembly bounds', () => {
    const o = new OrderedCiphertextFrames();
    assert.deepEqual(o.push(1, Buffer.from('b')), []);
    assert.deepEqual(o.push(1, Buffer.from('B')), []); // duplicate kept once
    assert.deepEqual(
      o.push(0, Buffer.from('a')).map((x) => Buffer.from(x).toString()),
      ['a', 'b'],
    );
    assert.deepEqual(o.push(0, Buffer.from('a')), []); // replay of a released one
    assert.throws(() => o.push(200, Buffer.from('x')), /reorder window/);
    const big = new OrderedCiphertextFrames();
    assert.throws(() => {
      for (let i = 1; i <= 64; i++) big.push(i, new Uint8Array(20_000));
    }, /buffer is full/);
    const d = new JsonRpcMessageDecoder();
    assert.throws(() => d.push(Uint8Array.from([0, 0, 0, 0])), /invalid length/);
    assert.throws(
      () => new JsonRpcMessageDecoder().push(Uint8Array.from([0xff, 0xff, 0xff, 0xff])),
      /invalid length/,
    );
    assert.throws(
      () => new JsonRpcMessageDecoder().push(new Uint8Array(61 * 1024)),
      /exceeds maximum length/,
    );
  });
});

/** A fake physical link: what the executor sends is kept; `deliver` plays the relay. */
function fakeLink() {
  const sent: Uint8Array[] = [];
  const handlers: ((d: Buffer, bin: boolean) => void)[] = [];
  const ws = {
    OPEN: 1,
    readyState: 1,
    send(d: Uint8Array, _o: unknown, cb?: () => void) {
      sent.push(d);
      cb?.();
    },
    ping() {},
    close() {
      ws.readyState = 3;
    },
    on(ev: string, f: (d: Buffer, bin: boolean) => void) {
      if (ev === 'message') handlers.push(f);
    },
  };
  return {
    ws: ws as unknown as WebSocket & { readyState: number },
    sent,
    deliver: (bytes: Uint8Array, bin = true) => {
      for (const h of handlers) h(Buffer.from(bytes), bin);
    },
  };
}

describe('the executor link (serveNoiseLink) under a hostile relay and harness', () => {
  const logs: string[] = [];
  const log = {
    error: (m: string) => logs.push(m),
    warn: (m: string) => logs.push(m),
    info: (m: string) => logs.push(m),
    debug: (m: string) => logs.push(m),
  } as unknown as Parameters<typeof serveNoiseLink>[2]['log'];
  const reg = { environmentId: 'env', registrationId: 'reg-1', url: new URL('ws://127.0.0.1:1/') };

  const clock = { now: 1_000_000 };
  function link(validate: (key: unknown, authz: string) => Promise<void>) {
    const l = fakeLink();
    const received: string[] = [];
    let opened = 0;
    const served = serveNoiseLink(l.ws, reg, {
      identity: executor,
      validate: (_r, key, authz) => validate(key, authz),
      log,
      open: () => {
        opened++;
        return { receive: (t: string) => received.push(t), transportClosed() {} } as never;
      },
      setTimeout: (f, ms) => setTimeout(f, ms),
      setInterval: (f, ms) => setInterval(f, ms).unref(),
      clearTimeout: (t) => clearTimeout(t as NodeJS.Timeout),
      now: () => clock.now,
    });
    return { ...l, received, opened: () => opened, served };
  }
  const frames = (sent: Uint8Array[]) => sent.map((b) => decodeRelayFrame(b));
  const settle = () => new Promise((r) => setImmediate(r));
  after(() => {
    // No authorization token ever reaches the log.
    assert.ok(!logs.some((l) => l.includes('authz-token-secret')), logs.join('\n'));
  });

  it('a harness the registry did not vouch for gets a reset and no stream; garbage frames are dropped', async () => {
    const l = link(async () => {
      throw new RegistryError('environment registry rejected Noise relay harness key', 200, false);
    });
    l.deliver(randomBytes(300));
    l.deliver(Buffer.from('{"method":"initialize"}'), false);
    l.deliver(encodeRelayFrame(relayData('s1', 0, Buffer.from('data before handshake'))));
    const { request } = InitiatorHandshake.start(
      harness,
      executorKey,
      noiseChannelPrologue('env', 'reg-1', 's2'),
      Buffer.from('authz-token-secret'),
    );
    l.deliver(encodeRelayFrame(relayHandshake('s2', request)));
    await settle();
    await settle();
    const fs = frames(l.sent);
    assert.deepEqual(
      fs.map((f) => [f.streamId, f.body?.kind]),
      [
        ['s1', 'reset'],
        ['s2', 'reset'],
      ],
    );
    assert.equal(l.opened(), 0);
    l.served.closed();
  });

  it('a vouched harness: replayed, reordered and forged data; a duplicate handshake; eight failures pause handshakes 10 s', async () => {
    const l = link(async () => {});
    const p = noiseChannelPrologue('env', 'reg-1', 's');
    const { handshake, request } = InitiatorHandshake.start(
      harness,
      executorKey,
      p,
      Buffer.from('authz-token-secret'),
    );
    l.deliver(encodeRelayFrame(relayHandshake('s', request)));
    await settle();
    await settle();
    const hsFrame = frames(l.sent).find((f) => f.body?.kind === 'handshake')!;
    const t = handshake.finish((hsFrame.body as { payload: Uint8Array }).payload);
    const rec = (text: string) => {
      const body = Buffer.from(text);
      const framed = Buffer.alloc(4 + body.length);
      framed.writeUInt32BE(body.length);
      body.copy(framed, 4);
      return t.encrypt(framed);
    };
    const one = rec('{"id":1,"method":"a"}');
    const two = rec('{"id":2,"method":"b"}');
    l.deliver(encodeRelayFrame(relayData('s', 1, two))); // reordered: held
    l.deliver(encodeRelayFrame(relayData('s', 0, one)));
    l.deliver(encodeRelayFrame(relayData('s', 0, one))); // replay: dropped
    assert.deepEqual(l.received, ['{"id":1,"method":"a"}', '{"id":2,"method":"b"}']);
    // The same stream id again while it is open: reset.
    l.deliver(encodeRelayFrame(relayHandshake('s', request)));
    // A forged record: the stream is reset.
    l.deliver(encodeRelayFrame(relayData('s', 2, randomBytes(64))));
    const kinds = frames(l.sent).map((f) => f.body?.kind);
    assert.equal(kinds.filter((k) => k === 'reset').length, 2);
    // Replaying msg 1 on eight new stream ids (prologue mismatch): handshakes pause (Codex 0.171), the link stays.
    for (let i = 0; i < 8; i++) l.deliver(encodeRelayFrame(relayHandshake(`r${i}`, request)));
    assert.equal(l.ws.readyState, 1);
    const good = (id: string) =>
      InitiatorHandshake.start(
        harness,
        executorKey,
        noiseChannelPrologue('env', 'reg-1', id),
        Buffer.from('authz-token-secret'),
      ).request;
    const before = l.sent.length;
    l.deliver(encodeRelayFrame(relayHandshake('g1', good('g1'))));
    await settle();
    await settle();
    assert.deepEqual(
      frames(l.sent.slice(before)).map((f) => [f.streamId, f.body?.kind]),
      [['g1', 'reset']],
    );
    clock.now += 10_001; // the pause is over: a good handshake is answered
    l.deliver(encodeRelayFrame(relayHandshake('g2', good('g2'))));
    await settle();
    await settle();
    assert.ok(frames(l.sent).some((f) => f.streamId === 'g2' && f.body?.kind === 'handshake'));
    l.served.closed();
  });
});

describe('a hostile registry', () => {
  const stops: (() => Promise<void>)[] = [];
  after(async () => {
    for (const s of stops) await s();
  });
  const key = publicKeyJson(executorKey);

  it('registration answers that are nonsense fail clearly; validation answers that are not {valid:true} refuse', async () => {
    const answers = [
      { status: 200, body: 'not json' },
      {
        status: 200,
        body: '{"environment_id":"env","url":"","security_profile":"noise_hybrid_ik_v1","executor_registration_id":"r"}',
      },
      {
        status: 200,
        body: '{"environment_id":"other","url":"ws://127.0.0.1:1/","security_profile":"noise_hybrid_ik_v1","executor_registration_id":"r"}',
      },
      {
        status: 200,
        body: '{"environment_id":"env","url":"ws://127.0.0.1:1/","security_profile":"plaintext","executor_registration_id":"r"}',
      },
      {
        status: 200,
        body: '{"environment_id":"env","url":"ws://evil.example:1/","security_profile":"noise_hybrid_ik_v1","executor_registration_id":"r"}',
      },
      {
        status: 200,
        body: `{"environment_id":"env","url":"ws://127.0.0.1:1/","security_profile":"noise_hybrid_ik_v1","executor_registration_id":"${'r'.repeat(5000)}"}`,
      },
      { status: 500, body: '{"error":{"code":"x","message":"\u001b[31mred"}}' },
    ];
    for (const a of answers) {
      const r = await startNoiseRegistry({ registerAnswer: () => a });
      stops.push(() => r.close());
      const client = new RegistryClient(r.url, 'env', noAuth(), { noiseKey: key });
      await assert.rejects(client.register(), (e: Error) => {
        assert.ok(e instanceof RegistryError, e.message);
        assert.ok(!e.message.includes('\u001b'), e.message);
        return true;
      });
    }
    for (const a of [
      { status: 200, body: '{"valid":"yes"}' },
      { status: 200, body: '{"valid":false}' },
      { status: 200, body: '[]' },
      { status: 403, body: '{"valid":true}' },
      { status: 200, body: 'x'.repeat(200_000) },
    ]) {
      const r = await startNoiseRegistry({ validateAnswer: () => a });
      stops.push(() => r.close());
      const client = new RegistryClient(r.url, 'env', noAuth(), { noiseKey: key });
      await assert.rejects(client.validateHarnessKey('reg-1', key, 'authz-token-secret'), (e: Error) => {
        assert.match(e.message, /harness key/);
        assert.ok(!e.message.includes('authz-token-secret'));
        return true;
      });
    }
  });
});
