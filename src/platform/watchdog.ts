/**
 * The group watchdog (src/platform/native/watchdog.c): a small process of its own that outlives a SIGKILLed server
 * for as long as it takes to SIGKILL the process groups it was given and to empty and remove the server's cgroups.
 * It is how nothing outlives the server (README, "Nothing outlives the server"). Node has no way to act after its
 * own SIGKILL: without the addon there is no watchdog, and the server says so (`absence`).
 */
import { addon, addonAbsence } from './addon.js';

export interface GroupWatchdog {
  /** Registers a process group started without the native spawner (node-pty); returns its release (call once). */
  watchGroup(pgid: number): () => void;
  /** (Re)starts the watchdog if it is not running; false when it cannot be started now (ENOMEM, EAGAIN). */
  ensure(): boolean;
  /** The watchdog's pid while it runs, else 0. */
  pid(): number;
  /** The cgroups it empties and removes if the server dies (src/process/cgroup.ts). */
  setCgroupCleanup(version: 1 | 2, bases: string[], removeBases: boolean): void;
}

/** The release of a watchdog slot the native spawner returned (-1: none). */
export function watchdogSlotRelease(slot: number): () => void {
  if (!addon || slot < 0) return () => {};
  let watched = true;
  return () => {
    if (!watched) return;
    watched = false;
    addon!.unwatchGroup(slot);
  };
}

/** The watchdog, or null without the addon (see groupWatchdogAbsence). */
export const groupWatchdog: GroupWatchdog | null = addon
  ? {
      watchGroup: (pgid) => watchdogSlotRelease(addon!.watchGroup(pgid)),
      ensure() {
        try {
          addon!.ensureWatchdog();
          return true;
        } catch {
          return false;
        }
      },
      pid: () => addon!.watchdogPid(),
      setCgroupCleanup: (version, bases, removeBases) => addon!.setCgroupCleanup(version, bases, removeBases),
    }
  : null;

/** Why there is no watchdog (children may then outlive a SIGKILLed server); null when there is one. */
export const groupWatchdogAbsence: string | null = addonAbsence;
