/**
 * splice(2) relays between two connected TCP sockets (src/platform/native/relay.c), for the proxy's tunnels: no byte
 * passes through JavaScript. Without the addon, or with CORRAL_PROXY_SPLICE=0 (src/platform/addon.ts), src/network/tunnel.ts
 * pipes Node streams (its JS implementation).
 */
import { addon, type NativeHandle, nativeSwitches } from './addon.js';

/** A running relay. */
export type RelayHandle = NativeHandle;

/**
 * A socket as Node describes it, plus the mark its owner has just set with `setKeepAlive(true, mark * 1000)`: how the
 * relay finds the one fd of this process that is this socket (relay.c find_sockets).
 */
export type RelaySocketId = [
  mark: number,
  localAddress: string,
  localPort: number,
  remoteAddress: string,
  remotePort: number,
];

export interface SpliceRelay {
  /**
   * Relays between duplicates of the sockets a and b name (their marks cleared), sending headAToB to b and headBToA
   * to a before anything it reads; onDone(err, aToB, bToA) once both directions have ended (err 0) or at the first
   * error (an errno value; both connections are then reset), never from within open. The caller then closes its own
   * sockets: the connections live as long as the relay. Throws (ENOENT, ENOTUNIQ) when a name does not match exactly
   * one socket.
   */
  open(
    a: RelaySocketId,
    b: RelaySocketId,
    headAToB: Buffer | null,
    headBToA: Buffer | null,
    onDone: (err: number, aToB: number, bToA: number) => void,
  ): RelayHandle;
  /** Stops a relay now (its connections close); its onDone is not called. */
  close(handle: RelayHandle): void;
}

/** The splice relay, or null without the addon. */
export const spliceRelay: SpliceRelay | null = addon
  ? { open: addon.relayOpen.bind(addon), close: addon.relayClose.bind(addon) }
  : null;

/** Whether tunnels go through the splice relay now: it exists and CORRAL_PROXY_SPLICE=0 does not turn it off. */
export function spliceRelayOn(): boolean {
  return spliceRelay !== null && nativeSwitches.proxySplice();
}
