/**
 * The Noise channel of Codex 0.171's remote exec-server transport (`--remote-transport noise`, docs/remote-noise.md):
 * `Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256`, the hybrid IK pattern (X25519 and ML-KEM-768 both feed the keys):
 *
 *   <- s                                  (the executor's static keys, pinned by the harness from the registry)
 *   -> skem, e, es, s, ss                 (harness → executor; its payload is the registry's authorization)
 *   <- ekem, skem, e, ee, se              (executor → harness, empty payload)
 *
 * Token semantics as the hybrid handshake Codex links does them: `e` sends (and hashes) an X25519 and an ML-KEM-768
 * ephemeral public key, `s` encrypts-and-hashes the static X25519 then the static ML-KEM key, `ekem` encapsulates to
 * the peer's ephemeral KEM key (ciphertext sent in clear, MixHash(ct), MixKey(ss)), `skem` encapsulates to the
 * peer's static KEM key (EncryptAndHash(ct), MixKeyAndHash(ss)). The protocol name hashed at the start is
 * `Noise_hybridIK_25519+MLKEM768_AESGCM_SHA256` (the DH is named "25519" there, unlike the suite tag). Then the
 * usual Noise SymmetricState: SHA-256, HKDF per the Noise spec, AES-256-GCM with the nonce 0^32 || n (64-bit
 * big-endian) and the handshake hash as associated data.
 *
 * x25519, ML-KEM-768, SHA-256 and HKDF are @noble's; AES-256-GCM is Node's (OpenSSL): @noble/ciphers' GCM cost
 * ~100 ms of CPU per MiB of records encrypted and decrypted, OpenSSL's a few (test/bench/noise-handshake.bench.ts).
 * Nothing here touches a socket.
 */
import { createCipheriv, createDecipheriv } from 'node:crypto';
import { x25519 } from '@noble/curves/ed25519.js';
import { hkdf } from '@noble/hashes/hkdf.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { ml_kem768 } from '@noble/post-quantum/ml-kem.js';

export const NOISE_CHANNEL_SUITE = 'Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256';
/** What the handshake hashes first (each primitive's Noise name: the DH is "25519"). */
export const NOISE_PROTOCOL_NAME = 'Noise_hybridIK_25519+MLKEM768_AESGCM_SHA256';
export const NOISE_PROLOGUE_DOMAIN = 'codex-exec-server-relay-noise/v1';
/** The Noise spec's limit on one message (handshake or transport). */
export const NOISE_MAX_MESSAGE_LEN = 65535;
export const TAG_LEN = 16;
export const X25519_LEN = 32;
export const MLKEM768_PUBLIC_LEN = 1184;
export const MLKEM768_CIPHERTEXT_LEN = 1088;
/** msg 1 without payload: skem ct (clear) + e (32 + 1184) + s (32+16 + 1184+16) + payload tag. */
export const HANDSHAKE_REQUEST_OVERHEAD =
  MLKEM768_CIPHERTEXT_LEN +
  X25519_LEN +
  MLKEM768_PUBLIC_LEN +
  X25519_LEN +
  TAG_LEN +
  MLKEM768_PUBLIC_LEN +
  TAG_LEN +
  TAG_LEN;
/** msg 2 with its empty payload: ekem ct (clear) + skem ct (+tag) + e + the payload's tag. */
export const HANDSHAKE_RESPONSE_LEN =
  MLKEM768_CIPHERTEXT_LEN + MLKEM768_CIPHERTEXT_LEN + TAG_LEN + X25519_LEN + MLKEM768_PUBLIC_LEN + TAG_LEN;

export class NoiseChannelError extends Error {}

/** The registry's JSON form of a public key (`NoiseChannelPublicKey`: exactly these three fields). */
export interface NoisePublicKeyJson {
  suite: string;
  x25519_public_key: string;
  mlkem768_public_key: string;
}

export interface NoisePublicKey {
  dh: Uint8Array;
  kem: Uint8Array;
}

export interface NoiseIdentity {
  dh: { secretKey: Uint8Array; publicKey: Uint8Array };
  kem: { secretKey: Uint8Array; publicKey: Uint8Array };
}

export function generateIdentity(): NoiseIdentity {
  const dh = x25519.keygen();
  const kem = ml_kem768.keygen();
  return { dh: { secretKey: dh.secretKey, publicKey: dh.publicKey }, kem };
}

export function publicKeyJson(key: NoisePublicKey): NoisePublicKeyJson {
  return {
    suite: NOISE_CHANNEL_SUITE,
    x25519_public_key: Buffer.from(key.dh).toString('base64'),
    mlkem768_public_key: Buffer.from(key.kem).toString('base64'),
  };
}

const B64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

function strictBase64(s: unknown, what: string, len: number): Uint8Array {
  if (typeof s !== 'string' || s.length > 4 * Math.ceil(len / 3) || !B64.test(s))
    throw new NoiseChannelError(`invalid Noise channel public key: invalid ${what}`);
  const bytes = Buffer.from(s, 'base64');
  if (bytes.length !== len)
    throw new NoiseChannelError(`invalid Noise channel public key: invalid ${what} length`);
  return new Uint8Array(bytes);
}

/** Decode a registry-provided key: the suite must match exactly and nothing else may be there (Codex's serde
 * `deny_unknown_fields`), each component strict base64 of its exact length. */
export function decodePublicKey(value: unknown): NoisePublicKey {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new NoiseChannelError('invalid Noise channel public key: not an object');
  const o = value as Record<string, unknown>;
  const keys = Object.keys(o).sort().join(',');
  if (keys !== 'mlkem768_public_key,suite,x25519_public_key')
    throw new NoiseChannelError('invalid Noise channel public key: unexpected fields');
  if (o.suite !== NOISE_CHANNEL_SUITE)
    throw new NoiseChannelError('invalid Noise channel public key: unsupported Noise channel suite');
  return {
    dh: strictBase64(o.x25519_public_key, 'X25519 public key', X25519_LEN),
    kem: strictBase64(o.mlkem768_public_key, 'ML-KEM-768 public key', MLKEM768_PUBLIC_LEN),
  };
}

/** `u64be(len) || part` for the domain, the environment id, the executor registration id and the stream id. */
export function noiseChannelPrologue(
  environmentId: string,
  registrationId: string,
  streamId: string,
): Uint8Array {
  const parts = [NOISE_PROLOGUE_DOMAIN, environmentId, registrationId, streamId].map((p) =>
    Buffer.from(p, 'utf8'),
  );
  const out = Buffer.alloc(parts.reduce((n, p) => n + 8 + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.writeBigUInt64BE(BigInt(p.length), at);
    p.copy(out, at + 8);
    at += 8 + p.length;
  }
  return new Uint8Array(out);
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}

function nonce(n: bigint): Uint8Array {
  const iv = new Uint8Array(12);
  new DataView(iv.buffer).setBigUint64(4, n, false);
  return iv;
}

const MAX_NONCE = 2n ** 64n - 1n;

/** One direction of transport (or the handshake's current key): AES-256-GCM with an implicit counter nonce. */
export class CipherState {
  private n = 0n;
  constructor(private k: Uint8Array | null = null) {}
  hasKey(): boolean {
    return this.k !== null;
  }
  setKey(k: Uint8Array): void {
    this.k = k;
    this.n = 0n;
  }
  encrypt(ad: Uint8Array, plaintext: Uint8Array): Uint8Array {
    if (!this.k) return plaintext;
    if (this.n >= MAX_NONCE) throw new NoiseChannelError('Noise channel transport failed: nonce exhausted');
    const c = createCipheriv('aes-256-gcm', this.k, nonce(this.n));
    c.setAAD(ad);
    const out = Buffer.concat([c.update(plaintext), c.final(), c.getAuthTag()]);
    this.n++;
    return new Uint8Array(out.buffer, out.byteOffset, out.length);
  }
  decrypt(ad: Uint8Array, ciphertext: Uint8Array): Uint8Array {
    if (!this.k) return ciphertext;
    if (this.n >= MAX_NONCE) throw new NoiseChannelError('Noise channel transport failed: nonce exhausted');
    if (ciphertext.length < TAG_LEN)
      throw new NoiseChannelError('invalid Noise channel message: ciphertext is too short');
    let out: Uint8Array;
    try {
      const d = createDecipheriv('aes-256-gcm', this.k, nonce(this.n));
      d.setAAD(ad);
      d.setAuthTag(ciphertext.subarray(ciphertext.length - TAG_LEN));
      const pt = Buffer.concat([d.update(ciphertext.subarray(0, ciphertext.length - TAG_LEN)), d.final()]);
      out = new Uint8Array(pt.buffer, pt.byteOffset, pt.length);
    } catch {
      throw new NoiseChannelError('Noise channel transport failed: decryption failed');
    }
    // The nonce moves only on success: a forged record does not desynchronise the stream (Noise spec 5.1).
    this.n++;
    return out;
  }
}

class SymmetricState {
  private h: Uint8Array;
  private ck: Uint8Array;
  readonly cs = new CipherState();
  constructor(protocolName: string) {
    const name = Buffer.from(protocolName, 'ascii');
    if (name.length <= 32) {
      this.h = new Uint8Array(32);
      this.h.set(name);
    } else this.h = sha256(name);
    this.ck = this.h;
  }
  mixHash(data: Uint8Array): void {
    this.h = sha256(concat(this.h, data));
  }
  private hkdf(ikm: Uint8Array, outputs: 2 | 3): Uint8Array[] {
    const okm = hkdf(sha256, ikm, this.ck, undefined, 32 * outputs);
    return Array.from({ length: outputs }, (_, i) => okm.slice(32 * i, 32 * i + 32));
  }
  mixKey(ikm: Uint8Array): void {
    const [ck, k] = this.hkdf(ikm, 2) as [Uint8Array, Uint8Array];
    this.ck = ck;
    this.cs.setKey(k);
  }
  mixKeyAndHash(ikm: Uint8Array): void {
    const [ck, h, k] = this.hkdf(ikm, 3) as [Uint8Array, Uint8Array, Uint8Array];
    this.ck = ck;
    this.mixHash(h);
    this.cs.setKey(k);
  }
  encryptAndHash(plaintext: Uint8Array): Uint8Array {
    const out = this.cs.encrypt(this.h, plaintext);
    this.mixHash(out);
    return out;
  }
  decryptAndHash(ciphertext: Uint8Array): Uint8Array {
    let out: Uint8Array;
    try {
      out = this.cs.decrypt(this.h, ciphertext);
    } catch {
      throw new NoiseChannelError('Noise channel handshake failed: decryption error');
    }
    this.mixHash(ciphertext);
    return out;
  }
  split(): [CipherState, CipherState] {
    const [k1, k2] = this.hkdf(new Uint8Array(0), 2) as [Uint8Array, Uint8Array];
    return [new CipherState(k1), new CipherState(k2)];
  }
  handshakeHash(): Uint8Array {
    return this.h;
  }
}

function dh(secret: Uint8Array, pub: Uint8Array): Uint8Array {
  let out: Uint8Array;
  try {
    out = x25519.getSharedSecret(secret, pub);
  } catch {
    throw new NoiseChannelError('Noise channel handshake failed: invalid X25519 public key');
  }
  if (out.every((b) => b === 0))
    throw new NoiseChannelError('Noise channel handshake failed: invalid X25519 public key');
  return out;
}

function encapsulate(pub: Uint8Array): { cipherText: Uint8Array; sharedSecret: Uint8Array } {
  try {
    return ml_kem768.encapsulate(pub);
  } catch {
    throw new NoiseChannelError('Noise channel handshake failed: invalid ML-KEM-768 public key');
  }
}

function decapsulate(ct: Uint8Array, secret: Uint8Array): Uint8Array {
  try {
    return ml_kem768.decapsulate(ct, secret);
  } catch {
    throw new NoiseChannelError('Noise channel handshake failed: invalid ML-KEM-768 ciphertext');
  }
}

/** A cursor over a received handshake message: every read is bounds-checked. */
class Reader {
  private at = 0;
  constructor(private readonly buf: Uint8Array) {}
  take(n: number): Uint8Array {
    if (this.at + n > this.buf.length)
      throw new NoiseChannelError('invalid Noise channel message: handshake message is truncated');
    const out = this.buf.subarray(this.at, this.at + n);
    this.at += n;
    return out;
  }
  rest(): Uint8Array {
    const out = this.buf.subarray(this.at);
    this.at = this.buf.length;
    return out;
  }
}

function initialState(prologue: Uint8Array, responderStatic: NoisePublicKey): SymmetricState {
  const ss = new SymmetricState(NOISE_PROTOCOL_NAME);
  ss.mixHash(prologue);
  // Pre-message `<- s`: the responder's static DH key then its static KEM key.
  ss.mixHash(responderStatic.dh);
  ss.mixHash(responderStatic.kem);
  return ss;
}

/** The tokens `skem, e` as a sender: encapsulate to the peer's static KEM key (EncryptAndHash(ct),
 * MixKeyAndHash(ss)), then a fresh X25519 and ML-KEM ephemeral, each public key hashed and sent. */
function writeSkemThenE(ss: SymmetricState, parts: Uint8Array[], peerStaticKem: Uint8Array) {
  const skem = encapsulate(peerStaticKem);
  parts.push(ss.encryptAndHash(skem.cipherText));
  ss.mixKeyAndHash(skem.sharedSecret);
  const e = x25519.keygen();
  const eKem = ml_kem768.keygen();
  ss.mixHash(e.publicKey);
  parts.push(e.publicKey);
  ss.mixHash(eKem.publicKey);
  parts.push(eKem.publicKey);
  return { e, eKem };
}

/** The established channel: independent send and receive nonces; records must be decrypted in order. */
export class NoiseTransport {
  constructor(
    private readonly send: CipherState,
    private readonly recv: CipherState,
    /** The handshake hash (channel binding), for tests. */
    readonly handshakeHash: Uint8Array,
  ) {}
  encrypt(plaintext: Uint8Array): Uint8Array {
    if (plaintext.length + TAG_LEN > NOISE_MAX_MESSAGE_LEN)
      throw new NoiseChannelError('invalid Noise channel message: transport plaintext is too large');
    return this.send.encrypt(new Uint8Array(0), plaintext);
  }
  decrypt(ciphertext: Uint8Array): Uint8Array {
    if (ciphertext.length < TAG_LEN)
      throw new NoiseChannelError('invalid Noise channel message: transport ciphertext is too short');
    if (ciphertext.length > NOISE_MAX_MESSAGE_LEN)
      throw new NoiseChannelError('invalid Noise channel message: transport ciphertext is too large');
    return this.recv.decrypt(new Uint8Array(0), ciphertext);
  }
}

/** Harness side (the initiator): pins the executor's key from the registry, sends the authorization in msg 1. */
export class InitiatorHandshake {
  private constructor(
    private readonly ss: SymmetricState,
    private readonly identity: NoiseIdentity,
    private readonly e: { secretKey: Uint8Array; publicKey: Uint8Array },
    private readonly eKem: { secretKey: Uint8Array; publicKey: Uint8Array },
  ) {}

  static start(
    identity: NoiseIdentity,
    responder: NoisePublicKey,
    prologue: Uint8Array,
    payload: Uint8Array,
  ): { handshake: InitiatorHandshake; request: Uint8Array } {
    if (payload.length > NOISE_MAX_MESSAGE_LEN - HANDSHAKE_REQUEST_OVERHEAD)
      throw new NoiseChannelError('invalid Noise channel message: handshake payload is too large');
    const ss = initialState(prologue, responder);
    const parts: Uint8Array[] = [];
    // skem: encapsulate to the responder's static KEM key (no key yet: the ciphertext goes in clear).
    const { e, eKem } = writeSkemThenE(ss, parts, responder.kem);
    // es
    ss.mixKey(dh(e.secretKey, responder.dh));
    // s
    parts.push(ss.encryptAndHash(identity.dh.publicKey));
    parts.push(ss.encryptAndHash(identity.kem.publicKey));
    // ss
    ss.mixKey(dh(identity.dh.secretKey, responder.dh));
    parts.push(ss.encryptAndHash(payload));
    return { handshake: new InitiatorHandshake(ss, identity, e, eKem), request: Buffer.concat(parts) };
  }

  /** Read msg 2 and enter transport mode; its payload must be empty (v1). */
  finish(response: Uint8Array): NoiseTransport {
    if (response.length > NOISE_MAX_MESSAGE_LEN)
      throw new NoiseChannelError('invalid Noise channel message: handshake response is too large');
    if (response.length !== HANDSHAKE_RESPONSE_LEN)
      throw new NoiseChannelError(
        response.length > HANDSHAKE_RESPONSE_LEN
          ? 'invalid Noise channel message: handshake response payload must be empty'
          : 'invalid Noise channel message: handshake message is truncated',
      );
    const ss = this.ss;
    const r = new Reader(response);
    // ekem
    const ekemCt = r.take(MLKEM768_CIPHERTEXT_LEN);
    ss.mixHash(ekemCt);
    ss.mixKey(decapsulate(ekemCt, this.eKem.secretKey));
    // skem (to our static KEM key)
    const skemCt = ss.decryptAndHash(r.take(MLKEM768_CIPHERTEXT_LEN + TAG_LEN));
    ss.mixKeyAndHash(decapsulate(skemCt, this.identity.kem.secretKey));
    // e
    const re = r.take(X25519_LEN);
    ss.mixHash(re);
    ss.mixHash(r.take(MLKEM768_PUBLIC_LEN));
    // ee, se
    ss.mixKey(dh(this.e.secretKey, re));
    ss.mixKey(dh(this.identity.dh.secretKey, re));
    const payload = ss.decryptAndHash(r.rest());
    if (payload.length !== 0)
      throw new NoiseChannelError('invalid Noise channel message: handshake response payload must be empty');
    const [c1, c2] = ss.split();
    return new NoiseTransport(c1, c2, ss.handshakeHash());
  }
}

/** Executor side (the responder) after msg 1: the harness's key is authenticated, not yet authorised. Only
 * {@link complete} (after the registry said yes) produces a transport. */
export class PendingResponderHandshake {
  private constructor(
    private readonly ss: SymmetricState,
    private readonly rs: NoisePublicKey,
    private readonly reKem: Uint8Array,
    private readonly re: Uint8Array,
    /** The harness's static key, authenticated by msg 1. */
    readonly initiatorPublicKey: NoisePublicKey,
    /** msg 1's payload: the registry's harness-key authorization. */
    readonly payload: Uint8Array,
  ) {}

  static readRequest(
    identity: NoiseIdentity,
    prologue: Uint8Array,
    request: Uint8Array,
  ): PendingResponderHandshake {
    if (request.length > NOISE_MAX_MESSAGE_LEN)
      throw new NoiseChannelError('invalid Noise channel message: handshake request is too large');
    if (request.length < HANDSHAKE_REQUEST_OVERHEAD)
      throw new NoiseChannelError('invalid Noise channel message: handshake message is truncated');
    const ss = initialState(prologue, { dh: identity.dh.publicKey, kem: identity.kem.publicKey });
    const r = new Reader(request);
    // skem (in clear: no key yet)
    const skemCt = ss.decryptAndHash(r.take(MLKEM768_CIPHERTEXT_LEN));
    ss.mixKeyAndHash(decapsulate(skemCt, identity.kem.secretKey));
    // e
    const re = new Uint8Array(r.take(X25519_LEN));
    ss.mixHash(re);
    const reKem = new Uint8Array(r.take(MLKEM768_PUBLIC_LEN));
    ss.mixHash(reKem);
    // es
    ss.mixKey(dh(identity.dh.secretKey, re));
    // s
    const rsDh = ss.decryptAndHash(r.take(X25519_LEN + TAG_LEN));
    const rsKem = ss.decryptAndHash(r.take(MLKEM768_PUBLIC_LEN + TAG_LEN));
    // ss
    ss.mixKey(dh(identity.dh.secretKey, rsDh));
    const payload = ss.decryptAndHash(r.rest());
    const rs = { dh: new Uint8Array(rsDh), kem: new Uint8Array(rsKem) };
    return new PendingResponderHandshake(ss, rs, reKem, re, rs, payload);
  }

  /** Write msg 2 (empty payload) and enter transport mode. */
  complete(): { transport: NoiseTransport; response: Uint8Array } {
    const ss = this.ss;
    const parts: Uint8Array[] = [];
    // ekem: to the harness's ephemeral KEM key
    const ekem = encapsulate(this.reKem);
    ss.mixHash(ekem.cipherText);
    parts.push(ekem.cipherText);
    ss.mixKey(ekem.sharedSecret);
    // skem (to the harness's static KEM key), e
    const { e } = writeSkemThenE(ss, parts, this.rs.kem);
    // ee, se
    ss.mixKey(dh(e.secretKey, this.re));
    ss.mixKey(dh(e.secretKey, this.rs.dh));
    parts.push(ss.encryptAndHash(new Uint8Array(0)));
    const [c1, c2] = ss.split();
    return { transport: new NoiseTransport(c2, c1, ss.handshakeHash()), response: Buffer.concat(parts) };
  }
}
