/**
 * How `corral approvals …` finds the local host (`corral serve`, the desktop app) without a flag: the host writes its
 * listener's URL and its panel token to a state file for its own user — 0600, in a 0700 directory of the user's state
 * directory, written whole (a temporary file renamed over it), hidden from every sandbox (a sandboxed command must
 * never read the panel token: it could answer its own prompts), removed at exit. The reader refuses a file or a
 * directory another user could have written, a symbolic link, a non-loopback URL, and a file whose server is gone.
 */
import {
  closeSync,
  constants,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  rmdirSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { z } from 'zod';

export const LOCAL_STATE_FILE = 'local-host.json';
/** Far more than the file ever holds (a URL, a token, a pid). */
const MAX_STATE_BYTES = 64 * 1024;

const LOOPBACK = /^(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|localhost|\[::1\])$/;

export const LocalState = z.object({
  /** ws://127.0.0.1:PORT of the host's listener (loopback only). */
  url: z
    .string()
    .max(2048)
    .refine((u) => {
      try {
        const x = new URL(u);
        return x.protocol === 'ws:' && LOOPBACK.test(x.hostname) && x.search === '' && x.hash === '';
      } catch {
        return false;
      }
    }, 'a ws:// URL of a loopback address'),
  /** The host's panel token. */
  token: z.string().min(16).max(4096),
  pid: z.number().int().positive(),
});
export type LocalState = z.infer<typeof LocalState>;

/** `$XDG_STATE_HOME/corral/local-host.json`, else `~/.local/state/corral/local-host.json`. */
export function localStatePath(env: NodeJS.ProcessEnv = process.env): string {
  const xdg = env.XDG_STATE_HOME;
  const base = xdg?.startsWith('/') ? xdg : join(env.HOME || homedir(), '.local', 'state');
  return join(base, 'corral', LOCAL_STATE_FILE);
}

const me = () => process.geteuid?.() ?? -1;

/** Why `dir` is not a directory only this user can write, or null. */
function unsafeDirectory(dir: string): string | null {
  const d = lstatSync(dir);
  if (!d.isDirectory()) return `${dir} is not a directory`;
  if (d.uid !== me()) return `${dir} belongs to another user (uid ${d.uid})`;
  if (d.mode & 0o022) return `${dir} is writable by others (mode ${(d.mode & 0o777).toString(8)})`;
  return null;
}

/** Writes the state file at `path` (0600, whole); `remove` deletes it if it is still this process's. */
export function writeLocalState(path: string, state: LocalState): { remove(): void } {
  const dir = dirname(path);
  // The first directory this call made (undefined: all there already): what it made is removed again at exit, when
  // empty, so a server that kept nothing else (`--no-audit`) leaves nothing behind.
  const made = mkdirSync(dir, { recursive: true, mode: 0o700 });
  const unsafe = unsafeDirectory(dir);
  if (unsafe) throw new Error(`the approvals state file ${path}: ${unsafe}`);
  const tmp = `${path}.${process.pid}.tmp`;
  const fd = openSync(
    tmp,
    constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
    0o600,
  );
  try {
    writeSync(fd, `${JSON.stringify(LocalState.parse(state))}\n`);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
  let removed = false;
  const remove = () => {
    if (removed) return;
    removed = true;
    process.off('exit', remove);
    try {
      // Another host may have written its own since: leave that one.
      if (readLocalStateFile(path).pid === state.pid) unlinkSync(path);
    } catch {
      // gone already, or not ours
    }
    if (made === undefined) return;
    for (let d = dir; d.length >= made.length; d = dirname(d)) {
      try {
        rmdirSync(d);
      } catch {
        return; // not empty (another file, another host's state): kept
      }
      if (d === made) return;
    }
  };
  process.on('exit', remove);
  return { remove };
}

/** Reads and checks a state file (ours, 0600, no link, a loopback URL); throws saying why not. */
export function readLocalStateFile(path: string): LocalState {
  const unsafe = unsafeDirectory(dirname(path));
  if (unsafe) throw new Error(`refusing the state file ${path}: ${unsafe}`);
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new Error(`no local Corral host is running (no ${path})`);
    if (code === 'ELOOP') throw new Error(`refusing the state file ${path}: it is a symbolic link`);
    throw new Error(`the state file ${path}: ${(e as Error).message}`);
  }
  let text: string;
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new Error(`refusing the state file ${path}: not a regular file`);
    if (st.uid !== me())
      throw new Error(`refusing the state file ${path}: owned by uid ${st.uid}, not by you`);
    if (st.mode & 0o077)
      throw new Error(`refusing the state file ${path}: mode ${(st.mode & 0o777).toString(8)}, not 600`);
    if (st.size > MAX_STATE_BYTES) throw new Error(`refusing the state file ${path}: ${st.size} bytes`);
    text = readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new Error(`the state file ${path} is not JSON`);
  }
  const r = LocalState.safeParse(json);
  if (!r.success) {
    const i = r.error.issues[0]!;
    throw new Error(`the state file ${path}: ${i.path.join('.') || '(top)'}: ${i.message}`);
  }
  return r.data;
}

/** The live local host's state; throws saying why there is none. */
export function readLocalState(path: string): LocalState {
  const s = readLocalStateFile(path);
  try {
    process.kill(s.pid, 0);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ESRCH')
      throw new Error(`no local Corral host is running (${path} is left from pid ${s.pid}, which is gone)`);
  }
  return s;
}
