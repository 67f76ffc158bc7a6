/**
 * The audit database as a file on disk, before SQLite opens it: its directory (0700, ours, writable by nobody else)
 * and mode (0600), no symbolic link where SQLite would follow one, what its header says it is, and moving a bad one
 * aside.
 */
import {
  chmodSync,
  closeSync,
  existsSync,
  lstatSync,
  mkdirSync,
  openSync,
  readlinkSync,
  readSync,
  renameSync,
  statSync,
} from 'node:fs';
import { dirname } from 'node:path';

const SQLITE_MAGIC = Buffer.from('SQLite format 3\0', 'latin1');

/** What the first 100 bytes say: missing/empty, a SQLite file of some user_version, or not a database. */
export function inspectHeader(path: string): {
  state: 'absent' | 'empty' | 'sqlite' | 'garbage';
  version: number;
} {
  if (!existsSync(path)) return { state: 'absent', version: 0 };
  const fd = openSync(path, 'r');
  try {
    const head = Buffer.alloc(100);
    let n = readSync(fd, head, 0, 100, 0);
    // Another Corral may be creating the file this instant: give a short header a moment before calling it bad.
    for (let i = 0; i < 4 && n > 0 && n < 100; i++) {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
      n = readSync(fd, head, 0, 100, 0);
    }
    if (n === 0) return { state: 'empty', version: 0 };
    if (n < 100 || !head.subarray(0, 16).equals(SQLITE_MAGIC)) return { state: 'garbage', version: 0 };
    return { state: 'sqlite', version: head.readUInt32BE(60) };
  } finally {
    closeSync(fd);
  }
}

/** Renames the file (and its -wal/-shm) to `<path>.corrupt-<time>`; returns the new name. */
export function moveAside(path: string): string {
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const to = `${path}.corrupt-${stamp}`;
  renameSync(path, to);
  for (const ext of ['-wal', '-shm']) {
    if (existsSync(path + ext)) renameSync(path + ext, to + ext);
  }
  return to;
}

/** The database's files: SQLite opens (and creates) all three, following a symbolic link at any of them. */
const DB_FILES = ['', '-wal', '-shm'];

/**
 * Why the database's place is unsafe to write, or null. Anyone who can write its directory can plant, swap or
 * remove its files while we use them; a symbolic link at the database (a repository can ship one, and --audit-db may
 * point into a workspace) would make us chmod, migrate and write another file, say another program's SQLite database.
 * Links at its -wal/-shm are refused too, rather than trusting each SQLite open not to follow them.
 */
export function unsafePlace(path: string): string | null {
  const dir = dirname(path);
  const d = statSync(dir);
  const uid = process.geteuid?.() ?? d.uid;
  if (d.uid !== uid && d.uid !== 0)
    return `its directory ${dir} belongs to another user (uid ${d.uid}), who could replace its files`;
  if (d.mode & 0o022)
    return (
      `its directory ${dir} is writable by ${d.mode & 0o002 ? 'every user' : 'its group'} (mode ` +
      `${(d.mode & 0o7777).toString(8)}), who could plant or replace its files: use a directory of your own`
    );
  for (const ext of DB_FILES) {
    let l: ReturnType<typeof lstatSync>;
    try {
      l = lstatSync(path + ext);
    } catch {
      continue;
    }
    if (l.isSymbolicLink())
      return `${path + ext} is a symbolic link (to ${readlinkSync(path + ext)}): refusing to write through it`;
  }
  return null;
}

/** Creates the directory (0700, and the file 0600) if missing. */
export function prepareDirectory(path: string, ownDirectory: boolean): void {
  const dir = dirname(path);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (ownDirectory) chmodSync(dir, 0o700);
}

/**
 * Creates the file 0600, or tightens an existing one to 0600 (throws EPERM when it is someone else's). `exists` is
 * what the caller saw a moment ago: another server sharing the database may have created the file since, and then
 * it is tightened like any existing one.
 */
export function prepareFile(path: string, exists: boolean, notice?: (text: string) => void): void {
  if (!exists) {
    try {
      closeSync(openSync(path, 'wx', 0o600));
      return;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
  }
  const mode = statSync(path).mode & 0o777;
  if (mode !== 0o600) {
    chmodSync(path, 0o600);
    notice?.(`audit database ${path} had mode ${mode.toString(8)}: set to 600`);
  }
}
