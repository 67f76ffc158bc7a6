/**
 * `--chatgpt-token-stdin`'s account-policy fetch and registry credential, as codex 0.171 does them (recorded from its
 * binary in the loopback namespace: test/fixtures/remote/codex-0.171.0-chatgpt.json). After the token's checks
 * (credentials.ts), Codex asks `GET <chatgpt_base_url>/wham/config/bundle` with `Authorization: Bearer <token>` and
 * `ChatGPT-Account-Id: <account>`; any answer but a 2xx JSON object ends it with "could not load ChatGPT account
 * policy" (exit 1) before the registry is asked anything. Then every registry request carries the same two headers.
 * `chatgpt_base_url` is Codex's `-c chatgpt_base_url=…` (default https://chatgpt.com/backend-api/), which must be
 * HTTPS without userinfo or fragment. Corral's bounds (Codex's are not observable): no redirect followed, at most
 * 1 MiB of answer, one deadline for the whole exchange.
 */
import { request as httpsRequest } from 'node:https';
import { escapeTerminalText } from '../protocol/terminalText.js';
import type { RegistrationAuth } from './auth.js';

export const DEFAULT_CHATGPT_BASE_URL = 'https://chatgpt.com/backend-api/';
export const POLICY_URL_PROBLEM = 'ChatGPT policy endpoint URLs must use HTTPS without userinfo or fragments';
export const POLICY_LOAD_FAILED = 'could not load ChatGPT account policy';
export const POLICY_TIMED_OUT = 'timed out loading ChatGPT account policy';
export const MAX_POLICY_BYTES = 1024 * 1024;
export const POLICY_TIMEOUT_MS = 30_000;

/** The policy endpoint for a `chatgpt_base_url`, or Codex's text when it is not HTTPS without userinfo/fragment. */
export function policyUrl(base: string): { url: URL } | { error: string } {
  let u: URL;
  try {
    u = new URL(base.trim());
  } catch {
    return { error: POLICY_URL_PROBLEM };
  }
  if (u.protocol !== 'https:' || u.username !== '' || u.password !== '' || base.includes('#'))
    return { error: POLICY_URL_PROBLEM };
  u.pathname = `${u.pathname.replace(/\/+$/, '')}/wham/config/bundle`;
  return { url: u };
}

export class PolicyError extends Error {
  constructor(
    message: string,
    readonly detail: string,
  ) {
    super(message);
  }
}

export interface PolicyOptions {
  timeoutMs?: number;
  /** For tests: extra TLS trust (the stand-in's CA). */
  ca?: string | Buffer;
}

/**
 * Loads the account policy: resolves when the service answers 2xx with a JSON object, else rejects with a
 * PolicyError: Codex's text, and in `detail` what went wrong (never the token: the service's words are not repeated).
 */
export function loadChatgptAccountPolicy(
  url: URL,
  token: string,
  account: string,
  opts: PolicyOptions = {},
): Promise<void> {
  const timeoutMs = opts.timeoutMs ?? POLICY_TIMEOUT_MS;
  return new Promise((resolve, reject) => {
    let settled = false;
    const finish = (why: string | null, timedOut = false) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      req.destroy();
      if (why === null) resolve();
      else reject(new PolicyError(timedOut ? POLICY_TIMED_OUT : POLICY_LOAD_FAILED, why));
    };
    const req = httpsRequest(url, {
      method: 'GET',
      headers: {
        authorization: `Bearer ${token}`,
        'chatgpt-account-id': account,
        accept: 'application/json',
        'user-agent': 'corral-exec-server',
      },
      ...(opts.ca ? { ca: opts.ca } : {}),
    });
    const timer = setTimeout(() => finish('timeout', true), timeoutMs);
    req.on('error', (e) => finish(escapeTerminalText(e.message).slice(0, 200)));
    req.on('response', (res) => {
      const status = res.statusCode ?? 0;
      if (status < 200 || status > 299) return finish(`HTTP ${status}`);
      const chunks: Buffer[] = [];
      let size = 0;
      if (Number(res.headers['content-length']) > MAX_POLICY_BYTES) return finish('answer too large');
      res.on('data', (d: Buffer) => {
        size += d.length;
        if (size > MAX_POLICY_BYTES) return finish('answer too large');
        chunks.push(d);
      });
      res.on('error', (e) => finish(escapeTerminalText(e.message).slice(0, 200)));
      res.on('end', () => {
        let body: unknown;
        try {
          body = JSON.parse(Buffer.concat(chunks, size).toString('utf8'));
        } catch {
          return finish('not JSON');
        }
        if (typeof body !== 'object' || body === null || Array.isArray(body))
          return finish('not a JSON object');
        finish(null);
      });
    });
    req.end();
  });
}

/** The registry credential of `--chatgpt-token-stdin`: the token as bearer and the account header, as Codex. */
export function chatgptAuth(token: string, account: string): RegistrationAuth {
  return {
    kind: 'bearer',
    secrets: [token],
    sign: (r) => ({ ...r.headers, authorization: `Bearer ${token}`, 'chatgpt-account-id': account }),
  };
}
