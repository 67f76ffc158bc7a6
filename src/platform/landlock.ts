/**
 * The Landlock calls of the addon (src/platform/native/landlock.c): the kernel's ABI version and the ruleset builder;
 * the child applies a ruleset itself (NativeSpawnArgs.confine, confine.c; the sandbox launcher for terminals and
 * child_process). Node has no Landlock: without the addon the Landlock backend is refused (src/sandbox/linux/
 * landlockNative.ts says why).
 */
import { type Addon, addon, addonAbsence } from './addon.js';

export type LandlockCalls = Pick<Addon, 'landlockAbi' | 'landlockRuleset'>;

/** The calls, or null without the addon. */
export const landlockCalls: LandlockCalls | null = addon
  ? { landlockAbi: addon.landlockAbi.bind(addon), landlockRuleset: addon.landlockRuleset.bind(addon) }
  : null;

/** Why there are none (null when there are). */
export const landlockAbsence: string | null = addonAbsence;
