import { errnoError } from '../../platform/errno.js';
import { internalError } from '../../protocol/errors.js';
import type { DirectoryEntry, Metadata } from '../../protocol/fs.js';
import type { FsBackend, Located } from './fsBackend.js';
import {
  closeFd,
  copyBytes,
  type Deadline,
  type FsLimits,
  fchmod,
  ftruncate,
  readCapped,
  writeAll,
} from './fsIo.js';

/**
 * The fs/* methods (protocol.md §6) written once on an FsBackend: the same code runs by name for requests without a
 * sandbox context and on walked fds for the others. Each takes the backend, the limits and the request's deadline.
 */
export interface FsRun<D> {
  b: FsBackend<D>;
  limits: FsLimits;
  d: Deadline;
  /** Whether the backend checks accesses (then a recursive copy or remove is scanned before it starts). */
  checks: boolean;
}

const ENOENT = 2;
const EEXIST = 17;
const ENOTDIR = 20;

/** Runs `work` with a Located and gives its handles back afterwards. */
async function using<D, T>(r: FsRun<D>, at: Located<D>, work: (at: Located<D>) => Promise<T>): Promise<T> {
  try {
    return await work(at);
  } finally {
    r.b.release(at);
  }
}

async function inDir<D, T>(r: FsRun<D>, at: Located<D>, work: (dir: D) => Promise<T>): Promise<T> {
  const dir = await r.b.enter(at);
  try {
    return await work(dir);
  } finally {
    r.b.release(dir);
  }
}

function joinPath(dir: string, name: string): string {
  return dir === '/' ? `/${name}` : `${dir}/${name}`;
}

export async function readFile<D>(r: FsRun<D>, path: string): Promise<Buffer> {
  return using(r, await r.b.locate(path, true), async (at) => {
    r.b.check(at, 'read');
    if (!at.info) throw errnoError(ENOENT, 'open');
    const f = await r.b.openRead(at, 'fs/readFile');
    try {
      return await readCapped(f.fd, f.info.size, path, r.limits.maxReadBytes, r.d);
    } finally {
      closeFd(f.fd);
    }
  });
}

export async function writeFile<D>(r: FsRun<D>, path: string, data: Buffer): Promise<void> {
  await using(r, await r.b.locate(path, true), async (at) => {
    const f = await r.b.openWrite(at, 'fs/writeFile', 0o666, true);
    try {
      if (!f.truncated) await ftruncate(f.fd, 0);
      await writeAll(f.fd, data, r.d);
    } finally {
      closeFd(f.fd);
    }
  });
}

export async function createDirectory<D>(r: FsRun<D>, path: string, recursive: boolean): Promise<void> {
  if (!recursive) {
    await using(r, await r.b.locate(path, false), async (at) => {
      if (at.info) {
        r.b.check(at, 'write');
        throw errnoError(EEXIST, 'mkdir');
      }
      await r.b.mkdir(at, 0o777);
    });
    return;
  }
  // mkdir -p: each prefix located afresh (symlinks in it followed), created when missing.
  const names = path.split('/').filter((n) => n !== '' && n !== '.');
  for (let i = 1; i <= names.length; i++) {
    r.d.check();
    const prefix = `/${names.slice(0, i).join('/')}`;
    if (names[i - 1] === '..') continue;
    await using(r, await r.b.locate(prefix, true), async (at) => {
      if (!at.info)
        return r.b.mkdir(at, 0o777).catch((e: NodeJS.ErrnoException) => {
          // Made meanwhile by someone else: fine if it is a directory now (the next prefix will tell).
          if (e.code !== 'EEXIST') throw e;
        });
      if (at.info.kind !== 'dir') throw errnoError(i === names.length ? EEXIST : ENOTDIR, 'mkdir');
      // Already there: still only where the request may write (nothing is told about other places).
      if (i === names.length) r.b.check(at, 'write');
    });
  }
}

export async function getMetadata<D>(r: FsRun<D>, path: string): Promise<Metadata> {
  return using(r, await r.b.locate(path, false), async (self) => {
    r.b.check(self, 'read');
    if (!self.info) throw errnoError(ENOENT, 'lstat');
    const isSymlink = self.info.kind === 'symlink';
    const info = isSymlink
      ? await using(r, await r.b.locate(path, true), async (target) => {
          r.b.check(target, 'read');
          if (!target.info) throw errnoError(ENOENT, 'stat');
          return target.info;
        })
      : self.info;
    return {
      isDirectory: info.kind === 'dir',
      isFile: info.kind === 'file',
      isSymlink,
      size: info.size,
      createdAtMs: Math.trunc(info.birthtimeMs),
      modifiedAtMs: Math.trunc(info.mtimeMs),
    };
  });
}

export async function canonicalize<D>(r: FsRun<D>, path: string): Promise<string> {
  return using(r, await r.b.locate(path, true), async (at) => {
    r.b.check(at, 'read');
    if (!at.info) throw errnoError(ENOENT, 'realpath');
    return r.b.canonical(at);
  });
}

/** The names of a directory, refusing one that has more than the listing limit. */
async function listAll<D>(r: FsRun<D>, dir: D, path: string) {
  const max = r.limits.maxDirectoryEntries;
  const entries = await r.b.list(dir, path, max);
  if (entries.length > max)
    throw internalError(`${path} has more than ${max} entries, the most fs/* lists in one request`);
  return entries;
}

export async function readDirectory<D>(r: FsRun<D>, path: string): Promise<DirectoryEntry[]> {
  return using(r, await r.b.locate(path, true), async (at) => {
    r.b.check(at, 'read');
    if (!at.info) throw errnoError(ENOENT, 'opendir');
    if (at.info.kind !== 'dir') throw errnoError(ENOTDIR, 'opendir');
    const dirPath = at.path;
    const entries = await inDir(r, at, async (dir) => {
      const out: DirectoryEntry[] = [];
      for (const e of await listAll(r, dir, dirPath)) {
        await r.d.pace();
        let kind = e.kind;
        if (kind === 'unknown' || kind === 'symlink') {
          // Symlinks are reported as what they lead to (when that is readable), as today.
          kind = await using(r, await r.b.lookup(dir, dirPath, e.name), async (c) => {
            if (c.info?.kind !== 'symlink') return c.info?.kind ?? 'unknown';
            return r.b.locate(joinPath(dirPath, e.name), true).then(
              (t) =>
                using(r, t, async () => {
                  r.b.check(t, 'read');
                  return t.info?.kind ?? 'unknown';
                }),
              () => 'unknown' as const,
            );
          }).catch(() => 'unknown' as const);
        }
        out.push({ fileName: e.name, isDirectory: kind === 'dir', isFile: kind === 'file' });
      }
      return out;
    });
    entries.sort((a, b) => (a.fileName < b.fileName ? -1 : a.fileName > b.fileName ? 1 : 0));
    return entries;
  });
}

/**
 * Visits every entry under a directory (depth first, not following symlinks), before anything is changed: a
 * recursive copy or remove is refused as a whole, naming the first entry it may not touch.
 */
async function scanTree<D>(
  r: FsRun<D>,
  at: Located<D>,
  mode: 'read' | 'write',
  what: string,
  depth = 0,
): Promise<void> {
  r.b.check(at, mode);
  if (at.info?.kind !== 'dir') {
    if (mode === 'read' && at.info && !['file', 'symlink'].includes(at.info.kind))
      throw internalError(`${what} refused: ${at.path} is neither a regular file, a directory nor a symlink`);
    return;
  }
  notTooDeep(r, at.path, depth, what);
  const dirPath = at.path;
  await inDir(r, at, async (dir) => {
    for (const e of await listAll(r, dir, dirPath)) {
      await r.d.pace();
      await using(r, await r.b.lookup(dir, dirPath, e.name), (c) => scanTree(r, c, mode, what, depth + 1));
    }
  });
}

function notTooDeep<D>(r: FsRun<D>, path: string, depth: number, what: string): void {
  if (depth >= r.limits.maxDepth)
    throw internalError(`${what} refused: ${path} is nested more than ${r.limits.maxDepth} directories deep`);
}

export async function remove<D>(
  r: FsRun<D>,
  path: string,
  recursive: boolean,
  force: boolean,
): Promise<void> {
  let found: Located<D>;
  try {
    found = await r.b.locate(path, false);
  } catch (e) {
    // rm -f of a path whose directory is missing too.
    if (force && (e as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw e;
  }
  await using(r, found, async (at) => {
    if (!at.info) {
      r.b.check(at, 'write');
      if (force) return;
      throw errnoError(ENOENT, 'lstat');
    }
    if (at.info.kind === 'dir' && recursive) {
      if (r.checks) await scanTree(r, at, 'write', 'fs/remove');
      await removeTree(r, at);
    } else await r.b.unlink(at);
  });
}

async function removeTree<D>(r: FsRun<D>, at: Located<D>, depth = 0): Promise<void> {
  notTooDeep(r, at.path, depth, 'fs/remove');
  const dirPath = at.path;
  await inDir(r, at, async (dir) => {
    // Listed in batches until empty, so that a huge directory costs no huge listing.
    for (;;) {
      const batch = await r.b.list(dir, dirPath, 1024);
      if (batch.length === 0) break;
      let gone = 0;
      for (const e of batch) {
        await r.d.pace();
        await using(r, await r.b.lookup(dir, dirPath, e.name), async (c) => {
          if (!c.info) return;
          if (c.info.kind === 'dir') await removeTree(r, c, depth + 1);
          else await r.b.unlink(c).catch(ignoreGone);
          gone++;
        });
      }
      // Listed but not found by name (a name that is not valid UTF-8 comes back mangled): it would be listed forever.
      if (gone === 0) throw internalError(`fs/remove: cannot remove ${joinPath(dirPath, batch[0]!.name)}`);
    }
  });
  await r.b.unlink(at).catch(ignoreGone);
}

function ignoreGone(e: NodeJS.ErrnoException): void {
  if (e.code !== 'ENOENT') throw e;
}

export async function copy<D>(r: FsRun<D>, src: string, dst: string, recursive: boolean): Promise<void> {
  await using(r, await r.b.locate(src, true), async (from) => {
    r.b.check(from, 'read');
    if (!from.info) throw errnoError(ENOENT, 'stat');
    if (from.info.kind !== 'dir') {
      await using(r, await r.b.locate(dst, true), (to) => copyFile(r, from, to));
      return;
    }
    if (!recursive) throw internalError(`fs/copy requires recursive:true for directory ${src}`);
    if (r.checks) await scanTree(r, from, 'read', 'fs/copy');
    await using(r, await r.b.locate(dst, true), async (to) => {
      const [srcReal, dstReal] = [await r.b.canonical(from), to.info ? await r.b.canonical(to) : to.path];
      if (dstReal === srcReal || dstReal.startsWith(`${srcReal}/`))
        throw internalError(`fs/copy refused: cannot copy ${src} into itself (${dst})`);
      if (!to.info) await r.b.mkdir(to, from.info!.mode & 0o777);
      else if (to.info.kind !== 'dir') throw errnoError(EEXIST, 'mkdir');
      await using(r, await r.b.locate(to.path, false), async (root) => {
        if (root.info?.kind !== 'dir') throw errnoError(ENOTDIR, 'mkdir');
        await inDir(r, root, (dd) =>
          inDir(r, from, (sd) => copyTree(r, sd, from.path, dd, root.path, root.info!.ident, 0)),
        );
      });
    });
  });
}

async function copyFile<D>(r: FsRun<D>, from: Located<D>, to: Located<D>): Promise<void> {
  const src = await r.b.openRead(from, 'fs/copy');
  try {
    const dst = await r.b.openWrite(to, 'fs/copy', src.info.mode & 0o777);
    try {
      if (dst.info.ident === src.info.ident)
        throw internalError(`fs/copy refused: ${from.path} and ${to.path} are the same file`);
      await ftruncate(dst.fd, 0);
      await copyBytes(src.fd, dst.fd, r.d);
      // Permission bits only: a setuid or setgid bit is not carried over to a file this server owns.
      if ((dst.info.mode & 0o7777) !== (src.info.mode & 0o777)) await fchmod(dst.fd, src.info.mode & 0o777);
    } finally {
      closeFd(dst.fd);
    }
  } finally {
    closeFd(src.fd);
  }
}

/**
 * Copies the entries of `sd` into `dd` (merging into what is there: files and links replaced, directories merged).
 * Symlinks are copied as links with their target as written. `skipIdent`: the destination root, never copied into
 * itself (a bind mount or a rename can put it inside the source).
 */
async function copyTree<D>(
  r: FsRun<D>,
  sd: D,
  sPath: string,
  dd: D,
  dPath: string,
  skipIdent: string | undefined,
  depth: number,
) {
  notTooDeep(r, sPath, depth, 'fs/copy');
  for (const e of await listAll(r, sd, sPath)) {
    await r.d.pace();
    await using(r, await r.b.lookup(sd, sPath, e.name), async (s) => {
      if (!s.info) return; // gone meanwhile
      if (skipIdent !== undefined && s.info.ident === skipIdent) return;
      const sChild = joinPath(sPath, e.name);
      await using(r, await r.b.lookup(dd, dPath, e.name), async (d) => {
        const dChild = joinPath(dPath, e.name);
        const kind = s.info!.kind;
        if (kind === 'dir') {
          if (d.info && d.info.kind !== 'dir')
            throw internalError(
              `fs/copy refused: cannot overwrite non-directory ${dChild} with directory ${sChild}`,
            );
          r.b.check(s, 'read');
          if (!d.info) await r.b.mkdir(d, s.info!.mode & 0o777);
          r.b.release(d); // one handle per level and side while the walk goes deeper
          await using(r, await r.b.lookup(dd, dPath, e.name), (made) =>
            inDir(r, made, (dChildDir) =>
              inDir(r, s, (sChildDir) =>
                copyTree(r, sChildDir, sChild, dChildDir, dChild, skipIdent, depth + 1),
              ),
            ),
          );
          return;
        }
        if (d.info?.kind === 'dir')
          throw internalError(
            `fs/copy refused: cannot overwrite directory ${dChild} with non-directory ${sChild}`,
          );
        if (kind === 'symlink') {
          const target = await r.b.readlink(s);
          if (d.info) await r.b.unlink(d);
          await using(r, await r.b.lookup(dd, dPath, e.name), (fresh) => r.b.symlink(fresh, target));
          return;
        }
        if (kind !== 'file')
          throw internalError(
            `fs/copy refused: ${sChild} is neither a regular file, a directory nor a symlink`,
          );
        // Never written through: whatever is there (a link to elsewhere, a FIFO) is replaced.
        if (d.info && d.info.kind !== 'file') await r.b.unlink(d);
        await using(r, await r.b.lookup(dd, dPath, e.name), (fresh) => copyFile(r, s, fresh));
      });
    });
  }
}
