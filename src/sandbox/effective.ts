import { deepFreeze } from '../protocol/deepFreeze.js';
import type {
  FileSystemEntry,
  FileSystemSandboxContext,
  FileSystemSandboxPolicy,
  FileSystemSpecial,
  ParsedSandbox,
  PermissionProfile,
  SandboxLaunchConfig,
  SandboxPolicy,
  SandboxTypeWire,
} from '../protocol/sandbox.js';
import { isKeptSandboxParam, isSeedSandbox } from '../protocol/sandbox.js';

/** One normalised policy entry: `deny` is folded into `none`, paths are absolute. */
export type EntryPath = { type: 'path'; path: string } | { type: 'special'; value: FileSystemSpecial };
export interface Entry {
  path: EntryPath;
  access: 'read' | 'write' | 'none';
}
export interface FsPolicy {
  kind: 'restricted' | 'unrestricted' | 'external-sandbox';
  entries: Entry[];
}

/** The effective sandbox request, after additionalPermissions were merged and the 0.169 shape was mapped. */
export interface EffectiveSandbox {
  /** Which wire shape it came from. */
  shape: 'seed' | 'context';
  /**
   * The requested sandbox: the seed's `sandbox`, or for the 0.169 shape `native` (managed: the platform's own
   * sandbox) / `none` (disabled or external).
   */
  requested: SandboxTypeWire | 'native';
  fs: FsPolicy;
  network: 'restricted' | 'enabled';
  /** sandboxPolicyCwd (0.169: `cwd`), if known. */
  cwd: string | undefined;
  /** 0.169 workspaceRoots (the `project_roots` special); empty → the cwd. */
  projectRoots: string[];
  enforceManagedNetwork: boolean;
  useLegacyLandlock: boolean;
  /** The legacy policy after the merge (seed only; shown on the dashboard). */
  legacy?: SandboxPolicy;
}

function normEntry(e: FileSystemEntry): Entry {
  return { path: e.path, access: e.access === 'deny' ? 'none' : e.access };
}

export function normalizeFsPolicy(p: FileSystemSandboxPolicy): FsPolicy {
  return { kind: p.kind, entries: p.entries.map(normEntry) };
}

const special = (value: FileSystemSpecial): EntryPath => ({ type: 'special', value });
const pathOf = (path: string): EntryPath => ({ type: 'path', path });

/** §4.3: a FileSystemSandboxPolicy derived from a legacy SandboxPolicy, in Codex's output order. */
export function legacyToFsPolicy(policy: SandboxPolicy, cwd?: string): FsPolicy {
  switch (policy.type) {
    case 'danger-full-access':
      return { kind: 'unrestricted', entries: [] };
    case 'external-sandbox':
      return { kind: 'external-sandbox', entries: [] };
    case 'read-only': {
      if (policy.access.type === 'full-access') {
        return { kind: 'restricted', entries: [{ path: special({ kind: 'root' }), access: 'read' }] };
      }
      const entries: Entry[] = [{ path: special({ kind: 'current_working_directory' }), access: 'read' }];
      if (policy.access.include_platform_defaults)
        entries.push({ path: special({ kind: 'minimal' }), access: 'read' });
      for (const r of policy.access.readable_roots) entries.push({ path: pathOf(r), access: 'read' });
      return { kind: 'restricted', entries };
    }
    case 'workspace-write': {
      const entries: Entry[] = [];
      const ro = policy.read_only_access;
      if (ro.type === 'full-access') entries.push({ path: special({ kind: 'root' }), access: 'read' });
      else {
        if (ro.include_platform_defaults)
          entries.push({ path: special({ kind: 'minimal' }), access: 'read' });
        for (const r of ro.readable_roots) entries.push({ path: pathOf(r), access: 'read' });
      }
      entries.push({ path: special({ kind: 'current_working_directory' }), access: 'write' });
      if (!policy.exclude_slash_tmp) entries.push({ path: special({ kind: 'slash_tmp' }), access: 'write' });
      if (!policy.exclude_tmpdir_env_var)
        entries.push({ path: special({ kind: 'tmpdir' }), access: 'write' });
      for (const r of policy.writable_roots) entries.push({ path: pathOf(r), access: 'write' });
      // A read path entry that already lies inside a legacy writable root is redundant and must not become a carve-out.
      const writable = [...policy.writable_roots, ...(cwd ? [cwd] : [])];
      return {
        kind: 'restricted',
        entries: entries.filter(
          (e) =>
            !(e.access === 'read' && e.path.type === 'path' && writable.some((w) => isWithin(e.path, w))),
        ),
      };
    }
  }
}

function isWithin(p: EntryPath, root: string): boolean {
  if (p.type !== 'path') return false;
  const r = root.endsWith('/') ? root : `${root}/`;
  return p.path === root || p.path.startsWith(r);
}

/** Whether a legacy policy grants full network access. */
export function legacyNetworkEnabled(policy: SandboxPolicy): boolean {
  switch (policy.type) {
    case 'danger-full-access':
      return true;
    case 'external-sandbox':
      return policy.network_access === 'enabled';
    case 'read-only':
    case 'workspace-write':
      return policy.network_access;
  }
}

/** §4.5: merge additionalPermissions into the fs policy, network policy and legacy policy. */
export function mergeAdditionalPermissions(
  fs: FsPolicy,
  network: 'restricted' | 'enabled',
  legacy: SandboxPolicy | undefined,
  extra: PermissionProfile | null | undefined,
): { fs: FsPolicy; network: 'restricted' | 'enabled'; legacy: SandboxPolicy | undefined } {
  if (!extra) return { fs, network, legacy };
  const net = extra.network?.enabled === true ? 'enabled' : network;
  // An unrestricted or external filesystem takes no entries (it stays as it is); the network grant still applies,
  // to the legacy policy too (an external sandbox's `network_access`, as the seed's manager tests pin).
  if (fs.kind !== 'restricted')
    return {
      fs,
      network: net,
      legacy: legacy && net !== network ? mergeLegacy(legacy, [], [], true) : legacy,
    };
  const entries = [...fs.entries];
  const write = extra.file_system?.write ?? [];
  const read = extra.file_system?.read ?? [];
  for (const w of write) entries.push({ path: pathOf(w), access: 'write' });
  for (const r of read) entries.push({ path: pathOf(r), access: 'read' });
  for (const e of extra.file_system?.entries ?? []) entries.push(normEntry(e));
  let newLegacy = legacy;
  if (legacy && (write.length > 0 || read.length > 0 || net !== network)) {
    newLegacy = mergeLegacy(legacy, write, read, net === 'enabled');
  }
  return { fs: { kind: fs.kind, entries }, network: net, legacy: newLegacy };
}

function mergeLegacy(policy: SandboxPolicy, write: string[], read: string[], netOn: boolean): SandboxPolicy {
  const addRead = (a: Extract<SandboxPolicy, { type: 'workspace-write' }>['read_only_access']): typeof a =>
    a.type === 'restricted' ? { ...a, readable_roots: [...a.readable_roots, ...read] } : a;
  switch (policy.type) {
    case 'read-only':
      if (write.length > 0) {
        return {
          type: 'workspace-write',
          writable_roots: write,
          read_only_access: addRead(policy.access),
          network_access: policy.network_access || netOn,
          exclude_tmpdir_env_var: false,
          exclude_slash_tmp: false,
        };
      }
      return { ...policy, access: addRead(policy.access), network_access: policy.network_access || netOn };
    case 'workspace-write':
      return {
        ...policy,
        writable_roots: [...policy.writable_roots, ...write],
        read_only_access: addRead(policy.read_only_access),
        network_access: policy.network_access || netOn,
      };
    case 'external-sandbox':
      return netOn ? { ...policy, network_access: 'enabled' } : policy;
    default:
      return policy;
  }
}

function fromSeed(s: SandboxLaunchConfig): EffectiveSandbox {
  const merged = mergeAdditionalPermissions(
    normalizeFsPolicy(s.fileSystemPolicy),
    s.networkPolicy,
    s.policy,
    s.additionalPermissions,
  );
  return {
    shape: 'seed',
    requested: s.sandbox,
    fs: merged.fs,
    network: merged.network,
    cwd: s.sandboxPolicyCwd,
    projectRoots: [],
    enforceManagedNetwork: s.enforceManagedNetwork,
    useLegacyLandlock: s.useLegacyLandlock,
    legacy: merged.legacy,
  };
}

function fromContext(c: FileSystemSandboxContext, enforceManagedNetwork: boolean): EffectiveSandbox {
  const p = c.permissions;
  const cwd = c.cwd ?? c.policyContext?.cwd ?? undefined;
  const roots = c.workspaceRoots ?? c.policyContext?.workspaceRoots ?? [];
  const base = {
    shape: 'context' as const,
    cwd,
    projectRoots: roots,
    enforceManagedNetwork,
    useLegacyLandlock: c.useLegacyLandlock === true,
  };
  if (p.type === 'managed') {
    const fs: FsPolicy =
      p.file_system.type === 'restricted'
        ? { kind: 'restricted', entries: p.file_system.entries.map(normEntry) }
        : { kind: 'unrestricted', entries: [] };
    return { ...base, requested: 'native', fs, network: p.network };
  }
  if (p.type === 'external') {
    return {
      ...base,
      requested: 'none',
      fs: { kind: 'external-sandbox', entries: [] },
      network: p.network ?? 'enabled',
    };
  }
  return { ...base, requested: 'none', fs: { kind: 'unrestricted', entries: [] }, network: 'enabled' };
}

/**
 * The effective sandbox of a parsed `sandbox` param. `enforceManagedNetwork` is the top-level process/start param
 * (0.169); the seed carries its own flag inside the object.
 */
export function effectiveSandbox(s: ParsedSandbox, enforceManagedNetwork = false): EffectiveSandbox {
  if (isSeedSandbox(s)) {
    const e = fromSeed(s);
    return enforceManagedNetwork ? { ...e, enforceManagedNetwork: true } : e;
  }
  return fromContext(s, enforceManagedNetwork);
}

/** The effective sandbox for `enforceManagedNetwork` without a sandbox: full filesystem, network only via the proxy. */
function enforcementOnly(cwd: string): EffectiveSandbox {
  return {
    shape: 'context',
    requested: 'native',
    fs: { kind: 'unrestricted', entries: [] },
    network: 'enabled',
    cwd,
    projectRoots: [],
    enforceManagedNetwork: true,
    useLegacyLandlock: false,
  };
}

/**
 * The one sandbox a process/start runs under, made once from the parsed `sandbox` param (or what a client-wrapped
 * command amounts to) and the start's top-level `enforceManagedNetwork`; everything after it reads only this. Null:
 * nothing to enforce. Managed-network enforcement is never ignored: without a sandbox, or with a `none` one (not an
 * external sandbox), it gets a network-only sandbox with the full filesystem.
 */
export function startSandbox(
  sandbox: ParsedSandbox | null | undefined,
  enforceManagedNetwork: boolean,
  cwd: string,
): EffectiveSandbox | null {
  if (sandbox === null || sandbox === undefined) return enforceManagedNetwork ? enforcementOnly(cwd) : null;
  // A kept parse (frozen, shared by the starts that sent its text: protocol/sandbox.ts) makes one effective sandbox
  // per flag, frozen too: the starts under one policy share it, and what is kept by it (the Landlock launch plan)
  // knows it by identity.
  const shared = isKeptSandboxParam(sandbox);
  const kept = shared ? effectiveOfKept.get(sandbox) : undefined;
  const slot = enforceManagedNetwork ? 1 : 0;
  const known = kept?.[slot];
  if (known) return known;
  let eff = effectiveSandbox(sandbox, enforceManagedNetwork);
  if (eff.requested === 'none' && eff.enforceManagedNetwork && eff.fs.kind !== 'external-sandbox')
    eff = { ...eff, requested: 'native' };
  if (!shared) return eff;
  const frozen = deepFreeze(eff);
  keptEffective.add(frozen);
  const both = kept ?? [undefined, undefined];
  both[slot] = frozen;
  effectiveOfKept.set(sandbox, both);
  return frozen;
}

/** The effective sandboxes of kept parses, by parse: [without, with enforceManagedNetwork]. */
const effectiveOfKept = new WeakMap<object, [EffectiveSandbox | undefined, EffectiveSandbox | undefined]>();
const keptEffective = new WeakSet<EffectiveSandbox>();

/**
 * Whether `eff` is the effective sandbox of a kept parse (startSandbox): deeply frozen, the same object for every
 * start under that policy, so what is made of it may be kept by its identity (the Landlock launch plan).
 */
export function isKeptEffective(eff: EffectiveSandbox): boolean {
  return keptEffective.has(eff);
}

/** A legacy SandboxPolicy alone (0.120's `sandboxPolicy` context on fs/* requests), as an effective sandbox. */
export function effectiveFromLegacy(policy: SandboxPolicy, cwd?: string): EffectiveSandbox {
  return {
    shape: 'seed',
    requested: policy.type === 'danger-full-access' ? 'none' : 'native',
    fs: legacyToFsPolicy(policy, cwd),
    network: legacyNetworkEnabled(policy) ? 'enabled' : 'restricted',
    cwd,
    projectRoots: [],
    enforceManagedNetwork: false,
    useLegacyLandlock: false,
    legacy: policy,
  };
}
