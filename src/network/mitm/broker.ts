/**
 * The credential broker (issue 34, item 6; Codex's `credential_broker`): the tokens below, when a child's
 * environment holds them, are replaced by dummies of the same shape (same known prefix, same length, each letter a
 * random letter and each digit a random digit); the real values stay in this object, in the server's memory. A
 * request whose one `Authorization` header holds exactly one dummy, once, gets the real value in its place — only
 * when it goes to that credential's hosts, and only inside TLS the proxy verified (an intercepted tunnel) or, for
 * plain HTTP, to a loopback target or with `dangerously_allow_plaintext_credential_injection`. Anywhere else the
 * dummy goes as it is. The audit names the credential, never its value.
 */
import { randomBytes } from 'node:crypto';
import { normalizeHost } from '../host.js';

type Family = 'github' | 'openai';

/** The brokered variables, and whose hosts their values are for. */
export const BROKERED_ENV: Readonly<Record<string, Family>> = {
  GH_TOKEN: 'github',
  GITHUB_TOKEN: 'github',
  GH_ENTERPRISE_TOKEN: 'github',
  GITHUB_ENTERPRISE_TOKEN: 'github',
  OPENAI_API_KEY: 'openai',
};

/** The known token prefixes a dummy keeps. */
const PREFIX = /^(github_pat_|gh[pousr]_|sk-proj-|sk-svcacct-|sk-admin-|sk-)/;

/** A dummy shaped like `real`: its known prefix, then per character a random letter, digit, or the same symbol. */
export function shapedDummy(real: string): string {
  const prefix = PREFIX.exec(real)?.[1] ?? '';
  const rest = real.slice(prefix.length);
  const rnd = randomBytes(rest.length);
  let out = prefix;
  for (let i = 0; i < rest.length; i++) {
    const c = rest[i]!;
    const r = rnd[i]!;
    if (/[a-z]/.test(c)) out += String.fromCharCode(97 + (r % 26));
    else if (/[A-Z]/.test(c)) out += String.fromCharCode(65 + (r % 26));
    else if (/[0-9]/.test(c)) out += String.fromCharCode(48 + (r % 10));
    else out += c;
  }
  return out;
}

/** Whether `host` (normalised) is one of a family's hosts; `ghHost` is the child's GH_HOST, normalised. */
export function isCredentialHost(family: Family, host: string, ghHost: string | null): boolean {
  if (family === 'openai') return host === 'api.openai.com';
  return host === 'github.com' || host === 'api.github.com' || host.endsWith('.ghe.com') || host === ghHost;
}

interface Brokered {
  name: string;
  family: Family;
  real: string;
  dummy: string;
}

/** Where a request goes out: inside verified TLS, or plain HTTP (to a loopback target or not). */
export type Carrier = 'tls' | 'plain-loopback' | 'plain';

/** A plain-HTTP request's carrier: `plain-loopback` when every address it may be sent to is a loopback one. */
export function plainCarrier(addresses: readonly string[]): Carrier {
  const loopback = (a: string) => a.startsWith('127.') || a === '::1';
  return addresses.length > 0 && addresses.every(loopback) ? 'plain-loopback' : 'plain';
}

export class CredentialBroker {
  private readonly creds: Brokered[] = [];
  private ghHost: string | null = null;

  constructor(private readonly opts: { plaintext: boolean }) {}

  /** Replaces the brokered values of a child's environment by dummies (in place), keeping the real ones here. */
  virtualize(env: Record<string, string>): void {
    const gh = env.GH_HOST !== undefined ? normalizeHost(env.GH_HOST) : null;
    if (gh?.ok && gh.host !== '') this.ghHost = gh.host;
    for (const [name, family] of Object.entries(BROKERED_ENV)) {
      const real = env[name];
      if (real === undefined || real.length < 8) continue;
      let dummy = shapedDummy(real);
      while (dummy === real || this.creds.some((c) => c.dummy === dummy)) dummy = shapedDummy(real);
      this.creds.push({ name, family, real, dummy });
      env[name] = dummy;
    }
  }

  /** Whether any brokered credential is for `host` (its TLS tunnels are intercepted). */
  has(host: string): boolean {
    return this.creds.some((c) => isCredentialHost(c.family, host, this.ghHost));
  }

  get size(): number {
    return this.creds.length;
  }

  /** The headers with the real value in place of the dummy, or undefined (the dummy, if any, goes as it is). */
  rewrite(
    host: string,
    rawHeaders: readonly string[],
    carrier: Carrier,
  ): { headers: string[]; credential: string } | undefined {
    if (this.creds.length === 0) return undefined;
    if (carrier === 'plain' && !this.opts.plaintext) return undefined;
    let at = -1;
    for (let i = 0; i < rawHeaders.length; i += 2) {
      if (rawHeaders[i]!.toLowerCase() !== 'authorization') continue;
      if (at >= 0) return undefined; // more than one Authorization: nothing is injected
      at = i + 1;
    }
    if (at < 0) return undefined;
    const auth = rawHeaders[at]!;
    let found: Brokered | undefined;
    for (const c of this.creds) {
      const pos = auth.indexOf(c.dummy);
      if (pos < 0) continue;
      if (found !== undefined || auth.indexOf(c.dummy, pos + 1) >= 0) return undefined; // not exactly one dummy
      found = c;
    }
    if (found === undefined || !isCredentialHost(found.family, host, this.ghHost)) return undefined;
    const real = found.real;
    const headers = [...rawHeaders];
    headers[at] = auth.replace(found.dummy, () => real);
    return { headers, credential: found.name };
  }
}
