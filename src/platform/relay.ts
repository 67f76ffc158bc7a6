/**
 * splice(2) relays between two connected sockets (src/process/native/relay.c), for the proxy's tunnels: no byte
 * passes through JavaScript. Without the addon src/network/tunnel.ts pipes Node streams (its JS implementation).
 */
import { addon, type NativeHandle } from './addon.js';

/** A running relay. */
export type RelayHandle = NativeHandle;

export interface SpliceRelay {
  /**
   * Relays between duplicates of fdA and fdB; onDone(err, aToB, bToA) once both directions have ended (err 0) or at
   * the first error (an errno value), never from within open.
   */
  open(fdA: number, fdB: number, onDone: (err: number, aToB: number, bToA: number) => void): RelayHandle;
  /** Stops a relay now; its onDone is not called. */
  close(handle: RelayHandle): void;
}

/** The splice relay, or null without the addon. */
export const spliceRelay: SpliceRelay | null = addon
  ? { open: addon.relayOpen.bind(addon), close: addon.relayClose.bind(addon) }
  : null;
