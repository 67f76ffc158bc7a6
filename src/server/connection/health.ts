/**
 * Health endpoints of the exec-server port (issue 18 item 5), for Kubernetes probes and load balancers:
 *
 *   GET|HEAD /healthz → 200 {"status":"ok"}                                      liveness: the server answers HTTP
 *   GET|HEAD /readyz  → 200 {"status":"ok"}                                      ready to start processes
 *                     → 503 {"status":"unavailable","failing":["sandbox",…]}     the names of the failing checks only
 *   any other method on these two paths → 405
 *
 * They need no credential and say nothing else: no version, no path, no error text (a failing check's reason goes to
 * the server's log, never to the caller). Readiness is a list of named checks that modules register
 * (`listener.readiness.register('audit', audit.ready)`: the audit worker still storing); the sandbox backend is the one every listener starts
 * with. Results are cached for `cacheMs` and concurrent probes share one evaluation, so a flood of unauthenticated
 * probes runs the checks at most once per `cacheMs`.
 */
import { accessSync, constants } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type Clock, realClock, type Timer } from '../../clock.js';
import { findBwrap, probeBwrap } from '../../sandbox/linux/locate.js';
import { SANDBOX_EXEC } from '../../sandbox/macos/seatbelt.js';
import type { PrepareOptions } from '../../sandbox/prepare.js';

/** True (or resolves true) when healthy; false, a throw or a rejection means failing. */
export type ReadinessCheck = () => boolean | Promise<boolean>;

export interface ReadinessReport {
  ready: boolean;
  /** Names of the failing checks, in registration order. */
  failing: string[];
}

export interface ReadinessOptions {
  /** How long one evaluation is reused (ms). */
  cacheMs?: number;
  /** A check that has not settled after this long is failing (ms). */
  timeoutMs?: number;
  /** Where a failing check's reason is written when it starts failing or its reason changes (never to the caller). */
  onFailure?: (name: string, reason: string) => void;
  /** The time of the cache and the check timeout (default: the real one). */
  clock?: Clock;
}

const CHECK_NAME = /^[a-z][a-z0-9-]{0,31}$/;

/** The named readiness checks of one listener. */
export class Readiness {
  private readonly checks = new Map<string, ReadinessCheck>();
  private readonly cacheMs: number;
  private readonly timeoutMs: number;
  private readonly onFailure: (name: string, reason: string) => void;
  private readonly clock: Clock;
  private last: { at: number; report: Promise<ReadinessReport> } | null = null;
  /** The last reason reported per failing check: a failure is logged when it starts or changes, not per probe. */
  private readonly reported = new Map<string, string>();

  constructor(opts: ReadinessOptions = {}) {
    this.cacheMs = opts.cacheMs ?? 1000;
    this.timeoutMs = opts.timeoutMs ?? 5000;
    this.onFailure = opts.onFailure ?? (() => {});
    this.clock = opts.clock ?? realClock;
  }

  /** Adds a check; the returned function removes it. Names are short lowercase words and unique. */
  register(name: string, check: ReadinessCheck): () => void {
    if (!CHECK_NAME.test(name)) throw new Error(`readiness check name must match ${CHECK_NAME}: ${name}`);
    if (this.checks.has(name)) throw new Error(`readiness check ${name} is already registered`);
    this.checks.set(name, check);
    this.last = null;
    return () => {
      if (this.checks.get(name) === check) {
        this.checks.delete(name);
        this.last = null;
      }
    };
  }

  names(): string[] {
    return [...this.checks.keys()];
  }

  /** Runs every check (or reuses an evaluation younger than `cacheMs`). */
  evaluate(): Promise<ReadinessReport> {
    const now = this.clock.now();
    if (this.last && now - this.last.at < this.cacheMs) return this.last.report;
    const report = this.runAll();
    this.last = { at: now, report };
    return report;
  }

  private async runAll(): Promise<ReadinessReport> {
    const entries = [...this.checks];
    const results = await Promise.all(entries.map(([name, check]) => this.runOne(name, check)));
    const failing = entries.filter((_, i) => !results[i]).map(([name]) => name);
    return { ready: failing.length === 0, failing };
  }

  private async runOne(name: string, check: ReadinessCheck): Promise<boolean> {
    let timer: Timer | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = this.clock
        .setTimeout(() => reject(new Error(`no answer within ${this.timeoutMs} ms`)), this.timeoutMs)
        .unref();
    });
    let reason: string | null;
    try {
      const ok = await Promise.race([Promise.resolve().then(check), timeout]);
      reason = ok === true ? null : 'the check reported not ready';
    } catch (e) {
      reason = e instanceof Error ? e.message : String(e);
    } finally {
      this.clock.clearTimeout(timer);
    }
    if (reason === null) this.reported.delete(name);
    else if (this.reported.get(name) !== reason) {
      this.reported.set(name, reason);
      this.onFailure(name, reason);
    }
    return reason === null;
  }
}

/**
 * Whether this server can start sandboxed processes: on Linux the bwrap binary the launcher would use passes its
 * preflight (src/sandbox/linux/locate.ts: cached once it succeeded), on macOS sandbox-exec exists; elsewhere there is
 * no sandbox backend.
 */
export function sandboxBackendCheck(opts: PrepareOptions = {}): ReadinessCheck {
  const platform = opts.platform ?? process.platform;
  return async () => {
    if (platform === 'linux') {
      const path = opts.bwrapPath ?? findBwrap();
      if (!path) throw new Error('bubblewrap (bwrap) is not installed');
      await probeBwrap(path);
      return true;
    }
    if (platform === 'darwin') {
      accessSync(SANDBOX_EXEC, constants.X_OK);
      return true;
    }
    throw new Error(`no sandbox backend on ${platform}`);
  };
}

/** A registry holding the sandbox backend check: what every listener starts with unless given its own. */
export function defaultReadiness(opts: ReadinessOptions & { sandbox?: PrepareOptions } = {}): Readiness {
  const r = new Readiness(opts);
  r.register('sandbox', sandboxBackendCheck(opts.sandbox));
  return r;
}

export const HEALTH_PATHS: readonly string[] = ['/healthz', '/readyz'];

const HEADERS = {
  'content-type': 'application/json',
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
} as const;

function send(req: IncomingMessage, res: ServerResponse, status: number, body: unknown, extra = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { ...HEADERS, 'content-length': Buffer.byteLength(text), ...extra });
  res.end(req.method === 'HEAD' ? undefined : text);
}

/**
 * Answers `/healthz` and `/readyz` (true) or leaves the request alone (false). Call it before any credential check:
 * these two paths, and nothing else, are open.
 */
export function answerHealth(
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
  readiness: Readiness,
): boolean {
  if (!HEALTH_PATHS.includes(url.pathname)) return false;
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    send(req, res, 405, { status: 'method not allowed' }, { allow: 'GET, HEAD' });
    return true;
  }
  if (url.pathname === '/healthz') {
    send(req, res, 200, { status: 'ok' });
    return true;
  }
  readiness.evaluate().then(
    (r) =>
      r.ready
        ? send(req, res, 200, { status: 'ok' })
        : send(req, res, 503, { status: 'unavailable', failing: r.failing }),
    () => send(req, res, 503, { status: 'unavailable', failing: [] }),
  );
  return true;
}
