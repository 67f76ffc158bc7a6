/**
 * Wire shapes of the panel's monitor feed and policy debugger (privileged connections only): `monitor/subscribe`
 * (snapshot, then live `monitor/*` notifications), `monitor/read`, `monitor/terminate`, `monitor/write`,
 * `policy/preview` and `policy/checkUrl`. Pure: no Node imports, so the renderer imports these too.
 */
import { z } from 'zod';
import { deepFreeze } from './deepFreeze.js';
import {
  LimitHit,
  OutputChunk,
  OutputStream,
  ProcessUsage,
  SandboxGuarantees,
  SandboxTypeWire,
} from './exec.js';

/** What the panel shows as the sandbox badge. `client-wrapped`: a 0.120–0.130 client wrapped its own sandbox. */
export const SandboxBadge = z.enum(['none', 'linux-seccomp', 'macos-seatbelt', 'client-wrapped']);
export type SandboxBadge = z.infer<typeof SandboxBadge>;

export const REDACTED = '‹redacted›';

const SECRET_KEY = /(^env$|^environment$|key|secret|token|password|passwd|credential|authorization|cookie)/i;

/**
 * Deep copy with secrets removed: any env map keeps its names but loses every value, and any field whose name looks
 * secret (`*key*`, `*token*`, …) has its value replaced. Env values never reach the panel.
 */
export function redact(value: unknown, depth = 0): unknown {
  if (depth > 8) return REDACTED;
  if (Array.isArray(value)) return value.map((v) => redact(v, depth + 1));
  if (value === null || typeof value !== 'object') return value;
  // Own members made as data properties (fromEntries): a `__proto__` member (JSON.parse makes one) stays a member of
  // the copy, redacted like any other, instead of an assignment that would set the copy's prototype. An undefined
  // member is dropped, as JSON drops it: the redaction is a function of the input's JSON text (redactedByText).
  return Object.fromEntries(
    Object.entries(value as Record<string, unknown>).flatMap(([k, v]): [string, unknown][] => {
      if (v === undefined) return [];
      if (/^(env|environment|envVars)$/i.test(k) && v !== null && typeof v === 'object' && !Array.isArray(v))
        return [[k, Object.fromEntries(Object.keys(v as object).map((name) => [name, REDACTED]))]];
      if (SECRET_KEY.test(k) && v !== null && typeof v !== 'boolean' && typeof v !== 'number')
        return [[k, REDACTED]];
      return [[k, redact(v, depth + 1)]];
    }),
  );
}

/** What redact gave for an object (frozen), and its JSON text once asked for. */
interface Redacted {
  value: Record<string, unknown>;
  text?: string;
}

const redactedOnce = new WeakMap<object, Redacted>();
/**
 * The last redactions by their input's JSON text: a server starts command after command under one policy, and each
 * start's launch summary is an object of its own with the same content (redacting and serialising it again cost
 * ~15 µs of a sandboxed start). A redaction is a function of the input's JSON text (redact drops an undefined member
 * as JSON does), so for JSON data (what the wire gives, what summaries are made of) the kept one is what a fresh
 * redaction gives; for the values JSON spells alike (NaN and null, -0 and 0, an undefined array element and null)
 * the kept one has the same text. It is frozen and shared.
 * Bounded: MAX_BY_TEXT inputs of at most MAX_KEY_TEXT characters (longer ones are redacted every time).
 */
const redactedByText = new Map<string, Redacted>();
const MAX_BY_TEXT = 16;
const MAX_KEY_TEXT = 16 * 1024;

function redactedOf(value: object): Redacted {
  let r = redactedOnce.get(value);
  if (r !== undefined) return r;
  let key: string | undefined;
  try {
    key = JSON.stringify(value);
  } catch {
    key = undefined; // not JSON data (a cycle, a bigint): redacted without the memo
  }
  r = key !== undefined ? redactedByText.get(key) : undefined;
  if (r !== undefined) {
    redactedByText.delete(key!);
    redactedByText.set(key!, r);
  } else {
    r = { value: deepFreeze(redact(value) as Record<string, unknown>) };
    if (key !== undefined && key.length <= MAX_KEY_TEXT) {
      redactedByText.set(key, r);
      if (redactedByText.size > MAX_BY_TEXT) redactedByText.delete(redactedByText.keys().next().value!);
    }
  }
  redactedOnce.set(value, r);
  return r;
}

/**
 * redact(value) of an object that no longer changes once its process started (its launch's policy summary, its
 * metadata), made once and shared, frozen, by every reader: the audit trail and the monitor each made their own copy
 * at every start (issue 32); and shared by the objects of the same content (see redactedByText).
 */
export function redactFixed(value: object): Record<string, unknown> {
  return redactedOf(value).value;
}

/** JSON.stringify(redactFixed(value)), made once: the monitor's feed and the audit trail store the same text. */
export function redactedJson(value: object): string {
  const r = redactedOf(value);
  r.text ??= JSON.stringify(r.value);
  return r.text;
}

export const ProcessStateWire = z.enum(['starting', 'running', 'exited', 'closed']);

/**
 * Which Corral server a row belongs to, on a fleet host (a host that joined other servers): the host's id for that
 * server. Absent or `''`: the host itself. A host sets it on every row it relays; what the server sent there is
 * overwritten, so a joined server cannot pass its rows off as another's.
 */
const ServerTag = z.string().optional();

/** One process as the panel sees it. No env values: `envKeys` names the variables the child got. */
export const MonitorProcess = z.object({
  server: ServerTag,
  /** On a fleet host: the process's server dropped, or came back without it; this is its last known state. */
  stale: z.boolean().optional(),
  sessionId: z.string(),
  processId: z.string(),
  clientName: z.string(),
  argv: z.array(z.string()),
  cwd: z.string(),
  tty: z.boolean(),
  pipeStdin: z.boolean(),
  pid: z.number(),
  state: ProcessStateWire,
  exitCode: z.number().nullable(),
  sandboxDenied: z.boolean(),
  /** The cgroup limit the process ran into (present once it has exited, only when one was hit). */
  limitHit: LimitHit.optional(),
  /** What the process used (present once it has exited, when its cgroup or its reap could say). @corral */
  usage: ProcessUsage.optional(),
  sandboxType: SandboxTypeWire,
  badge: SandboxBadge,
  /**
   * The flags of the client's own sandbox launcher, in order, when the client wrapped the command in it (badge
   * `client-wrapped`): what the panel shows of the client's sandbox (src/sandbox/codexWrapped.ts reads them).
   * @corral
   */
  launcherFlags: z.array(z.object({ name: z.string(), value: z.string().nullable() })).nullable(),
  /** The Landlock backend's guarantees, as in process/start's result (absent under bubblewrap). */
  sandboxGuarantees: SandboxGuarantees.optional(),
  /** The effective policy summary of the sandbox/proxy layers (writable roots, network mode, …), redacted. */
  policy: z.record(z.string(), z.unknown()).nullable(),
  metadata: z.record(z.string(), z.unknown()).nullable(),
  envKeys: z.array(z.string()),
  startedAt: z.number(),
  exitedAt: z.number().nullable(),
  closedAt: z.number().nullable(),
  bytesOut: z.number(),
  /** seq of the last event of the process. */
  lastSeq: z.number(),
  /** False once the session expired: the output is no longer retained. */
  retained: z.boolean(),
});
export type MonitorProcess = z.infer<typeof MonitorProcess>;

export const MonitorSession = z.object({
  server: ServerTag,
  sessionId: z.string(),
  clientName: z.string(),
  attached: z.boolean(),
  detachedAt: z.number().nullable(),
  /** When a detached session's processes will be killed (ms since epoch), if known. */
  expiresAt: z.number().nullable(),
  processCount: z.number(),
  /** The session of the subscribing connection itself. */
  self: z.boolean(),
});
export type MonitorSession = z.infer<typeof MonitorSession>;

/** A blocked proxy request, tagged with its process (network-proxy.md §4.8). */
export const MonitorBlocked = z.object({
  server: ServerTag,
  id: z.number(),
  processId: z.string(),
  sessionId: z.string().nullable(),
  host: z.string(),
  port: z.number().nullable(),
  reason: z.string(),
  method: z.string().nullable(),
  protocol: z.string(),
  mode: z.string().nullable(),
  decision: z.string().nullable(),
  source: z.string().nullable(),
  client: z.string().nullable(),
  timestamp: z.number(),
  blockedTotal: z.number(),
});
export type MonitorBlocked = z.infer<typeof MonitorBlocked>;

/** A policy decision of a proxy, allowed or not (network-proxy.md §4.9), with its audit metadata. */
export const MonitorAudit = z.object({
  server: ServerTag,
  id: z.number(),
  processId: z.string(),
  sessionId: z.string().nullable(),
  host: z.string(),
  port: z.number(),
  decision: z.enum(['allow', 'deny', 'ask']),
  reason: z.string(),
  source: z.string(),
  protocol: z.string(),
  method: z.string(),
  scope: z.string(),
  override: z.boolean(),
  timestamp: z.string(),
  /** conversation.id, app.version, model, … as sent in auditMetadata (secret-looking fields redacted). */
  metadata: z.record(z.string(), z.unknown()),
  /** A request inside a tunnel the proxy intercepted (protocol `https`): its path, without the query. */
  path: z.string().optional(),
  /** Present (true) when the proxy terminated TLS and saw this request. */
  intercepted: z.literal(true).optional(),
  /** The credential injected into this request (its name: a brokered variable or `mitm_hooks[i]`; never the value). */
  credential: z.string().optional(),
  /**
   * `transparent`: the command made a plain TCP connect and the connect supervisor asked the proxy for it
   * (`--linux-sandbox-transparent-tcp`); absent: the program spoke to the proxy itself.
   */
  transport: z.literal('transparent').optional(),
});
export type MonitorAudit = z.infer<typeof MonitorAudit>;

export const HostCount = z.object({ host: z.string(), allowed: z.number(), blocked: z.number() });
export type HostCount = z.infer<typeof HostCount>;

/** What this subscriber missed because it read too slowly, or because the server's rings evicted it. */
export const DroppedCounts = z.object({
  /** Output chunks not sent to this subscriber (read them back with monitor/read while retained). */
  output: z.number(),
  /** Network events not sent to this subscriber. */
  network: z.number(),
  /** Blocked/audit events evicted from the server's rings (older than the snapshot window). */
  evicted: z.number(),
  /** Finished processes of expired sessions forgotten by the server. */
  forgottenProcesses: z.number(),
});
export type DroppedCounts = z.infer<typeof DroppedCounts>;

export const MonitorLimits = z.object({
  blockedRing: z.number(),
  auditRing: z.number(),
  finishedProcesses: z.number(),
  subscriberHighWaterBytes: z.number(),
  /** Events are batched into one `monitor/batch` per this many ms (at most). */
  batchMs: z.number().optional(),
});

/**
 * A Corral server as a fleet host sees it: the host itself (`id` `''`, state `local`), or a server it joined (by
 * URL and that server's panel credential) and the state of the link to it.
 */
export const MonitorServer = z.object({
  id: z.string(),
  name: z.string(),
  /** Where the host reaches it, without any credential; null for the host itself. */
  url: z.string().nullable(),
  state: z.enum(['local', 'connecting', 'connected', 'disconnected']),
  /** Epoch ms of the last state change. */
  since: z.number(),
  /** Why the link is down (or the last protocol problem), in one line. */
  lastError: z.string().nullable(),
  /** Epoch ms of the next reconnection attempt while disconnected. */
  retryAt: z.number().nullable(),
  /** Its `/readyz`: true, false, or null when unknown. */
  ready: z.boolean().nullable(),
  /** Rows the host holds for it. */
  processes: z.number(),
  /** Messages from it that the host refused (malformed, too large, not allowed). */
  rejected: z.number(),
  /**
   * The last time the host dropped the link because of what the server sent (a message or row past a bound: nested
   * too deep, too many values, metadata too large), and why. Kept across reconnections; absent or null: never.
   */
  dropped: z.object({ reason: z.string(), at: z.number() }).nullable().optional(),
  /** What the host keeps of the server's rows (estimated bytes: their JSON size plus a cost per value). */
  keptBytes: z.number().optional(),
  /** The most the host keeps of one server's rows (same measure): its budget. */
  budgetBytes: z.number().optional(),
  /** The host forgot (or refused) rows of the server to stay within `budgetBytes`. */
  overBudget: z.boolean().optional(),
});
export type MonitorServer = z.infer<typeof MonitorServer>;

export const MonitorSnapshot = z.object({
  processes: z.array(MonitorProcess),
  sessions: z.array(MonitorSession),
  blocked: z.array(MonitorBlocked),
  audit: z.array(MonitorAudit),
  hosts: z.array(HostCount),
  dropped: DroppedCounts,
  limits: MonitorLimits,
  /** Whether proxy events are wired into this server (false: the network list stays empty). */
  networkWired: z.boolean(),
  /** Whether policy/preview can show bwrap argv / Seatbelt profiles (the sandbox engine is wired). */
  previewWired: z.boolean(),
  serverTime: z.number(),
  /**
   * Processes of this snapshot still to come, in pages (`monitor/batch` with `snapshotRemaining`): a snapshot of
   * 100 000 processes is never one message. Absent: `processes` is the whole list.
   */
  pendingProcesses: z.number().optional(),
  /** The servers a fleet host watches, itself first. Absent: only this server. */
  servers: z.array(MonitorServer).optional(),
});
export type MonitorSnapshot = z.infer<typeof MonitorSnapshot>;

// ---- methods ---------------------------------------------------------------------------------------------------

/**
 * `output`: `all` (default) streams every process's output as `monitor/output`; `followed` streams only the
 * processes named with `monitor/follow` (the panel follows the one it shows, so an open panel costs the output hot
 * path nothing). Process byte counts are refreshed about once a second either way.
 */
export const SubscribeParams = z.object({ output: z.enum(['all', 'followed']).default('all') }).nullish();
/** `server`: on a fleet host, the server whose process it is (the host forwards the call there); absent: the host. */
const ServerRef = z.string().nullish();
export const ProcessRef = z.object({ server: ServerRef, sessionId: z.string(), processId: z.string() });
export const SessionRef = z.object({ server: ServerRef, sessionId: z.string() });
export type ProcessRef = z.infer<typeof ProcessRef>;
export const KillSessionResult = z.object({
  /** Processes that were running and got SIGKILL. */
  killed: z.number(),
});
export const FollowParams = ProcessRef.extend({ follow: z.boolean() });
export type FollowParams = z.infer<typeof FollowParams>;
/**
 * Following starts the live output at once, after the retained tail it returns (newest chunks up to `tailBytes`,
 * default 256 KiB): chunks live after it have higher seqs, so nothing is shown twice or missed.
 */
export const FollowResult = z.object({
  following: z.boolean(),
  chunks: z.array(OutputChunk).optional(),
  /** Retained output older than the tail (read it with monitor/read `beforeSeq`). */
  earlier: z.boolean().optional(),
  retained: z.boolean().optional(),
});
export type FollowResult = z.infer<typeof FollowResult>;

export const MonitorReadParams = ProcessRef.extend({
  afterSeq: z.number().int().nonnegative().nullish(),
  /** Instead of after `afterSeq`: the newest retained chunks before this seq (paging back through the output). */
  beforeSeq: z.number().int().positive().nullish(),
  maxBytes: z.number().int().positive().nullish(),
});
export type MonitorReadParams = z.infer<typeof MonitorReadParams>;
export const MonitorReadResult = z.object({
  chunks: z.array(OutputChunk),
  nextSeq: z.number(),
  retained: z.boolean(),
  /** With `beforeSeq`: retained output older than these chunks exists. */
  earlier: z.boolean().optional(),
});
export type MonitorReadResult = z.infer<typeof MonitorReadResult>;

export const MonitorWriteParams = ProcessRef.extend({ chunk: z.string() });
export type MonitorWriteParams = z.infer<typeof MonitorWriteParams>;

/** One validation problem, by field path (`sandbox.fileSystemPolicy.entries.0.access`). */
export const FieldError = z.object({ path: z.string(), message: z.string() });
export type FieldError = z.infer<typeof FieldError>;

export const PolicyPreviewParams = z.object({
  /** A SandboxLaunchConfig (seed) or FileSystemSandboxContext (0.169). */
  sandbox: z.unknown(),
  argv: z.array(z.string()).nullish(),
  cwd: z.string().nullish(),
  /** Optional managedNetwork, previewed together (proxy env, network mode). */
  managedNetwork: z.unknown().optional(),
});
export type PolicyPreviewParams = z.infer<typeof PolicyPreviewParams>;

export const PolicyPreviewResult = z.object({
  valid: z.boolean(),
  errors: z.array(FieldError),
  /** Which shape was recognised: `seed` SandboxLaunchConfig or `context` FileSystemSandboxContext. */
  shape: z.enum(['seed', 'context', 'none']).nullable(),
  sandboxType: SandboxTypeWire.nullable(),
  /** Human summary of the effective policy: writable roots, read-only carve-outs, network mode, … */
  summary: z.record(z.string(), z.unknown()).nullable(),
  /** The full command that would run (bwrap argv on Linux). */
  argv: z.array(z.string()).nullable(),
  /** The Seatbelt profile (macOS). */
  seatbeltProfile: z.string().nullable(),
  /** Why there is no argv/profile, when there is none. */
  note: z.string().nullable(),
});
export type PolicyPreviewResult = z.infer<typeof PolicyPreviewResult>;

export const CheckUrlParams = z.object({
  /** A managedNetwork object `{config, constraints?, auditMetadata?}` or a bare `config` (`{network:{…}}`). */
  config: z.unknown(),
  /** `https://host/path`, `http://host:port/…`, or `host:port`. */
  target: z.string(),
  method: z.string().nullish(),
});
export type CheckUrlParams = z.infer<typeof CheckUrlParams>;

export const CheckUrlResult = z.object({
  valid: z.boolean(),
  errors: z.array(FieldError),
  host: z.string().nullable(),
  port: z.number().nullable(),
  decision: z.enum(['allow', 'deny', 'ask']).nullable(),
  reason: z.string().nullable(),
  source: z.string().nullable(),
  /** The text the blocked client would see. */
  message: z.string().nullable(),
  mode: z.enum(['full', 'limited']).nullable(),
  /** What the proxy would warn about for this config (e.g. `mitm` in full mode with nothing to intercept, a listed unix socket with a symlink on its path). */
  warnings: z.array(z.string()),
});
export type CheckUrlResult = z.infer<typeof CheckUrlResult>;

// ---- notifications (server → privileged subscriber) -------------------------------------------------------------

/**
 * `monitor/batch`: everything that changed since the last batch, at most one per `limits.batchMs` (the server
 * coalesces: a process that started and closed within one batch is sent once, in its latest state);
 * `monitor/resync`: the subscriber fell so far behind that the server dropped what it had queued for it: a fresh
 * snapshot (as `monitor/subscribe` answers; replace sessions and network lists, upsert processes, pages follow);
 * `monitor/output`: live output of followed processes (or all, with `output: 'all'`), coalesced per batch.
 */
export const MONITOR_NOTIFICATIONS = ['monitor/batch', 'monitor/resync', 'monitor/output'] as const;

export const SessionChangeKind = z.enum(['created', 'attached', 'detached', 'expired']);
export type SessionChangeKind = z.infer<typeof SessionChangeKind>;
export const MonitorSessionChange = z.object({ kind: SessionChangeKind, session: MonitorSession });
export type MonitorSessionChange = z.infer<typeof MonitorSessionChange>;

export const MonitorBatch = z.object({
  processes: z.array(MonitorProcess).default([]),
  sessions: z.array(MonitorSessionChange).default([]),
  blocked: z.array(MonitorBlocked).default([]),
  audit: z.array(MonitorAudit).default([]),
  servers: z.array(MonitorServer).default([]),
  dropped: DroppedCounts.optional(),
  /** Set while a snapshot is paged in: processes of it still to come (0: it is complete). */
  snapshotRemaining: z.number().optional(),
});
export type MonitorBatch = z.infer<typeof MonitorBatch>;

export const MonitorOutputNotification = z.object({
  server: ServerTag,
  sessionId: z.string(),
  processId: z.string(),
  /** The seq of the last chunk joined into this one; `firstSeq` the first (absent: one chunk). */
  seq: z.number(),
  firstSeq: z.number().optional(),
  stream: OutputStream,
  chunk: z.string(),
  /** Bytes of this process's output before this chunk that were not sent live (read them with monitor/read). */
  skippedBytes: z.number().optional(),
});
export type MonitorOutputNotification = z.infer<typeof MonitorOutputNotification>;

/** Turns zod issues into per-field errors, prefixed with the name of the pasted object. */
export function fieldErrors(error: z.ZodError, prefix: string): FieldError[] {
  return error.issues.map((i) => {
    const path = i.path.filter((p) => typeof p !== 'symbol').map(String);
    return { path: [prefix, ...path].filter((s) => s !== '').join('.'), message: i.message };
  });
}
