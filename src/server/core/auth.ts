/**
 * Who may talk to the server, and as what. An upgrade (or any other way in) presents a credential; a verifier turns it
 * into a Principal or refuses it. Two roles:
 *
 * - `agent`: the exec-server methods (process/*, fs/*) on the sessions it creates. What an agent's client holds.
 * - `panel`: additionally monitor/*, approvals/*, policy/*, host/info — every session. The app's own window (IPC)
 *   and a browser holding the panel token.
 *
 * Credentials are presented as `Authorization: Bearer <token>`, `X-Corral-Token: <token>` or `?token=<token>` (the
 * Codex CLI can only send the last: it keeps the query of CODEX_EXEC_SERVER_URL). Static tokens are compared as
 * SHA-256 digests with timingSafeEqual, so neither the length nor the content of the expected token leaks through
 * timing. A verifier is pluggable (`CredentialVerifier`): a JWT or a digest-only verifier fits behind the same API.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { errors as joseErrors, jwtVerify } from 'jose';

export type Role = 'agent' | 'panel';

/** What a connection proved. `credential` names the credential (never its secret): sessions are bound to it. */
export interface Principal {
  readonly role: Role;
  readonly credential: string;
  /**
   * A panel that watches and steers (monitor/*, approvals/*, policy/*, host/*) but may call no agent method
   * (process/*, fs/*): the credential of `corral exec-server --panel-token-file`, which a fleet host holds. The fleet
   * host forwards only monitor and approval calls, so it needs no more; a joined server must not hand it the power
   * to run commands. The host's own panel (the app's window, `corral serve`'s panel token) starts commands from its
   * Run view and is not watch-only.
   */
  readonly watchOnly?: boolean;
}

/** The app's own window over IPC: always the panel. */
export const IPC_PANEL: Principal = Object.freeze({ role: 'panel', credential: 'ipc' });
/** A transport that needs no credential (stdio: whoever started the process owns its stdin). */
export const LOCAL_AGENT: Principal = Object.freeze({ role: 'agent', credential: 'local' });
/** Everyone, with `--ws-auth none`. */
export const ANONYMOUS_AGENT: Principal = Object.freeze({ role: 'agent', credential: 'anonymous' });

/** Turns a presented credential into a principal. Implementations must not leak the secret through timing. */
export interface CredentialVerifier {
  verify(presented: string): Principal | null;
  /**
   * Secret strings that must never reach a child process (their environment is scrubbed of any variable whose value
   * contains one). A verifier that only knows digests has none; the server then scrubs credentials as presented.
   */
  readonly secrets: readonly string[];
}

/** What a signed token proved: who, and until when the token itself is a credential (its `exp`, ms since the epoch). */
export interface VerifiedToken {
  principal: Principal;
  until: number;
}

/** A verifier that answers later (signed tokens: jose verifies asynchronously). */
export interface AsyncCredentialVerifier {
  verify(presented: string): Promise<VerifiedToken | null>;
  readonly secrets: readonly string[];
}

/**
 * A request that passed: who it is, and the credential it presented (scrubbed from children from then on, in every
 * form; until `presentedUntil`, ms since the epoch, when it expires — a JWT's `exp` — or for good).
 */
export interface Authenticated {
  principal: Principal;
  presented: string | null;
  presentedUntil?: number;
}

/** The upgrade-time check of a listener. */
export interface Authenticator {
  /** null: refuse with 401. A signed-token check (jose) answers asynchronously. */
  authenticate(req: IncomingMessage, url: URL): Authenticated | null | Promise<Authenticated | null>;
  /** False only for `--ws-auth none`. */
  readonly required: boolean;
  readonly secrets: readonly string[];
}

/** An authenticator that answers at once (static tokens, digests, open access). */
export interface SyncAuthenticator extends Authenticator {
  authenticate(req: IncomingMessage, url: URL): Authenticated | null;
}

/** A fresh capability token: 256 random bits, base64url (so it goes into a URL query unescaped). */
export function generateToken(): string {
  return randomBytes(32).toString('base64url');
}

const digest = (s: string): Buffer => createHash('sha256').update(s, 'utf8').digest();

/** Accepts credentials whose SHA-256 is one of `entries` (e.g. from `--ws-token-sha256`); knows no secrets. */
export function digestVerifier(entries: { sha256: Buffer; principal: Principal }[]): CredentialVerifier {
  for (const e of entries)
    if (e.sha256.length !== 32) throw new Error('a token digest must be 32 bytes (SHA-256)');
  return {
    secrets: [],
    verify(presented) {
      const d = digest(presented);
      let found: Principal | null = null;
      // Every entry is compared (no early exit), so the time does not tell which one matched.
      for (const e of entries) if (timingSafeEqual(d, e.sha256) && found === null) found = e.principal;
      return found;
    },
  };
}

/** Accepts these tokens, each as its principal. */
export function tokenVerifier(entries: { token: string; principal: Principal }[]): CredentialVerifier {
  for (const e of entries) if (e.token === '') throw new Error('a token must not be empty');
  const inner = digestVerifier(entries.map((e) => ({ sha256: digest(e.token), principal: e.principal })));
  return { secrets: entries.map((e) => e.token), verify: (p) => inner.verify(p) };
}

/**
 * The credential a request presents: `Authorization: Bearer`, then `X-Corral-Token`, then `?token=`. Only the first one
 * present is considered (a wrong header is not rescued by a right query).
 */
export function presentedCredential(req: IncomingMessage, url: URL): string | null {
  const auth = req.headers.authorization;
  const bearer = auth ? /^bearer[ \t]+(\S+)[ \t]*$/i.exec(auth) : null;
  if (bearer) return bearer[1]!;
  const header = req.headers['x-corral-token'];
  if (typeof header === 'string' && header !== '') return header.trim();
  return url.searchParams.get('token');
}

/** Requires a credential that `verifier` accepts. */
export function credentialAuth(verifier: CredentialVerifier): SyncAuthenticator {
  return {
    required: true,
    get secrets() {
      return verifier.secrets;
    },
    authenticate(req, url) {
      const presented = presentedCredential(req, url);
      const principal = presented === null ? null : verifier.verify(presented);
      return principal ? { principal, presented } : null;
    },
  };
}

/** One token (`corral exec-server`): its holders are agents. */
export function tokenAuth(
  token: string,
  principal: Principal = { role: 'agent', credential: 'token' },
): SyncAuthenticator {
  return credentialAuth(tokenVerifier([{ token, principal }]));
}

/**
 * `auth`, plus one more credential whose holders are a watching panel (`corral exec-server --panel-token-file`: a
 * fleet host watching this server; `watchOnly`: no process/* or fs/*). The panel token is checked first; any other
 * credential goes to `auth` as before.
 */
export function withPanelToken(auth: Authenticator, token: string): Authenticator {
  const panel = tokenVerifier([
    { token, principal: { role: 'panel', credential: 'panel-token', watchOnly: true } },
  ]);
  return {
    required: true,
    get secrets() {
      return [...auth.secrets, ...panel.secrets];
    },
    authenticate(req, url) {
      const presented = presentedCredential(req, url);
      const principal = presented === null ? null : panel.verify(presented);
      return principal ? { principal, presented } : auth.authenticate(req, url);
    },
  };
}

/** `--ws-auth none`: everyone who can reach the port is an agent (never the panel). */
export function openAccess(): SyncAuthenticator {
  return {
    required: false,
    secrets: [],
    authenticate: () => ({ principal: ANONYMOUS_AGENT, presented: null }),
  };
}

/** The agent and panel tokens of a host (`corral serve`, the desktop app). */
export interface HostTokens {
  agent: string;
  panel: string;
}

export function hostTokens(given: Partial<HostTokens> = {}): HostTokens {
  const agent = given.agent ?? generateToken();
  const panel = given.panel ?? generateToken();
  if (agent === panel) throw new Error('the agent and panel tokens must differ');
  return { agent, panel };
}

export function hostAuth(tokens: HostTokens): SyncAuthenticator {
  return credentialAuth(
    tokenVerifier([
      { token: tokens.agent, principal: { role: 'agent', credential: 'agent-token' } },
      { token: tokens.panel, principal: { role: 'panel', credential: 'panel-token' } },
    ]),
  );
}

// ---- --ws-token-sha256 and --ws-auth signed-bearer-token (parity with `codex exec-server` 0.169) ------------------

/** `--ws-token-sha256 HEX`: the 64 hex digits of the token's SHA-256 (the token itself never reaches this process). */
export function parseTokenSha256(hex: string): Buffer {
  const t = hex.trim();
  if (!/^[0-9a-fA-F]{64}$/.test(t))
    throw new Error('--ws-token-sha256 must be a 64-character hex SHA-256 digest');
  return Buffer.from(t, 'hex');
}

/** The shortest HS256 shared secret accepted (`--ws-shared-secret-file`), as Codex: 32 bytes. */
export const MIN_SHARED_SECRET_BYTES = 32;
export const DEFAULT_MAX_CLOCK_SKEW_SECONDS = 30;

export interface SignedBearerOptions {
  /** The HS256 key (the trimmed contents of `--ws-shared-secret-file`). */
  secret: Buffer;
  /** `--ws-issuer`: the `iss` a token must carry. */
  issuer?: string | null;
  /** `--ws-audience`: a value the token's `aud` (string or array) must hold. */
  audience?: string | null;
  /** `--ws-max-clock-skew-seconds` (default 30) for `exp` and `nbf`. */
  maxClockSkewSeconds?: number;
}

/** Why a signed token was refused, in Codex's words (logged at debug; the client only ever sees 401). */
export type JwtRefusal =
  | 'invalid websocket jwt'
  | 'expired websocket jwt'
  | 'websocket jwt is not valid yet'
  | 'websocket jwt issuer mismatch'
  | 'websocket jwt audience mismatch';

/**
 * Verifies HS256 JWTs with `jose`: the signature with the shared secret (HS256 only, so `alg: none`, RS256/ES256 and
 * any other algorithm are refused before a key is used), `exp` required, `nbf` when present, both with the clock
 * skew, `iss` and `aud` when configured; `sub` a non-empty string and `iss` a string when present (jwtCredential).
 * A token's holder is an agent; its sessions are bound to its issuer and subject (`jwt:<iss>/<sub>`, each part
 * percent-encoded), so a refreshed token of the same subject can resume them and another subject cannot.
 */
export function signedBearerVerifier(
  o: SignedBearerOptions,
  onRefused: (why: JwtRefusal) => void = () => {},
): AsyncCredentialVerifier {
  if (o.secret.length < MIN_SHARED_SECRET_BYTES)
    throw new Error(`the signed bearer secret must be at least ${MIN_SHARED_SECRET_BYTES} bytes`);
  const key = new Uint8Array(o.secret);
  const skew = o.maxClockSkewSeconds ?? DEFAULT_MAX_CLOCK_SKEW_SECONDS;
  return {
    secrets: [o.secret.toString('utf8')],
    async verify(presented) {
      try {
        const { payload } = await jwtVerify(presented, key, {
          algorithms: ['HS256'],
          clockTolerance: skew,
          requiredClaims: ['exp'],
          ...(o.issuer ? { issuer: o.issuer } : {}),
          ...(o.audience ? { audience: o.audience } : {}),
        });
        const credential = jwtCredential(payload.iss, payload.sub);
        if (credential === null) {
          onRefused('invalid websocket jwt');
          return null;
        }
        // exp is required; the skew is added so that the token is forgotten only once nothing accepts it.
        return { principal: { role: 'agent', credential }, until: ((payload.exp ?? 0) + skew) * 1000 };
      } catch (e) {
        onRefused(jwtRefusal(e));
        return null;
      }
    },
  };
}

/**
 * The credential name of a token's subject: `jwt:<iss>/<sub>`, each part percent-encoded (encodeURIComponent: `/`
 * and `%` included), so that the one unencoded `/` separates them and (iss `a/b`, sub `c`) is `jwt:a%2Fb/c`, never
 * (iss `a`, sub `b/c`) `jwt:a/b%2Fc`. `sub` must be a non-empty string (a session is bound to a subject: a token
 * naming none is refused); `iss`, when present, a string (absent and empty are both "no issuer"). null: refuse.
 */
export function jwtCredential(iss: unknown, sub: unknown): string | null {
  if (typeof sub !== 'string' || sub === '') return null;
  if (iss !== undefined && typeof iss !== 'string') return null;
  return `jwt:${encodeURIComponent(iss ?? '')}/${encodeURIComponent(sub)}`;
}

function jwtRefusal(e: unknown): JwtRefusal {
  if (e instanceof joseErrors.JWTExpired) return 'expired websocket jwt';
  if (e instanceof joseErrors.JWTClaimValidationFailed) {
    if (e.claim === 'nbf') return 'websocket jwt is not valid yet';
    if (e.claim === 'iss') return 'websocket jwt issuer mismatch';
    if (e.claim === 'aud') return 'websocket jwt audience mismatch';
  }
  return 'invalid websocket jwt';
}

/** Requires a credential an asynchronous verifier (a signed-token check) accepts. */
export function asyncCredentialAuth(verifier: AsyncCredentialVerifier): Authenticator {
  return {
    required: true,
    secrets: verifier.secrets,
    async authenticate(req, url) {
      const presented = presentedCredential(req, url);
      if (presented === null) return null;
      const verified = await verifier.verify(presented);
      return verified ? { principal: verified.principal, presented, presentedUntil: verified.until } : null;
    },
  };
}
