/**
 * The credentials on the command line of `corral exec-server` and `corral serve`: the listener's, the panel's and the
 * fleet registration's, and the secret files and stdin lines they are read from.
 */
import { createHash } from 'node:crypto';
import { closeSync, constants, fstatSync, openSync, readFileSync, realpathSync } from 'node:fs';
import { fail } from './cliOptions.js';
import { clapFail, configFail } from './codexFlags.js';
import { bearerAuth, NO_AWS_REGION, noAuth, type RegistrationAuth, sigv4Auth } from './remote/auth.js';
import { apiKeyRegistryProblem } from './remote/credentials.js';
import {
  type Authenticator,
  asyncCredentialAuth,
  credentialAuth,
  DEFAULT_MAX_CLOCK_SKEW_SECONDS,
  digestVerifier,
  generateToken,
  MIN_SHARED_SECRET_BYTES,
  openAccess,
  parseTokenSha256,
  signedBearerVerifier,
  tokenAuth,
  withPanelToken,
} from './server/core/auth.js';

/**
 * Reads a secret file (`--ws-token-file`, `--ws-shared-secret-file`): a regular file of this user (or root) that
 * neither group nor others can read, holding one word of at least `minLength` characters. Returns it and the file's
 * real path (hidden from every sandbox).
 */
export function readSecretFile(
  file: string,
  flag: string,
  minLength: number,
): { token: string; path: string } {
  let fd: number;
  try {
    fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (e) {
    fail(`${flag}: ${(e as Error).message}`);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) fail(`${flag}: ${file} is not a regular file`);
    const me = process.geteuid?.() ?? st.uid;
    if (st.uid !== me && st.uid !== 0) fail(`${flag}: ${file} is owned by uid ${st.uid}, not by you`);
    if ((st.mode & 0o077) !== 0) {
      fail(
        `${flag}: ${file} can be read by others (mode ${(st.mode & 0o777).toString(8).padStart(4, '0')}): chmod 600 it`,
      );
    }
    const token = readFileSync(fd, 'utf8').trim();
    if (!token) fail(`${flag}: the file is empty`);
    // A token is counted in characters, an HMAC key in bytes (as Codex counts it).
    const what = flag === '--ws-token-file' ? 'token' : 'secret';
    const size = what === 'token' ? token.length : Buffer.byteLength(token);
    if (size < minLength)
      fail(`${flag}: the ${what} must be at least ${minLength} ${what === 'token' ? 'characters' : 'bytes'}`);
    if (/\s/.test(token)) fail(`${flag}: the ${what} must not contain white space`);
    return { token, path: realpathSync(file) };
  } finally {
    closeSync(fd);
  }
}

/** The first line of standard input (`--registration-bearer-stdin`); stdin stays open for `--exit-on-stdin-close`. */
export function readStdinLine(flag: string): Promise<string> {
  return new Promise((resolve) => {
    let buf = '';
    const onData = (d: Buffer) => {
      buf += d.toString('utf8');
      const nl = buf.indexOf('\n');
      if (nl < 0) {
        if (buf.length > 65536) fail(`${flag}: no line within 64 KiB`);
        return;
      }
      process.stdin.off('data', onData);
      process.stdin.off('end', onEnd);
      process.stdin.pause();
      resolve(buf.slice(0, nl).trim());
    };
    const onEnd = () => fail(`${flag}: standard input closed before a line was read`);
    process.stdin.on('data', onData);
    process.stdin.once('end', onEnd);
  });
}

/** The longest ChatGPT access token line `--chatgpt-token-stdin` reads (bytes, without its newline), as Codex. */
export const MAX_CHATGPT_TOKEN_LINE_BYTES = 16 * 1024;

/**
 * `--chatgpt-token-stdin`'s line, read as Codex 0.171 reads it: standard input must be a pipe or a socket (not a
 * file or a terminal), and the token one line of at most 16 KiB ended by a newline; else null with Codex's text.
 * Nothing after the newline is read.
 */
export function readChatgptTokenLine(
  input: NodeJS.ReadableStream & { fd?: number } = process.stdin,
): Promise<{ line: string } | { error: string }> {
  let st: ReturnType<typeof fstatSync> | null = null;
  try {
    st = fstatSync(input.fd ?? 0);
  } catch {}
  if (!st || !(st.isFIFO() || st.isSocket()))
    return Promise.resolve({ error: 'ChatGPT token stdin must be a pipe or socket' });
  const bounded = { error: 'expected a bounded, newline-terminated ChatGPT access token' };
  return new Promise((resolve) => {
    const parts: Buffer[] = [];
    let size = 0;
    const done = (r: { line: string } | { error: string }) => {
      input.off('data', onData);
      input.off('end', onEnd);
      input.off('error', onEnd);
      input.pause();
      resolve(r);
    };
    const onData = (d: Buffer | string) => {
      const b = typeof d === 'string' ? Buffer.from(d) : d;
      const nl = b.indexOf(0x0a);
      const take = nl < 0 ? b : b.subarray(0, nl);
      size += take.length;
      if (size > MAX_CHATGPT_TOKEN_LINE_BYTES) return done(bounded);
      parts.push(take);
      if (nl >= 0) done({ line: Buffer.concat(parts, size).toString('utf8').trim() });
    };
    const onEnd = () => done(bounded);
    input.on('data', onData);
    input.once('end', onEnd);
    input.once('error', onEnd);
  });
}

export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/** What `--ws-auth` and its flags ask for (the checks and messages of `codex exec-server` 0.169). */
export function listenerAuth(values: Record<string, string | boolean | string[] | undefined>): {
  auth: Authenticator;
  /** The generated token to print in the URL, if any. */
  printedToken: string | null;
  hiddenPaths: string[];
  describe: string;
} {
  const str = (k: string) => values[k] as string | undefined;
  const mode = str('ws-auth');
  const jwtFlags = ['ws-shared-secret-file', 'ws-issuer', 'ws-audience', 'ws-max-clock-skew-seconds'];
  const tokenFlags = ['ws-token-file', 'ws-token-sha256'];
  const given = (list: string[]) => list.filter((k) => str(k) !== undefined);
  if (mode !== 'capability-token' && mode !== 'signed-bearer-token' && mode !== 'none')
    fail(`--ws-auth: unknown mode ${mode} (capability-token, signed-bearer-token or none)`);
  if (mode === 'none') {
    if (given([...tokenFlags, ...jwtFlags]).length > 0)
      fail('websocket auth flags require `--ws-auth capability-token` or `--ws-auth signed-bearer-token`');
    return { auth: openAccess(), printedToken: null, hiddenPaths: [], describe: 'no authentication' };
  }
  if (mode === 'capability-token') {
    if (given(jwtFlags).length > 0)
      fail(
        '`--ws-shared-secret-file`, `--ws-issuer`, `--ws-audience`, and `--ws-max-clock-skew-seconds` require `--ws-auth signed-bearer-token`',
      );
    if (given(tokenFlags).length === 2)
      fail('`--ws-token-file` and `--ws-token-sha256` are mutually exclusive');
    const sha = str('ws-token-sha256');
    if (sha !== undefined) {
      let digest: Buffer;
      try {
        digest = parseTokenSha256(sha);
      } catch (e) {
        fail((e as Error).message);
      }
      const auth = credentialAuth(
        digestVerifier([{ sha256: digest, principal: { role: 'agent', credential: 'token' } }]),
      );
      return {
        auth,
        printedToken: null,
        hiddenPaths: [],
        describe: 'the token of --ws-token-sha256 required',
      };
    }
    const file = str('ws-token-file') ? readSecretFile(str('ws-token-file')!, '--ws-token-file', 16) : null;
    // The token lives in this process's memory only: never in argv, the environment, a log line or a file we write.
    const token = file?.token ?? generateToken();
    return {
      auth: tokenAuth(token),
      printedToken: file ? null : token,
      hiddenPaths: file ? [file.path] : [],
      describe: file ? `token from ${file.path} required` : 'token required: see the URL on stdout',
    };
  }
  if (given(tokenFlags).length > 0)
    fail(
      '`--ws-token-file` and `--ws-token-sha256` require `--ws-auth capability-token`, not `signed-bearer-token`',
    );
  const secretFile = str('ws-shared-secret-file');
  if (!secretFile) fail('`--ws-shared-secret-file` is required when `--ws-auth signed-bearer-token` is set');
  const secret = readSecretFile(secretFile, '--ws-shared-secret-file', MIN_SHARED_SECRET_BYTES);
  const skewText = str('ws-max-clock-skew-seconds');
  const skew = skewText === undefined ? DEFAULT_MAX_CLOCK_SKEW_SECONDS : Number(skewText);
  if (!Number.isSafeInteger(skew) || skew < 0) fail('--ws-max-clock-skew-seconds must be a whole number ≥ 0');
  const issuer = str('ws-issuer')?.trim() || null;
  const audience = str('ws-audience')?.trim() || null;
  const verifier = signedBearerVerifier({
    secret: Buffer.from(secret.token, 'utf8'),
    issuer,
    audience,
    maxClockSkewSeconds: skew,
  });
  return {
    auth: asyncCredentialAuth(verifier),
    printedToken: null,
    hiddenPaths: [secret.path],
    describe: `HS256 bearer tokens signed with ${secret.path} required${issuer ? `, iss ${issuer}` : ''}${audience ? `, aud ${audience}` : ''}`,
  };
}

export type Listening = ReturnType<typeof listenerAuth>;

/**
 * `--panel-token-file`: the listener also accepts that token (a different one) as a watching panel credential — the
 * monitor, approvals and policy methods, never process/* or fs/* — so that a fleet host can watch this server.
 */
export function withPanelCredential(
  l: Listening,
  values: Record<string, string | boolean | string[] | undefined>,
): Listening & { panel: boolean } {
  const file = values['panel-token-file'] as string | undefined;
  if (file === undefined) return { ...l, panel: false };
  if (!l.auth.required) fail('--ws-auth none and --panel-token-file exclude each other');
  const panel = readSecretFile(file, '--panel-token-file', 16);
  const sha = values['ws-token-sha256'] as string | undefined;
  const sameAsAgent =
    l.auth.secrets.includes(panel.token) ||
    (sha !== undefined && parseTokenSha256(sha).equals(createHash('sha256').update(panel.token).digest()));
  if (sameAsAgent) fail('--panel-token-file: the panel token must differ from the agent token');
  return {
    ...l,
    auth: withPanelToken(l.auth, panel.token),
    hiddenPaths: [...l.hiddenPaths, panel.path],
    describe: `${l.describe}; the token of --panel-token-file for a panel`,
    panel: true,
  };
}

/** Codex 0.171's parser requires --aws-sigv4 with --aws-profile, --aws-region or --aws-service (its words, exit 2). */
export function requireSigv4ForAwsFlags(values: Record<string, unknown>): void {
  for (const f of ['aws-profile', 'aws-region', 'aws-service'])
    if (values[f] !== undefined && values['aws-sigv4'] !== true)
      clapFail('the following required arguments were not provided:\n  --aws-sigv4');
}

/** The registration auth of `--remote`: SigV4, a bearer read from stdin, or none (loopback registries only). */
export async function registrationAuth(
  values: Record<string, string | boolean | string[] | undefined>,
  base: string,
  /** `--executor-credential-stdin`'s, already reading (it excludes the other two, as in Codex). */
  executorCredential?: RegistrationAuth,
): Promise<RegistrationAuth> {
  const sigv4 = values['aws-sigv4'] === true;
  const bearer = values['registration-bearer-stdin'] === true;
  if (sigv4 && bearer) fail('--aws-sigv4 and --registration-bearer-stdin exclude each other');
  requireSigv4ForAwsFlags(values);
  if (executorCredential) return executorCredential;
  if (sigv4) {
    if (values['aws-region'] === undefined && !process.env.AWS_REGION && !process.env.AWS_DEFAULT_REGION)
      configFail(NO_AWS_REGION);
    try {
      return sigv4Auth({
        profile: (values['aws-profile'] as string | undefined) ?? null,
        region: (values['aws-region'] as string | undefined) ?? null,
        service: (values['aws-service'] as string | undefined) ?? 'execute-api',
      });
    } catch (e) {
      fail((e as Error).message);
    }
  }
  if (bearer) {
    const line = await readStdinLine('--registration-bearer-stdin');
    try {
      return bearerAuth(line);
    } catch (e) {
      fail(`--registration-bearer-stdin: ${(e as Error).message}`);
    }
  }
  // CODEX_API_KEY, after the explicit credentials (as codex 0.171: a stdin bearer or a ChatGPT token wins), only to
  // a registry Codex allows it for.
  const apiKey = process.env.CODEX_API_KEY;
  if (apiKey) {
    const problem = apiKeyRegistryProblem(base, isLoopback);
    if (problem) configFail(problem);
    try {
      return bearerAuth(apiKey);
    } catch (e) {
      fail(`CODEX_API_KEY: ${(e as Error).message}`);
    }
  }
  let host = '';
  try {
    host = new URL(base).hostname;
  } catch {}
  if (!isLoopback(host.replace(/^\[|\]$/g, '')))
    fail(
      '--remote: a registry that is not on loopback needs a credential (--aws-sigv4 or --registration-bearer-stdin)',
    );
  return noAuth();
}
