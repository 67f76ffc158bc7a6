/**
 * `x-unix-socket` on Linux (network-proxy.md §3.8, issue 33 item 6): which paths a request may reach, and opening one
 * without following any symlink. The allowed list holds absolute paths; a request's path is compared raw, then after
 * canonicalising its symlinks (only the canonical path is opened then), and `dangerously_allow_all_unix_sockets`
 * skips the list. A sandboxed child may own a directory on the way (its workspace): it could swap a component for a
 * symlink between the check and the connect, so the socket is opened component by component, each with
 * O_PATH|O_NOFOLLOW relative to the previous one (an openat-style walk through /proc/self/fd), and connected through
 * its own descriptor. A symlink anywhere on the path fails the open; nothing outside the listed path is reached.
 */
import { closeSync, openSync, realpathSync } from 'node:fs';
import net from 'node:net';

/** Linux's O_PATH (generic and x86 value; Node does not export it). */
const O_PATH = 0o10000000;
const O_NOFOLLOW = 0o400000;
const O_DIRECTORY = 0o200000;
const O_CLOEXEC = 0o2000000;

/** Whether unix-socket forwarding exists on this platform (the walk needs /proc/self/fd). */
export const UNIX_SOCKETS_SUPPORTED = process.platform === 'linux';

/**
 * The path to open for `requested`, or null when neither it nor its canonical form is allowed. `requested` is an
 * absolute path (the caller checked the header).
 */
export function allowedUnixSocket(
  settings: { allow_unix_sockets: readonly string[]; dangerously_allow_all_unix_sockets: boolean },
  requested: string,
): string | null {
  if (requested.includes('\0')) return null;
  if (settings.dangerously_allow_all_unix_sockets) return requested;
  if (settings.allow_unix_sockets.includes(requested)) return requested;
  let canonical: string;
  try {
    canonical = realpathSync.native(requested);
  } catch {
    return null;
  }
  return settings.allow_unix_sockets.includes(canonical) ? canonical : null;
}

/** The components of an absolute path, `.` and empty ones dropped; null when one is `..` (never walked up). */
function components(path: string): string[] | null {
  const parts = path.split('/').filter((p) => p !== '' && p !== '.');
  return parts.includes('..') ? null : parts;
}

/**
 * An O_PATH descriptor of `path` reached without following any symlink (every directory on the way and the socket
 * itself); throws (ELOOP, ENOTDIR, ENOENT, …) otherwise. The caller closes it.
 */
export function openNoFollow(path: string): number {
  const parts = components(path);
  if (!parts || parts.length === 0)
    throw Object.assign(new Error(`invalid unix socket path ${path}`), { code: 'EINVAL' });
  let dir = openSync('/', O_PATH | O_DIRECTORY | O_CLOEXEC);
  try {
    for (let i = 0; i < parts.length; i++) {
      const last = i === parts.length - 1;
      const next = openSync(
        `/proc/self/fd/${dir}/${parts[i]}`,
        O_PATH | O_NOFOLLOW | O_CLOEXEC | (last ? 0 : O_DIRECTORY),
      );
      closeSync(dir);
      dir = next;
    }
    return dir;
  } catch (e) {
    closeSync(dir);
    throw e;
  }
}

/**
 * Connects to the unix socket at `path` without following symlinks: through the O_PATH descriptor of the socket
 * itself (a symlink's own descriptor refuses the connect). Resolves once connected.
 */
export function connectNoFollow(path: string): Promise<net.Socket> {
  let fd: number;
  try {
    fd = openNoFollow(path);
  } catch (e) {
    return Promise.reject(e);
  }
  return new Promise((resolve, reject) => {
    const socket = net.connect({ path: `/proc/self/fd/${fd}` });
    const done = () => {
      try {
        closeSync(fd);
      } catch {
        // already closed
      }
    };
    socket.once('connect', () => {
      done();
      resolve(socket);
    });
    socket.once('error', (e) => {
      done();
      reject(e);
    });
  });
}
