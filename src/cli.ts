import { closeSync, constants, fstatSync, openSync, readFileSync, realpathSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { exportAudit } from './audit/cli.js';
import { type AuditOptions, defaultAuditPath, startAudit } from './audit/index.js';
import { generateToken, openAccess, tokenAuth } from './server/auth.js';
import { ExecServer, type ExecServerOptions } from './server/execServer.js';
import { startHost } from './server/host.js';
import { createLogger, type LogLevel } from './server/log.js';
import { serveStdio } from './server/stdio.js';
import { listenWebSocket } from './server/wsListener.js';

const USAGE = `usage: corral exec-server --listen ws://127.0.0.1:0 [options]
       corral exec-server --listen stdio
       corral serve [--port N] [--resume-grace-ms N] [limits] [audit options] [--log-level L] [--log-file F]
                               exec server with an agent token + the panel (its own token) at /panel/
       corral audit export [--db FILE] --format jsonl [--since ISO] [--session ID]
                               every stored event as one JSON object per line, oldest first

options:
  --listen URL            ws://HOST:PORT (PORT 0 picks a free port) or stdio  [ws://127.0.0.1:0]
  --ws-auth MODE          capability-token: a token is required on WebSocket upgrades (generated per start and
                          printed in the URL, ws://HOST:PORT/?token=…), or none: anyone who can reach the port
                          (every local user, any sandbox with network) may connect  [capability-token]
  --ws-token-file FILE    the token to require instead of a generated one (the file: mode 0600, owned by you)
  --allow-origin ORIGIN   allow a browser Origin to connect (repeatable); any other Origin gets 403
  --allow-host NAME       also answer requests whose Host is NAME (repeatable), e.g. a Kubernetes Service name
  --resume-grace-ms N     keep a disconnected session's processes N ms for resume, then kill them  [10000]
  --log-level LEVEL       error | warn | info | debug  [info]
  --log-file FILE         also log to FILE
  --allow-non-loopback    permit --listen on a non-loopback address

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

audit options (exec-server and serve):
  --audit-db FILE         the audit database  [$XDG_STATE_HOME/corral/audit.db, ~/.local/state/corral/audit.db]
  --no-audit              store nothing
  --audit-output-bytes N  keep the first and the last N bytes of each process's output; 0 keeps none  [65536]
  --audit-retention-days N  delete events older than N days  [30]
  --audit-max-bytes N     above N bytes, delete the oldest events  [1073741824]
  --otlp-endpoint URL     also send every event to an OpenTelemetry collector (OTLP/HTTP logs, e.g. http://127.0.0.1:4318)`;

function fail(message: string): never {
  process.stderr.write(`corral: ${message}\n${USAGE}\n`);
  process.exit(2);
}

/** The limit options shared by `exec-server` and `serve`. */
const LIMIT_OPTIONS = {
  'max-processes': { type: 'string', default: '1024' },
  'max-total-processes': { type: 'string', default: '4096' },
  'max-sessions': { type: 'string', default: '256' },
  'max-retained-mib': { type: 'string', default: '64' },
  'max-total-retained-mib': { type: 'string', default: '1024' },
  'max-approval-timeout-ms': { type: 'string', default: '120000' },
  'pids-max': { type: 'string' },
  'memory-max': { type: 'string' },
} as const;

type LimitValues = { [K in Exclude<keyof typeof LIMIT_OPTIONS, 'pids-max' | 'memory-max'>]: string } & {
  'pids-max'?: string;
  'memory-max'?: string;
};

function positiveInt(flag: string, text: string): number {
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 1) fail(`--${flag} must be a whole number ≥ 1`);
  return n;
}

function parseLimits(v: LimitValues): Partial<ExecServerOptions> {
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

/**
 * Reads `--ws-token-file`: a regular file of this user (or root) that neither group nor others can read, holding a
 * token of at least 16 characters. Returns the token and the file's real path (hidden from every sandbox).
 */
function readTokenFile(file: string): { token: string; path: string } {
  let fd: number;
  try {
    fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (e) {
    fail(`--ws-token-file: ${(e as Error).message}`);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) fail(`--ws-token-file: ${file} is not a regular file`);
    const me = process.geteuid?.() ?? st.uid;
    if (st.uid !== me && st.uid !== 0) fail(`--ws-token-file: ${file} is owned by uid ${st.uid}, not by you`);
    if ((st.mode & 0o077) !== 0) {
      fail(
        `--ws-token-file: ${file} can be read by others (mode ${(st.mode & 0o777).toString(8).padStart(4, '0')}): chmod 600 it`,
      );
    }
    const token = readFileSync(fd, 'utf8').trim();
    if (!token) fail('--ws-token-file: the file is empty');
    if (token.length < 16) fail('--ws-token-file: the token must be at least 16 characters');
    if (/\s/.test(token)) fail('--ws-token-file: the token must not contain white space');
    return { token, path: realpathSync(file) };
  } finally {
    closeSync(fd);
  }
}

const AUDIT_OPTIONS = {
  'audit-db': { type: 'string' },
  'no-audit': { type: 'boolean', default: false },
  'audit-output-bytes': { type: 'string', default: '65536' },
  'audit-retention-days': { type: 'string', default: '30' },
  'audit-max-bytes': { type: 'string', default: String(1024 * 1024 * 1024) },
  'otlp-endpoint': { type: 'string' },
} as const;

/** The audit options of exec-server and serve; null: off (--no-audit without a collector). */
function auditOptions(values: {
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
  };
}

/** Reports a startup failure (no usage text: the arguments were fine) and exits 1. */
function fatal(message: string): never {
  process.stderr.write(`corral: ${message}\n`);
  process.exit(1);
}

/** --pids-max and --memory-max: the server's per-command cgroup limits (only those given). */
function limitFlags(values: { 'pids-max'?: string; 'memory-max'?: string }): {
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

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

async function execServerCommand(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      listen: { type: 'string', default: 'ws://127.0.0.1:0' },
      'ws-auth': { type: 'string', default: 'capability-token' },
      'ws-token-file': { type: 'string' },
      'allow-origin': { type: 'string', multiple: true, default: [] },
      'allow-host': { type: 'string', multiple: true, default: [] },
      'resume-grace-ms': { type: 'string', default: '10000' },
      ...LIMIT_OPTIONS,
      'log-level': { type: 'string', default: 'info' },
      'log-file': { type: 'string' },
      'allow-non-loopback': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
      ...AUDIT_OPTIONS,
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const level = values['log-level'] as LogLevel;
  if (!['error', 'warn', 'info', 'debug'].includes(level)) fail(`--log-level: unknown level ${level}`);
  const log = createLogger({ level, file: values['log-file'] ?? null });
  const resumeGraceMs = Number(values['resume-grace-ms']);
  if (!Number.isInteger(resumeGraceMs) || resumeGraceMs < 0)
    fail('--resume-grace-ms must be a whole number ≥ 0');
  const limits = parseLimits(values);
  const mode = values['ws-auth'];
  if (mode !== 'capability-token' && mode !== 'none') {
    fail(`--ws-auth: unknown mode ${mode} (capability-token or none)`);
  }
  if (mode === 'none' && values['ws-token-file'])
    fail('--ws-auth none and --ws-token-file exclude each other');
  const tokenFile = values['ws-token-file'] ? readTokenFile(values['ws-token-file']) : null;
  // The token lives in this process's memory only: never in argv, the environment, a log line or a file we write.
  const token = mode === 'none' ? null : (tokenFile?.token ?? generateToken());
  const auth = token === null ? openAccess() : tokenAuth(token);
  // No sandbox may read the token file or our log (sandbox.md: masked like any unreadable path).
  const audit = await startAudit(auditOptions(values), log).catch((e: Error) => fatal(e.message));
  // …nor the audit database (its directory).
  const hiddenPaths = [tokenFile?.path, values['log-file'], ...audit.hiddenPaths].filter(
    (p): p is string => !!p,
  );

  const server = new ExecServer({
    resumeGraceMs,
    ...limits,
    log,
    launcher: { sandbox: { hiddenPaths } },
  });
  audit.attach(server);
  let stopping = false;
  let closeListener: (() => Promise<void>) | null = null;
  const stop = (why: string) => {
    if (stopping) return;
    stopping = true;
    log.info(`stopping (${why}): killing every child process`);
    void server
      .shutdown()
      .then(() => closeListener?.())
      .then(() => audit.stop())
      .catch((e: Error) => log.error(`stopping: ${e.message}`))
      .finally(() => process.exit(0));
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGHUP', () => stop('SIGHUP'));

  if (values.listen === 'stdio') {
    serveStdio(server, () => stop('stdin closed'));
    log.info('exec-server listening on stdio');
    return;
  }
  let url: URL;
  try {
    url = new URL(values.listen);
  } catch {
    fail(`--listen: not a URL: ${values.listen}`);
  }
  if (url.protocol !== 'ws:') fail(`--listen: expected ws://HOST:PORT or stdio, got ${values.listen}`);
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (!isLoopback(host) && !values['allow-non-loopback']) {
    fail(`--listen: ${host} is not a loopback address; pass --allow-non-loopback to expose the server`);
  }
  const listener = await listenWebSocket(server, {
    host,
    port: url.port === '' ? 0 : Number(url.port),
    auth,
    allowedOrigins: values['allow-origin'],
    allowedHosts: values['allow-host'],
  });
  closeListener = () => listener.close();
  // The first line is what a client connects to; a token from --ws-token-file is the caller's and is not echoed.
  const printed =
    token !== null && !tokenFile ? `${listener.url}/?token=${encodeURIComponent(token)}` : listener.url;
  process.stdout.write(`${printed}\n`);
  if (token === null) {
    process.stderr.write(
      `corral: WARNING: --ws-auth none: anyone who can reach ${listener.url} (every local user, and any sandboxed ` +
        'process with network access) can run commands as this user, unsandboxed\n',
    );
  }
  log.info(
    `exec-server listening on ${listener.url} (${
      token === null
        ? 'no authentication'
        : tokenFile
          ? `token from ${tokenFile.path} required`
          : 'token required: see the URL on stdout'
    })`,
  );
}

/** `corral serve`: the headless host — exec server with a generated token, and the panel at /panel/ on that port. */
async function serveCommand(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '0' },
      'resume-grace-ms': { type: 'string', default: '10000' },
      ...LIMIT_OPTIONS,
      'log-level': { type: 'string', default: 'info' },
      'log-file': { type: 'string' },
      ...AUDIT_OPTIONS,
    },
    strict: true,
  });
  const level = values['log-level'] as LogLevel;
  if (!['error', 'warn', 'info', 'debug'].includes(level)) fail(`--log-level: unknown level ${level}`);
  const audit = auditOptions(values);
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) fail('--port must be 0..65535');
  const resumeGraceMs = Number(values['resume-grace-ms']);
  if (!Number.isInteger(resumeGraceMs) || resumeGraceMs < 0)
    fail('--resume-grace-ms must be a whole number ≥ 0');
  if (!isLoopback(values.host)) fail(`--host: ${values.host} is not a loopback address`);
  const log = createLogger({ level, file: values['log-file'] ?? null });
  const host = await startHost({
    host: values.host,
    ...(port !== 0 ? { port } : {}),
    resumeGraceMs,
    server: parseLimits(values),
    log,
    servePanel: true,
    logFile: values['log-file'] ?? null,
    audit,
  }).catch((e: Error) => fatal(e.message));
  let stopping = false;
  const stop = (why: string) => {
    if (stopping) return;
    stopping = true;
    log.info(`stopping (${why}): killing every child process`);
    void host.shutdown().finally(() => process.exit(0));
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGHUP', () => stop('SIGHUP'));
  process.stdout.write(`exec-server: ${host.execUrl}\npanel: ${host.panelUrl}\n`);
  log.info(`panel at ${host.listener.url.replace(/^ws/, 'http')}/panel/ (token in the URL fragment)`);
}

/** `corral audit export …`. */
async function auditCommand(argv: string[]): Promise<void> {
  const [sub, ...rest] = argv;
  if (sub !== 'export') fail(`audit: unknown subcommand ${sub ?? '(none)'}; expected export`);
  const { values } = parseArgs({
    args: rest,
    options: {
      db: { type: 'string' },
      format: { type: 'string', default: 'jsonl' },
      since: { type: 'string' },
      session: { type: 'string' },
    },
    strict: true,
  });
  if (values.format !== 'jsonl') fail(`--format: only jsonl is supported, got ${values.format}`);
  let since: number | null = null;
  if (values.since !== undefined) {
    since = Date.parse(values.since);
    if (Number.isNaN(since)) fail(`--since: not an ISO 8601 time: ${values.since}`);
  }
  await exportAudit({
    dbPath: values.db ?? defaultAuditPath(),
    since,
    sessionId: values.session ?? null,
    out: process.stdout,
  }).catch((e: Error) => fatal(e.message));
}

async function main(): Promise<void> {
  const [command, ...rest] = process.argv.slice(2);
  switch (command) {
    case 'exec-server':
      await execServerCommand(rest);
      break;
    case 'serve':
      await serveCommand(rest);
      break;
    case 'audit':
      await auditCommand(rest);
      break;
    case undefined:
    case '--help':
    case '-h':
    case 'help':
      process.stdout.write(`${USAGE}\n`);
      break;
    default:
      fail(`unknown command ${command}`);
  }
}

main().catch((e) => {
  process.stderr.write(`corral: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
