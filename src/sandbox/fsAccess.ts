import { decodePathOrFileUri } from '../protocol/paths.js';
import type { ParsedSandbox, SandboxPolicy } from '../protocol/sandbox.js';
import { type EffectiveSandbox, effectiveFromLegacy, effectiveSandbox } from './effective.js';
import { SandboxSetupError } from './errors.js';
import { canonicalize, type FsProbe, realFsProbe } from './fsProbe.js';
import {
  type Access,
  accessOf,
  type ConcreteEntry,
  PROTECTED_NAMES,
  type ResolvedPolicy,
  resolvePolicy,
} from './resolve.js';

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
 * One object as a walk reached it: its path with no symlink in it (each component opened without following links,
 * links read and walked again), and what the walk learned on the way there.
 */
export interface FsStep {
  readonly path: string;
  /**
   * Directories (and the object itself) on the way that were, by identity (dev:ino), one of the policy's read or
   * `none` paths, whatever name reached them: each becomes an entry at the walked path, so that a carve-out reached
   * through a rename, a bind mount or a hard link keeps its access.
   */
  readonly seen: readonly ConcreteEntry[];
  /** Set once the walk went through a protected name of a writable root (`.git`, `.codex`, …): read-only below. */
  readonly protectedName: string | null;
  /** Set once the walk reached the server's own /proc or /dev (by path or identity): never the sandbox's view. */
  readonly hostOnly: boolean;
}

/**
 * What a sandbox has of its own instead of the host's (bwrap `--proc /proc`, `--dev /dev`): through fs/* with a
 * sandbox context these would be the server's (`/proc/self/environ` is the server's environment), so they are
 * neither read nor written, whatever the entries say.
 */
const HOST_ONLY = ['/proc', '/dev'];

/** The ways an fs access is decided (for the error texts). */
export type FsDenial = 'outside' | 'read-only' | 'protected' | 'unreadable' | 'host-only';

/**
 * The fs/* view of a sandbox context: the policy resolved exactly as for a process (sandbox.md §4), decided one walked
 * step at a time. All decisions of confined fs/* are here; fsConfined.ts only walks and asks.
 */
export class FsRules {
  private readonly entries: ConcreteEntry[];
  private readonly writableRoots: Set<string>;
  private readonly explicitWrite: Set<string>;
  private readonly identities = new Map<string, ConcreteEntry>();
  private readonly hostOnlyIdents = new Set<string>();

  constructor(readonly policy: ResolvedPolicy) {
    this.entries = policy.entries;
    this.writableRoots = new Set(policy.fullWrite ? [] : policy.writableRoots.map((w) => w.root));
    this.explicitWrite = new Set(
      policy.entries.filter((e) => e.access === 'write' && e.origin === 'entry').map((e) => e.path),
    );
  }

  /** The read and `none` paths (other than `/`), and /proc and /dev, whose identity a walk compares with what it opens. */
  get guardedPaths(): string[] {
    const paths = this.entries.filter((e) => e.access !== 'write' && e.path !== '/').map((e) => e.path);
    return [...new Set([...HOST_ONLY, ...paths])];
  }

  /** Records the identity (dev:ino) that a guarded path has now. */
  addIdentity(path: string, ident: string): void {
    if (HOST_ONLY.includes(path)) this.hostOnlyIdents.add(ident);
    const access = accessOf(this.entries, path);
    if (access === 'write') return;
    const prev = this.identities.get(ident);
    if (!prev || (prev.access === 'read' && access === 'none'))
      this.identities.set(ident, { path, access, origin: 'entry' });
  }

  /** The step of `/`. */
  root(ident: string | null): FsStep {
    return this.seenAs({ path: '/', seen: [], protectedName: null, hostOnly: false }, ident);
  }

  /**
   * The step of `name` in the directory of `parent`. `ident` is the identity of what was opened there, null for a
   * name that does not exist (yet).
   */
  child(parent: FsStep, name: string, ident: string | null): FsStep {
    const path = parent.path === '/' ? `/${name}` : `${parent.path}/${name}`;
    let protectedName = parent.protectedName;
    if (
      protectedName === null &&
      this.writableRoots.has(parent.path) &&
      PROTECTED_NAMES.includes(name) &&
      !this.explicitWrite.has(path)
    )
      protectedName = path;
    const hostOnly =
      parent.hostOnly ||
      (parent.path === '/' && HOST_ONLY.includes(path)) ||
      (ident !== null && this.hostOnlyIdents.has(ident));
    return this.seenAs({ path, seen: parent.seen, protectedName, hostOnly }, ident);
  }

  /** A step reached through a symlink at `link`: a protected name stays protected wherever its link points. */
  throughLink(step: FsStep, link: FsStep): FsStep {
    if (link.protectedName === null || step.protectedName !== null) return step;
    return { ...step, protectedName: link.protectedName };
  }

  private seenAs(step: FsStep, ident: string | null): FsStep {
    const match = ident === null ? undefined : this.identities.get(ident);
    if (!match || match.path === step.path) return step;
    return { ...step, seen: [...step.seen, { path: step.path, access: match.access, origin: 'entry' }] };
  }

  /** The access of a step: the most specific entry (§4.2), the identities seen on the way, protected names. */
  access(step: FsStep): Access {
    if (step.hostOnly) return 'none';
    const a = accessOf(step.seen.length ? [...this.entries, ...step.seen] : this.entries, step.path);
    return a === 'write' && step.protectedName !== null ? 'read' : a;
  }

  canRead(step: FsStep): boolean {
    if (step.hostOnly) return false;
    return this.policy.fullRead || this.access(step) !== 'none';
  }

  canWrite(step: FsStep): boolean {
    return this.access(step) === 'write';
  }

  /** Why `step` may not be accessed in `mode` (null when it may). */
  denial(step: FsStep, mode: 'read' | 'write'): FsDenial | null {
    if (step.hostOnly) return 'host-only';
    if (mode === 'read') return this.canRead(step) ? null : 'unreadable';
    const a = this.access(step);
    if (a === 'write') return null;
    if (a === 'none') return 'outside';
    return step.protectedName !== null ? 'protected' : 'read-only';
  }

  /** The -32603 text for a denial: names the requested path and, when it differs, where it leads. */
  message(requested: string, step: FsStep, mode: 'read' | 'write', why: FsDenial): string {
    const via = step.path !== requested ? ` (resolves to ${step.path})` : '';
    const text: Record<FsDenial, string> = {
      outside: 'it is outside the sandbox',
      'read-only': 'it is read-only in the sandbox',
      protected: `${step.protectedName} is protected in a writable root`,
      unreadable: 'it is not readable in the sandbox',
      'host-only': "it is the server's own /proc or /dev, not the sandbox's",
    };
    return `sandbox denied ${mode === 'read' ? 'read of' : 'write to'} ${requested}${via}: ${text[why]}`;
  }
}

/**
 * Resolves the sandbox context of an fs/* request (sandbox.md §3.3) exactly as for a process: FsRules when it
 * restricts the filesystem, null when it does not (no context, `danger-full-access`, an unrestricted or external
 * policy), or a -32603 text when it cannot be resolved (a writable root that does not exist, …).
 */
export function fsRulesFor(
  context: ParsedSandbox | SandboxPolicy | null | undefined,
  opts: FsAccessOptions = {},
): FsRules | null | string {
  if (context === null || context === undefined) return null;
  let eff: EffectiveSandbox;
  try {
    eff = isLegacyPolicy(context) ? effectiveFromLegacy(context) : effectiveSandbox(context as ParsedSandbox);
  } catch (e) {
    return `sandbox: cannot resolve the fs sandbox context: ${(e as Error).message}`;
  }
  if (eff.requested === 'none' || eff.fs.kind !== 'restricted') return null;
  try {
    return new FsRules(resolvePolicy(eff, { tmpdir: opts.tmpdir ?? process.env.TMPDIR, probe: opts.probe }));
  } catch (e) {
    if (e instanceof SandboxSetupError) return `sandbox: cannot resolve the fs sandbox context: ${e.message}`;
    throw e;
  }
}

/**
 * A check of one path against a sandbox context by its name (after following symlinks), for previews and tests:
 * null when allowed, else the -32603 text. Advisory only: the name can change right after the check; fs/* itself
 * decides on what it opens (src/server/fs/fsConfined.ts).
 */
export function checkFsAccess(
  context: ParsedSandbox | SandboxPolicy | null | undefined,
  absPath: string,
  mode: 'read' | 'write',
  opts: FsAccessOptions = {},
): string | null {
  const path = decodePathOrFileUri(absPath);
  if (path === null) return `sandbox: refusing ${mode} of ${absPath}: not an absolute path`;
  const rules = fsRulesFor(context, opts);
  if (rules === null || typeof rules === 'string') return rules;
  const probe = opts.probe ?? realFsProbe;
  const targets = new Set([canonicalize(path, probe)]);
  if (probe.kind(path) === 'symlink') {
    const real = probe.realpath(path);
    if (real) targets.add(real);
    else if (mode === 'write') return `sandbox denied write to ${path}: it is a dangling symlink`;
  }
  for (const t of targets) {
    let step = rules.root(null);
    for (const name of t.split('/').filter(Boolean)) step = rules.child(step, name, null);
    const why = rules.denial(step, mode);
    if (why) return rules.message(path, step, mode, why);
  }
  return null;
}
