import { ErrorCode, internalError, RpcError } from '../protocol/errors.js';
import {
  CanonicalizeParams,
  CopyParams,
  CreateDirectoryParams,
  GetMetadataParams,
  ReadDirectoryParams,
  ReadFileParams,
  RemoveParams,
  WriteFileParams,
} from '../protocol/fs.js';
import type { FsRules } from '../sandbox/fsAccess.js';
import { decodeBase64Strict } from './base64.js';
import { ConfinedFs } from './fsConfined.js';
import { HostFs } from './fsHost.js';
import { DEFAULT_FS_LIMITS, Deadline, type FsLimits } from './fsIo.js';
import { nativeFs } from './fsNative.js';
import * as ops from './fsOps.js';
import { parseParams } from './params.js';

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

/**
 * The fs/* requests of one connection: one at a time in arrival order (a write then a read of the same file stay in
 * that order), but apart from the connection's other requests, so that a slow fs/* never holds its process/* ones.
 */
export class FsLane {
  private tail: Promise<unknown> = Promise.resolve();
  run<T>(work: () => Promise<T>): Promise<T> {
    const r = this.tail.then(work);
    this.tail = r.catch(() => {});
    return r;
  }
}

export interface FsMethodsOptions {
  /** Resolves the sandbox context of each request. */
  rulesFor: FsContextResolver;
  limits?: Partial<FsLimits>;
}

/** The seed's fs/* methods (protocol.md §6) plus fs/canonicalize, one function each, on a backend per request. */
export function createFsMethods(
  opts: FsMethodsOptions,
): Record<string, (params: unknown) => Promise<unknown>> {
  const limits: FsLimits = { ...DEFAULT_FS_LIMITS, ...opts.limits };
  const host = new HostFs();

  /** Runs one request on the backend its context asks for, within the time limit, errors mapped to the wire. */
  async function serve<T>(
    method: string,
    path: string,
    context: unknown,
    work: (r: ops.FsRun<unknown>) => Promise<T>,
  ): Promise<T> {
    const d = new Deadline(limits.timeoutMs, `${method} of ${path}`);
    let timer: NodeJS.Timeout | undefined;
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
        timer = setTimeout(() => reject(d.error()), limits.timeoutMs);
      });
      return await Promise.race([running, timeout]);
    } catch (e) {
      throw fsError(e);
    } finally {
      clearTimeout(timer);
    }
  }

  function readFile(params: unknown) {
    const p = parseParams(ReadFileParams, params, 'FsReadFileParams');
    return serve('fs/readFile', p.path, contextOf(p), async (r) => ({
      dataBase64: (await ops.readFile(r, p.path)).toString('base64'),
    }));
  }

  function writeFile(params: unknown) {
    const p = parseParams(WriteFileParams, params, 'FsWriteFileParams');
    const data = decodeBase64Strict(p.dataBase64);
    return serve('fs/writeFile', p.path, contextOf(p), async (r) => {
      await ops.writeFile(r, p.path, data);
      return {};
    });
  }

  function createDirectory(params: unknown) {
    const p = parseParams(CreateDirectoryParams, params, 'FsCreateDirectoryParams');
    return serve('fs/createDirectory', p.path, contextOf(p), async (r) => {
      await ops.createDirectory(r, p.path, p.recursive ?? true);
      return {};
    });
  }

  function getMetadata(params: unknown) {
    const p = parseParams(GetMetadataParams, params, 'FsGetMetadataParams');
    return serve('fs/getMetadata', p.path, contextOf(p), (r) => ops.getMetadata(r, p.path));
  }

  function readDirectory(params: unknown) {
    const p = parseParams(ReadDirectoryParams, params, 'FsReadDirectoryParams');
    return serve('fs/readDirectory', p.path, contextOf(p), async (r) => ({
      entries: await ops.readDirectory(r, p.path),
    }));
  }

  function remove(params: unknown) {
    const p = parseParams(RemoveParams, params, 'FsRemoveParams');
    return serve('fs/remove', p.path, contextOf(p), async (r) => {
      await ops.remove(r, p.path, p.recursive ?? true, p.force ?? true);
      return {};
    });
  }

  function copy(params: unknown) {
    const p = parseParams(CopyParams, params, 'FsCopyParams');
    return serve('fs/copy', p.sourcePath, contextOf(p), async (r) => {
      await ops.copy(r, p.sourcePath, p.destinationPath, p.recursive ?? false);
      return {};
    });
  }

  function canonicalize(params: unknown) {
    const p = parseParams(CanonicalizeParams, params, 'FsCanonicalizeParams');
    return serve('fs/canonicalize', p.path, contextOf(p), async (r) => ({
      path: await ops.canonicalize(r, p.path),
    }));
  }

  const methods = {
    'fs/readFile': readFile,
    'fs/writeFile': writeFile,
    'fs/createDirectory': createDirectory,
    'fs/getMetadata': getMetadata,
    'fs/readDirectory': readDirectory,
    'fs/remove': remove,
    'fs/copy': copy,
    'fs/canonicalize': canonicalize,
  };
  // Parse errors are answered like every other error (a rejected promise), in lane order.
  return Object.fromEntries(
    Object.entries(methods).map(([name, fn]) => [
      name,
      (params: unknown) => {
        try {
          return fn(params);
        } catch (e) {
          return Promise.reject(fsError(e));
        }
      },
    ]),
  );
}
