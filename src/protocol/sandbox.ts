import { z } from 'zod';
import { deepFreeze } from './deepFreeze.js';
import { AbsolutePath } from './paths.js';
import { sameJson } from './sameJson.js';
import { serdeMessage } from './serde.js';

/*
 * Wire shapes of the `sandbox` member of `process/start` and of the sandbox context of `fs/*` requests
 * (sandbox.md §2 and §3.2). Outer keys are camelCase; inner policy objects keep Codex's core serde spellings
 * (snake_case fields, kebab-case tags). Every path must be absolute (or a file:// URI); relative paths are rejected.
 * The schemas are plain z.object / z.enum / z.union: z.object strips unknown keys, which is wanted.
 */

/** An absolute path or file:// URI, decoded to an absolute path (relative paths are rejected). */
const Abs = AbsolutePath;

// ---------------------------------------------------------------------------------------------------------------
// §2.2 legacy SandboxPolicy and ReadOnlyAccess

export const ReadOnlyAccessSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('full-access') }),
  z.object({
    type: z.literal('restricted'),
    include_platform_defaults: z.boolean().default(true),
    readable_roots: z.array(Abs).default([]),
  }),
]);
export type ReadOnlyAccess = z.infer<typeof ReadOnlyAccessSchema>;

export const NetworkAccessSchema = z.enum(['restricted', 'enabled']);

export const SandboxPolicySchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('danger-full-access') }),
  z.object({
    type: z.literal('read-only'),
    access: ReadOnlyAccessSchema.default({ type: 'full-access' }),
    network_access: z.boolean().default(false),
  }),
  z.object({
    type: z.literal('external-sandbox'),
    network_access: NetworkAccessSchema.default('restricted'),
  }),
  z.object({
    type: z.literal('workspace-write'),
    writable_roots: z.array(Abs).default([]),
    read_only_access: ReadOnlyAccessSchema.default({ type: 'full-access' }),
    network_access: z.boolean().default(false),
    exclude_tmpdir_env_var: z.boolean().default(false),
    exclude_slash_tmp: z.boolean().default(false),
  }),
]);
export type SandboxPolicy = z.infer<typeof SandboxPolicySchema>;

// ---------------------------------------------------------------------------------------------------------------
// §2.3 FileSystemSandboxPolicy and NetworkSandboxPolicy

export const FileSystemSpecialSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('root') }),
  z.object({ kind: z.literal('minimal') }),
  z.object({ kind: z.literal('current_working_directory') }),
  z.object({ kind: z.literal('project_roots'), subpath: z.string().nullable().optional() }),
  z.object({ kind: z.literal('tmpdir') }),
  z.object({ kind: z.literal('slash_tmp') }),
  z.object({ kind: z.literal('unknown'), path: z.string(), subpath: z.string().nullable().optional() }),
]);
export type FileSystemSpecial = z.infer<typeof FileSystemSpecialSchema>;

export const FileSystemPathSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('path'), path: Abs }),
  z.object({ type: z.literal('special'), value: FileSystemSpecialSchema }),
]);
export type FileSystemPath = z.infer<typeof FileSystemPathSchema>;

/** Entry access. `deny` is the 0.169 spelling of `none`. */
export const FileSystemAccessSchema = z.enum(['read', 'write', 'none', 'deny']);
export type FileSystemAccess = z.infer<typeof FileSystemAccessSchema>;

export const FileSystemEntrySchema = z.object({
  path: FileSystemPathSchema,
  access: FileSystemAccessSchema,
  /** 0.169: accepted and ignored (missing protected paths stay protected; sandbox.md §2.3). */
  missing_path_behavior: z.string().optional(),
});
export type FileSystemEntry = z.infer<typeof FileSystemEntrySchema>;

export const FileSystemSandboxPolicySchema = z.object({
  kind: z.enum(['restricted', 'unrestricted', 'external-sandbox']),
  entries: z.array(FileSystemEntrySchema).default([]),
});
export type FileSystemSandboxPolicy = z.infer<typeof FileSystemSandboxPolicySchema>;

export const NetworkSandboxPolicySchema = z.enum(['restricted', 'enabled']);
export type NetworkSandboxPolicy = z.infer<typeof NetworkSandboxPolicySchema>;

// ---------------------------------------------------------------------------------------------------------------
// §2.4 PermissionProfile (additionalPermissions) and WindowsSandboxLevel

export const PermissionProfileSchema = z.object({
  network: z.object({ enabled: z.boolean().nullable().optional() }).nullable().optional(),
  file_system: z
    .object({
      read: z.array(Abs).nullable().optional(),
      write: z.array(Abs).nullable().optional(),
      /** Newer clients: extra FileSystemSandboxPolicy entries (tolerated). */
      entries: z.array(FileSystemEntrySchema).nullable().optional(),
    })
    .nullable()
    .optional(),
});
export type PermissionProfile = z.infer<typeof PermissionProfileSchema>;

export const WindowsSandboxLevelSchema = z.enum(['disabled', 'restricted-token', 'elevated']);
export type WindowsSandboxLevel = z.infer<typeof WindowsSandboxLevelSchema>;

export const SandboxTypeSchema = z.enum([
  'none',
  'macos-seatbelt',
  'linux-seccomp',
  'windows-restricted-token',
]);
export type SandboxTypeWire = z.infer<typeof SandboxTypeSchema>;

// ---------------------------------------------------------------------------------------------------------------
// §2.1 the seed's SandboxLaunchConfig

export const SandboxLaunchConfigSchema = z.object({
  sandbox: SandboxTypeSchema,
  policy: SandboxPolicySchema,
  fileSystemPolicy: FileSystemSandboxPolicySchema,
  networkPolicy: NetworkSandboxPolicySchema,
  sandboxPolicyCwd: Abs,
  additionalPermissions: PermissionProfileSchema.nullable().optional(),
  enforceManagedNetwork: z.boolean(),
  windowsSandboxLevel: WindowsSandboxLevelSchema,
  windowsSandboxPrivateDesktop: z.boolean(),
  useLegacyLandlock: z.boolean(),
});
export type SandboxLaunchConfig = z.infer<typeof SandboxLaunchConfigSchema>;

// ---------------------------------------------------------------------------------------------------------------
// §3.2 the 0.169 FileSystemSandboxContext (also the 0.125/0.130 fs/* context)

export const ContextFileSystemSchema = z.object({
  type: z.enum(['restricted', 'unrestricted']),
  entries: z.array(FileSystemEntrySchema).default([]),
});

export const ContextPermissionsSchema = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('managed'),
    file_system: ContextFileSystemSchema,
    network: NetworkSandboxPolicySchema.default('restricted'),
  }),
  z.object({
    type: z.literal('disabled'),
    file_system: ContextFileSystemSchema.nullable().optional(),
    network: NetworkSandboxPolicySchema.nullable().optional(),
  }),
  z.object({
    type: z.literal('external'),
    file_system: ContextFileSystemSchema.nullable().optional(),
    network: NetworkSandboxPolicySchema.nullable().optional(),
  }),
]);
export type ContextPermissions = z.infer<typeof ContextPermissionsSchema>;

export const FileSystemSandboxContextSchema = z.object({
  permissions: ContextPermissionsSchema,
  cwd: Abs.nullable().optional(),
  workspaceRoots: z.array(Abs).nullable().optional(),
  windowsSandboxLevel: WindowsSandboxLevelSchema.nullable().optional(),
  windowsSandboxProxySettingsMode: z.string().nullable().optional(),
  windowsSandboxPrivateDesktop: z.boolean().nullable().optional(),
  useLegacyLandlock: z.boolean().nullable().optional(),
  policyContext: z
    .object({ cwd: Abs.nullable().optional(), workspaceRoots: z.array(Abs).nullable().optional() })
    .nullable()
    .optional(),
  userHomeDir: Abs.nullable().optional(),
});
export type FileSystemSandboxContext = z.infer<typeof FileSystemSandboxContextSchema>;

// ---------------------------------------------------------------------------------------------------------------
// The `sandbox` param of process/start (and the `sandbox` context of fs/* requests)

/**
 * undefined / null (no sandbox), the seed object (has key `sandbox`) or the 0.169 object (has key `permissions`).
 * Anything else fails. For messages that name the offending field prefer `parseSandboxParam`, which picks the branch
 * by key first (a plain union reports `invalid_union`).
 */
export const SandboxParamSchema = z.union([
  z.null(),
  z.undefined(),
  SandboxLaunchConfigSchema,
  FileSystemSandboxContextSchema,
]);
export type SandboxParam = z.infer<typeof SandboxParamSchema>;
/** A parsed, non-null sandbox param. */
export type ParsedSandbox = SandboxLaunchConfig | FileSystemSandboxContext;

/** True for the seed SandboxLaunchConfig (as opposed to the 0.169 context). */
export function isSeedSandbox(s: ParsedSandbox): s is SandboxLaunchConfig {
  return 'sandbox' in s && typeof (s as { sandbox?: unknown }).sandbox === 'string';
}

/**
 * Validates a `sandbox` param, choosing the schema by key so that zod issues point into the right shape:
 * `sandbox` key → SandboxLaunchConfig; `permissions` key → FileSystemSandboxContext; otherwise the seed schema's
 * errors (``missing field `sandbox` ``) after the plain union fails.
 */
export function parseSandboxParam(value: unknown): z.ZodSafeParseResult<ParsedSandbox | null | undefined> {
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    if ('permissions' in value && !('sandbox' in value))
      return FileSystemSandboxContextSchema.safeParse(value);
    return SandboxLaunchConfigSchema.safeParse(value);
  }
  return SandboxParamSchema.safeParse(value);
}

/**
 * The last successful parses of `sandbox` params, by their JSON text (issue 32: an agent sends the same policy with
 * every start, and parsing it cost ~70-90 µs of CPU in a server's first hundreds of starts, ~5x its text and a
 * copy). A parse is a function of the value, and a value from the wire (JSON) of its text, so the kept result is the
 * one a fresh parse gives. It is deeply frozen and shared by every start that sent that text (a copy for each cost
 * ~9 µs of a sandboxed start): no reader may change it, and one that tries throws. Bounded: MAX_PARSED texts of at
 * most MAX_PARSED_TEXT characters (longer ones are parsed every time). Failed parses are not kept.
 */
const parsedByText = new Map<string, ParsedSandbox>();
/** Every parse ever kept (deeply frozen): what may be known by its identity (isKeptSandboxParam). */
const keptParses = new WeakSet<object>();

/**
 * Whether `v` is a kept parse: deeply frozen by this module, so its identity stands for its content for as long as
 * it lives (effective.ts keeps what it makes of one by identity).
 */
export function isKeptSandboxParam(v: unknown): boolean {
  return typeof v === 'object' && v !== null && keptParses.has(v);
}
const MAX_PARSED = 8;
const MAX_PARSED_TEXT = 64 * 1024;

function jsonText(value: unknown): string | undefined {
  try {
    return JSON.stringify(value);
  } catch {
    return undefined; // not JSON (a cycle, a bigint): parsed without the memo
  }
}

/**
 * The most recently used kept parse with a value of its text (JSON.parse of it, frozen: nobody else holds it): an
 * agent sends one policy with start after start, and a walk comparing the value with this one (sameJson, ~1.5 µs for
 * a policy of ~700 characters) answers those starts without making their text and looking it up (~4-9 µs).
 */
let lastKept: { value: unknown; text: string; parse: ParsedSandbox } | undefined;
/** Each kept parse's value (JSON.parse of its text, frozen), for lastKept. */
const keptValues = new WeakMap<ParsedSandbox, unknown>();

/**
 * The kept parse of a `sandbox` param (frozen, shared), or undefined when this text was not parsed successfully
 * lately: what `toSandboxParam` gives for it, without the schema (execParamsFast, the hot path of process/start).
 */
export function keptSandboxParam(value: unknown): ParsedSandbox | undefined {
  if (value === null || typeof value !== 'object') return undefined;
  return lastKeptFor(value) ?? keptByText(jsonText(value));
}

/**
 * The last kept parse when `value` spells its text and it is still kept. (Answering from it leaves the kept texts'
 * order as it was: a policy used all the time between 8 others can be dropped, and is then parsed once again.)
 */
function lastKeptFor(value: unknown): ParsedSandbox | undefined {
  const last = lastKept;
  return last && sameJson(value, last.value) && parsedByText.get(last.text) === last.parse
    ? last.parse
    : undefined;
}

/** The kept parse of this text (now the most recently used), or undefined. */
function keptByText(text: string | undefined): ParsedSandbox | undefined {
  const kept = text === undefined ? undefined : parsedByText.get(text);
  if (!kept) return undefined;
  parsedByText.delete(text!);
  parsedByText.set(text!, kept);
  if (lastKept?.parse !== kept) {
    // Made once per kept parse: a client alternating between policies pays a lookup, not a parse, per switch.
    let value = keptValues.get(kept);
    if (value === undefined) {
      value = deepFreeze(JSON.parse(text!));
      keptValues.set(kept, value);
    }
    lastKept = { value, text: text!, parse: kept };
  }
  return kept;
}

/**
 * The `sandbox` member of process/start as the method table reads it (a zod transform): absent or null → null, else
 * the shape `parseSandboxParam` picks by key, its issues kept (the table puts them under `sandbox`).
 */
export function toSandboxParam(value: unknown, ctx: z.RefinementCtx): ParsedSandbox | null {
  if (value === undefined || value === null) return null;
  const fast = lastKeptFor(value);
  if (fast) return fast;
  const text = jsonText(value);
  const kept = keptByText(text);
  if (kept) return kept;
  const r = parseSandboxParam(value);
  if (r.success) {
    const data = r.data ?? null;
    if (data && text !== undefined && text.length <= MAX_PARSED_TEXT) {
      // The first start gets the object it kept too: frozen, as every later start gets it.
      parsedByText.set(text, deepFreeze(data));
      keptParses.add(data);
      if (parsedByText.size > MAX_PARSED) parsedByText.delete(parsedByText.keys().next().value!);
    }
    return data;
  }
  for (const issue of r.error.issues) ctx.addIssue({ ...issue });
  return z.NEVER;
}

/**
 * The -32602 text of a bad `sandbox` member (the table's field error map): serde's dialect for the shape picked by
 * key, with nested paths under `sandbox.` (``missing field `x` `` names the field alone, as serde does).
 */
export function sandboxParamMessage(value: unknown): string {
  const r = parseSandboxParam(value);
  if (r.success) return 'invalid sandbox';
  return serdeMessage(r.error, value, 'SandboxLaunchConfig').replace(/at `/, 'at `sandbox.');
}

/** A `special` filesystem entry of a seed policy (`root`, `current_working_directory`, …). */
export const specialEntry = (kind: string, access: FileSystemAccess) => ({
  path: { type: 'special', value: { kind } },
  access,
});

/**
 * A seed `SandboxLaunchConfig` for `linux-seccomp` as a client sends one (the server's own probes: doctor, selftest):
 * the legacy policy, the filesystem entries and network given, everything else at the seed's defaults.
 */
export function seedLinuxConfig(o: {
  policy: Record<string, unknown>;
  entries: unknown[];
  network: NetworkSandboxPolicy;
  cwd: string;
}) {
  return {
    sandbox: 'linux-seccomp',
    policy: o.policy,
    fileSystemPolicy: { kind: 'restricted', entries: o.entries },
    networkPolicy: o.network,
    sandboxPolicyCwd: o.cwd,
    additionalPermissions: null,
    enforceManagedNetwork: false,
    windowsSandboxLevel: 'disabled',
    windowsSandboxPrivateDesktop: false,
    useLegacyLandlock: false,
  };
}
