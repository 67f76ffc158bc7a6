/**
 * How a remote executor proves itself to its environment registry: on the registration POST and again on the
 * WebSocket handshake of every link (the released Codex executor signs both).
 *
 * - `sigv4`: AWS Signature V4 (`--aws-sigv4`, what Codex 0.169 requires for `--remote-transport direct`), signed with
 *   the `aws4` library; credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, or from the
 *   shared credentials file (`--aws-profile`, AWS_PROFILE; `~/.aws/credentials` or AWS_SHARED_CREDENTIALS_FILE).
 *   Region from `--aws-region`, AWS_REGION or AWS_DEFAULT_REGION; service `execute-api` unless `--aws-service`.
 * - `bearer`: `Authorization: Bearer <token>` (`--registration-bearer-stdin`: one line read from stdin, never from
 *   argv or the environment), for a self-hosted registry.
 * - `executor-credential`: `Authorization: Bearer <the newest token>` (`--executor-credential-stdin`: rotating JSON
 *   frames read from stdin, remote/executorCredential.ts).
 * - `none`: nothing (a registry on loopback that needs no credential, tests).
 *
 * Every secret a provider holds is listed in `secrets`, so the server scrubs it from every child's environment.
 */
import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import aws4 from 'aws4';

export interface SignableRequest {
  method: 'GET' | 'POST';
  url: URL;
  /** Headers the request will carry (lower-case names); the provider adds its own. */
  headers: Record<string, string>;
  body: string;
}

export interface RegistrationAuth {
  readonly kind: 'sigv4' | 'bearer' | 'executor-credential' | 'none';
  /** The headers to send: `req.headers` plus what proves the executor. */
  sign(req: SignableRequest): Record<string, string>;
  readonly secrets: readonly string[];
  /** A provider whose secrets rotate (`--executor-credential-stdin`) calls `fn` with each new one. */
  onSecret?(fn: (secret: string) => void): void;
}

export function noAuth(): RegistrationAuth {
  return { kind: 'none', secrets: [], sign: (r) => ({ ...r.headers }) };
}

export function bearerAuth(token: string): RegistrationAuth {
  if (token === '' || /\s/.test(token)) throw new Error('the registration bearer must be one non-empty word');
  return {
    kind: 'bearer',
    secrets: [token],
    sign: (r) => ({ ...r.headers, authorization: `Bearer ${token}` }),
  };
}

/** Codex 0.171's text when neither --aws-region nor the environment names a region (its exit 1). */
export const NO_AWS_REGION = 'AWS SDK config did not resolve a region';

export interface AwsCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
}

export interface SigV4Options {
  profile?: string | null;
  region?: string | null;
  service?: string;
  env?: NodeJS.ProcessEnv;
}

/** A minimal reader of the shared credentials file's `[profile]` section (key = value lines). */
function profileCredentials(profile: string, env: NodeJS.ProcessEnv): AwsCredentials {
  const file = env.AWS_SHARED_CREDENTIALS_FILE ?? join(homedir(), '.aws', 'credentials');
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new Error(`--aws-profile ${profile}: cannot read ${file}: ${(e as Error).message}`);
  }
  const values: Record<string, string> = {};
  let inSection = false;
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#') || line.startsWith(';')) continue;
    const section = /^\[\s*(.+?)\s*\]$/.exec(line);
    if (section) {
      inSection = section[1] === profile;
      continue;
    }
    const kv = /^([A-Za-z0-9_]+)\s*=\s*(.*)$/.exec(line);
    if (inSection && kv) values[kv[1]!.toLowerCase()] = kv[2]!.trim();
  }
  const accessKeyId = values.aws_access_key_id;
  const secretAccessKey = values.aws_secret_access_key;
  if (!accessKeyId || !secretAccessKey)
    throw new Error(`--aws-profile ${profile}: no aws_access_key_id / aws_secret_access_key in ${file}`);
  return { accessKeyId, secretAccessKey, sessionToken: values.aws_session_token };
}

export function awsCredentials(opts: SigV4Options = {}): AwsCredentials {
  const env = opts.env ?? process.env;
  const profile = opts.profile ?? null;
  if (profile === null && env.AWS_ACCESS_KEY_ID && env.AWS_SECRET_ACCESS_KEY) {
    return {
      accessKeyId: env.AWS_ACCESS_KEY_ID,
      secretAccessKey: env.AWS_SECRET_ACCESS_KEY,
      sessionToken: env.AWS_SESSION_TOKEN || undefined,
    };
  }
  const name = profile ?? env.AWS_PROFILE ?? 'default';
  try {
    return profileCredentials(name, env);
  } catch (e) {
    if (profile !== null) throw e;
    throw new Error(
      `--aws-sigv4: no AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile in the shared credentials file): ${(e as Error).message}`,
    );
  }
}

export function sigv4Auth(opts: SigV4Options = {}): RegistrationAuth {
  const env = opts.env ?? process.env;
  const credentials = awsCredentials(opts);
  const region = opts.region ?? env.AWS_REGION ?? env.AWS_DEFAULT_REGION;
  if (!region) throw new Error(NO_AWS_REGION);
  const service = opts.service ?? 'execute-api';
  return {
    kind: 'sigv4',
    secrets: [credentials.secretAccessKey, ...(credentials.sessionToken ? [credentials.sessionToken] : [])],
    sign(r) {
      const signed = aws4.sign(
        {
          method: r.method,
          host: r.url.host,
          path: `${r.url.pathname}${r.url.search}`,
          headers: { ...r.headers },
          body: r.body === '' ? undefined : r.body,
          service,
          region,
        },
        credentials,
      );
      const out: Record<string, string> = {};
      for (const [k, v] of Object.entries(signed.headers ?? {})) {
        const name = k.toLowerCase();
        // aws4 adds Content-Length for a body; the HTTP layer sets it from the bytes it sends.
        if (name !== 'content-length') out[name] = String(v);
      }
      return out;
    },
  };
}
