/**
 * The Linux sandbox's helpers (src/platform/native/sandbox.c) and its launcher executable
 * (src/platform/native/launcher.c, built next to the addon): fd inheritance control, pipes as plain fds, pinning
 * symlinks against a racing sandboxed process, locked mount targets. Node has none of these: without the addon a
 * bubblewrap sandbox starts through bash instead (src/sandbox/linux/bwrapLaunch.ts materializeBwrapWithoutAddon), and
 * refuses, naming the missing capability, what needs them (docs/architecture.md, "Without the addon").
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { type Addon, addon, addonAbsence, buildDir } from './addon.js';

/**
 * sealFds: every fd of this process close-on-exec (what child_process and node-pty would otherwise pass on);
 * pipe: pipe2(O_CLOEXEC) as [read fd, write fd]; the others: see sandbox.c.
 */
export type SandboxNative = Pick<
  Addon,
  'sealFds' | 'setInheritable' | 'pipe' | 'pinSymlinks' | 'holdMountTarget' | 'releaseMountTarget'
>;

/** Why there are no helpers (the addon's absence, in words for a user); null when there are. */
export const sandboxNativeAbsence: string | null = addonAbsence;

/** The helpers, or null without the addon. */
export const sandboxNative: SandboxNative | null = addon
  ? {
      sealFds: addon.sealFds.bind(addon),
      setInheritable: addon.setInheritable.bind(addon),
      pipe: addon.pipe.bind(addon),
      pinSymlinks: addon.pinSymlinks.bind(addon),
      holdMountTarget: addon.holdMountTarget.bind(addon),
      releaseMountTarget: addon.releaseMountTarget.bind(addon),
    }
  : null;

/**
 * Whether the mount table behind an open /proc/<pid>/mountinfo descriptor changed since the last ask on it (one
 * poll(), sandbox.c mountsChanged), or null without the addon (then the table is read and compared instead).
 */
export const mountsChanged: ((fd: number) => boolean) | null = addon?.mountsChanged
  ? addon.mountsChanged.bind(addon)
  : null;

/**
 * The sandbox launcher (a fresh session keyring, exactly the fds it is given), or null when it is missing; only
 * with the addon, so CORRAL_NATIVE=0 turns it off too.
 */
export const sandboxLauncher: string | null = (() => {
  const p = addon && buildDir ? join(buildDir, 'corral-sandbox-exec') : null;
  return p && existsSync(p) ? p : null;
})();
