/**
 * The key that signs the audit chain's checkpoints and anchors (chain.ts): Ed25519, in the database's directory (the
 * user's state directory by default), 0600, hidden from every sandbox as that directory is. Made on first use. Its
 * public half goes into every checkpoint and into the export, so someone else can verify with it alone.
 *
 * What it proves: a sandboxed command (which cannot read the directory) or anyone without the key cannot rewrite the
 * chain up to a checkpoint without verify noticing. What it does not: whoever holds the key (the user, root) can
 * rewrite history and sign it again; events after the last checkpoint are chained but not yet signed.
 */
import {
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  sign,
  verify,
} from 'node:crypto';
import { chmodSync, closeSync, existsSync, openSync, readFileSync, statSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';

/** The key file of the database at `dbPath`. */
export function chainKeyPath(dbPath: string): string {
  return join(dirname(dbPath), 'audit-signing.key');
}

export interface ChainSigner {
  /** The public key, base64 of its SPKI DER. */
  readonly publicKey: string;
  /** Signature (base64) of `data`. */
  sign(data: Buffer): string;
}

export function publicKeyText(key: KeyObject): string {
  return createPublicKey(key).export({ type: 'spki', format: 'der' }).toString('base64');
}

/** A public key from its text (base64 SPKI DER, or a PEM), or an Error naming what is wrong. */
export function parsePublicKey(text: string): KeyObject {
  const t = text.trim();
  const key = t.startsWith('-----')
    ? createPublicKey(t)
    : createPublicKey({ key: Buffer.from(t, 'base64'), format: 'der', type: 'spki' });
  if (key.asymmetricKeyType !== 'ed25519')
    throw new Error(`not an Ed25519 public key (${key.asymmetricKeyType})`);
  return key;
}

export function verifySignature(publicKey: KeyObject, data: Buffer, signature: string): boolean {
  try {
    return verify(null, data, publicKey, Buffer.from(signature, 'base64'));
  } catch {
    return false;
  }
}

function signerOf(privateKey: KeyObject): ChainSigner {
  return {
    publicKey: publicKeyText(privateKey),
    sign: (data) => sign(null, data, privateKey).toString('base64'),
  };
}

/**
 * The signer of the database at `dbPath`: its key file, made (0600, exclusive create) when absent. A key file
 * others may read or write is refused: a signature anyone could have made proves nothing.
 */
export function loadOrCreateSigner(dbPath: string): ChainSigner {
  const path = chainKeyPath(dbPath);
  if (!existsSync(path)) {
    const { privateKey } = generateKeyPairSync('ed25519');
    const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
    let fd: number;
    try {
      fd = openSync(path, 'wx', 0o600);
    } catch (e) {
      // Another server made it meanwhile: use theirs.
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      return loadOrCreateSigner(dbPath);
    }
    try {
      writeSync(fd, pem);
    } finally {
      closeSync(fd);
    }
    chmodSync(path, 0o600);
    return signerOf(privateKey);
  }
  const st = statSync(path);
  if ((st.mode & 0o077) !== 0)
    throw new Error(
      `audit signing key ${path} is readable or writable by others (mode ${(st.mode & 0o777).toString(8)})`,
    );
  return signerOf(createPrivateKey(readFileSync(path, 'utf8')));
}

/** The public key of the database's key file, or null when there is none (verify on another machine). */
export function localPublicKey(dbPath: string): KeyObject | null {
  const path = chainKeyPath(dbPath);
  if (!existsSync(path)) return null;
  return createPublicKey(createPrivateKey(readFileSync(path, 'utf8')));
}
