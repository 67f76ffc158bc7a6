import { type Clock, realClock } from '../../clock.js';
import { nativeFs } from '../../platform/confinedFs.js';
import { ErrorCode, internalError, RpcError } from '../../protocol/errors.js';
import type { MethodName } from '../../protocol/methods.js';
import type { FsRules } from '../../sandbox/fsAccess.js';
import { decodeBase64Strict } from '../core/base64.js';
import type { Call, Handler, MethodRegistry } from '../core/dispatch.js';
import type { ServerEvents } from '../core/events.js';
import { ConfinedFs } from './fsConfined.js';
import { HostFs } from './fsHost.js';
import { DEFAULT_FS_LIMITS, Deadline, type FsLimits } from './fsIo.js';
import * as ops from './fsOps.js';

/**
 * Resolves the sandbox context a request carries (`sandbox` 0.125+, `sandboxPolicy` 0.120): the rules to enforce,
 * null when it restricts nothing (absent, null, full access). Throws an RpcError for a context it cannot use.
 */
export type FsContextResolver = (context: unknown) => FsRules | null;

const ERRNO: Record<string, number> = {
  EPERM: 1,
  ENOENT: 2,
  EIO: 5,
  ENXIO: 6,
  EAGAIN: 11,
  EACCES: 13,
  EBUSY: 16,
  EEXIST: 17,
  EXDEV: 18,
  ENODEV: 19,
  ENOTDIR: 20,
  EISDIR: 21,
  EINVAL: 22,
  EFBIG: 27,
  ENOSPC: 28,
  EROFS: 30,
  ENAMETOOLONG: 36,
  ENOTEMPTY: 39,
  ELOOP: 40,
};
const TEXT: Record<string, string> = {
  EPERM: 'Operation not permitted',
  ENOENT: 'No such file or directory',
  EIO: 'Input/output error',
  ENXIO: 'No such device or address',
  EAGAIN: 'Resource temporarily unavailable',
  EACCES: 'Permission denied',
  EBUSY: 'Device or resource busy',
  EEXIST: 'File exists',
  EXDEV: 'Invalid cross-device link',
  ENODEV: 'No such device',
  ENOTDIR: 'Not a directory',
  EISDIR: 'Is a directory',
  EINVAL: 'Invalid argument',
  EFBIG: 'File too large',
  ENOSPC: 'No space left on device',
  EROFS: 'Read-only file system',
  ENAMETOOLONG: 'File name too long',
  ENOTEMPTY: 'Directory not empty',
  ELOOP: 'Too many levels of symbolic links',
};

/** Maps an fs error to the wire: not found → -32004, anything else → -32603, both with Rust's OS text. */
export function fsError(e: unknown): RpcError {
  if (e instanceof RpcError) return e;
  const code = (e as NodeJS.ErrnoException).code ?? '';
  const n = ERRNO[code];
  const text = n !== undefined ? `${TEXT[code]} (os error ${n})` : (e as Error).message;
  return new RpcError(code === 'ENOENT' ? ErrorCode.NotFound : ErrorCode.InternalError, text);
}

function contextOf(p: { sandbox?: unknown; sandboxPolicy?: unknown }): unknown {
  return p.sandbox ?? p.sandboxPolicy ?? null;
}

export interface FsMethodsOptions {
  /** Resolves the sandbox context of each request. */
  rulesFor: FsContextResolver;
  limits?: Partial<FsLimits> | undefined;
  clock?: Clock;
  /** Where each finished request is reported while someone listens (the audit trail). */
  events?: ServerEvents;
}

/** The fs layer words every refusal of a request's sandbox context `sandbox denied …` / `sandbox: …` (-32603). */
export function isSandboxRefusal(e: unknown): boolean {
  return e instanceof RpcError && e.code === ErrorCode.InternalError && /^sandbox( denied|:)/.test(e.message);
}

/**
 * Serves the seed's fs/* methods (protocol.md §6) plus fs/canonicalize, one function each, on a backend per request,
 * each on its connection's fs lane (in order among themselves, apart from the connection's other requests, so that
 * a slow fs/* never holds its process/* ones).
 */
export function registerFsMethods(registry: MethodRegistry, opts: FsMethodsOptions): void {
  const limits: FsLimits = { ...DEFAULT_FS_LIMITS, ...opts.limits };
  const clock = opts.clock ?? realClock;
  const host = new HostFs();

  /** Runs one request on the backend its context asks for, within the time limit, errors mapped to the wire. */
  async function serve<T>(
    method: string,
    path: string,
    context: unknown,
    work: (r: ops.FsRun<unknown>) => Promise<T>,
  ): Promise<T> {
    const d = new Deadline(limits.timeoutMs, `${method} of ${path}`, clock);
    let timer: ReturnType<Clock['setTimeout']> | undefined;
    try {
      const rules = opts.rulesFor(context);
      let r: ops.FsRun<unknown>;
      if (rules === null) r = { b: host, limits, d, checks: false };
      else if (nativeFs.available)
        r = { b: new ConfinedFs(nativeFs.fs, rules) as never, limits, d, checks: true };
      else
        throw internalError(
          `sandbox: ${method} of ${path} refused: with a sandbox context fs/* needs openat2 from Corral's native addon, and ${nativeFs.reason}; it is not run unconfined`,
        );
      const running = work(r);
      running.catch(() => {}); // still settles after a timeout; its error then goes nowhere
      const timeout = new Promise<never>((_, reject) => {
        timer = clock.setTimeout(() => reject(d.error()), limits.timeoutMs);
      });
      return await Promise.race([running, timeout]);
    } catch (e) {
      throw fsError(e);
    } finally {
      clock.clearTimeout(timer);
    }
  }

  /** Runs a request and reports how it ended on the event bus (the audit trail listens). */
  async function observed(method: string, params: unknown, call: Call, run: () => unknown): Promise<unknown> {
    const events = opts.events!;
    const time = clock.now();
    const session = call.state.session;
    try {
      const result = await run();
      events.emit('fs', { method, time, params, session, error: null, refused: false });
      return result;
    } catch (e) {
      const error = e instanceof Error ? e : new Error(String(e));
      events.emit('fs', { method, time, params, session, error, refused: isSandboxRefusal(e) });
      throw e;
    }
  }

  /** Every error, a synchronous one (bad base64) too, is answered as fs/* answers them, in lane order. */
  const serveOnLane = <M extends MethodName>(method: M, handler: Handler<M>) =>
    registry.handle(
      method,
      (p, call) => {
        const run = () => {
          try {
            return handler(p, call);
          } catch (e) {
            throw fsError(e);
          }
        };
        return opts.events?.hasFsListeners() ? (observed(method, p, call, run) as never) : run();
      },
      { lane: 'fs' },
    );

  serveOnLane('fs/readFile', (p) =>
    serve('fs/readFile', p.path, contextOf(p), async (r) => ({
      dataBase64: (await ops.readFile(r, p.path)).toString('base64'),
    })),
  );
  serveOnLane('fs/writeFile', (p) => {
    const data = decodeBase64Strict(p.dataBase64);
    return serve('fs/writeFile', p.path, contextOf(p), async (r) => {
      await ops.writeFile(r, p.path, data);
      return {};
    });
  });
  serveOnLane('fs/createDirectory', (p) =>
    serve('fs/createDirectory', p.path, contextOf(p), async (r) => {
      await ops.createDirectory(r, p.path, p.recursive ?? true);
      return {};
    }),
  );
  serveOnLane('fs/getMetadata', (p) =>
    serve('fs/getMetadata', p.path, contextOf(p), (r) => ops.getMetadata(r, p.path)),
  );
  serveOnLane('fs/readDirectory', (p) =>
    serve('fs/readDirectory', p.path, contextOf(p), async (r) => ({
      entries: await ops.readDirectory(r, p.path),
    })),
  );
  serveOnLane('fs/remove', (p) =>
    serve('fs/remove', p.path, contextOf(p), async (r) => {
      await ops.remove(r, p.path, p.recursive ?? true, p.force ?? true);
      return {};
    }),
  );
  serveOnLane('fs/copy', (p) =>
    serve('fs/copy', p.sourcePath, contextOf(p), async (r) => {
      await ops.copy(r, p.sourcePath, p.destinationPath, p.recursive ?? false);
      return {};
    }),
  );
  serveOnLane('fs/canonicalize', (p) =>
    serve('fs/canonicalize', p.path, contextOf(p), async (r) => ({
      path: await ops.canonicalize(r, p.path),
    })),
  );
}
