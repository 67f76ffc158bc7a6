/** The command line of `corral exec-server` and `corral serve`: usage, and the options parsed into server settings (the
 * credentials are cliAuth.ts). */
import { isIP } from 'node:net';
import { type AuditOptions, defaultAuditPath } from './audit/index.js';
import { CODEX_171_USAGE } from './codexFlags.js';
import { WeakerGuarantee } from './protocol/exec.js';
import { escapeTerminalLines } from './protocol/terminalText.js';
import { detectLinuxSandbox, type PrepareOptions } from './sandbox/index.js';
import type { createLogger } from './server/core/log.js';
import type { ExecServerOptions } from './server/execServer.js';

export const USAGE = `usage: corral exec-server --listen ws://127.0.0.1:0 [options]
       corral exec-server --listen stdio
       corral serve [--port N] [--resume-grace-ms N] [--join URL]... [limits] [audit options] [--log-level L]
                               [--log-file F]
                               exec server with an agent token + the panel (its own token) at /panel/
       corral audit export [--db FILE] --format jsonl [--since ISO] [--session ID]
                               every stored event as one JSON object per line, oldest first
       corral audit export [--db FILE] --format asciicast --session ID --process ID [--width N] [--height N]
                               one process's output with its times as asciicast v2 (asciinema plays it)
       corral audit replay SESSION PROCESS [--db FILE] [--speed N] [--max-idle S] [--raw]
                               one process's output at its recorded pace; terminal controls escaped unless --raw
       corral audit verify [--db FILE | --export FILE] [--public-key KEY|@FILE] [--json]
                               whether the audit trail's hash chain holds (exit 0) or where it breaks (exit 1)
       corral doctor [--json] [sandbox options]
                               what this machine can sandbox, and what to change
       corral selftest [--json] [sandbox options]
                               known escapes tried against this machine's sandbox; exit 1 when one gets out
       corral approvals list|allow|deny|rules|revoke|wait|repo|accept-repo …
                               answer the panel's approval prompts from a terminal (corral approvals --help)

       corral exec-server --remote URL --environment-id ID --remote-transport direct|noise [--aws-sigv4 …] [options]
       corral exec-server forward --remote URL --environment-id ID --connect URL [remote options]
                               register an existing exec-server (Corral or Codex, ws://) as a remote environment
                               and relay each harness link to it

options:
  --listen URL            ws://HOST:PORT (PORT 0 picks a free port) or stdio  [ws://127.0.0.1:0]
  --ws-auth MODE          capability-token: a token is required on WebSocket upgrades (generated per start and
                          printed in the URL, ws://HOST:PORT/?token=…); signed-bearer-token: an HS256 JWT signed
                          with --ws-shared-secret-file; or none: anyone who can reach the port (every local user,
                          any sandbox with network) may connect  [capability-token]
  --ws-token-file FILE    the token to require instead of a generated one (the file: mode 0600, owned by you)
  --ws-token-sha256 HEX   require the token whose SHA-256 is HEX (the token itself is never given to Corral)
  --ws-shared-secret-file FILE  signed-bearer-token: the HS256 key (≥ 32 bytes; mode 0600, owned by you)
  --ws-issuer ISS         signed-bearer-token: the iss a token must carry
  --ws-audience AUD       signed-bearer-token: a value its aud must hold
  --ws-max-clock-skew-seconds N  signed-bearer-token: leeway for exp and nbf  [30]
  --concurrent-requests N requests of one connection handled at once (a parked process/read never holds one)  [1]
  --exit-on-stdin-close   exit (killing every child) when standard input closes
  --panel-token-file FILE exec-server: also accept this token (same rules as --ws-token-file) as a panel
                          credential: the monitor, approvals and policy methods, for a fleet host watching this server
                          (never process/* or fs/*: it cannot start a command)
  --join URL              serve: watch this Corral server too (repeatable): its panel credential from
                          #token-file=PATH (same rules as --ws-token-file; never ?token=: argv is public), upgrade
                          headers as #header=Name:Value (e.g. the agent-sandbox router's X-Sandbox-ID), #name=NAME
  --allow-origin ORIGIN   allow a browser Origin to connect (repeatable); any other Origin gets 403
  --allow-host NAME       also answer requests whose Host is NAME (repeatable), e.g. a Kubernetes Service name
  --resume-grace-ms N     keep a disconnected session's processes N ms for resume, then kill them  [10000]
  --log-level LEVEL       error | warn | info | debug  [info]
  --log-file FILE         also log to FILE
  --allow-non-loopback    permit --listen on a non-loopback address

${CODEX_171_USAGE}

remote executor (README "Remote executor"; instead of --listen):
  --remote URL            register with the environment registry at URL (https://, or http:// on loopback) and
                          serve the harness over the WebSocket link it hands back (wss://, or ws:// on loopback)
  --environment-id ID     the environment to register as (letters, digits, - and _)
  --remote-transport T    noise (hybrid Noise IK through the relay, docs/remote-noise.md) or direct (a WebSocket
                          link per harness; --aws-sigv4 needs it), as codex 0.171  [noise]
  --name NAME             a human-readable name for the logs
  --aws-sigv4             sign the registration and each handshake with AWS SigV4 (as codex 0.169 requires for
                          direct); credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the shared file
  --aws-profile P, --aws-region R, --aws-service S  SigV4 profile, region, service  [execute-api]
  --registration-bearer-stdin  instead: read one line from stdin and send it as Authorization: Bearer
  --relay-host HOST[:PORT]  also dial the executor link here (repeatable; no PORT: 443): the registration
                          credential goes only to the registry's own host and port and to these, whatever URL the
                          registry answers, and over ws:// only when the registry itself is http:// on loopback
  --executor-credential-stdin  instead: rotating credentials, one JSON frame a line on stdin
                          ({"version":1,"environment_id":ID,"token":T,"expires_at":UNIX_S}, ≤ 16 KiB); each token is
                          the Bearer from then on; exits when stdin closes (README "Remote executor")
  --chatgpt-token-stdin [--chatgpt-account-id ID]  instead: a ChatGPT access token (JWT) on one stdin line, as
                          Codex: an https:// registry; the account policy loaded from -c chatgpt_base_url=URL
                          [https://chatgpt.com/backend-api/] first; then the token is the Bearer and the account
                          the ChatGPT-Account-Id of every registry request
                          (CODEX_API_KEY: the Bearer when no credential flag is given; loopback or HTTPS
                          openai.com/openai.org registries only, as Codex)
  --use-agent-identity-auth  checked as Codex checks it (CODEX_ACCESS_TOKEN set), then refused as 0.171 refuses it
                          ("Agent Identity authentication is unavailable"): it needs OpenAI's identity service

limits (exec-server and serve):
  --max-processes N            live processes allowed per session  [1024]
  --max-total-processes N      live processes allowed on the whole server  [4096]
  --max-sessions N             agent sessions (attached or detached) allowed at once  [256]
  --max-retained-mib N         MiB of finished processes' output kept for process/read, per session  [64]
  --max-total-retained-mib N   the same, for all sessions together  [1024]
  --max-approval-timeout-ms N  longest a network approval prompt may wait, whatever the config asks  [120000]
  --pids-max N                 processes + threads each command may have (its cgroup's pids.max)  [4096]
  --memory-max SIZE            memory each command may use: bytes, or with K, M, G (1024-based)  [half the RAM]
                               (a process/start may ask for less, with "limits", never for more)

sandbox options (exec-server, serve and doctor):
  --sandbox-fallback MODE       landlock: where bubblewrap cannot create namespaces (containers, CI), Linux
                                sandboxes use Landlock + seccomp instead of failing; none: they fail  [none]
  --sandbox-accept-weaker LIST  guarantees the Landlock backend may hold weaker than bubblewrap, comma-separated:
                                protected-names, metadata, proxy-port, signals, host-ipc (see the README)  [none]
  --require-sandbox             a process/start must carry a sandbox, as in the seed: absent or null is -32602
                                "missing field \`sandbox\`" (an explicit sandbox "none" still runs)  [off]

audit options (exec-server and serve):
  --audit-db FILE         the audit database  [$XDG_STATE_HOME/corral/audit.db, ~/.local/state/corral/audit.db]
  --no-audit              store nothing
  --audit-output-bytes N  keep the first and the last N bytes of each process's output; 0 keeps none  [65536]
  --audit-retention-days N  delete events older than N days  [30]
  --audit-max-bytes N     above N bytes, delete the oldest events  [1073741824]
  --otlp-endpoint URL     also send every event to an OpenTelemetry collector (OTLP/HTTP logs, e.g. http://127.0.0.1:4318)`;

export function fail(message: string): never {
  process.stderr.write(`corral: ${escapeTerminalLines(message)}\n${USAGE}\n`);
  process.exit(2);
}

/** The limit options shared by `exec-server` and `serve`. */
export const LIMIT_OPTIONS = {
  'max-processes': { type: 'string', default: '1024' },
  'max-total-processes': { type: 'string', default: '4096' },
  'max-sessions': { type: 'string', default: '256' },
  'max-retained-mib': { type: 'string', default: '64' },
  'max-total-retained-mib': { type: 'string', default: '1024' },
  'max-approval-timeout-ms': { type: 'string', default: '120000' },
  'pids-max': { type: 'string' },
  'memory-max': { type: 'string' },
} as const;

export type LimitValues = {
  [K in Exclude<keyof typeof LIMIT_OPTIONS, 'pids-max' | 'memory-max'>]: string;
} & {
  'pids-max'?: string;
  'memory-max'?: string;
};

/** A value the user gave, as an error message repeats it: at most 200 characters. */
export function shown(v: string): string {
  return v.length > 200 ? `${v.slice(0, 200)}…` : v;
}

/**
 * `--allow-origin` values, each as a browser sends its Origin (the listener compares them as text): http(s) as the
 * URL's origin (lowercase, no default port, no path or trailing slash), any other scheme as `scheme://authority`.
 * A value that could never match fails, naming what a browser would send.
 */
export function allowedOrigins(values: readonly string[]): string[] {
  for (const v of values) {
    // A scheme, `://`, a host name of at most 253 characters (DNS) and a port.
    if (v.length > 300) fail(`--allow-origin: longer than any origin a browser sends: ${shown(v)}`);
    let u: URL | null = null;
    try {
      u = new URL(v);
    } catch {
      u = null;
    }
    if (/^https?:/i.test(v)) {
      if (u?.origin !== v)
        fail(
          u
            ? `--allow-origin: a browser sends ${shown(u.origin)}, never ${shown(v)}`
            : `--allow-origin: not an origin (scheme://host[:port], as a browser sends it): ${shown(v)}`,
        );
    } else if (!u || !/^[a-z][a-z0-9+.-]*:\/\/[^/?#\s]+$/.test(v))
      fail(`--allow-origin: not an origin (scheme://host[:port], as a browser sends it): ${shown(v)}`);
  }
  return [...values];
}

/** `--allow-host` values: host names or IP addresses as a Host header names them (an IPv6 one without brackets). */
export function allowedHosts(values: readonly string[]): string[] {
  return values.map((v) => {
    const bare = v.replace(/^\[(.*)\]$/, '$1');
    if (isIP(bare) === 0 && (bare.length > 253 || !/^[a-z0-9_](?:[a-z0-9_.-]*[a-z0-9_])?$/i.test(bare)))
      fail(`--allow-host: not a host name or IP address (no scheme, port or path): ${shown(v)}`);
    return bare;
  });
}

export function positiveInt(flag: string, text: string): number {
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 1) fail(`--${flag} must be a whole number ≥ 1`);
  return n;
}

export function parseLimits(v: LimitValues): Partial<ExecServerOptions> {
  const MiB = 1024 * 1024;
  return {
    maxProcessesPerSession: positiveInt('max-processes', v['max-processes']),
    maxProcessesTotal: positiveInt('max-total-processes', v['max-total-processes']),
    maxSessions: positiveInt('max-sessions', v['max-sessions']),
    retention: {
      sessionBytes: positiveInt('max-retained-mib', v['max-retained-mib']) * MiB,
      serverBytes: positiveInt('max-total-retained-mib', v['max-total-retained-mib']) * MiB,
    },
    approvals: { maxTimeoutMs: positiveInt('max-approval-timeout-ms', v['max-approval-timeout-ms']) },
    limits: limitFlags(v),
  };
}

export const SANDBOX_OPTIONS = {
  'sandbox-fallback': { type: 'string', default: 'none' },
  'sandbox-accept-weaker': { type: 'string', multiple: true, default: [] as string[] },
  'require-sandbox': { type: 'boolean', default: false },
} as const;

/** The sandbox options of exec-server, serve and doctor. */
export function sandboxOptions(values: {
  'sandbox-fallback'?: string | undefined;
  'sandbox-accept-weaker'?: string[] | undefined;
  'require-sandbox'?: boolean | undefined;
}): Pick<PrepareOptions, 'fallback' | 'acceptWeaker' | 'requireSandbox'> {
  const fallback = values['sandbox-fallback'] ?? 'none';
  if (fallback !== 'landlock' && fallback !== 'none')
    fail(`--sandbox-fallback: unknown mode ${fallback} (landlock or none)`);
  const names = (values['sandbox-accept-weaker'] ?? []).flatMap((v) => v.split(',')).map((v) => v.trim());
  const accepted: WeakerGuarantee[] = [];
  for (const n of names.filter(Boolean)) {
    const r = WeakerGuarantee.safeParse(n);
    if (!r.success)
      fail(`--sandbox-accept-weaker: unknown guarantee ${n} (one of ${WeakerGuarantee.options.join(', ')})`);
    if (!accepted.includes(r.data)) accepted.push(r.data);
  }
  return { fallback, acceptWeaker: accepted, requireSandbox: values['require-sandbox'] === true };
}

/** Logs once at startup which Linux backend sandboxed starts will get, and why bwrap cannot run when it cannot. */
export async function logLinuxSandbox(
  sandbox: PrepareOptions,
  log: ReturnType<typeof createLogger>,
): Promise<void> {
  const d = await detectLinuxSandbox(sandbox).catch(() => null);
  if (!d || d.backend === 'bwrap') return;
  if (d.backend === 'landlock')
    log.warn(
      `bubblewrap cannot sandbox here (${d.why}): Linux sandboxes use the Landlock backend (ABI ${d.landlock.abi})`,
    );
  else
    log.warn(
      `bubblewrap cannot sandbox here (${d.why}): sandboxed starts will fail; run \`corral doctor\`${
        d.landlock.abi > 0 ? ', or pass --sandbox-fallback landlock' : ''
      }`,
    );
}

export const AUDIT_OPTIONS = {
  'audit-db': { type: 'string' },
  'no-audit': { type: 'boolean', default: false },
  'audit-output-bytes': { type: 'string', default: '65536' },
  'audit-retention-days': { type: 'string', default: '30' },
  'audit-max-bytes': { type: 'string', default: String(1024 * 1024 * 1024) },
  'otlp-endpoint': { type: 'string' },
} as const;

/** The audit options of exec-server and serve; null: off (--no-audit without a collector). */
export function auditOptions(values: {
  'audit-db'?: string | undefined;
  'no-audit'?: boolean | undefined;
  'audit-output-bytes'?: string | undefined;
  'audit-retention-days'?: string | undefined;
  'audit-max-bytes'?: string | undefined;
  'otlp-endpoint'?: string | undefined;
}): AuditOptions | null {
  const whole = (name: keyof typeof AUDIT_OPTIONS, min: number) => {
    const n = Number(values[name]);
    if (!Number.isInteger(n) || n < min) fail(`--${name} must be a whole number ≥ ${min}`);
    return n;
  };
  const outputBytes = whole('audit-output-bytes', 0);
  if (outputBytes > 1024 * 1024) fail('--audit-output-bytes must be at most 1048576');
  const endpoint = values['otlp-endpoint'] ?? null;
  if (endpoint !== null) {
    try {
      const u = new URL(endpoint);
      if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('not http');
    } catch {
      fail(`--otlp-endpoint: expected an http(s) URL, got ${endpoint}`);
    }
  }
  if (values['no-audit'] && values['audit-db']) fail('--no-audit and --audit-db exclude each other');
  if (values['no-audit'] && endpoint === null) return null;
  return {
    dbPath: values['no-audit'] ? null : (values['audit-db'] ?? defaultAuditPath()),
    outputBytes,
    retentionDays: whole('audit-retention-days', 1),
    maxBytes: whole('audit-max-bytes', 1024 * 1024),
    otlpEndpoint: endpoint,
    requiredBy: values['audit-db'] ? '--audit-db' : null,
  };
}

/** Reports a startup failure (no usage text: the arguments were fine) and exits 1. */
export function fatal(message: string): never {
  process.stderr.write(`corral: ${escapeTerminalLines(message)}\n`);
  process.exit(1);
}

/** --pids-max and --memory-max: the server's per-command cgroup limits (only those given). */
export function limitFlags(values: { 'pids-max'?: string; 'memory-max'?: string }): {
  pidsMax?: number;
  memoryMaxBytes?: number;
} {
  const out: { pidsMax?: number; memoryMaxBytes?: number } = {};
  if (values['pids-max'] !== undefined) {
    const n = Number(values['pids-max']);
    if (!Number.isInteger(n) || n < 1 || n > 4_194_304) fail('--pids-max must be a whole number 1..4194304');
    out.pidsMax = n;
  }
  if (values['memory-max'] !== undefined) {
    const m = /^(\d+)([KMGT]?)i?B?$/i.exec(values['memory-max'].trim());
    const unit = { '': 1, K: 2 ** 10, M: 2 ** 20, G: 2 ** 30, T: 2 ** 40 }[(m?.[2] ?? '').toUpperCase()];
    const bytes = m && unit ? Number(m[1]) * unit : Number.NaN;
    if (!Number.isSafeInteger(bytes) || bytes < 2 ** 20)
      fail(`--memory-max: expected a size of at least 1M (e.g. 512M, 8G), got ${values['memory-max']}`);
    out.memoryMaxBytes = bytes;
  }
  return out;
}
