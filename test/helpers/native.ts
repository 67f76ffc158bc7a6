/**
 * Skip reasons for tests that need the native addon (src/platform): under CORRAL_NATIVE=0 (CI's second pass), on
 * macOS or without a compiler they skip and print why; everything else runs both ways.
 */
import { nativeSpawnAbsence } from '../../src/platform/spawn.js';

/** For a test that needs the addon for `what`: false when it is loaded, else the reason to print. */
export function needsAddon(what: string): string | false {
  return nativeSpawnAbsence ? `${what} needs the native addon: ${nativeSpawnAbsence}` : false;
}

/**
 * A Linux sandbox as these tests drive it (bwrap with the addon's fd helpers and launcher: the managed network, pins,
 * the fresh keyring). Without the addon bwrap still runs, through bash, and refuses what needs the addon: that is
 * test/hostile/no-addon-sandbox.test.ts.
 */
export const needsSandbox: string | false = needsAddon('a Linux sandbox with the fd helpers and launcher');

/** fs/* with a sandbox context (openat2 from the addon): refused without the addon, by design. */
export const needsConfinedFs: string | false = needsAddon('sandboxed fs/* (refused without it, by design)');
