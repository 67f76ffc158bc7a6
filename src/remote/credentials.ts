/**
 * Codex 0.171's OpenAI-account credentials for `--remote` (`--chatgpt-token-stdin` + `--chatgpt-account-id`,
 * `--use-agent-identity-auth`, `--executor-credential-stdin`), checked as Codex checks them (its texts, recorded in
 * test/fixtures/codex-0.171.0-flags.txt and from its binary). `--executor-credential-stdin` needs only the registry
 * protocol and is implemented (remote/executorCredential.ts). `--chatgpt-token-stdin` is implemented with the account
 * policy fetch Codex makes first (remote/chatgptPolicy.ts, its base URL `-c chatgpt_base_url=…`). Agent identity
 * needs OpenAI's identity service (0.171 answers "Agent Identity authentication is unavailable" without it, before
 * any request), so a command line that passes its checks is refused with a message saying so.
 */

export interface OpenAiCredentialFlags {
  'chatgpt-token-stdin': boolean;
  'chatgpt-account-id'?: string | undefined;
  'use-agent-identity-auth': boolean;
  'executor-credential-stdin': boolean;
  'aws-sigv4': boolean;
  'registration-bearer-stdin': boolean;
}

/** A refusal: `clap` ones are argument errors (exit 2), the rest Codex's run-time errors (exit 1). */
export type CredentialRefusal = { clap: string } | { error: string };

/** The argument conflicts Codex's parser refuses, in its words; null when there is none. */
export function credentialConflict(v: OpenAiCredentialFlags): CredentialRefusal | null {
  if (v['executor-credential-stdin'] && v['aws-sigv4'])
    return { clap: "the argument '--executor-credential-stdin' cannot be used with '--aws-sigv4'" };
  if (v['registration-bearer-stdin'] && v['executor-credential-stdin'])
    return {
      clap: "the argument '--registration-bearer-stdin' cannot be used with '--executor-credential-stdin'",
    };
  if (v['use-agent-identity-auth'] && v['aws-sigv4'])
    return { clap: "the argument '--use-agent-identity-auth' cannot be used with '--aws-sigv4'" };
  if (v['chatgpt-account-id'] !== undefined && !v['chatgpt-token-stdin'])
    return { clap: 'the following required arguments were not provided:\n  --chatgpt-token-stdin' };
  return null;
}

/** Whether any of these credentials was asked for. */
export function wantsOpenAiCredential(v: OpenAiCredentialFlags): boolean {
  return v['chatgpt-token-stdin'] || v['use-agent-identity-auth'] || v['executor-credential-stdin'];
}

const ACCOUNT_CLAIM = 'https://api.openai.com/auth';

/** Codex's check of a ChatGPT registry URL: https, a host, no userinfo, no fragment. */
export function chatgptRegistryProblem(remote: string): string | null {
  let u: URL;
  try {
    u = new URL(remote);
  } catch {
    return 'ChatGPT token registry URLs must use HTTPS without userinfo or fragments';
  }
  if (
    u.protocol !== 'https:' ||
    u.username !== '' ||
    u.password !== '' ||
    u.hash !== '' ||
    remote.includes('#')
  )
    return 'ChatGPT token registry URLs must use HTTPS without userinfo or fragments';
  return null;
}

/**
 * Codex's checks of a ChatGPT access token (a JWT) and the account it is used for: the account is the
 * `--chatgpt-account-id`, which must match the token's claim when the token has one. Returns the account or why not.
 */
export function chatgptAccount(
  token: string,
  accountId: string | undefined,
): { account: string } | { error: string } {
  const parts = token.split('.');
  if (
    token.length > 16 * 1024 ||
    parts.length !== 3 ||
    !parts.slice(0, 2).every((p) => /^[A-Za-z0-9_-]+$/.test(p))
  )
    return { error: 'invalid ChatGPT access token' };
  let claims: unknown;
  try {
    claims = JSON.parse(Buffer.from(parts[1]!, 'base64url').toString('utf8'));
  } catch {
    return { error: 'invalid ChatGPT access token' };
  }
  if (typeof claims !== 'object' || claims === null || Array.isArray(claims))
    return { error: 'invalid ChatGPT access token' };
  const auth = (claims as Record<string, unknown>)[ACCOUNT_CLAIM];
  const claimed =
    typeof auth === 'object' && auth !== null
      ? (auth as Record<string, unknown>).chatgpt_account_id
      : undefined;
  if (accountId !== undefined && !/^[A-Za-z0-9_-]{1,128}$/.test(accountId))
    return { error: 'invalid ChatGPT account ID' };
  if (typeof claimed === 'string') {
    if (accountId !== undefined && accountId !== claimed)
      return { error: '--chatgpt-account-id does not match the token' };
    return { account: claimed };
  }
  if (accountId === undefined)
    return { error: 'token has no ChatGPT account ID; supply --chatgpt-account-id' };
  return { account: accountId };
}

/** Codex 0.171's text when CODEX_API_KEY would go to a registry it does not allow. */
export const API_KEY_REGISTRY_PROBLEM =
  'remote exec-server API-key authentication is restricted to HTTPS openai.com and openai.org hosts and subdomains or loopback hosts';

/**
 * Codex 0.171's rule for the registry CODEX_API_KEY may be sent to (recorded from its binary): a loopback host (any
 * scheme), or HTTPS to openai.com, openai.org or a subdomain of either. Null when allowed.
 */
export function apiKeyRegistryProblem(remote: string, isLoopback: (host: string) => boolean): string | null {
  let u: URL;
  try {
    u = new URL(remote);
  } catch {
    return API_KEY_REGISTRY_PROBLEM;
  }
  const host = u.hostname.replace(/^\[|\]$/g, '').toLowerCase();
  if (isLoopback(host)) return null;
  const openai = ['openai.com', 'openai.org'].some((d) => host === d || host.endsWith(`.${d}`));
  return u.protocol === 'https:' && openai ? null : API_KEY_REGISTRY_PROBLEM;
}

/** Why Corral cannot go on once the credential checks pass (the OpenAI service each credential needs). */
export const UNSUPPORTED_OPENAI_CREDENTIAL: Record<'use-agent-identity-auth', string> = {
  'use-agent-identity-auth':
    '--use-agent-identity-auth: agent identity needs OpenAI’s identity service (codex 0.171 itself refuses it, before any request, even with its JWKS and task registration stood in); use --chatgpt-token-stdin, --registration-bearer-stdin or --aws-sigv4',
};

/** Codex 0.171's text for `--use-agent-identity-auth` once CODEX_ACCESS_TOKEN is set (recorded from its binary). */
export const AGENT_IDENTITY_UNAVAILABLE = 'Agent Identity authentication is unavailable';
