/**
 * Resolution of a sandbox policy into concrete paths (sandbox.md §6): writable roots with their protected and
 * read-only subpaths, unreadable paths, and the links they go through, from the filesystem as fsProbe.ts sees it.
 */
import { dirname, isAbsolute, join, resolve as resolvePath, sep } from 'node:path';
import type { EffectiveSandbox, Entry, FsPolicy } from './effective.js';
import { SandboxSetupError } from './errors.js';
import { canonicalize, type FsProbe, memoProbe, realFsProbe, trace } from './fsProbe.js';

export type Access = 'read' | 'write' | 'none';
export type PathState = 'dir' | 'file' | 'symlink' | 'other' | 'missing';

/** A concrete entry: an absolute, canonical path and its access. */
export interface ConcreteEntry {
  path: string;
  access: Access;
  /** Symlinks the path as written went through (see trace). */
  via?: string[];
  /** Where it came from, for the panel: `entry`, `minimal`, `carve-out` (.git/.codex/.agents/.aws), `gitdir`. */
  origin: 'entry' | 'minimal' | 'carve-out' | 'gitdir';
}

/** A read-only (or unreadable) subpath of a writable root, or an unreadable path elsewhere. */
export interface ProtectedPath {
  /** The path to mount over (canonical; a dangling symlink is reported with state 'symlink' and cannot be pinned). */
  path: string;
  access: 'read' | 'none';
  state: PathState;
  /** For a missing path: its first missing component, the synthetic mount target (§8.4.1). */
  mountTarget?: string;
}

export interface WritableRoot {
  root: string;
  readOnlySubpaths: ProtectedPath[];
  /**
   * Directories of this root (shallow → deep) between it and a protected path or a nested writable root: each is
   * bind-mounted onto itself, so that renaming it (or an ancestor) cannot move what is protected below it away from
   * its path and let the sandbox put something else there.
   */
  pinnedDirs: string[];
}

export interface ResolvedPolicy {
  /** Kind ≠ restricted: no enforcement of the filesystem at all. */
  unrestricted: boolean;
  fullRead: boolean;
  fullWrite: boolean;
  /** `/` is readable (the read layer is `--ro-bind / /`); otherwise `--tmpfs /` plus readableRoots. */
  rootReadable: boolean;
  /** Readable roots other than `/` (existing, canonical), including the platform defaults when `minimal` is set. */
  readableRoots: string[];
  includePlatformDefaults: boolean;
  /** Sorted shallow → deep. */
  writableRoots: WritableRoot[];
  /** `none` paths that lie under no writable root. */
  unreadable: ProtectedPath[];
  /** All concrete entries (explicit plus the implied carve-outs), for access checks. */
  entries: ConcreteEntry[];
  /**
   * Symlinks inside a writable root that a protected path, a writable root or a readable root is reached through
   * (a protected name that is a symlink, `.git -> elsewhere`, first of all). A mount cannot be put on a symlink with
   * bwrap; each is pinned by name after bwrap has set up (see platform/native/sandbox.c), so it cannot be renamed,
   * removed or replaced while the sandbox runs.
   */
  pinnedLinks: string[];
}

export const LINUX_PLATFORM_DEFAULTS = ['/bin', '/etc', '/lib', '/lib64', '/sbin', '/usr'];
const LINUX_PLATFORM_OPTIONAL = ['/nix/store', '/run/current-system/sw'];
/** Names protected inside every writable root (§4.4; `.aws` is ours, as in 0.169). */
export const PROTECTED_NAMES = ['.git', '.agents', '.codex', '.aws'];

export function depth(p: string): number {
  return p === '/' ? 0 : p.split('/').length - 1;
}

/** Shallow → deep, then by path, so that argv order is deterministic. */
export function byDepthThenPath(a: string, b: string): number {
  return depth(a) - depth(b) || (a < b ? -1 : a > b ? 1 : 0);
}

/** `p` equals `root` or lies under it. */
export function isUnder(p: string, root: string): boolean {
  if (root === '/') return true;
  return p === root || p.startsWith(root.endsWith(sep) ? root : root + sep);
}

function state(p: string, probe: FsProbe): PathState {
  return probe.kind(p) ?? 'missing';
}

function firstMissing(p: string, probe: FsProbe): string {
  let cur = p;
  let missing = p;
  while (cur !== '/' && probe.kind(cur) === null) {
    missing = cur;
    cur = dirname(cur);
  }
  return missing;
}

const RANK: Record<Access, number> = { read: 0, write: 1, none: 2 };

/** §4.2 precedence: the most specific entry decides; on a tie none > write > read; no match → none. */
export function accessOf(entries: ConcreteEntry[], p: string): Access {
  let best: ConcreteEntry | undefined;
  let bestDepth = -1;
  for (const e of entries) {
    if (!isUnder(p, e.path)) continue;
    const d = depth(e.path);
    if (d > bestDepth || (d === bestDepth && best && RANK[e.access] > RANK[best.access])) {
      best = e;
      bestDepth = d;
    }
  }
  return best?.access ?? 'none';
}

export interface ResolveOptions {
  /** The exec-server's own TMPDIR (not the command's). Absolute and non-empty, or ignored. */
  tmpdir?: string;
  probe?: FsProbe;
}

/** Expands specials to concrete (absolute, canonical) entries. */
function concreteEntries(
  fs: FsPolicy,
  cwd: string | undefined,
  projectRoots: string[],
  opts: ResolveOptions,
): { entries: ConcreteEntry[]; minimal: boolean } {
  const probe = opts.probe ?? realFsProbe;
  const out: ConcreteEntry[] = [];
  let minimal = false;
  const push = (path: string, access: Access, origin: ConcreteEntry['origin'] = 'entry') => {
    const t = trace(path, probe);
    out.push(
      t.links.length > 0 ? { path: t.path, access, origin, via: t.links } : { path: t.path, access, origin },
    );
  };
  for (const e of fs.entries as Entry[]) {
    const p = e.path;
    if (p.type === 'path') {
      push(p.path, e.access);
      continue;
    }
    const v = p.value;
    switch (v.kind) {
      case 'root':
        push('/', e.access);
        break;
      case 'minimal':
        if (e.access !== 'none') minimal = true;
        break;
      case 'current_working_directory':
        if (cwd) push(cwd, e.access);
        break;
      case 'project_roots': {
        const roots = projectRoots.length > 0 ? projectRoots : cwd ? [cwd] : [];
        for (const r of roots) push(v.subpath ? resolvePath(r, v.subpath) : r, e.access);
        break;
      }
      case 'tmpdir':
        if (opts.tmpdir && isAbsolute(opts.tmpdir) && probe.kind(opts.tmpdir) !== null)
          push(opts.tmpdir, e.access);
        break;
      case 'slash_tmp':
        if (probe.kind('/tmp') === 'dir' || probe.kind('/tmp') === 'symlink') push('/tmp', e.access);
        break;
      case 'unknown':
        break;
    }
  }
  return { entries: out, minimal };
}

/**
 * §4.2/§4.4: resolves an effective filesystem policy to the roots and carve-outs bwrap (or Seatbelt, or an fs check)
 * enforces. Throws SandboxSetupError for a writable root that does not exist.
 */
export function resolvePolicy(
  eff: Pick<EffectiveSandbox, 'fs' | 'cwd' | 'projectRoots'>,
  opts: ResolveOptions = {},
) {
  // One resolution asks about the same paths many times (every component of every path): ask the filesystem once.
  const probe = memoProbe(opts.probe ?? realFsProbe);
  opts = { ...opts, probe };
  const fs = eff.fs;
  if (fs.kind !== 'restricted') {
    const r: ResolvedPolicy = {
      unrestricted: true,
      fullRead: true,
      fullWrite: true,
      rootReadable: true,
      readableRoots: [],
      includePlatformDefaults: false,
      writableRoots: [{ root: '/', readOnlySubpaths: [], pinnedDirs: [] }],
      unreadable: [],
      entries: [{ path: '/', access: 'write', origin: 'entry' }],
      pinnedLinks: [],
    };
    return r;
  }
  const cwd = eff.cwd ? canonicalize(eff.cwd, probe) : undefined;
  const { entries, minimal } = concreteEntries(fs, eff.cwd, eff.projectRoots, opts);
  const hasNone = entries.some((e) => e.access === 'none');
  const rootEntries = entries.filter((e) => e.path === '/');
  const rootAccess = rootEntries.length ? accessOf(rootEntries, '/') : undefined;
  const fullRead = (rootAccess === 'read' || rootAccess === 'write') && !hasNone;
  const fullWrite = rootAccess === 'write' && !entries.some((e) => e.path !== '/' && e.access !== 'write');

  // Writable roots: every write entry that stays writable under the precedence rules.
  const writeCandidates = [...new Set(entries.filter((e) => e.access === 'write').map((e) => e.path))];
  const writable = writeCandidates.filter((p) => accessOf(entries, p) === 'write').sort(byDepthThenPath);
  for (const w of writable) {
    if (probe.kind(w) === null) {
      throw new SandboxSetupError(`Sandbox expected writable root ${w}, but it does not exist`);
    }
  }

  // Implied carve-outs (§4.4), added as read entries so that access checks see them too. Every protected name of
  // every writable root is protected whatever it is now: an existing one keeps its content, a missing one cannot be
  // created (a synthetic mount target holds the name), and one that is a symlink keeps its target, which is
  // protected in turn (the link itself is pinned by name, and so is every link on the way to the target).
  const nameLinks: string[] = [];
  if (!fullWrite) {
    const implied: ConcreteEntry[] = [];
    // The cwd too when it lies in a writable root without being one (codex and git look there first).
    const holders =
      cwd && !writable.includes(cwd) && writable.some((w) => isUnder(cwd, w)) ? [...writable, cwd] : writable;
    for (const w of holders) {
      for (const name of PROTECTED_NAMES) {
        const t = trace(join(w, name), probe);
        nameLinks.push(...t.links);
        implied.push({ path: t.path, access: 'read', origin: 'carve-out' });
        if (name === '.git' && probe.kind(t.path) === 'file') {
          const m = /^gitdir:\s*(.+?)\s*$/m.exec(probe.readText(t.path) ?? '');
          if (m?.[1]) {
            const g = trace(resolvePath(w, m[1]), probe);
            nameLinks.push(...g.links);
            implied.push({ path: g.path, access: 'read', origin: 'gitdir' });
          }
        }
      }
    }
    for (const i of implied) {
      // An explicit, more specific or equal write entry keeps the path writable (e.g. `.git:write`).
      const explicit = entries.filter((e) => e.path === i.path);
      if (explicit.some((e) => e.access !== 'read')) continue;
      if (!entries.some((e) => e.path === i.path && e.access === i.access && e.origin === i.origin))
        entries.push(i);
    }
  }

  // Protected paths: every read/none entry (and symlinked entry) strictly under some writable root.
  const protectedOf = (e: ConcreteEntry): ProtectedPath[] => {
    const access = e.access === 'none' ? 'none' : 'read';
    const out: ProtectedPath[] = [];
    const st = state(e.path, probe);
    out.push(
      st === 'missing'
        ? { path: e.path, access, state: st, mountTarget: firstMissing(e.path, probe) }
        : { path: e.path, access, state: st },
    );
    return out;
  };
  const guarded = entries.filter((e) => e.access !== 'write' && e.path !== '/');
  const seen = new Set<string>();
  const uniqueGuarded = guarded.filter((e) => {
    const k = `${e.path}\0${e.access}`;
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
  const writableRoots: WritableRoot[] = fullWrite
    ? [{ root: '/', readOnlySubpaths: [], pinnedDirs: [] }]
    : writable.map((root) => {
        const readOnlySubpaths = uniqueGuarded
          .filter((e) => e.path !== root && isUnder(e.path, root))
          .sort((a, b) => byDepthThenPath(a.path, b.path))
          .flatMap(protectedOf);
        return { root, readOnlySubpaths, pinnedDirs: pinnedDirsOf(root, readOnlySubpaths, writable) };
      });
  const unreadable = uniqueGuarded
    .filter((e) => e.access === 'none' && !writable.some((w) => isUnder(e.path, w)))
    .flatMap(protectedOf)
    .filter((p) => p.state !== 'missing');

  const rootReadable = rootAccess === 'read' || rootAccess === 'write';
  const readable = new Set<string>();
  if (!rootReadable) {
    if (minimal) {
      for (const d of [...LINUX_PLATFORM_DEFAULTS, ...LINUX_PLATFORM_OPTIONAL]) {
        if (probe.kind(d) === null) continue;
        readable.add(d);
        entries.push({ path: d, access: 'read', origin: 'minimal' });
      }
    }
    for (const e of entries) {
      if (e.access === 'read' && e.origin === 'entry' && accessOf(entries, e.path) !== 'none') {
        if (probe.kind(e.path) !== null) readable.add(e.path);
      }
    }
  }
  // A symlink matters when the sandbox could replace it: when it lies in a writable root (not a read-only part).
  const replaceable = (l: string) =>
    !fullWrite &&
    writable.some((w) => l !== w && isUnder(l, w)) &&
    accessOf(entries, l) === 'write' &&
    !writableRoots.some((w) => w.readOnlySubpaths.some((s) => l !== s.path && isUnder(l, s.path)));
  const links = [...nameLinks, ...entries.flatMap((e) => e.via ?? [])];
  const r: ResolvedPolicy = {
    unrestricted: false,
    fullRead,
    fullWrite,
    rootReadable,
    readableRoots: [...readable].sort(byDepthThenPath),
    includePlatformDefaults: minimal,
    writableRoots,
    unreadable,
    entries,
    pinnedLinks: [...new Set(links.filter(replaceable))].sort(byDepthThenPath),
  };
  return r;
}

/**
 * The directories of `root` that must be mount points (see WritableRoot.pinnedDirs): every directory strictly
 * between the root and one of its protected paths (for a missing one, its mount target), stopping at a nested
 * writable root (which is a mount point itself and pins its own) and never inside a protected path (read-only
 * already, and a writable bind there would undo that).
 */
function pinnedDirsOf(root: string, protectedPaths: ProtectedPath[], writable: string[]): string[] {
  const out = new Set<string>();
  const mounted = new Set(protectedPaths.map((p) => p.mountTarget ?? p.path));
  for (const p of protectedPaths) {
    const target = p.mountTarget ?? p.path;
    const chain: string[] = [];
    for (let d = dirname(target); d !== root && isUnder(d, root) && d !== '/'; d = dirname(d))
      chain.unshift(d);
    for (const d of chain) {
      if (writable.includes(d)) break; // a nested writable root: the rest is its business
      if ([...mounted].some((m) => isUnder(d, m))) break;
      out.add(d);
    }
  }
  return [...out].sort(byDepthThenPath);
}
