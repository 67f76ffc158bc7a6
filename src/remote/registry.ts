/**
 * The environment registry client of a remote executor: `POST {base}/cloud/environment/{id}/direct/register` with
 * `{"transport":"direct_jsonrpc_v1"}`, signed by the registration auth, answered with where to dial
 * (src/protocol/remote.ts). No redirects are followed (a redirect would carry the signed request elsewhere), the
 * request times out after 10 s, and TLS is required unless the host is loopback, for the base URL and for the URL
 * the registry hands back (the released Codex executor's rule).
 */
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { isIP } from 'node:net';
import {
  DIRECT_TRANSPORT,
  DirectRegistrationRequest,
  DirectRegistrationResponse,
  EnvironmentId,
  RegistryErrorBody,
} from '../protocol/remote.js';
import type { RegistrationAuth } from './auth.js';

export const REGISTRY_REQUEST_TIMEOUT_MS = 10_000;
const MAX_RESPONSE_BYTES = 1024 * 1024;

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
  if (scheme === secure.slice(0, -1) && isLoopbackHost(u.hostname)) return u;
  throw new RegistryError(
    `${what} ${u.protocol}//${u.host}${u.pathname}: the remote transport requires ${secure}:// for non-loopback endpoints`,
    null,
    false,
  );
}

export interface Registration {
  environmentId: string;
  registrationId: string;
  /** Where to dial (checked: wss://, or ws:// on loopback). */
  url: URL;
}

export class RegistryClient {
  readonly base: URL;
  readonly environmentId: string;

  constructor(
    base: string,
    environmentId: string,
    private readonly auth: RegistrationAuth,
  ) {
    const id = EnvironmentId.safeParse(environmentId);
    if (!id.success) throw new RegistryError(`--environment-id: ${id.error.issues[0]!.message}`, null, false);
    this.environmentId = id.data;
    const trimmed = base.trim().replace(/\/+$/, '');
    if (trimmed === '') throw new RegistryError('--remote: the registry base URL is required', null, false);
    this.base = requireTlsOrLoopback(trimmed, 'https', '--remote');
  }

  /** The endpoint for this environment's registration. */
  get registerUrl(): URL {
    const path = this.base.pathname.replace(/\/+$/, '');
    const u = new URL(this.base.href);
    u.pathname = `${path}/cloud/environment/${this.environmentId}/direct/register`;
    u.search = '';
    return u;
  }

  async register(): Promise<Registration> {
    const url = this.registerUrl;
    const body = JSON.stringify(DirectRegistrationRequest.parse({ transport: DIRECT_TRANSPORT }));
    const headers = this.auth.sign({
      method: 'POST',
      url,
      headers: { 'content-type': 'application/json', accept: '*/*' },
      body,
    });
    const { status, text } = await post(url, headers, body);
    if (status < 200 || status > 299) throw registryHttpError(status, text);
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw new RegistryError('the environment registry answered with invalid JSON', status, false);
    }
    const parsed = DirectRegistrationResponse.safeParse(json);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw new RegistryError(
        `the environment registry returned incomplete direct connection data (${issue.path.join('.') || 'body'}: ${issue.message})`,
        status,
        false,
      );
    }
    const r = parsed.data;
    if (r.environment_id !== this.environmentId)
      throw new RegistryError('the environment registry returned a different environment id', status, false);
    if (r.transport !== DIRECT_TRANSPORT)
      throw new RegistryError(
        `the environment registry returned unsupported direct transport ${JSON.stringify(r.transport)}`,
        status,
        false,
      );
    return {
      environmentId: r.environment_id,
      registrationId: r.registration_id,
      url: requireTlsOrLoopback(r.url, 'wss', 'the registry returned the executor URL'),
    };
  }
}

function registryHttpError(status: number, text: string): RegistryError {
  let detail = '';
  try {
    const body = RegistryErrorBody.safeParse(JSON.parse(text));
    if (body.success && body.data.error)
      detail = [body.data.error.code, body.data.error.message].filter(Boolean).join(': ');
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

function post(
  url: URL,
  headers: Record<string, string>,
  body: string,
): Promise<{ status: number; text: string }> {
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = send(
      url,
      {
        method: 'POST',
        headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
        timeout: REGISTRY_REQUEST_TIMEOUT_MS,
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (d: Buffer) => {
          size += d.length;
          if (size > MAX_RESPONSE_BYTES) {
            req.destroy(
              new RegistryError(
                'the environment registry answer is too large',
                res.statusCode ?? null,
                false,
              ),
            );
            return;
          }
          chunks.push(d);
        });
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }),
        );
        res.on('error', reject);
      },
    );
    req.on('timeout', () =>
      req.destroy(
        new RegistryError(
          `the environment registry did not answer within ${REGISTRY_REQUEST_TIMEOUT_MS} ms`,
          null,
          true,
        ),
      ),
    );
    req.on('error', (e) =>
      reject(
        e instanceof RegistryError
          ? e
          : new RegistryError(`cannot reach the environment registry: ${e.message}`, null, true),
      ),
    );
    req.end(body);
  });
}
