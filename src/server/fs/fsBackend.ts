export type NodeKind = 'file' | 'dir' | 'symlink' | 'fifo' | 'socket' | 'char' | 'block' | 'unknown';

/** What an object is (lstat of it, or fstat of what was opened). `ident` ("dev:ino") names the inode. */
export interface FsNodeInfo {
  kind: NodeKind;
  mode: number;
  size: number;
  mtimeMs: number;
  birthtimeMs: number;
  uid: number;
  ident: string;
}

/** An object a backend located: the directory holding it and its name there, or the directory itself (name ''). */
export interface Located<D> {
  /** The path it was reached by, with symlinks resolved where the backend resolves them (for messages). */
  readonly path: string;
  /** The directory holding it; null when the object is reached as a directory itself (`/`, or via `..`). */
  readonly parent: D | null;
  readonly name: string;
  /** null: it does not exist (its parent does). */
  readonly info: FsNodeInfo | null;
}

/** An fd open on a regular file, and what fstat said of it. */
export interface OpenedFile {
  fd: number;
  info: FsNodeInfo;
  /** The open itself emptied it (openWrite's `truncate`, where the backend can do it in the same call). */
  truncated?: boolean;
}

/**
 * The filesystem primitives fs/* is written on (fsOps.ts), one implementation per way of reaching files: by name for
 * requests without a sandbox context (fsHost.ts), by fds walked from `/` and checked against the context for the
 * others (fsConfined.ts). `D` is the backend's handle of an opened directory.
 *
 * Every primitive that reads or changes something checks the access it needs itself (the confined backend refuses
 * with a -32603 naming the path); `check` is for what fsOps reads from a Located (metadata, names) and for the scans
 * that refuse a whole recursive copy or remove before it starts. Handles must be given back with `release`.
 */
export interface FsBackend<D> {
  /** The object at an absolute path; `follow` follows a symlink in the last component too. */
  locate(path: string, follow: boolean): Promise<Located<D>>;
  /** `name` in `dir` (dirPath: its path), not following a symlink. */
  lookup(dir: D, dirPath: string, name: string): Promise<Located<D>>;
  /** A handle of the located directory (released on its own; `at` stays usable, and may be entered again). */
  enter(at: Located<D>): Promise<D>;
  /** The names in a directory, at most `max` + 1 of them; kinds where the directory says (else 'unknown'). */
  list(dir: D, dirPath: string, max: number): Promise<{ name: string; kind: NodeKind }[]>;
  /** Opens a located regular file for reading (non-blocking; anything but a regular file is refused). */
  openRead(at: Located<D>, method: string): Promise<OpenedFile>;
  /**
   * Opens (creating with `mode` when missing) a located regular file for writing. With `truncate` the backend may
   * empty it in the same call (O_TRUNC: a FIFO or a device ignores it, a directory refuses the open) and says so in
   * `truncated`; otherwise it is not truncated (fs/copy empties its destination only once it knows it is not the
   * source).
   */
  openWrite(at: Located<D>, method: string, mode: number, truncate?: boolean): Promise<OpenedFile>;
  mkdir(at: Located<D>, mode: number): Promise<void>;
  /** Removes a located non-directory, or an empty directory. */
  unlink(at: Located<D>): Promise<void>;
  symlink(at: Located<D>, target: string): Promise<void>;
  readlink(at: Located<D>): Promise<string>;
  /** Its path with every symlink resolved (fs/canonicalize). */
  canonical(at: Located<D>): Promise<string>;
  /** Throws when `at` may not be accessed in `mode`. */
  check(at: Located<D>, mode: 'read' | 'write'): void;
  release(x: Located<D> | D | null): void;
}
