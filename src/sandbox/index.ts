/**
 * The sandbox engine (GitHub issue 3): turns a `process/start` sandbox param into a wrapped launch (bwrap + seccomp on
 * Linux, Seatbelt on macOS), enforces fs/* sandbox contexts, and classifies denials.
 */
export type {
  FileSystemSandboxContext,
  ParsedSandbox,
  SandboxLaunchConfig,
  SandboxParam,
} from '../protocol/sandbox.js';
export { parseSandboxParam, SandboxParamSchema } from '../protocol/sandbox.js';
export { isLikelySandboxDenied } from './denial.js';
export { type EffectiveSandbox, effectiveSandbox, legacyToFsPolicy, startSandbox } from './effective.js';
export { SandboxSetupError } from './errors.js';
export { checkFsAccess, type FsAccessOptions } from './fsAccess.js';
export { buildSeccompFilter } from './linux/seccomp.js';
export {
  detectLinuxSandbox,
  type LaunchCommand,
  type LaunchPlan,
  type LaunchPreview,
  type PrepareOptions,
  planLaunch,
  prepareLaunch,
  previewLaunch,
  SANDBOX_ADVICE,
  sweepStalePrivateDirs,
  WINDOWS_ERROR,
} from './prepare.js';
export { type ResolvedPolicy, resolvePolicy } from './resolve.js';
