/**
 * The Landlock backend's one door to native code (src/platform/native/landlock.c and confine.c): the kernel's ABI
 * version and the ruleset builder, behind an explicit capability check of the addon's exports. Everything else about
 * Landlock is planned in TypeScript (landlock.ts); the child applies the ruleset itself (LaunchSpec.confine).
 */
import { closeSync } from 'node:fs';
import { landlockCalls as calls, landlockAbsence as nativeLoadError } from '../../platform/landlock.js';
import { sandboxLauncher } from '../../platform/sandbox.js';

export interface LandlockSupport {
  /** The kernel's Landlock ABI version; 0: none. */
  abi: number;
  /** The kernel's errata bitmask (fixes of known Landlock bugs, LANDLOCK_CREATE_RULESET_ERRATA). */
  errata: number;
  /** Why there is no Landlock here (null when abi > 0). */
  missing: string | null;
}

let support: LandlockSupport | undefined;

/** What this kernel and build offer, asked once per process. */
export function landlockSupport(): LandlockSupport {
  if (support) return support;
  if (!calls) {
    support = {
      abi: 0,
      errata: 0,
      missing: `the native addon has no Landlock support (${nativeLoadError ?? 'an older build'}): run \`npm ci\` or \`npx node-gyp rebuild\``,
    };
  } else if (!sandboxLauncher) {
    support = { abi: 0, errata: 0, missing: 'the sandbox launcher (corral-sandbox-exec) is not built' };
  } else {
    const [abi, errata, errno] = calls.landlockAbi();
    support = {
      abi,
      errata,
      missing:
        abi > 0
          ? null
          : errno === 38 // ENOSYS
            ? 'this kernel has no Landlock (CONFIG_SECURITY_LANDLOCK is not set, or the call is blocked by a seccomp filter)'
            : errno === 95 // EOPNOTSUPP
              ? 'Landlock is built into this kernel but not enabled: add landlock to the lsm= boot parameter'
              : `landlock_create_ruleset failed (errno ${errno})`,
    };
  }
  return support;
}

export interface RulesetSpec {
  handledFs: number;
  handledNet: number;
  scoped: number;
  rules: { path: string; rights: number }[];
  connectPorts: number[];
}

/**
 * A new ruleset fd (close-on-exec; the caller closes it once the child has it), and what each rule's path was when
 * its rule was made: `dev:ino` of what it opened as (a symlink's own), `-` where it opened as nothing (gone: no
 * rule) — as `${st.dev}:${st.ino}` of an lstat of the path reads while it is unchanged. Throws an Error with `errno`.
 */
export function buildBoundRuleset(spec: RulesetSpec): { fd: number; inodes: string[] } {
  if (!calls) throw new Error(landlockSupport().missing ?? 'no Landlock');
  const out = calls.landlockRuleset(
    spec.handledFs,
    spec.handledNet,
    spec.scoped,
    spec.rules.map((r) => r.path),
    spec.rules.map((r) => r.rights),
    spec.connectPorts,
  );
  const inodes = spec.rules.map((_, i) => {
    const dev = out[1 + 2 * i]!;
    const ino = out[2 + 2 * i]!;
    return dev < 0 ? '-' : `${dev}:${ino}`;
  });
  return { fd: out[0]!, inodes };
}

/** A new ruleset fd (buildBoundRuleset without the inodes). */
export function buildRuleset(spec: RulesetSpec): number {
  return buildBoundRuleset(spec).fd;
}

export function closeRuleset(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // already closed
  }
}
