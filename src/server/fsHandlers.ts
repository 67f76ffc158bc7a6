import { constants as fsc } from 'node:fs';
import * as fs from 'node:fs/promises';
import { ErrorCode, internalError, RpcError } from '../protocol/errors.js';
import {
  CanonicalizeParams,
  CopyParams,
  CreateDirectoryParams,
  GetMetadataParams,
  type Metadata,
  ReadDirectoryParams,
  ReadFileParams,
  RemoveParams,
  WriteFileParams,
} from '../protocol/fs.js';
import { decodeBase64Strict } from './base64.js';
import { parseParams } from './params.js';

/**
 * Checks one fs access against the sandbox context a request carries (`sandbox` 0.125+, `sandboxPolicy` 0.120).
 * Throws an RpcError (-32603 naming the path) when the access is outside the policy. A null/absent context allows.
 */
export type FsGuard = (context: unknown, path: string, access: 'read' | 'write') => void | Promise<void>;

const ERRNO: Record<string, number> = {
  EPERM: 1,
  ENOENT: 2,
  EIO: 5,
  EACCES: 13,
  EBUSY: 16,
  EEXIST: 17,
  EXDEV: 18,
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
  EACCES: 'Permission denied',
  EBUSY: 'Device or resource busy',
  EEXIST: 'File exists',
  EXDEV: 'Invalid cross-device link',
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

/** Maps a Node fs error to the wire: not found → -32004, anything else → -32603, both with Rust's OS text. */
export function fsError(e: unknown): RpcError {
  if (e instanceof RpcError) return e;
  const code = (e as NodeJS.ErrnoException).code ?? '';
  const n = ERRNO[code];
  const text = n !== undefined ? `${TEXT[code]} (os error ${n})` : (e as Error).message;
  return new RpcError(code === 'ENOENT' ? ErrorCode.NotFound : ErrorCode.InternalError, text);
}

async function guarded<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (e) {
    throw fsError(e);
  }
}

function contextOf(p: { sandbox?: unknown; sandboxPolicy?: unknown }): unknown {
  return p.sandbox ?? p.sandboxPolicy ?? null;
}

async function metadata(path: string): Promise<Metadata> {
  const l = await fs.lstat(path);
  const st = l.isSymbolicLink() ? await fs.stat(path) : l;
  return {
    isDirectory: st.isDirectory(),
    isFile: st.isFile(),
    isSymlink: l.isSymbolicLink(),
    size: st.size,
    createdAtMs: Math.trunc(st.birthtimeMs),
    modifiedAtMs: Math.trunc(st.mtimeMs),
  };
}

/** The seed's fs/* methods (protocol.md §6) plus fs/canonicalize. */
export function createFsMethods(guard: FsGuard): Record<string, (params: unknown) => Promise<unknown>> {
  return {
    'fs/readFile': (params) =>
      guarded(async () => {
        const p = parseParams(ReadFileParams, params, 'FsReadFileParams');
        await guard(contextOf(p), p.path, 'read');
        return { dataBase64: (await fs.readFile(p.path)).toString('base64') };
      }),
    'fs/writeFile': (params) =>
      guarded(async () => {
        const p = parseParams(WriteFileParams, params, 'FsWriteFileParams');
        const data = decodeBase64Strict(p.dataBase64);
        await guard(contextOf(p), p.path, 'write');
        await fs.writeFile(p.path, data);
        return {};
      }),
    'fs/createDirectory': (params) =>
      guarded(async () => {
        const p = parseParams(CreateDirectoryParams, params, 'FsCreateDirectoryParams');
        await guard(contextOf(p), p.path, 'write');
        await fs.mkdir(p.path, { recursive: p.recursive ?? true });
        return {};
      }),
    'fs/getMetadata': (params) =>
      guarded(async () => {
        const p = parseParams(GetMetadataParams, params, 'FsGetMetadataParams');
        await guard(contextOf(p), p.path, 'read');
        return metadata(p.path);
      }),
    'fs/readDirectory': (params) =>
      guarded(async () => {
        const p = parseParams(ReadDirectoryParams, params, 'FsReadDirectoryParams');
        await guard(contextOf(p), p.path, 'read');
        const dirents = await fs.readdir(p.path, { withFileTypes: true });
        const entries = await Promise.all(
          dirents.map(async (d) => {
            let isDirectory = d.isDirectory();
            let isFile = d.isFile();
            if (d.isSymbolicLink()) {
              const st = await fs.stat(`${p.path}/${d.name}`).catch(() => null);
              isDirectory = st?.isDirectory() ?? false;
              isFile = st?.isFile() ?? false;
            }
            return { fileName: d.name, isDirectory, isFile };
          }),
        );
        entries.sort((a, b) => (a.fileName < b.fileName ? -1 : a.fileName > b.fileName ? 1 : 0));
        return { entries };
      }),
    'fs/remove': (params) =>
      guarded(async () => {
        const p = parseParams(RemoveParams, params, 'FsRemoveParams');
        await guard(contextOf(p), p.path, 'write');
        const recursive = p.recursive ?? true;
        const force = p.force ?? true;
        const st = await fs.lstat(p.path).catch((e: NodeJS.ErrnoException) => {
          if (e.code === 'ENOENT' && force) return null;
          throw e;
        });
        if (!st) return {};
        if (st.isDirectory()) {
          if (recursive) await fs.rm(p.path, { recursive: true, force });
          else await fs.rmdir(p.path);
        } else await fs.unlink(p.path);
        return {};
      }),
    'fs/copy': (params) =>
      guarded(async () => {
        const p = parseParams(CopyParams, params, 'FsCopyParams');
        await guard(contextOf(p), p.sourcePath, 'read');
        await guard(contextOf(p), p.destinationPath, 'write');
        const st = await fs.stat(p.sourcePath);
        if (st.isDirectory()) {
          if (!p.recursive)
            throw internalError(`fs/copy requires recursive:true for directory ${p.sourcePath}`);
          await fs.cp(p.sourcePath, p.destinationPath, { recursive: true, errorOnExist: false, force: true });
        } else await fs.copyFile(p.sourcePath, p.destinationPath, fsc.COPYFILE_FICLONE);
        return {};
      }),
    'fs/canonicalize': (params) =>
      guarded(async () => {
        const p = parseParams(CanonicalizeParams, params, 'FsCanonicalizeParams');
        await guard(contextOf(p), p.path, 'read');
        return { path: await fs.realpath(p.path) };
      }),
  };
}
