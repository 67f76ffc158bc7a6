/**
 * How the managed proxy opens an `x-unix-socket` path without following symlinks (network/unixSocket.ts):
 *  - `fd`: an openat-style walk, each component O_PATH|O_NOFOLLOW relative to the previous descriptor through
 *    /proc/self/fd, and the connect through the socket's own descriptor (Linux only: O_PATH and /proc);
 *  - `lstat`: every component lstat'ed from the root (no symlink anywhere, the last one a socket), a connect by path,
 *    then the same lstat walk again compared by device and inode (any platform with unix sockets: macOS, the BSDs).
 *    It narrows the check-to-connect window but cannot close it (see docs/security.md).
 * CORRAL_UNIX_SOCKET_WALK=lstat forces the portable walk on Linux (tests; read per request, not on the hot path).
 */
export type UnixSocketWalk = 'fd' | 'lstat';

/** The walk this platform supports, or null where there are no unix sockets to forward to (Windows). */
export function unixSocketWalk(): UnixSocketWalk | null {
  if (process.platform === 'win32') return null;
  if (process.platform === 'linux' && process.env.CORRAL_UNIX_SOCKET_WALK !== 'lstat') return 'fd';
  return 'lstat';
}
