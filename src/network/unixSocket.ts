/**
 * `x-unix-socket` (network-proxy.md §3.8, issue 33 item 6): which paths a request may reach, and opening one
 * without following any symlink. The allowed list holds absolute paths; a request's path is compared raw, then after
 * canonicalising its symlinks (only the canonical path is opened then), and `dangerously_allow_all_unix_sockets`
 * skips the list. A sandboxed child may own a directory on the way (its workspace): it could swap a component for a
 * symlink between the check and the connect, so the socket is opened component by component, each with
 * O_PATH|O_NOFOLLOW relative to the previous one (an openat-style walk through /proc/self/fd), and connected through
 * its own descriptor. A symlink anywhere on the path fails the open; nothing outside the listed path is reached.
 * Where that walk does not exist (macOS, or forced: platform/unixSocketWalk.ts) the path is lstat'ed component by
 * component, connected by path, and lstat'ed again (same device and inode for every component, else the connection
 * is dropped before a byte is sent): a swap made before the first walk or still in place after the connect is
 * refused; one made and undone between the two walks is not (docs/security.md).
 */
import { closeSync, lstatSync, openSync, realpathSync } from 'node:fs';
import net from 'node:net';
import { type UnixSocketWalk, unixSocketWalk } from '../platform/unixSocketWalk.js';

/** Linux's O_PATH (generic and x86 value; Node does not export it). */
const O_PATH = 0o10000000;
const O_NOFOLLOW = 0o400000;
const O_DIRECTORY = 0o200000;
const O_CLOEXEC = 0o2000000;

/** Whether unix-socket forwarding exists on this platform (every one with unix sockets). */
export const UNIX_SOCKETS_SUPPORTED = unixSocketWalk() !== null;

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

/**
 * The listed paths that have a symlink on the way (their canonical form differs), with that form: the walks never
 * follow it, so such a path is refused as written (502) and the canonical one should be listed instead (a request for
 * the symlinked path then reaches it). At most the first `max` entries are looked at (config time, not per request).
 */
export function symlinkedListedSockets(
  listed: readonly string[],
  max = 64,
): { path: string; canonical: string }[] {
  const out: { path: string; canonical: string }[] = [];
  for (const path of listed.slice(0, max)) {
    try {
      const canonical = realpathSync.native(path);
      if (canonical !== path) out.push({ path, canonical });
    } catch {
      // absent now: nothing to say
    }
  }
  return out;
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
 * The device and inode of every component of `path` from the root, none of them a symlink, the last one a socket;
 * throws (ELOOP, ENOTSOCK, ENOENT, …) otherwise. The portable walk's check, made before and after the connect.
 */
export function lstatWalk(path: string): string {
  const parts = components(path);
  if (!parts || parts.length === 0)
    throw Object.assign(new Error(`invalid unix socket path ${path}`), { code: 'EINVAL' });
  let at = '';
  let ids = '';
  for (let i = 0; i < parts.length; i++) {
    at += `/${parts[i]}`;
    const st = lstatSync(at, { bigint: true });
    if (st.isSymbolicLink()) throw Object.assign(new Error(`symlink on the way: ${at}`), { code: 'ELOOP' });
    const last = i === parts.length - 1;
    if (!last && !st.isDirectory())
      throw Object.assign(new Error(`not a directory: ${at}`), { code: 'ENOTDIR' });
    if (last && !st.isSocket()) throw Object.assign(new Error(`not a socket: ${at}`), { code: 'ENOTSOCK' });
    ids += `${st.dev}:${st.ino}/`;
  }
  return ids;
}

/** The connect of the `fd` walk: through the O_PATH descriptor of the socket itself. */
function connectFd(path: string, afterCheck?: () => void): { socket: net.Socket; done: () => void } {
  const fd = openNoFollow(path);
  afterCheck?.();
  return {
    socket: net.connect({ path: `/proc/self/fd/${fd}` }),
    done: () => {
      try {
        closeSync(fd);
      } catch {
        // already closed
      }
    },
  };
}

/**
 * Connects to the unix socket at `path` without following symlinks, by the platform's walk (or `walk`, the tests'
 * way to take the portable one on Linux). Resolves once connected; rejects when the walk refuses the path or the
 * connect fails. `afterCheck` runs between the check and the connect (tests: the window a swap must hit).
 */
export function connectNoFollow(
  path: string,
  walk: UnixSocketWalk | null = unixSocketWalk(),
  afterCheck?: () => void,
): Promise<net.Socket> {
  let socket: net.Socket;
  let done = () => {};
  let before = '';
  try {
    if (walk === null)
      throw Object.assign(new Error('no unix sockets on this platform'), { code: 'ENOTSUP' });
    if (walk === 'fd') ({ socket, done } = connectFd(path, afterCheck));
    else {
      before = lstatWalk(path);
      afterCheck?.();
      socket = net.connect({ path: `/${components(path)!.join('/')}` });
    }
  } catch (e) {
    return Promise.reject(e);
  }
  return new Promise((resolve, reject) => {
    socket.once('connect', () => {
      done();
      if (walk === 'lstat') {
        let after = '';
        try {
          after = lstatWalk(path);
        } catch {
          // compared below
        }
        if (after !== before) {
          socket.destroy();
          reject(Object.assign(new Error(`${path} changed during the connect`), { code: 'ESTALE' }));
          return;
        }
      }
      resolve(socket);
    });
    socket.once('error', (e) => {
      done();
      reject(e);
    });
  });
}
