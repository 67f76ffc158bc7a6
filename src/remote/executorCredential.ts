/**
 * `--executor-credential-stdin` (codex 0.171): rotating executor credentials read from standard input, one JSON frame a
 * line, for as long as the pipe stays open; the executor exits when it closes. What Codex 0.171 does, recorded from its
 * binary against a loopback registry (test/integration/remote-executor-credential.test.ts holds Corral to it):
 *
 *   {"version":1,"environment_id":"<the --environment-id>","token":"<bearer>","expires_at":<unix seconds>}\n
 *
 * - exactly these four fields (an unknown or repeated one, another type, version ≠ 1, an empty token or one with a
 *   space or control character, a fraction or negative expiry: "invalid exec-server executor credential frame");
 *   white space around the JSON (a CRLF ending too) is allowed, an empty line is not;
 * - a line of more than 16 KiB (its newline excluded): "exec-server executor credential frame exceeds the size limit";
 * - another environment: "exec-server executor credential is for a different environment"; `expires_at` not in the
 *   future: "exec-server executor credential is expired" (also when the one in use expires before it is used again);
 * - a frame's token is the registration's `Authorization: Bearer` from then on (rotation: the next registration uses
 *   the newest one); no frame within INITIAL_FRAME_TIMEOUT_MS: "timed out waiting for the initial exec-server executor
 *   credential";
 * - the pipe closing ends the executor: exit 0 once it has registered, else "exec-server executor credential pipe
 *   closed" (exit 1); a bad frame is fatal (exit 1, the text above); a last line without its newline is a bad frame.
 *   (Codex's blocking reader makes it wait for the pipe to close before it exits on an error; Corral exits at once.)
 *
 * The token is a secret: it is kept in memory only (never logged, never in an error text, never in argv or a child's
 * environment: every token seen is handed to the server's scrubber). Codex's executor sends the credential to the
 * noise registration (`POST {base}/cloud/environment/{id}/register`); Corral, which has the direct transport only,
 * sends it as the bearer of the direct registration and of every link's handshake (remote/auth.ts).
 */
import type { Readable } from 'node:stream';
import type { Clock, Timer } from '../clock.js';
import type { RegistrationAuth } from './auth.js';
import { RegistryError } from './registry.js';

/** The longest frame line (bytes, without its newline), as Codex bounds it. */
export const MAX_CREDENTIAL_FRAME_BYTES = 16 * 1024;
/** How long the executor waits for the first frame. */
export const INITIAL_FRAME_TIMEOUT_MS = 30_000;
/** How many tokens the scrubber is told about at most (a rotation every minute for two days). */
const MAX_REMEMBERED_TOKENS = 4096;

export const CREDENTIAL_TEXT = {
  invalid: 'invalid exec-server executor credential frame',
  tooLarge: 'exec-server executor credential frame exceeds the size limit',
  otherEnvironment: 'exec-server executor credential is for a different environment',
  expired: 'exec-server executor credential is expired',
  timeout: 'timed out waiting for the initial exec-server executor credential',
  unreadable: 'could not read exec-server executor credential pipe',
  pipeClosed: 'exec-server executor credential pipe closed',
} as const;

export interface ExecutorCredential {
  token: string;
  /** Unix seconds. */
  expiresAt: number;
}

const FIELDS = ['version', 'environment_id', 'token', 'expires_at'] as const;
/** A bearer as an HTTP header carries it: visible ASCII, no space. */
const TOKEN = /^[\x21-\x7e]+$/;

/**
 * The top-level object of `text` as written: how many members it has (its `:` outside strings) and whether a number in
 * it has a fraction or an exponent. Only asked of a text that parsed as an object of scalar values (no nested `:`):
 * a repeated key shows as one member more than the parsed object kept; `1.0` or `1e3` is a float to Codex (no u64).
 */
function written(text: string): { members: number; float: boolean } {
  let members = 0;
  let float = false;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x3a) members++;
    else if (c === 0x2e || c === 0x65 || c === 0x45) float = true;
  }
  return { members, float };
}

/** Every key once, every number an integer as written (every value is a scalar here). */
function writtenAsCodexReadsIt(text: string): boolean {
  const w = written(text);
  return w.members === FIELDS.length && !w.float;
}

/** One frame line (without its newline), checked as Codex checks it. */
export function parseCredentialFrame(
  line: string,
  environmentId: string,
  nowSeconds: number,
): ExecutorCredential | { error: string } {
  const text = line.trim();
  if (!text.startsWith('{')) return { error: CREDENTIAL_TEXT.invalid };
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return { error: CREDENTIAL_TEXT.invalid };
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return { error: CREDENTIAL_TEXT.invalid };
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o);
  if (keys.length !== FIELDS.length || !FIELDS.every((f) => Object.hasOwn(o, f)))
    return { error: CREDENTIAL_TEXT.invalid };
  const { version, environment_id: env, token, expires_at: expiresAt } = o;
  if (
    version !== 1 ||
    typeof env !== 'string' ||
    typeof token !== 'string' ||
    !TOKEN.test(token) ||
    typeof expiresAt !== 'number' ||
    !Number.isSafeInteger(expiresAt) ||
    expiresAt < 0 ||
    !writtenAsCodexReadsIt(text)
  )
    return { error: CREDENTIAL_TEXT.invalid };
  if (env !== environmentId) return { error: CREDENTIAL_TEXT.otherEnvironment };
  if (expiresAt <= nowSeconds) return { error: CREDENTIAL_TEXT.expired };
  return { token, expiresAt };
}

export interface CredentialStreamOptions {
  environmentId: string;
  clock: Clock;
  initialTimeoutMs?: number;
}

/**
 * Reads frames from `input` (standard input) until it ends. `first` settles with the first frame (or its error);
 * later frames replace the current credential; `ended` settles once the stream is over: resolved when the pipe
 * closed after good frames only, rejected with the first problem (a bad frame, the pipe closing inside a line, a read
 * error), after which nothing more is read.
 */
export class ExecutorCredentialStream {
  readonly first: Promise<ExecutorCredential>;
  readonly ended: Promise<void>;
  private current: ExecutorCredential | null = null;
  private readonly tokens = new Set<string>();
  private readonly secretListeners = new Set<(token: string) => void>();
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private done = false;
  private resolveFirst!: (c: ExecutorCredential) => void;
  private rejectFirst!: (e: Error) => void;
  private resolveEnded!: () => void;
  private rejectEnded!: (e: Error) => void;
  private readonly timer: Timer;

  constructor(
    private readonly input: Readable,
    private readonly opts: CredentialStreamOptions,
  ) {
    this.first = new Promise((res, rej) => {
      this.resolveFirst = res;
      this.rejectFirst = rej;
    });
    this.ended = new Promise((res, rej) => {
      this.resolveEnded = res;
      this.rejectEnded = rej;
    });
    // Whoever awaits only one of them must not see the other as an unhandled rejection.
    this.first.catch(() => {});
    this.ended.catch(() => {});
    this.timer = opts.clock
      .setTimeout(() => this.fail(CREDENTIAL_TEXT.timeout), opts.initialTimeoutMs ?? INITIAL_FRAME_TIMEOUT_MS)
      .unref();
    input.on('data', this.onData);
    input.once('end', this.onEnd);
    input.once('error', this.onError);
  }

  /** The credential in use; throws Codex's text when there is none or it has expired. */
  credential(): ExecutorCredential {
    const c = this.current;
    if (c === null) throw new Error(CREDENTIAL_TEXT.invalid);
    if (c.expiresAt * 1000 <= this.opts.clock.now()) throw new Error(CREDENTIAL_TEXT.expired);
    return c;
  }

  /** Every token read so far (most recent last, at most MAX_REMEMBERED_TOKENS). */
  secrets(): string[] {
    return [...this.tokens];
  }

  /** Calls `fn` with every token read from now on (the ones before are in `secrets()`). */
  onSecret(fn: (token: string) => void): void {
    this.secretListeners.add(fn);
  }

  /** Stops reading (the executor is stopping). */
  close(): void {
    this.finish(null);
  }

  private readonly onData = (chunk: Buffer | string) => {
    if (this.done) return;
    let buf = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : chunk;
    for (;;) {
      const nl = buf.indexOf(0x0a);
      if (nl < 0) {
        this.pendingBytes += buf.length;
        if (this.pendingBytes > MAX_CREDENTIAL_FRAME_BYTES) return this.fail(CREDENTIAL_TEXT.tooLarge);
        if (buf.length > 0) this.pending.push(buf);
        return;
      }
      const lineBytes = this.pendingBytes + nl;
      if (lineBytes > MAX_CREDENTIAL_FRAME_BYTES) return this.fail(CREDENTIAL_TEXT.tooLarge);
      const line = Buffer.concat([...this.pending, buf.subarray(0, nl)], lineBytes);
      this.pending = [];
      this.pendingBytes = 0;
      buf = buf.subarray(nl + 1);
      this.onLine(line);
      if (this.done) return;
    }
  };

  private onLine(bytes: Buffer): void {
    // Invalid UTF-8 or a NUL is no JSON text a frame can be.
    const line = bytes.toString('utf8');
    if (line.includes('\uFFFD') || line.includes('\0')) {
      this.fail(CREDENTIAL_TEXT.invalid);
      return;
    }
    const r = parseCredentialFrame(line, this.opts.environmentId, Math.floor(this.opts.clock.now() / 1000));
    if ('error' in r) {
      this.fail(r.error);
      return;
    }
    this.current = r;
    if (!this.tokens.has(r.token)) {
      this.tokens.add(r.token);
      if (this.tokens.size > MAX_REMEMBERED_TOKENS) this.tokens.delete(this.tokens.values().next().value!);
      for (const fn of this.secretListeners) fn(r.token);
    }
    this.opts.clock.clearTimeout(this.timer);
    this.resolveFirst(r);
  }

  private readonly onEnd = () => {
    // A last line without its newline is a frame Codex refuses too.
    this.finish(this.pendingBytes > 0 ? new Error(CREDENTIAL_TEXT.invalid) : null);
  };

  private readonly onError = () => this.fail(CREDENTIAL_TEXT.unreadable);

  private fail(text: string): void {
    this.finish(new Error(text));
  }

  private finish(error: Error | null): void {
    if (this.done) return;
    this.done = true;
    this.opts.clock.clearTimeout(this.timer);
    this.pending = [];
    this.pendingBytes = 0;
    this.input.off('data', this.onData);
    this.input.off('end', this.onEnd);
    this.input.off('error', this.onError);
    this.input.pause();
    // Settles `first` only when no frame came (else it is resolved already).
    this.rejectFirst(error ?? new Error(CREDENTIAL_TEXT.pipeClosed));
    if (error) this.rejectEnded(error);
    else this.resolveEnded();
  }
}

/**
 * The registration auth of `--executor-credential-stdin`: `Authorization: Bearer <the newest token>` on the
 * registration and on every link's handshake; an expired credential fails the request (not retried: the executor
 * stops, as Codex's does).
 */
export function executorCredentialAuth(stream: ExecutorCredentialStream): RegistrationAuth {
  return {
    kind: 'executor-credential',
    get secrets() {
      return stream.secrets();
    },
    onSecret: (fn) => stream.onSecret(fn),
    sign(r) {
      let c: ExecutorCredential;
      try {
        c = stream.credential();
      } catch (e) {
        throw new RegistryError((e as Error).message, null, false);
      }
      return { ...r.headers, authorization: `Bearer ${c.token}` };
    },
  };
}
