/**
 * The environment registry client of a remote executor: `POST {base}/cloud/environment/{id}/direct/register` with
 * `{"transport":"direct_jsonrpc_v1"}`, signed by the registration auth, answered with where to dial
 * (src/protocol/remote.ts). TLS is required unless the host is loopback, for the base URL and for the URL the
 * registry hands back (the released Codex executor's rule). Every answer is hostile until checked: at most
 * MAX_RESPONSE_BYTES within REGISTRY_REQUEST_TIMEOUT_MS in all, parsed with zod, any failure a RegistryError.
 *
 * Where the registration credential goes (the bearer, or SigV4 headers) is decided here, not by the registry:
 * - the registration POST goes to the registry's own origin only. A redirect is followed only when it is a 307/308
 *   to that same origin (re-signed for its path, at most MAX_REDIRECTS); any other 3xx fails naming where it
 *   pointed, with nothing sent there;
 * - the executor link (the URL the registry answers) must be on the registry's own host and port, or on a host the
 *   user allowed with `--relay-host HOST[:PORT]`; cleartext `ws://` only when the registry itself is `http://` (on
 *   loopback). Anything else fails registration naming the URL and why, before any connection to it.
 */
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { isIP } from 'node:net';
import type { z } from 'zod';
import { type Clock, realClock } from '../clock.js';
import {
  DIRECT_TRANSPORT,
  DirectRegistrationRequest,
  DirectRegistrationResponse,
  EnvironmentId,
  HarnessKeyValidationResponse,
  NOISE_SECURITY_PROFILE,
  NoiseRegistrationResponse,
  RegistryErrorBody,
} from '../protocol/remote.js';
import { escapeTerminalText } from '../protocol/terminalText.js';
import type { RegistrationAuth } from './auth.js';
import type { NoisePublicKeyJson } from './noiseChannel.js';

export const REGISTRY_REQUEST_TIMEOUT_MS = 10_000;
/** The largest registry answer read (a registration answer is a few hundred bytes). */
export const MAX_RESPONSE_BYTES = 64 * 1024;
/** Same-origin 307/308 redirects followed for one registration. */
export const MAX_REDIRECTS = 3;
/** The longest text of a registry's error body quoted in a message. */
const MAX_QUOTED_CHARS = 300;

/** A failure talking to the registry. `retryable`: worth trying again later (network, 5xx, 408, 429). */
export class RegistryError extends Error {
  constructor(
    message: string,
    readonly status: number | null,
    readonly retryable: boolean,
  ) {
    super(message);
  }
}

export function isLoopbackHost(hostname: string): boolean {
  const h = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost') return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  if (isIP(h) === 6) return h === '::1' || h === '0:0:0:0:0:0:0:1';
  return false;
}

/**
 * `url` with `secure` as its scheme, or its plain twin on a loopback host; anything else is refused. The message says
 * which, without the URL's query (which may hold a credential).
 */
export function requireTlsOrLoopback(url: string, secure: 'https' | 'wss', what: string): URL {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new RegistryError(`${what} is not a URL`, null, false);
  }
  const scheme = u.protocol.slice(0, -1);
  if (scheme === secure) return u;
  if (scheme !== secure.slice(0, -1))
    throw new RegistryError(
      `${what} ${u.protocol}//${u.host}${u.pathname}: expected a ${secure}:// URL`,
      null,
      false,
    );
  if (scheme === secure.slice(0, -1) && isLoopbackHost(u.hostname)) return u;
  throw new RegistryError(
    `${what} ${u.protocol}//${u.host}${u.pathname}: the remote transport requires ${secure}:// for non-loopback endpoints`,
    null,
    false,
  );
}

/** A URL as a message may name it: scheme, host, port and path (no credentials, no query, no fragment). */
export function describeUrl(u: URL): string {
  return `${u.protocol}//${u.host}${u.pathname}`;
}

/** The port a URL connects to (its scheme's default when it names none). */
function effectivePort(u: URL): number {
  if (u.port !== '') return Number(u.port);
  return u.protocol === 'https:' || u.protocol === 'wss:' ? 443 : 80;
}

/** A host the user allows the executor link on (`--relay-host HOST[:PORT]`); no port: the scheme's default. */
export interface RelayHost {
  hostname: string;
  port: number | null;
}

/** `HOST`, `HOST:PORT`, `[IPv6]` or `[IPv6]:PORT`, normalized as a URL's host is (lower case, IPv4 canonical). */
export function parseRelayHost(text: string): RelayHost {
  const t = text.trim();
  const bad = () =>
    new RegistryError(`--relay-host: expected HOST or HOST:PORT, got ${JSON.stringify(text)}`, null, false);
  if (t === '' || /[/@?#\\\s]/.test(t)) throw bad();
  let u: URL;
  try {
    u = new URL(`wss://${t}`);
  } catch {
    throw bad();
  }
  if (u.hostname === '' || u.pathname !== '/' || u.username !== '' || u.password !== '') throw bad();
  return { hostname: u.hostname, port: u.port === '' ? null : Number(u.port) };
}

/**
 * The executor URL the registry answered, if the registration credential may go there: wss:// (or ws:// on loopback
 * when the registry itself is http://), no user info, and the registry's own host and port or an allowed relay host.
 * Otherwise a RegistryError naming the URL (without its query) and why.
 */
export function checkRelayUrl(relay: string, registry: URL, allowed: readonly RelayHost[]): URL {
  const what = 'the registry returned the executor URL';
  const u = requireTlsOrLoopback(relay, 'wss', what);
  const named = `${what} ${describeUrl(u)}`;
  if (u.protocol === 'ws:' && registry.protocol !== 'http:')
    throw new RegistryError(
      `${named}: the registry is ${registry.protocol}//, so its executor link must be wss:// (the registration credential would cross in cleartext)`,
      null,
      false,
    );
  if (u.username !== '' || u.password !== '')
    throw new RegistryError(
      `${named}: the URL carries user info, which the executor never sends`,
      null,
      false,
    );
  const port = effectivePort(u);
  if (u.hostname === registry.hostname && port === effectivePort(registry)) return u;
  const schemeDefault = u.protocol === 'wss:' ? 443 : 80;
  if (allowed.some((h) => h.hostname === u.hostname && (h.port ?? schemeDefault) === port)) return u;
  const hostPort = u.hostname.includes(':')
    ? `[${u.hostname.replace(/^\[|\]$/g, '')}]:${port}`
    : `${u.hostname}:${port}`;
  throw new RegistryError(
    `${named}: ${hostPort} is not the registry's host (${registry.host}) nor a --relay-host, and the registration credential goes only to those (pass --relay-host ${hostPort} to allow it)`,
    null,
    false,
  );
}

export interface Registration {
  environmentId: string;
  registrationId: string;
  /** Where to dial (checked by checkRelayUrl). */
  url: URL;
}

export interface RegistryClientOptions {
  /** Hosts besides the registry's own that the executor link may be on (`--relay-host`). */
  relayHosts?: readonly RelayHost[];
  /** Register for Codex's Noise transport with this executor key (`POST …/register`), not `direct`. */
  noiseKey?: NoisePublicKeyJson;
  /** The deadline of one registration, redirects included (ms); tests may shorten it. */
  timeoutMs?: number;
  /** The time that deadline runs on (default: the real one). */
  clock?: Clock;
}

export class RegistryClient {
  readonly base: URL;
  readonly environmentId: string;
  readonly relayHosts: readonly RelayHost[];
  private readonly timeoutMs: number;
  private readonly clock: Clock;
  readonly noiseKey: NoisePublicKeyJson | null;

  constructor(
    base: string,
    environmentId: string,
    private readonly auth: RegistrationAuth,
    opts: RegistryClientOptions = {},
  ) {
    this.relayHosts = opts.relayHosts ?? [];
    this.noiseKey = opts.noiseKey ?? null;
    this.timeoutMs = opts.timeoutMs ?? REGISTRY_REQUEST_TIMEOUT_MS;
    this.clock = opts.clock ?? realClock;
    const id = EnvironmentId.safeParse(environmentId);
    if (!id.success) throw new RegistryError(`--environment-id: ${id.error.issues[0]!.message}`, null, false);
    this.environmentId = id.data;
    const trimmed = base.trim().replace(/\/+$/, '');
    if (trimmed === '') throw new RegistryError('--remote: the registry base URL is required', null, false);
    this.base = requireTlsOrLoopback(trimmed, 'https', '--remote');
    if (this.base.username !== '' || this.base.password !== '')
      throw new RegistryError('--remote: the registry URL must not carry user info', null, false);
  }

  /** `relay` if the executor link may be dialled there with the registration credential (checkRelayUrl). */
  checkRelayUrl(relay: string): URL {
    return checkRelayUrl(relay, this.base, this.relayHosts);
  }

  /** The endpoint `{base}/cloud/environment/{id}/{tail}`. */
  private endpoint(tail: string): URL {
    const path = this.base.pathname.replace(/\/+$/, '');
    const u = new URL(this.base.href);
    u.pathname = `${path}/cloud/environment/${this.environmentId}/${tail}`;
    u.search = '';
    return u;
  }

  /** The endpoint for this environment's registration. */
  get registerUrl(): URL {
    return this.endpoint(this.noiseKey ? 'register' : 'direct/register');
  }

  /** One signed JSON POST to the registry, following only 307/308 within its origin; the answer within the deadline. */
  private async postJson(first: URL, body: string): Promise<Answer> {
    let url = first;
    const deadline = this.clock.now() + this.timeoutMs;
    for (let hops = 0; ; hops++) {
      const headers = this.auth.sign({
        method: 'POST',
        url,
        headers: { 'content-type': 'application/json', accept: '*/*' },
        body,
      });
      const answer = await post(url, headers, body, deadline, this.timeoutMs, this.clock);
      if (answer.status < 300 || answer.status > 399) return answer;
      url = this.redirectTarget(url, answer, hops);
    }
  }

  /** POSTs a registration and parses the answer field by field (a 2xx with JSON of `schema`'s shape, or an error). */
  private async registerWith<T extends { environment_id: string }>(
    body: string,
    schema: z.ZodType<T>,
    what: string,
  ): Promise<{ status: number; r: T }> {
    const { status, text } = await this.postJson(this.registerUrl, body);
    if (status < 200 || status > 299) throw registryHttpError(status, text);
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw new RegistryError('the environment registry answered with invalid JSON', status, false);
    }
    const parsed = schema.safeParse(json);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw new RegistryError(
        `the environment registry returned incomplete ${what} connection data (${issue.path.join('.') || 'body'}: ${issue.message})`,
        status,
        false,
      );
    }
    if (parsed.data.environment_id !== this.environmentId)
      throw new RegistryError('the environment registry returned a different environment id', status, false);
    return { status, r: parsed.data };
  }

  async register(): Promise<Registration> {
    if (this.noiseKey) return this.registerNoise(this.noiseKey);
    const body = JSON.stringify(DirectRegistrationRequest.parse({ transport: DIRECT_TRANSPORT }));
    const { status, r } = await this.registerWith(body, DirectRegistrationResponse, 'direct');
    if (r.transport !== DIRECT_TRANSPORT)
      throw new RegistryError(
        `the environment registry returned unsupported direct transport ${JSON.stringify(r.transport)}`,
        status,
        false,
      );
    return {
      environmentId: r.environment_id,
      registrationId: r.registration_id,
      url: this.checkRelayUrl(r.url),
    };
  }

  /** Codex 0.171's Noise registration: `{security_profile:"noise_hybrid_ik_v1", executor_public_key}`. */
  private async registerNoise(key: NoisePublicKeyJson): Promise<Registration> {
    const body = JSON.stringify({ security_profile: NOISE_SECURITY_PROFILE, executor_public_key: key });
    const { status, r } = await this.registerWith(body, NoiseRegistrationResponse, 'Noise');
    if (r.security_profile !== NOISE_SECURITY_PROFILE)
      throw new RegistryError(
        `the environment registry returned unsupported security profile ${JSON.stringify(escapeTerminalText(r.security_profile.slice(0, MAX_QUOTED_CHARS)))}`,
        status,
        false,
      );
    return {
      environmentId: r.environment_id,
      registrationId: r.executor_registration_id,
      url: this.checkRelayUrl(r.url),
    };
  }

  /**
   * Asks the registry whether a Noise-authenticated harness key may use this registration (`POST …/validate`
   * `{executor_registration_id, harness_public_key, harness_key_authorization}`, signed like the registration).
   * Resolves only on `{"valid":true}`; Codex's texts otherwise (they never quote the authorization).
   */
  async validateHarnessKey(
    registrationId: string,
    key: NoisePublicKeyJson,
    authorization: string,
  ): Promise<void> {
    const body = JSON.stringify({
      executor_registration_id: registrationId,
      harness_public_key: key,
      harness_key_authorization: authorization,
    });
    let answer: Answer;
    try {
      answer = await this.postJson(this.endpoint('validate'), body);
    } catch {
      throw new RegistryError('environment registry harness key validation failed', null, true);
    }
    if (answer.status < 200 || answer.status > 299)
      throw new RegistryError(
        `environment registry harness key validation failed (HTTP ${answer.status})`,
        answer.status,
        false,
      );
    let valid = false;
    try {
      valid = HarnessKeyValidationResponse.parse(JSON.parse(answer.text)).valid;
    } catch {}
    if (!valid)
      throw new RegistryError('environment registry rejected Noise relay harness key', answer.status, false);
  }

  /** Where a 3xx answer may be followed: a 307/308 within the registry's origin; anything else fails. */
  private redirectTarget(from: URL, answer: Answer, hops: number): URL {
    const { status, location } = answer;
    let to: URL | null = null;
    try {
      to = location === null ? null : new URL(location, from);
    } catch {}
    const where = to ? describeUrl(to) : location === null ? 'nowhere (no Location)' : 'an invalid Location';
    const refuse = (why: string) =>
      new RegistryError(
        `the environment registry answered HTTP ${status} redirecting to ${escapeTerminalText(where.slice(0, MAX_QUOTED_CHARS))}: ${why}`,
        status,
        false,
      );
    if (!to || to.origin !== this.base.origin || to.username !== '' || to.password !== '')
      throw refuse(
        `redirects off the registry's origin (${this.base.origin}) are not followed: nothing was sent there`,
      );
    if (status !== 307 && status !== 308)
      throw refuse('only 307 and 308 keep the registration a POST; not followed');
    if (hops + 1 > MAX_REDIRECTS) throw refuse(`more than ${MAX_REDIRECTS} redirects`);
    return to;
  }
}

function registryHttpError(status: number, text: string): RegistryError {
  let detail = '';
  try {
    const body = RegistryErrorBody.safeParse(JSON.parse(text));
    if (body.success && body.data.error)
      detail = escapeTerminalText(
        [body.data.error.code, body.data.error.message].filter(Boolean).join(': ').slice(0, MAX_QUOTED_CHARS),
      );
  } catch {}
  const what =
    status === 401 || status === 403
      ? 'environment registry authentication failed'
      : 'environment registry request failed';
  return new RegistryError(
    `${what} (HTTP ${status})${detail ? `: ${detail}` : ''}`,
    status,
    status >= 500 || status === 408 || status === 429,
  );
}

interface Answer {
  status: number;
  text: string;
  /** The Location header of a 3xx (null when absent). */
  location: string | null;
}

/** One POST, no redirect followed; the answer's body bounded by MAX_RESPONSE_BYTES, everything by `deadline`. */
function post(
  url: URL,
  headers: Record<string, string>,
  body: string,
  deadline: number,
  timeoutMs: number,
  clock: Clock,
): Promise<Answer> {
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = send(url, {
      method: 'POST',
      headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
    });
    // One deadline for connecting, sending and the whole answer: a registry trickling bytes cannot hold us.
    const timer = clock.setTimeout(
      () =>
        req.destroy(
          new RegistryError(`the environment registry did not answer within ${timeoutMs} ms`, null, true),
        ),
      Math.max(0, deadline - clock.now()),
    );
    const settle = () => clock.clearTimeout(timer);
    const fail = (e: Error) => {
      settle();
      reject(
        e instanceof RegistryError
          ? e
          : new RegistryError(
              `cannot reach the environment registry: ${escapeTerminalText(e.message)}`,
              null,
              true,
            ),
      );
    };
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      const declared = Number(res.headers['content-length']);
      const tooLarge = () =>
        req.destroy(
          new RegistryError(
            `the environment registry answer is larger than ${MAX_RESPONSE_BYTES} bytes`,
            res.statusCode ?? null,
            false,
          ),
        );
      if (declared > MAX_RESPONSE_BYTES) return tooLarge();
      res.on('data', (d: Buffer) => {
        size += d.length;
        if (size > MAX_RESPONSE_BYTES) return tooLarge();
        chunks.push(d);
      });
      res.on('end', () => {
        settle();
        const location = res.headers.location;
        resolve({
          status: res.statusCode ?? 0,
          text: Buffer.concat(chunks).toString('utf8'),
          location: typeof location === 'string' ? location : null,
        });
      });
      // A destroy after the answer began (too large, the deadline) is reported on the answer, not the request.
      res.on('error', fail);
    });
    req.on('error', fail);
    req.end(body);
  });
}
