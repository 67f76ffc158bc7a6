import { z } from 'zod';
import {
  managedNetworkParamMessage,
  NetworkProxyParamSchema,
  networkProxyParamMessage,
  toManagedNetworkParam,
} from './network.js';
import { AbsolutePath, decodePathOrFileUri } from './paths.js';
import { keptSandboxParam, sandboxParamMessage, toSandboxParam } from './sandbox.js';

// ---- handshake -------------------------------------------------------------------------------------------------

/** What a client declares it can do (ours, additive). `networkApprovals`: it answers `network/policyRequest` for its
 * own processes (src/protocol/approvals.ts). Unknown members are ignored. */
export const ClientCapabilities = z.looseObject({ networkApprovals: z.boolean().nullish() });

export const InitializeParams = z.object({
  clientName: z.string(),
  /**
   * The `sessionId` an earlier `initialize` returned: re-attach to that detached session (same credential only).
   * @since 0.120
   */
  resumeSessionId: z.string().nullish(),
  capabilities: ClientCapabilities.nullish(),
});
export type InitializeParams = z.infer<typeof InitializeParams>;

export const InitializeResult = z.object({
  /**
   * The session's resume key: a secret of this client, for `resumeSessionId` (the seed answers `{}`).
   * @since 0.120
   */
  sessionId: z.string(),
  /**
   * Present (true) when the server runs with `--require-sandbox`: a process/start without a `sandbox` object (absent
   * or null) is -32602 ``missing field `sandbox` ``, as in the seed, where the field is required.
   * @corral
   */
  requireSandbox: z.boolean().optional(),
});
export type InitializeResult = z.infer<typeof InitializeResult>;

// ---- process/start ---------------------------------------------------------------------------------------------

/** `envPolicy` (0.121+ servers, sent by 0.125+ clients): how the child's environment is built (protocol.md §5.10). */
export const EnvPolicy = z.object({
  inherit: z.enum(['all', 'core', 'none']).default('all'),
  ignoreDefaultExcludes: z.boolean().default(false),
  exclude: z.array(z.string()).default([]),
  set: z.record(z.string(), z.string()).default({}),
  includeOnly: z.array(z.string()).default([]),
});
export type EnvPolicy = z.infer<typeof EnvPolicy>;

/**
 * Corral's own, additive: resource limits for this command's cgroup (README "Resource limits"). Each is optional and
 * may only lower the server's own limit (`--pids-max`, `--memory-max`): a larger value is -32602 naming the field.
 * Unknown members are refused so that a misspelt limit is never silently ignored.
 */
export const ProcessLimitsParam = z.strictObject({
  /** Processes and threads the command may have at once (cgroup pids.max). */
  pidsMax: z.number().int().min(1).max(4_194_304).nullish(),
  /** Bytes of memory the command may use (cgroup memory.max / v1 memory.limit_in_bytes), at least 1 MiB. */
  memoryMaxBytes: z.number().int().min(1_048_576).max(Number.MAX_SAFE_INTEGER).nullish(),
});
export type ProcessLimitsParam = z.infer<typeof ProcessLimitsParam>;

/** Which cgroup limit a command ran into (`process/exited`, `process/read`: present only when one was hit). */
export const LimitHit = z.enum(['pids', 'memory']);
export type LimitHit = z.infer<typeof LimitHit>;

/** Where a command's usage figures come from: its own cgroup (v2 or v1), else the kernel's rusage of the reaped child. */
export const UsageSource = z.enum(['cgroup-v2', 'cgroup-v1', 'rusage']);
export type UsageSource = z.infer<typeof UsageSource>;

/**
 * What a command used, read once it has exited (`process/exited`, the audit trail, the panel). From its own cgroup
 * (`source` cgroup-v2 or cgroup-v1: everything in the cgroup, descendants that left the process group included), else
 * from the rusage the kernel gave when the spawner reaped it (`source` rusage: the command and the descendants it
 * waited for). A figure the source cannot give is null: v1 has no per-command CPU or io accounting, so `cpu*Ms` and
 * `io*Bytes` then come from the rusage (when the spawner reaped the child itself) or are null; peaks of a cgroup
 * reused from an earlier command are null where the kernel cannot reset them. `limitEvents`: how often the command ran
 * into its limits (`memory`: OOM kills in its cgroup; `pids`: forks refused by pids.max), a key present only when > 0.
 * @corral
 */
export const ProcessUsage = z.object({
  source: UsageSource,
  wallMs: z.number(),
  cpuUserMs: z.number().nullable(),
  cpuSystemMs: z.number().nullable(),
  peakMemoryBytes: z.number().nullable(),
  peakPids: z.number().nullable(),
  ioReadBytes: z.number().nullable(),
  ioWriteBytes: z.number().nullable(),
  limitEvents: z.object({ memory: z.number().optional(), pids: z.number().optional() }),
});
export type ProcessUsage = z.infer<typeof ProcessUsage>;

/**
 * The seed's ExecParams, plus every field released clients send. `sandbox`, `managedNetwork` and `networkProxy` are
 * parsed here too, each by its own schema (protocol/sandbox.ts, protocol/network.ts): the shape is picked by key, and
 * a bad one answers the text of EXEC_PARAMS_FIELD_ERRORS (serde's dialect, naming the field). They come last, so a
 * bad member before them is reported first.
 */
export const ExecParams = z.object({
  processId: z.string(),
  argv: z.array(z.string()),
  cwd: AbsolutePath,
  env: z.record(z.string(), z.string()),
  tty: z.boolean(),
  arg0: z.string().nullish(),
  /** @since 0.169 */
  enforceManagedNetwork: z.boolean().nullish(),
  /** @since 0.121 */
  envPolicy: EnvPolicy.nullish(),
  /** A writable stdin pipe for a non-tty process. @since 0.122 */
  pipeStdin: z.boolean().nullish(),
  /** Shown on the panel (e.g. `{threadId, toolCallId}`). @since 0.169 */
  metadata: z.record(z.string(), z.unknown()).nullish(),
  limits: ProcessLimitsParam.nullish(),
  /**
   * Absent or null: no sandbox; else the seed's SandboxLaunchConfig or 0.169's FileSystemSandboxContext, enforced.
   * @shape SandboxParam
   */
  sandbox: z.unknown().transform(toSandboxParam).optional(),
  /**
   * A managed proxy described the 0.169 way. A config it cannot take (a bad glob, a relative unix-socket path, `*` in
   * the denylist, `enabled: false`) is -32602 `invalid network proxy config: <err>`, 0.169's text.
   * @since 0.169
   */
  networkProxy: NetworkProxyParamSchema.nullish(),
  /**
   * The seed's `{config, constraints, auditMetadata}` (starts a managed proxy) or 0.169's sandbox fact. As in the seed,
   * a config that breaks its `constraints` is -32603 `invalid managed network config: <err>` and one whose proxy state
   * cannot be built (a bad glob, a relative unix-socket path) -32603 `failed to build managed network proxy state:
   * <err>`; a malformed shape is -32602 `invalid network proxy config: <err>`.
   * @shape ManagedNetworkParam
   */
  managedNetwork: z.unknown().transform(toManagedNetworkParam).optional(),
});
export type ExecParams = z.infer<typeof ExecParams>;

/** The members whose every value but null goes to the schema (execParamsFast). */
const NULL_ONLY = new Set(['limits', 'networkProxy', 'managedNetwork']);
const EXEC_KEYS = Object.keys(ExecParams.shape);
const EXEC_KEY_SET = new Set(EXEC_KEYS);

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && Object.getPrototypeOf(v) === Object.prototype;
}

const isString = (x: unknown): x is string => typeof x === 'string';

/**
 * A fresh copy of a record whose every value passes `ok` (the schema's z.record, members in its order), or undefined.
 * `__proto__` (an own member of parsed JSON) is one the schema's record drops: the schema decides.
 */
function copyRecord(v: unknown, ok: (x: unknown) => boolean): Record<string, unknown> | undefined {
  if (!isRecord(v) || Object.hasOwn(v, '__proto__')) return undefined;
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(v)) {
    const value = v[k];
    if (!ok(value)) return undefined;
    out[k] = value;
  }
  return out;
}

/** A fresh copy of a string array, or undefined. */
function copyStrings(v: unknown): string[] | undefined {
  if (!Array.isArray(v)) return undefined;
  for (const a of v) if (typeof a !== 'string') return undefined;
  return v.slice();
}

const ENV_POLICY_KEYS = ['inherit', 'ignoreDefaultExcludes', 'exclude', 'set', 'includeOnly'];

/**
 * envPolicy as 0.125+ send it, every member given and of its type, nothing else: the schema's output (members in its
 * order, fresh arrays and record). A member left to its default, or one the schema strips: the schema decides.
 */
function fastEnvPolicy(v: unknown): EnvPolicy | undefined {
  if (!isRecord(v)) return undefined;
  const keys = Object.keys(v);
  if (keys.length !== ENV_POLICY_KEYS.length || !ENV_POLICY_KEYS.every((k) => Object.hasOwn(v, k)))
    return undefined;
  const { inherit, ignoreDefaultExcludes } = v;
  if (inherit !== 'all' && inherit !== 'core' && inherit !== 'none') return undefined;
  if (typeof ignoreDefaultExcludes !== 'boolean') return undefined;
  const exclude = copyStrings(v.exclude);
  const set = copyRecord(v.set, isString) as Record<string, string> | undefined;
  const includeOnly = copyStrings(v.includeOnly);
  if (!exclude || !set || !includeOnly) return undefined;
  return { inherit, ignoreDefaultExcludes, exclude, set, includeOnly };
}

function fastValue(key: string, v: unknown): unknown {
  switch (key) {
    case 'processId':
      return typeof v === 'string' ? v : undefined;
    case 'argv':
      return copyStrings(v);
    case 'cwd':
      return typeof v === 'string' ? (decodePathOrFileUri(v) ?? undefined) : undefined;
    case 'env':
      return copyRecord(v, isString);
    case 'tty':
      return typeof v === 'boolean' ? v : undefined;
    case 'arg0':
      return v === null || typeof v === 'string' ? v : undefined;
    case 'pipeStdin':
    case 'enforceManagedNetwork':
      return v === null || typeof v === 'boolean' ? v : undefined;
    case 'sandbox':
      // The policy an agent sends with every start: its kept parse, when its text was parsed lately.
      return v === null ? null : keptSandboxParam(v);
    case 'metadata':
      // 0.169 sends {threadId, toolCallId}: a fresh record, the values as they are (the schema's z.unknown()).
      return v === null ? null : copyRecord(v, () => true);
    case 'envPolicy':
      return v === null ? null : fastEnvPolicy(v);
    default:
      return NULL_ONLY.has(key) && v === null ? null : undefined;
  }
}

/**
 * process/start's params in the shape agents send at every start (the required members, `arg0`, `pipeStdin`,
 * `enforceManagedNetwork`, `metadata` and a whole `envPolicy` of their types, a `sandbox` whose text the schema parsed
 * lately (keptSandboxParam), every other member null or absent, nothing else), read without zod: the
 * same output as `ExecParams.parse` (members in the table's order, fresh arrays and records; the `sandbox` is the kept
 * parse, frozen and shared, as the schema's transform gives it too), for a fraction of its
 * cost on the hot path (issue 32: ~30 µs of the server's main thread per start). Anything else is undefined: the
 * schema decides, with its errors.
 */
export function execParamsFast(params: unknown): ExecParams | undefined {
  if (!isRecord(params)) return undefined;
  const keys = Object.keys(params);
  for (const k of keys) if (!EXEC_KEY_SET.has(k)) return undefined;
  const out: Record<string, unknown> = {};
  for (const k of EXEC_KEYS) {
    if (!Object.hasOwn(params, k)) {
      if (k === 'processId' || k === 'argv' || k === 'cwd' || k === 'env' || k === 'tty') return undefined;
      continue;
    }
    const v = fastValue(k, params[k]);
    if (v === undefined) return undefined;
    out[k] = v;
  }
  return out as ExecParams;
}

/** The -32602 text for a bad `sandbox`, `networkProxy` or `managedNetwork` of process/start, by field. */
export const EXEC_PARAMS_FIELD_ERRORS = {
  sandbox: sandboxParamMessage,
  networkProxy: networkProxyParamMessage,
  managedNetwork: managedNetworkParamMessage,
} as const satisfies Readonly<Record<string, (value: unknown) => string>>;

export const SandboxTypeWire = z.enum(['none', 'linuxSeccomp', 'macosSeatbelt']);

/**
 * The guarantees an operator may accept as weaker for the Landlock backend (`--sandbox-accept-weaker a,b`): each is
 * one thing Landlock + seccomp cannot hold exactly without namespaces. Without its acceptance a start that needs it
 * either gets the exact (stricter) behaviour or is refused (see src/sandbox/linux/landlock.ts and the README).
 */
export const WeakerGuarantee = z.enum(['protected-names', 'metadata', 'proxy-port', 'signals', 'host-ipc']);
export type WeakerGuarantee = z.infer<typeof WeakerGuarantee>;

/** What the panel badge says for each weaker guarantee in effect ("landlock — .git writable"). */
export const WEAKER_GUARANTEE_LABELS: Record<WeakerGuarantee, string> = {
  'protected-names': '.git/.codex writable',
  metadata: 'file modes writable',
  'proxy-port': 'proxy port open to any host',
  signals: 'can signal other processes',
  'host-ipc': 'host IPC reachable',
};

/**
 * Ours, additive, next to `sandboxType`: which backend enforced the sandbox and which accepted weaker guarantees
 * apply to this process (empty: every policy element is held exactly). Present for Landlock-sandboxed processes.
 */
export const SandboxGuarantees = z.object({
  backend: z.enum(['bwrap', 'landlock']),
  /** Why Landlock: the start asked for it (`useLegacyLandlock`), or namespaces are unavailable (`fallback`). */
  reason: z.enum(['useLegacyLandlock', 'fallback']).optional(),
  landlockAbi: z.number().int().optional(),
  weaker: z.array(WeakerGuarantee),
});
export type SandboxGuarantees = z.infer<typeof SandboxGuarantees>;

export const StartResult = z.object({
  processId: z.string(),
  /**
   * What confines the process (`macosSeatbelt` is Corral's spelling, by analogy: no release was seen sending it).
   * @since 0.169
   */
  sandboxType: SandboxTypeWire,
  /** Which backend confines the process and which weaker guarantees the operator accepted (Landlock). @corral */
  sandboxGuarantees: SandboxGuarantees.optional(),
  /**
   * What the server accepted but cannot fully honour for this start (a managed proxy the sandbox leaves unreachable, a
   * proxy setting without effect as configured, …), one sentence each; absent when there is none.
   * @corral
   */
  warnings: z.array(z.string()).optional(),
});
export type StartResult = z.infer<typeof StartResult>;

// ---- process/read ----------------------------------------------------------------------------------------------

const u64 = z.number().int().nonnegative();

export const ReadParams = z.object({
  processId: z.string(),
  afterSeq: u64.nullish(),
  maxBytes: z.number().int().nullish(),
  waitMs: u64.nullish(),
});
export type ReadParams = z.infer<typeof ReadParams>;

export const OutputStream = z.enum(['stdout', 'stderr', 'pty']);
export type OutputStream = z.infer<typeof OutputStream>;

export const OutputChunk = z.object({ seq: z.number(), stream: OutputStream, chunk: z.string() });
export type OutputChunk = z.infer<typeof OutputChunk>;

export const ReadResult = z.object({
  chunks: z.array(OutputChunk),
  nextSeq: z.number(),
  exited: z.boolean(),
  exitCode: z.number().nullable(),
  closed: z.boolean(),
  failure: z.string().nullable(),
  /** The exit looks like the sandbox refused something (sandbox.md §11.6). @since 0.169 */
  sandboxDenied: z.boolean(),
  /**
   * Present only when true: the process had closed and its retained output was freed to stay within the session's
   * retention budget (`--max-retained-mib`); `chunks` is then empty whatever `afterSeq` says.
   * @corral
   */
  outputEvicted: z.boolean().optional(),
  limitHit: LimitHit.optional(),
});
export type ReadResult = z.infer<typeof ReadResult>;

// ---- process/write, terminate, signal --------------------------------------------------------------------------

export const WriteParams = z.object({
  processId: z.string(),
  chunk: z.string(),
  /** @since 0.120 */
  writeId: z.string().nullish(),
});
export type WriteParams = z.infer<typeof WriteParams>;

export const WriteStatus = z.enum(['accepted', 'unknownProcess', 'stdinClosed', 'starting']);
export const WriteResult = z.object({ status: WriteStatus });
export type WriteResult = z.infer<typeof WriteResult>;

export const TerminateParams = z.object({ processId: z.string() });
export const TerminateResult = z.object({ running: z.boolean() });
export type TerminateResult = z.infer<typeof TerminateResult>;

export const SignalParams = z.object({
  processId: z.string(),
  signal: z.enum(['interrupt', 'terminate', 'kill']),
});
export type SignalParams = z.infer<typeof SignalParams>;

// ---- notifications ---------------------------------------------------------------------------------------------

export const OutputNotification = z.object({
  processId: z.string(),
  seq: z.number(),
  stream: OutputStream,
  chunk: z.string(),
});
export const ExitedNotification = z.object({
  processId: z.string(),
  seq: z.number(),
  exitCode: z.number(),
  /** @since 0.169 */
  sandboxDenied: z.boolean(),
  limitHit: LimitHit.optional(),
  /** What the command used (ProcessUsage); absent when neither its cgroup nor the spawner could say. @corral */
  usage: ProcessUsage.optional(),
});
export const ClosedNotification = z.object({ processId: z.string(), seq: z.number() });
export type OutputNotification = z.infer<typeof OutputNotification>;
export type ExitedNotification = z.infer<typeof ExitedNotification>;
export type ClosedNotification = z.infer<typeof ClosedNotification>;
