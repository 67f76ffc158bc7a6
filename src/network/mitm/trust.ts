/**
 * Who trusts what under TLS interception (issue 34, items 1 and 2), once per server process:
 * - The child trusts one bundle: the system roots, the certificate blocks of the CA files the server itself started
 *   with (`SSL_CERT_FILE`, `NODE_EXTRA_CA_CERTS`), and the Corral CA. It is written content-addressed under the
 *   server's tag (`<tag>.<sha256>.pem`, 0644: src/process/serverTag.ts) in a directory of the server's user (0755,
 *   owned by it, checked), next to the CA certificate alone. The CA's key is never written. Each server has a CA of
 *   its own, so its two files (~220 KiB) are its alone: removed when it exits, and those of a server that died
 *   without exiting (killed) by the next one that makes its trust there.
 * - The proxy verifies upstream servers against the system roots and those startup CA files, never the Corral CA.
 *
 * "Started with" is read on first use: the first interception-enabled proxy of the process (a test sets the
 * variables before it starts its server, as a shell would before `corral serve`).
 */
import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  renameSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { deadServerEntries, formatTag, ownTag } from '../../process/serverTag.js';
import { MitmCa } from './ca.js';

/** Where distributions keep the system roots, first found wins; Node's own bundled roots otherwise. */
const SYSTEM_BUNDLES = [
  '/etc/ssl/certs/ca-certificates.crt',
  '/etc/pki/tls/certs/ca-bundle.crt',
  '/etc/ssl/ca-bundle.pem',
  '/etc/ssl/cert.pem',
];
/** The CA files of the server's own environment whose certificates the child and the upstream check both trust. */
export const STARTUP_CA_ENV_KEYS = ['SSL_CERT_FILE', 'NODE_EXTRA_CA_CERTS'] as const;
/** A CA file larger than this is not read (a bundle of every public root is ~220 KiB). */
const MAX_CA_FILE_BYTES = 8 * 1024 * 1024;
const CERT_BLOCK = /-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+?-----END CERTIFICATE-----/g;

/** The certificate blocks of a PEM file (keys and anything else in it are left out); [] when unreadable. */
export function certificateBlocks(path: string): string[] {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch {
    return [];
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile() || st.size > MAX_CA_FILE_BYTES) return [];
    const buf = Buffer.alloc(st.size);
    let off = 0;
    while (off < buf.length) {
      const n = readSync(fd, buf, off, buf.length - off, off);
      if (n === 0) break;
      off += n;
    }
    return buf.subarray(0, off).toString('latin1').match(CERT_BLOCK) ?? [];
  } finally {
    closeSync(fd);
  }
}

function systemRoots(): string[] {
  for (const p of SYSTEM_BUNDLES) {
    const blocks = certificateBlocks(p);
    if (blocks.length > 0) return blocks;
  }
  return [...tls.rootCertificates];
}

/** The directory the trust files go in: the server's own, 0755, and nobody else's to write. */
function trustDir(): string {
  const uid = process.getuid?.() ?? 0;
  const dir = join(tmpdir(), `corral-ca-${uid}`);
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  const st = lstatSync(dir);
  if (!st.isDirectory() || st.uid !== uid || (st.mode & 0o022) !== 0) {
    throw new Error(`${dir} is not a directory of this user that only it can write`);
  }
  return dir;
}

/**
 * Writes `content` as `<dir>/<tag>.<sha256>.pem` (this server's tag), 0644, unless that file already holds exactly it
 * (content-addressed; a file is written whole under a temporary name, then renamed, so no reader ever sees half of
 * one).
 */
function writeAddressed(dir: string, content: string): string {
  const body = Buffer.from(content, 'latin1');
  const path = join(dir, `${formatTag(ownTag())}.${createHash('sha256').update(body).digest('hex')}.pem`);
  const st = lstatSync(path, { throwIfNoEntry: false });
  if (st?.isFile() && st.size === body.length && (st.mode & 0o777) === 0o644 && sameContent(path, body))
    return path;
  const tmp = join(dir, `.${randomBytes(8).toString('hex')}.tmp`);
  writeFileSync(tmp, body, { mode: 0o644, flag: 'wx' });
  chmodSync(tmp, 0o644); // whatever the umask
  renameSync(tmp, path);
  return path;
}

function sameContent(path: string, body: Buffer): boolean {
  try {
    return readFileSync(path).equals(body);
  } catch {
    return false;
  }
}

/** A trust file's name: `<tag>.<sha256>.pem`. */
const TRUST_FILE = /^\d+\.\d+\.\d+\.[0-9a-f]{64}\.pem$/;

/**
 * Removes the trust files in `dir` of servers that are certainly gone (serverTag.ts isDeadServer: a killed server
 * never removed its own). Only names of the trust files' form, only files and symbolic links (unlinked, never
 * followed); anything else, and every live or unknown server's file, stays.
 */
export function sweepDeadTrustFiles(dir: string): void {
  for (const name of deadServerEntries(dir, '')) {
    if (!TRUST_FILE.test(name)) continue;
    const p = join(dir, name);
    const st = lstatSync(p, { throwIfNoEntry: false });
    if (!st || !(st.isFile() || st.isSymbolicLink())) continue;
    try {
      unlinkSync(p);
    } catch {
      // gone already, or not ours to remove: left
    }
  }
}

/** The interception trust of one server process. */
export interface MitmTrust {
  readonly ca: MitmCa;
  /** The child's bundle (system roots + startup CA files + the Corral CA); rewritten if it was changed or removed. */
  bundlePath(): string;
  /** The CA certificate alone. */
  readonly caPath: string;
  /** What upstream TLS is verified with: the system roots and the startup CA files, never the Corral CA. */
  readonly upstream: tls.SecureContext;
  /** Removes the files it wrote (the server is exiting: nothing it started runs any more). */
  remove(): void;
}

/** Builds the trust from an environment (the server's own) and a directory; `mitmTrust()` is the process's one. */
export function createMitmTrust(
  env: Record<string, string | undefined> = process.env,
  dir: string = trustDir(),
): MitmTrust {
  sweepDeadTrustFiles(dir);
  const ca = new MitmCa();
  const startup: string[] = [];
  for (const k of STARTUP_CA_ENV_KEYS) {
    const p = env[k];
    if (p) for (const b of certificateBlocks(p)) if (!startup.includes(b)) startup.push(b);
  }
  const roots = systemRoots();
  const upstreamCa = [...roots, ...startup.filter((b) => !roots.includes(b))];
  const bundle = `${upstreamCa.join('\n')}\n${ca.certPem}`;
  const caPath = writeAddressed(dir, ca.certPem);
  let path = writeAddressed(dir, bundle);
  let written = lstatSync(path);
  return {
    ca,
    caPath,
    upstream: tls.createSecureContext({ ca: upstreamCa }),
    bundlePath() {
      // A stat per start (microseconds): a bundle someone replaced, truncated or removed is written again.
      const st = lstatSync(path, { throwIfNoEntry: false });
      if (!st || st.ino !== written.ino || st.size !== written.size || st.mtimeMs !== written.mtimeMs) {
        path = writeAddressed(dir, bundle);
        written = lstatSync(path);
      }
      return path;
    },
    remove() {
      for (const p of [caPath, path]) {
        try {
          unlinkSync(p);
        } catch {
          // already gone
        }
      }
    },
  };
}

let processTrust: MitmTrust | undefined;

/** The server process's interception trust, made on first use; its files go when the process exits. */
export function mitmTrust(): MitmTrust {
  if (!processTrust) {
    const trust = createMitmTrust();
    process.once('exit', () => trust.remove());
    processTrust = trust;
  }
  return processTrust;
}
