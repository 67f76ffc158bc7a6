/**
 * The per-server-process certificate authority of TLS interception (issue 34, item 1): an ECDSA P-256 key made at
 * start and held in memory only (never written, never passed to a child), its self-signed certificate, and leaves
 * minted on demand for the hosts the proxy intercepts, each kept as a ready SecureContext in a small LRU.
 *
 * Certificates are DER encoded here (der.ts) and signed with `crypto.sign`: measured at ~0.1 ms a leaf plus ~0.3 ms
 * for its SecureContext (`npm run bench -- mitm`). What strict verifiers want, and Codex's leaves lack (openai/codex
 * #45202: Python ≥ 3.13 sets VERIFY_X509_STRICT): the CA has a critical basicConstraints (CA, pathLen 0), a critical
 * keyUsage keyCertSign|cRLSign and a subjectKeyIdentifier; a leaf has SAN (DNS or IP), EKU serverAuth, keyUsage
 * digitalSignature, basicConstraints CA:false, and both SKI and authorityKeyIdentifier; serials are random; a leaf
 * is valid for 7 days starting an hour back (clock skew).
 */
import { createHash, generateKeyPairSync, type KeyObject, randomBytes, sign } from 'node:crypto';
import { isIPv4, isIPv6 } from 'node:net';
import tls from 'node:tls';
import { bits, bool, explicit, implicit, octets, oid, seq, set, smallInt, time, uint, utf8 } from './der.js';

const OID = {
  ecdsaWithSha256: '1.2.840.10045.4.3.2',
  commonName: '2.5.4.3',
  organization: '2.5.4.10',
  subjectKeyId: '2.5.29.14',
  keyUsage: '2.5.29.15',
  subjectAltName: '2.5.29.17',
  basicConstraints: '2.5.29.19',
  authorityKeyId: '2.5.29.35',
  extKeyUsage: '2.5.29.37',
  serverAuth: '1.3.6.1.5.5.7.3.1',
} as const;

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
/** A leaf is valid this long (notBefore an hour back included). */
export const LEAF_VALIDITY_MS = 7 * DAY;
/** A cached leaf with less than this left is minted again. */
const LEAF_RENEW_MS = DAY;
const CA_VALIDITY_MS = 365 * DAY;
/** How many hosts' SecureContexts are kept. */
export const LEAF_CACHE_SIZE = 1024;
/** An X.520 CommonName is at most 64 characters; a longer host is named by its SAN alone. */
const MAX_CN = 64;

interface KeyPair {
  readonly privateKey: KeyObject;
  /** SubjectPublicKeyInfo, DER. */
  readonly spki: Buffer;
  /** RFC 5280 §4.2.1.2 method 1: SHA-1 of the public key's bits. */
  readonly keyId: Buffer;
}

function p256(): KeyPair {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const spki = publicKey.export({ type: 'spki', format: 'der' });
  // A P-256 SPKI ends with the BIT STRING of the 65-byte uncompressed point.
  const point = spki.subarray(spki.length - 65);
  return { privateKey, spki, keyId: createHash('sha1').update(point).digest() };
}

function name(cn: string | null, org: string | null): Buffer {
  const rdn = (type: string, value: string) => set(seq(oid(type), utf8(value)));
  return seq(
    ...(org !== null ? [rdn(OID.organization, org)] : []),
    ...(cn !== null ? [rdn(OID.commonName, cn)] : []),
  );
}

const extension = (id: string, critical: boolean, value: Buffer) =>
  seq(oid(id), ...(critical ? [bool(true)] : []), octets(value));

function serial(): Buffer {
  const b = randomBytes(16);
  b[0] = (b[0]! & 0x7f) | 0x01; // positive, 16 bytes, never zero
  return b;
}

/** The 4 or 16 bytes of an IP literal (as `normalizeHost` writes it), or null for a name. */
export function ipBytes(host: string): Buffer | null {
  const h = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  if (isIPv4(h)) return Buffer.from(h.split('.').map(Number));
  if (!isIPv6(h)) return null;
  const zone = h.indexOf('%');
  let text = zone >= 0 ? h.slice(0, zone) : h;
  const tail: number[] = [];
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (v4) {
    const [a, b, c, d] = v4[1]!.split('.').map(Number) as [number, number, number, number];
    tail.push((a << 8) | b, (c << 8) | d);
    text = text.slice(0, -v4[1]!.length).replace(/:$/, text.endsWith('::' + v4[1]) ? ':' : '');
  }
  const [head, rest] = text.includes('::') ? text.split('::') : [text, undefined];
  const words = (s: string | undefined) =>
    s
      ? s
          .split(':')
          .filter((w) => w !== '')
          .map((w) => Number.parseInt(w, 16))
      : [];
  const left = words(head);
  const right = [...words(rest), ...tail];
  const fill = rest === undefined ? [] : new Array(8 - left.length - right.length).fill(0);
  const all = [...left, ...fill, ...right];
  if (all.length !== 8) return null;
  const out = Buffer.alloc(16);
  for (let i = 0; i < 8; i++) out.writeUInt16BE(all[i]! & 0xffff, i * 2);
  return out;
}

interface CertFields {
  issuer: Buffer;
  subject: Buffer;
  notBefore: Date;
  notAfter: Date;
  spki: Buffer;
  extensions: Buffer[];
  signer: KeyObject;
}

function certificate(f: CertFields): Buffer {
  const alg = seq(oid(OID.ecdsaWithSha256));
  const tbs = seq(
    explicit(0, smallInt(2)),
    uint(serial()),
    alg,
    f.issuer,
    seq(time(f.notBefore), time(f.notAfter)),
    f.subject,
    f.spki,
    explicit(3, seq(...f.extensions)),
  );
  const signature = sign('sha256', tbs, { key: f.signer, dsaEncoding: 'der' });
  return seq(tbs, alg, bits(signature));
}

export function pem(der: Buffer): string {
  const b64 = der.toString('base64').replace(/.{64}/g, '$&\n');
  return `-----BEGIN CERTIFICATE-----\n${b64}${b64.endsWith('\n') ? '' : '\n'}-----END CERTIFICATE-----\n`;
}

/** One certificate authority: its key pair (memory only), its certificate, and the leaves it mints. */
export class MitmCa {
  /** The CA certificate (PEM): the only part of the CA that is ever written anywhere. */
  readonly certPem: string;
  readonly certDer: Buffer;
  readonly #key: KeyPair;
  readonly #subject: Buffer;
  /** One key for every leaf (it never leaves this process either); a leaf costs one signature, no key generation. */
  readonly #leafKey: KeyPair;
  readonly #leafKeyPem: string;
  /** host → its context, in least-recently-used order (a Map keeps insertion order). */
  readonly #contexts = new Map<string, { context: tls.SecureContext; renewAt: number }>();
  readonly #now: () => number;

  constructor(opts: { now?: () => number } = {}) {
    this.#now = opts.now ?? Date.now;
    this.#key = p256();
    this.#leafKey = p256();
    this.#leafKeyPem = this.#leafKey.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
    const id = this.#key.keyId.subarray(0, 4).toString('hex');
    this.#subject = name(`Corral MITM CA ${id}`, 'Corral');
    const now = this.#now();
    this.certDer = certificate({
      issuer: this.#subject,
      subject: this.#subject,
      notBefore: new Date(now - HOUR),
      notAfter: new Date(now + CA_VALIDITY_MS),
      spki: this.#key.spki,
      extensions: [
        extension(OID.basicConstraints, true, seq(bool(true), smallInt(0))),
        // keyCertSign (bit 5) | cRLSign (bit 6): 0b0000_0110, the last bit unused.
        extension(OID.keyUsage, true, bits(Buffer.from([0x06]), 1)),
        extension(OID.subjectKeyId, false, octets(this.#key.keyId)),
        extension(OID.authorityKeyId, false, seq(implicit(0, this.#key.keyId))),
      ],
      signer: this.#key.privateKey,
    });
    this.certPem = pem(this.certDer);
  }

  /** A leaf certificate (DER) for `host`: a DNS name or an IP literal. */
  mintLeaf(host: string): Buffer {
    const ip = ipBytes(host);
    const now = this.#now();
    const san = ip !== null ? implicit(7, ip) : implicit(2, Buffer.from(host, 'latin1'));
    const cn = host.length <= MAX_CN ? host : null;
    return certificate({
      issuer: this.#subject,
      subject: name(cn, null),
      notBefore: new Date(now - HOUR),
      notAfter: new Date(now - HOUR + LEAF_VALIDITY_MS),
      spki: this.#leafKey.spki,
      extensions: [
        extension(OID.basicConstraints, true, seq()),
        // digitalSignature (bit 0), the 7 other bits unused.
        extension(OID.keyUsage, true, bits(Buffer.from([0x80]), 7)),
        extension(OID.extKeyUsage, false, seq(oid(OID.serverAuth))),
        // Without a subject (a host over 64 characters), the SAN must be critical (RFC 5280 §4.2.1.6).
        extension(OID.subjectAltName, cn === null, seq(san)),
        extension(OID.subjectKeyId, false, octets(this.#leafKey.keyId)),
        extension(OID.authorityKeyId, false, seq(implicit(0, this.#key.keyId))),
      ],
      signer: this.#key.privateKey,
    });
  }

  /** The TLS server context presenting a leaf for `host` (cached; minted again a day before it expires). */
  contextFor(host: string): tls.SecureContext {
    const now = this.#now();
    const hit = this.#contexts.get(host);
    if (hit !== undefined) {
      this.#contexts.delete(host);
      if (hit.renewAt > now) {
        this.#contexts.set(host, hit);
        return hit.context;
      }
    }
    const context = tls.createSecureContext({
      key: this.#leafKeyPem,
      cert: pem(this.mintLeaf(host)),
      minVersion: 'TLSv1.2',
    });
    this.#contexts.set(host, { context, renewAt: now - HOUR + LEAF_VALIDITY_MS - LEAF_RENEW_MS });
    if (this.#contexts.size > LEAF_CACHE_SIZE) {
      const oldest = this.#contexts.keys().next().value;
      if (oldest !== undefined) this.#contexts.delete(oldest);
    }
    return context;
  }

  /** How many hosts have a cached context (tests). */
  get cachedHosts(): number {
    return this.#contexts.size;
  }
}
