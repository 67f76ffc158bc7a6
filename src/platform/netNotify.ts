/**
 * The connect supervisor of Landlock commands under managed-network enforcement (src/platform/native/netnotify.c):
 * a seccomp user-notification filter in the command sends every connect() to one thread of the server, which answers
 * a connect to the command's loopback proxy endpoint with a socket of its own, connected to the proxy and installed
 * over the command's fd, and refuses anything else with EACCES. Node has nothing like it: without the addon, or on a
 * kernel without SECCOMP_RET_USER_NOTIF / SECCOMP_IOCTL_NOTIF_ADDFD (Linux 5.9), `netNotifyAbsence` says why and the
 * combination stays refused.
 */
import { closeSync } from 'node:fs';
import { addon, addonAbsence } from './addon.js';

let absence: string | null | undefined;

/** Why connect supervision cannot run here (null: it can). Asked of the kernel once per process. */
export function netNotifyAbsence(): string | null {
  if (absence !== undefined) return absence;
  if (!addon) absence = `the native addon is not loaded (${addonAbsence ?? 'unknown'})`;
  else if (typeof addon.netNotifyProbe !== 'function') absence = 'the native addon is an older build';
  else absence = addon.netNotifyProbe();
  return absence;
}

/** One command's channel: `childFd` goes to the command (close-on-exec: pass it as an fd), `watch` after its spawn. */
export interface NetNotifyChannel {
  readonly childFd: number;
  /**
   * Supervises the listener the command sends with these proxy ports (1..8); the server's end is adopted. With
   * `socksPort` (transparent TCP), a connect to any other inet/inet6 destination is held while the server's own socket
   * asks the command's SOCKS5 listener for it (CONNECT to the IP and port read once from the command); granted, that
   * socket replaces the command's fd and the connect returns 0; refused, ECONNREFUSED. With `passPorts` (bwrap: the
   * sandbox has a network namespace of its own), a connect that is not the supervisor's to take (another family, a
   * malformed call, 127.0.0.1 on one of these in-namespace forwarder ports) goes on to the kernel instead of EACCES.
   */
  watch(ports: number[], socksPort?: number, passPorts?: number[]): void;
  /** Closes what the server still holds of the channel (the child's end always; the server's unless watched). */
  close(): void;
}

/** A new channel (requires netNotifyAbsence() === null). */
export function netNotifyChannel(): NetNotifyChannel {
  const why = netNotifyAbsence();
  if (why !== null || !addon) throw new Error(`connect supervision is not available: ${why ?? 'no addon'}`);
  const native = addon;
  const [serverFd, childFd] = native.netNotifyPair();
  let serverOpen = true;
  let childOpen = true;
  const shut = (fd: number) => {
    try {
      closeSync(fd);
    } catch {
      // already closed
    }
  };
  return {
    childFd,
    watch(ports, socksPort, passPorts) {
      if (!serverOpen) throw new Error('netNotify: the channel is closed');
      if (childOpen) {
        shut(childFd); // the command has its copy: a command that dies before sending is then seen as a hang-up
        childOpen = false;
      }
      serverOpen = false; // adopted by the supervisor (or closed on failure below)
      try {
        if (passPorts !== undefined) native.netNotifyWatch(serverFd, ports, socksPort, passPorts);
        else if (socksPort !== undefined) native.netNotifyWatch(serverFd, ports, socksPort);
        else native.netNotifyWatch(serverFd, ports);
      } catch (e) {
        shut(serverFd);
        throw e;
      }
    },
    close() {
      if (childOpen) shut(childFd);
      if (serverOpen) shut(serverFd);
      childOpen = serverOpen = false;
    },
  };
}

/** Totals of the process: connects proxied, refused, and channels/listeners supervised now. */
export function netNotifyCounts(): { proxied: number; refused: number; watched: number } {
  const [proxied, refused, watched] = addon?.netNotifyCounts?.() ?? [0, 0, 0];
  return { proxied, refused, watched };
}

/**
 * Whether a connection that reached a SOCKS5 listener on `socksPort` from `address`:`port` is the supervisor's own
 * exchange for a command's held connect (transparent TCP): only the supervisor's sockets, bound by the server, have
 * those 127.0.0.1 4-tuples while their exchange runs, so no program can present one.
 */
export function netNotifyTransparent(
  address: string | undefined,
  port: number | undefined,
  socksPort: number,
): boolean {
  if (port === undefined || (address !== '127.0.0.1' && address !== '::ffff:127.0.0.1')) return false;
  return addon?.netNotifyTransparent?.(port, socksPort) ?? false;
}
