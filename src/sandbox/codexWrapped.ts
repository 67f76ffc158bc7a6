import {
  type FileSystemSandboxContext,
  FileSystemSandboxContextSchema,
  type ParsedSandbox,
  type SandboxLaunchConfig,
  SandboxLaunchConfigSchema,
} from '../protocol/sandbox.js';

/*
 * Codex CLI 0.120–0.130 wrap a sandboxed command in their own Linux launcher (sandbox.md §3.1, codex-clients.md §6):
 *
 *   <CODEX_HOME>/tmp/arg0/codex-arg0XXXX/codex-linux-sandbox --sandbox-policy-cwd <cwd> --command-cwd <cwd>
 *     (0.120/0.125) --sandbox-policy '<legacy JSON>' --file-system-sandbox-policy '<JSON>' --network-sandbox-policy '"…"'
 *     (0.130)       --permission-profile '{"type":"managed","file_system":{…},"network":"…"}'
 *     -- <command…>
 *
 * Run by root, that launcher starts bwrap without `--cap-drop ALL` (an escape, sandbox.md §7.1). This pure parser
 * recognises exactly those shapes and turns them into the equivalent sandbox param of process/start (the seed
 * SandboxLaunchConfig, or the 0.169-style FileSystemSandboxContext for a permission profile), so the server can run
 * the command under its own sandbox. Anything it does not fully understand is refused (the caller then runs the argv
 * as sent): an unknown flag may carry a restriction we would silently drop.
 */

/** The basename of argv[0] that marks a client-wrapped command. */
export const CODEX_LINUX_SANDBOX = 'codex-linux-sandbox';

/** The launcher flags we understand; each takes one value (`--flag value` or `--flag=value`) and may appear once. */
const KNOWN_FLAGS = [
  'sandbox-policy-cwd',
  'command-cwd',
  'sandbox-policy',
  'file-system-sandbox-policy',
  'network-sandbox-policy',
  'permission-profile',
] as const;
type KnownFlag = (typeof KNOWN_FLAGS)[number];

export type ClientWrappedShape = 'legacy-flags' | 'permission-profile';

export type ClientWrapped =
  /** argv[0] is not the client's launcher. */
  | { kind: 'not-wrapped' }
  /** Understood: run `command` in `cwd` under `sandbox` instead of the launcher. */
  | {
      kind: 'unwrapped';
      launcher: string;
      shape: ClientWrappedShape;
      sandbox: ParsedSandbox;
      /** The program and its arguments after `--` (argv[0] is the program as the launcher would exec it). */
      command: string[];
      /** `--command-cwd` (absent: the caller's cwd). */
      cwd: string | undefined;
    }
  /** The launcher, but with something we do not understand: run the argv as sent. */
  | { kind: 'refused'; launcher: string; reason: string };

export function isClientWrapped(argv: readonly string[]): boolean {
  const program = argv[0] ?? '';
  return program.slice(program.lastIndexOf('/') + 1) === CODEX_LINUX_SANDBOX;
}

// Keys each JSON value may carry. A key outside these sets may be a restriction we would drop: refuse instead.
const LEGACY_POLICY_KEYS = [
  'type',
  'access',
  'read_only_access',
  'network_access',
  'writable_roots',
  'exclude_tmpdir_env_var',
  'exclude_slash_tmp',
];
const READ_ONLY_ACCESS_KEYS = ['type', 'include_platform_defaults', 'readable_roots'];
const FS_POLICY_KEYS = ['kind', 'entries'];
const ENTRY_KEYS = ['path', 'access', 'missing_path_behavior'];
const FS_PATH_KEYS = ['type', 'path', 'value'];
const SPECIAL_KEYS = ['kind', 'subpath', 'path'];
const PROFILE_KEYS = ['type', 'file_system', 'network'];
const PROFILE_FS_KEYS = ['type', 'entries'];

const isObject = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v);

/** The first key of `v` outside `allowed` (as `where.key`), or null. Non-objects are left to the schema. */
function extraKey(v: unknown, allowed: readonly string[], where: string): string | null {
  if (!isObject(v)) return null;
  for (const k of Object.keys(v)) if (!allowed.includes(k)) return `${where}.${k}`;
  return null;
}

function extraEntryKey(entries: unknown, where: string): string | null {
  if (!Array.isArray(entries)) return null;
  for (const [i, e] of entries.entries()) {
    const at = `${where}[${i}]`;
    const k =
      extraKey(e, ENTRY_KEYS, at) ??
      (isObject(e) ? extraKey(e.path, FS_PATH_KEYS, `${at}.path`) : null) ??
      (isObject(e) && isObject(e.path) ? extraKey(e.path.value, SPECIAL_KEYS, `${at}.path.value`) : null);
    if (k) return k;
  }
  return null;
}

function extraLegacyKey(p: unknown): string | null {
  return (
    extraKey(p, LEGACY_POLICY_KEYS, 'sandbox-policy') ??
    (isObject(p) ? extraKey(p.access, READ_ONLY_ACCESS_KEYS, 'sandbox-policy.access') : null) ??
    (isObject(p)
      ? extraKey(p.read_only_access, READ_ONLY_ACCESS_KEYS, 'sandbox-policy.read_only_access')
      : null)
  );
}

function extraFsKey(p: unknown): string | null {
  return (
    extraKey(p, FS_POLICY_KEYS, 'file-system-sandbox-policy') ??
    (isObject(p) ? extraEntryKey(p.entries, 'file-system-sandbox-policy.entries') : null)
  );
}

function extraProfileKey(p: unknown): string | null {
  return (
    extraKey(p, PROFILE_KEYS, 'permission-profile') ??
    (isObject(p) ? extraKey(p.file_system, PROFILE_FS_KEYS, 'permission-profile.file_system') : null) ??
    (isObject(p) && isObject(p.file_system)
      ? extraEntryKey(p.file_system.entries, 'permission-profile.file_system.entries')
      : null)
  );
}

function issueText(error: { issues: { path: PropertyKey[]; message: string }[] }): string {
  const i = error.issues[0];
  if (!i) return 'invalid';
  return i.path.length > 0 ? `${i.path.map(String).join('.')}: ${i.message}` : i.message;
}

/** What the client's launcher was given before `--`: its flags in order, then (if any) an argument that is none. */
export interface LauncherArgs {
  /** `--name value` or `--name=value`; `value` null when the argv ends after `--name`. */
  flags: { name: string; value: string | null }[];
  /** The first argument before `--` that is not a flag (reading stops there). */
  stray: string | null;
  /** What follows `--`; undefined without one. */
  command: string[] | undefined;
}

/** Reads a client-wrapped argv's launcher arguments (argv[0] is the launcher). The panel shows these flags. */
export function readLauncherArgs(argv: readonly string[]): LauncherArgs {
  const flags: LauncherArgs['flags'] = [];
  for (let i = 1; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--') return { flags, stray: null, command: argv.slice(i + 1) };
    if (!a.startsWith('--')) return { flags, stray: a, command: undefined };
    const eq = a.indexOf('=');
    const name = a.slice(2, eq === -1 ? undefined : eq);
    if (eq !== -1) flags.push({ name, value: a.slice(eq + 1) });
    else if (i + 1 >= argv.length) flags.push({ name, value: null });
    else flags.push({ name, value: argv[++i]! });
  }
  return { flags, stray: null, command: undefined };
}

/**
 * Recognises a 0.120–0.130 client-wrapped argv and, when every flag is understood, returns the equivalent sandbox
 * param and the command after `--`. Pure: no filesystem access (the caller resolves the program and checks the cwd).
 */
export function parseClientWrapped(argv: readonly string[]): ClientWrapped {
  if (!isClientWrapped(argv)) return { kind: 'not-wrapped' };
  const launcher = argv[0]!;
  const refuse = (reason: string): ClientWrapped => ({ kind: 'refused', launcher, reason });
  const flags = new Map<KnownFlag, string>();
  const read = readLauncherArgs(argv);
  for (const { name, value } of read.flags) {
    if (!(KNOWN_FLAGS as readonly string[]).includes(name)) return refuse(`unknown launcher flag --${name}`);
    const flag = name as KnownFlag;
    if (flags.has(flag)) return refuse(`launcher flag --${flag} given twice`);
    if (value === null) return refuse(`launcher flag --${flag} has no value`);
    flags.set(flag, value);
  }
  if (read.stray !== null)
    return refuse(`unexpected launcher argument ${JSON.stringify(read.stray)} before --`);
  const command = read.command;
  if (command === undefined) return refuse('no -- before the command');
  if (command.length === 0 || command[0] === '') return refuse('no command after --');

  const policyCwd = flags.get('sandbox-policy-cwd');
  if (policyCwd === undefined) return refuse('missing --sandbox-policy-cwd');
  if (!policyCwd.startsWith('/')) return refuse(`--sandbox-policy-cwd is not absolute: ${policyCwd}`);
  const commandCwd = flags.get('command-cwd');
  if (commandCwd !== undefined && !commandCwd.startsWith('/'))
    return refuse(`--command-cwd is not absolute: ${commandCwd}`);

  const json = (flag: KnownFlag): { ok: true; value: unknown } | { ok: false; reason: string } => {
    try {
      return { ok: true, value: JSON.parse(flags.get(flag)!) };
    } catch (e) {
      return { ok: false, reason: `unparseable JSON in --${flag}: ${(e as Error).message}` };
    }
  };

  const legacyFlags: KnownFlag[] = ['sandbox-policy', 'file-system-sandbox-policy', 'network-sandbox-policy'];
  const haveLegacy = legacyFlags.filter((f) => flags.has(f));
  const haveProfile = flags.has('permission-profile');

  if (haveProfile) {
    if (haveLegacy.length > 0) return refuse(`--permission-profile together with --${haveLegacy[0]}`);
    const p = json('permission-profile');
    if (!p.ok) return refuse(p.reason);
    if (!isObject(p.value)) return refuse('--permission-profile is not a JSON object');
    const extra = extraProfileKey(p.value);
    if (extra) return refuse(`unknown key ${extra}`);
    if (p.value.type !== 'managed') {
      return refuse(
        `--permission-profile type ${JSON.stringify(p.value.type)} (only "managed" is unwrapped)`,
      );
    }
    const wire = {
      permissions: p.value,
      cwd: policyCwd,
      windowsSandboxLevel: 'disabled',
      useLegacyLandlock: false,
    };
    const r = FileSystemSandboxContextSchema.safeParse(wire);
    if (!r.success) return refuse(`invalid --permission-profile: ${issueText(r.error)}`);
    const sandbox: FileSystemSandboxContext = r.data;
    return { kind: 'unwrapped', launcher, shape: 'permission-profile', sandbox, command, cwd: commandCwd };
  }

  if (haveLegacy.length !== legacyFlags.length) {
    const missing = legacyFlags.filter((f) => !flags.has(f));
    return refuse(`missing --${missing.join(', --')}`);
  }
  const values: unknown[] = [];
  for (const f of legacyFlags) {
    const r = json(f);
    if (!r.ok) return refuse(r.reason);
    values.push(r.value);
  }
  const [policy, fileSystemPolicy, networkPolicy] = values;
  const extra = extraLegacyKey(policy) ?? extraFsKey(fileSystemPolicy);
  if (extra) return refuse(`unknown key ${extra}`);
  if (isObject(policy) && policy.type === 'external-sandbox')
    return refuse('--sandbox-policy type "external-sandbox" is left to the client');
  if (isObject(fileSystemPolicy) && fileSystemPolicy.kind === 'external-sandbox')
    return refuse('--file-system-sandbox-policy kind "external-sandbox" is left to the client');
  const wire = {
    sandbox: 'linux-seccomp',
    policy,
    fileSystemPolicy,
    networkPolicy,
    sandboxPolicyCwd: policyCwd,
    additionalPermissions: null,
    enforceManagedNetwork: false,
    windowsSandboxLevel: 'disabled',
    windowsSandboxPrivateDesktop: false,
    useLegacyLandlock: false,
  };
  const r = SandboxLaunchConfigSchema.safeParse(wire);
  if (!r.success) return refuse(`invalid launcher policy: ${issueText(r.error)}`);
  const sandbox: SandboxLaunchConfig = r.data;
  return { kind: 'unwrapped', launcher, shape: 'legacy-flags', sandbox, command, cwd: commandCwd };
}

export type UnwrapMode = 'auto' | 'always' | 'never';

/** Whether to unwrap: `auto` means only when the server runs as root (where the client's launcher is unsafe). */
export function shouldUnwrap(mode: UnwrapMode, euid: number | undefined): boolean {
  if (mode === 'always') return true;
  if (mode === 'never') return false;
  return euid === 0;
}
