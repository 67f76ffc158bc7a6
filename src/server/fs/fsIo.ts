import * as fs from 'node:fs';
import { type Clock, realClock } from '../../clock.js';
import { internalError, type RpcError } from '../../protocol/errors.js';
import { MAX_MESSAGE_BYTES } from '../../protocol/methods.js';
import type { FsNodeInfo, NodeKind } from './fsBackend.js';

/** Bounds of fs/* work (issue 13 item 4): nothing a hostile repository plants can make a request unbounded. */
export interface FsLimits {
  /** Largest file fs/readFile returns: its base64 (4/3 of it) and the frame around it fit in one message. */
  maxReadBytes: number;
  /** Longest an fs/* request may take before it is answered with an error. */
  timeoutMs: number;
  /** Most entries fs/readDirectory lists (a listing must fit in one message too). */
  maxDirectoryEntries: number;
  /** Deepest nesting a recursive fs/copy or fs/remove walks (each level holds an fd or two while it runs). */
  maxDepth: number;
}

/** The frame around a readFile result (`{"id":…,"result":{"dataBase64":"…"}}`), generously. */
const FRAME_SLACK = 1024;

export const DEFAULT_FS_LIMITS: FsLimits = {
  maxReadBytes: Math.floor((MAX_MESSAGE_BYTES - FRAME_SLACK) / 4) * 3,
  timeoutMs: 30_000,
  // An entry costs at least ~45 bytes of JSON (`{"fileName":"x","isDirectory":false,"isFile":true},`).
  maxDirectoryEntries: Math.floor(MAX_MESSAGE_BYTES / 45),
  maxDepth: 256,
};

const KIND_OF_TYPE = new Map<number, NodeKind>([
  [fs.constants.S_IFREG, 'file'],
  [fs.constants.S_IFDIR, 'dir'],
  [fs.constants.S_IFLNK, 'symlink'],
  [fs.constants.S_IFIFO, 'fifo'],
  [fs.constants.S_IFSOCK, 'socket'],
  [fs.constants.S_IFCHR, 'char'],
  [fs.constants.S_IFBLK, 'block'],
]);

/** The kind of an st_mode. */
export function kindOfMode(mode: number): NodeKind {
  return KIND_OF_TYPE.get(mode & fs.constants.S_IFMT) ?? 'unknown';
}

/** What a backend reports of an object, from its stat fields and identity. */
export function nodeInfo(
  st: { mode: number; size: number; mtimeMs: number; birthtimeMs: number; uid: number },
  ident: string,
): FsNodeInfo {
  return {
    kind: kindOfMode(st.mode),
    mode: st.mode,
    size: st.size,
    mtimeMs: st.mtimeMs,
    birthtimeMs: st.birthtimeMs,
    uid: st.uid,
    ident,
  };
}

const KIND_TEXT: Record<NodeKind, string> = {
  file: 'a regular file',
  dir: 'a directory',
  symlink: 'a symbolic link',
  fifo: 'a FIFO (named pipe)',
  socket: 'a socket',
  char: 'a character device',
  block: 'a block device',
  unknown: 'not a regular file',
};

/** -32603 for a FIFO, socket or device where fs/* needs a regular file: names the path and what it is. */
export function notRegularFile(method: string, path: string, kind: NodeKind): RpcError {
  return internalError(
    `${method} refused: ${path} is ${KIND_TEXT[kind]}; fs/* reads and writes regular files only`,
  );
}

/** -32603 for a file over the read cap: names the path and the cap. */
export function tooLarge(path: string, size: number | null, cap: number): RpcError {
  const what = size === null ? 'more than' : `${size} bytes,`;
  return internalError(
    `fs/readFile refused: ${path} is ${what} over the ${cap}-byte limit of fs/readFile (its base64 must fit in one ${MAX_MESSAGE_BYTES}-byte message)`,
  );
}

/** The time budget of one request: long loops check it between steps. */
export class Deadline {
  private readonly at: number;
  constructor(
    private readonly ms: number,
    private readonly what: string,
    private readonly clock: Clock = realClock,
  ) {
    this.at = clock.now() + ms;
  }
  get expired(): boolean {
    return this.clock.now() >= this.at;
  }
  /** Throws the timeout error once the budget is spent. */
  check(): void {
    if (this.expired) throw this.error();
  }
  error(): RpcError {
    return internalError(`${this.what} timed out after ${this.ms} ms`);
  }
  private steps = 0;
  /**
   * Called once per entry by tree walks: checks the budget and, every so many entries, lets the event loop run
   * (confined fs calls are synchronous, and a walk of many entries must not hold other clients meanwhile).
   */
  async pace(): Promise<void> {
    this.check();
    if (++this.steps % 64 === 0) await new Promise<void>((resolve) => setImmediate(resolve));
  }
}

function read(fd: number, buf: Buffer, off: number, len: number, pos: number): Promise<number> {
  return new Promise((resolve, reject) =>
    fs.read(fd, buf, off, len, pos, (e, n) => (e ? reject(e) : resolve(n))),
  );
}

function write(fd: number, buf: Buffer, off: number, len: number, pos: number): Promise<number> {
  return new Promise((resolve, reject) =>
    fs.write(fd, buf, off, len, pos, (e, n) => (e ? reject(e) : resolve(n))),
  );
}

/** Closes an fd now (a close is one cheap syscall; through the threadpool it would cost a round trip). */
export function closeFd(fd: number): void {
  if (fd < 0) return;
  try {
    fs.closeSync(fd);
  } catch {
    // EBADF/EIO on close: nothing to do about it
  }
}

export function ftruncate(fd: number, len = 0): Promise<void> {
  return new Promise((resolve, reject) => fs.ftruncate(fd, len, (e) => (e ? reject(e) : resolve())));
}

export function fchmod(fd: number, mode: number): Promise<void> {
  return new Promise((resolve, reject) => fs.fchmod(fd, mode, (e) => (e ? reject(e) : resolve())));
}

/**
 * Reads a regular file from `fd` (already checked to be one, of `size` bytes by fstat): at most `cap` bytes, and an
 * error naming the cap when there are more (a file can grow, and /proc files report size 0).
 */
export async function readCapped(
  fd: number,
  size: number,
  path: string,
  cap: number,
  d: Deadline,
): Promise<Buffer> {
  if (size > cap) throw tooLarge(path, size, cap);
  let buf = Buffer.allocUnsafe(Math.min(cap + 1, Math.max(size + 1, 64 * 1024)));
  let n = 0;
  for (;;) {
    d.check();
    if (n === buf.length) {
      if (n > cap) throw tooLarge(path, null, cap);
      const bigger = Buffer.allocUnsafe(Math.min(cap + 1, buf.length * 2));
      buf.copy(bigger, 0, 0, n);
      buf = bigger;
    }
    const asked = buf.length - n;
    const got = await read(fd, buf, n, asked, n);
    if (got === 0) break;
    n += got;
    // A short read once the size fstat gave is in is the end of the file (a regular file reads short only there): no
    // second read just to be told so, one round trip to the thread pool less per small file (issue 32). A file that
    // grew meanwhile is read as far as it was at the open, as one that grows after the last read is. /proc files say
    // size 0 and read a page at a time: they are read to the zero.
    if (size > 0 && got < asked && n >= size) break;
  }
  if (n > cap) throw tooLarge(path, null, cap);
  return buf.subarray(0, n);
}

/** Writes all of `data` at offset 0 of `fd`. */
export async function writeAll(fd: number, data: Buffer, d: Deadline): Promise<void> {
  let off = 0;
  while (off < data.length) {
    d.check();
    off += await write(fd, data, off, data.length - off, off);
  }
}

const COPY_CHUNK = 1024 * 1024;

/** Copies a regular file's bytes from `src` to `dst` (both at offset 0), checking the deadline between chunks. */
export async function copyBytes(src: number, dst: number, d: Deadline): Promise<void> {
  const buf = Buffer.allocUnsafe(COPY_CHUNK);
  let pos = 0;
  for (;;) {
    d.check();
    const got = await read(src, buf, 0, COPY_CHUNK, pos);
    if (got === 0) return;
    let off = 0;
    while (off < got) off += await write(dst, buf, off, got - off, pos + off);
    pos += got;
  }
}
