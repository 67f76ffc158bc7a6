import { decodePathOrFileUri } from '../protocol/paths.js';
import type { ParsedSandbox, SandboxPolicy } from '../protocol/sandbox.js';
import { type EffectiveSandbox, effectiveFromLegacy, effectiveSandbox } from './effective.js';
import { SandboxSetupError } from './errors.js';
import { accessOf, canonicalize, type FsProbe, realFsProbe, resolvePolicy } from './resolve.js';

export interface FsAccessOptions {
  /** The server's TMPDIR (default: process.env.TMPDIR). */
  tmpdir?: string;
  probe?: FsProbe;
}

function isLegacyPolicy(v: unknown): v is SandboxPolicy {
  return (
    typeof v === 'object' &&
    v !== null &&
    typeof (v as { type?: unknown }).type === 'string' &&
    !('permissions' in v) &&
    !('sandbox' in v)
  );
}

/**
 * Enforces a sandbox context on an fs/* request (sandbox.md §3.3): resolves it exactly as for a process and checks
 * `absPath` (an absolute path or file:// URI) after following symlinks. Returns null when the access is allowed,
 * otherwise an error message (for -32603) that names the path. Writes need `write` access; reads need any access
 * (or full read). A null/undefined context allows everything.
 */
export function checkFsAccess(
  context: ParsedSandbox | SandboxPolicy | null | undefined,
  absPath: string,
  mode: 'read' | 'write',
  opts: FsAccessOptions = {},
): string | null {
  if (context === null || context === undefined) return null;
  const probe = opts.probe ?? realFsProbe;
  const path = decodePathOrFileUri(absPath);
  if (path === null) return `sandbox: refusing ${mode} of ${absPath}: not an absolute path`;
  let eff: EffectiveSandbox;
  try {
    eff = isLegacyPolicy(context) ? effectiveFromLegacy(context) : effectiveSandbox(context as ParsedSandbox);
  } catch (e) {
    return `sandbox: refusing ${mode} of ${path}: ${(e as Error).message}`;
  }
  if (eff.requested === 'none' || eff.fs.kind !== 'restricted') return null;
  const tmpdir = opts.tmpdir ?? process.env.TMPDIR;
  let resolved: ReturnType<typeof resolvePolicy>;
  try {
    resolved = resolvePolicy(eff, { tmpdir, probe });
  } catch (e) {
    if (e instanceof SandboxSetupError) return `sandbox: refusing ${mode} of ${path}: ${e.message}`;
    throw e;
  }
  // Check both the path as named and where it really leads (a symlink must not lead out of the writable roots).
  const targets = new Set([canonicalize(path, probe)]);
  if (probe.kind(path) === 'symlink') {
    const real = probe.realpath(path);
    if (real) targets.add(real);
    else if (mode === 'write') return `sandbox denied write to ${path}: it is a dangling symlink`;
  }
  for (const t of targets) {
    const access = accessOf(resolved.entries, t);
    if (mode === 'write' && access !== 'write') {
      const why = access === 'read' ? 'it is read-only in the sandbox' : 'it is outside the sandbox';
      return `sandbox denied write to ${path}${t !== path ? ` (resolves to ${t})` : ''}: ${why}`;
    }
    if (mode === 'read' && access === 'none' && !resolved.fullRead) {
      return `sandbox denied read of ${path}${t !== path ? ` (resolves to ${t})` : ''}: it is not readable in the sandbox`;
    }
  }
  return null;
}
