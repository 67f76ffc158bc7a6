// issue 33, item 6: the unix-socket upgrade suite and the plain-request suite again, through the portable walk
// (lstat every component from the root, connect by path, lstat again) that macOS takes, forced on Linux by
// CORRAL_UNIX_SOCKET_WALK=lstat (read per request in src/platform/unixSocketWalk.ts). Every swapped-link case of
// both suites holds: the swaps are in place at the check. The one the portable walk cannot hold (a swap made and
// undone between its two walks, around the connect) is pinned in unix-socket-walk.test.ts and docs/security.md.
process.env.CORRAL_UNIX_SOCKET_WALK = 'lstat';
await import('./unix-socket-upgrade.test.js');
await import('./unix-socket-proxy.test.js');
