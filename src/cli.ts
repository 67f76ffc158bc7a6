import { parseArgs } from 'node:util';
import { composeServer } from './app/compose.js';
import { startHost } from './app/host.js';
import { localStatePath } from './app/localState.js';
import { auditMain, isAuditUsageError } from './audit/cli.js';
import { approvalsMain } from './cli/approvals.js';
import {
  isLoopback,
  listenerAuth,
  readChatgptTokenLine,
  readSecretFile,
  registrationAuth,
  requireSigv4ForAwsFlags,
  withPanelCredential,
} from './cliAuth.js';
import {
  AUDIT_OPTIONS,
  allowedHosts,
  allowedOrigins,
  auditOptions,
  fail,
  fatal,
  LIMIT_OPTIONS,
  logLinuxSandbox,
  parseLimits,
  positiveInt,
  SANDBOX_OPTIONS,
  sandboxOptions,
  shown,
  USAGE,
} from './cliOptions.js';
import { realClock } from './clock.js';
import {
  CODEX_171_CREDENTIAL_OPTIONS,
  CODEX_171_OPTIONS,
  clapFail,
  codexServerFlags,
  configFail,
} from './codexFlags.js';
import { doctorCommand } from './doctor/report.js';
import { joinKey, joinTarget } from './fleet/fleet.js';
import { cgroupHost } from './process/cgroup.js';
import { JoinParams, parseJoinText } from './protocol/fleet.js';
import { EnvironmentId } from './protocol/remote.js';
import { escapeTerminalLines } from './protocol/terminalText.js';
import type { RegistrationAuth } from './remote/auth.js';
import {
  chatgptAuth,
  DEFAULT_CHATGPT_BASE_URL,
  loadChatgptAccountPolicy,
  PolicyError,
  policyUrl,
} from './remote/chatgptPolicy.js';
import {
  AGENT_IDENTITY_UNAVAILABLE,
  chatgptAccount,
  chatgptRegistryProblem,
  credentialConflict,
  type OpenAiCredentialFlags,
  UNSUPPORTED_OPENAI_CREDENTIAL,
  wantsOpenAiCredential,
} from './remote/credentials.js';
import { startDirectExecutor } from './remote/direct.js';
import {
  CREDENTIAL_TEXT,
  ExecutorCredentialStream,
  executorCredentialAuth,
} from './remote/executorCredential.js';
import { parseConnectUrl, startForwarder, startNoiseForwarder } from './remote/forward.js';
import { generateIdentity, type NoiseIdentity, publicKeyJson } from './remote/noiseChannel.js';
import { startNoiseExecutor } from './remote/noiseExecutor.js';
import { parseRelayHost, RegistryClient, type RelayHost } from './remote/registry.js';
import { selftestCommand } from './selftest/selftest.js';
import { serveStdio } from './server/connection/stdio.js';
import { listenWebSocket } from './server/connection/wsListener.js';
import { createLogger, type Logger, type LogLevel } from './server/core/log.js';

/** The environment id and the transport of a registration (exec-server --remote, forward), in codex 0.171's words. */
function checkRegistration(
  values: {
    'environment-id'?: string | undefined;
    'remote-transport'?: string | undefined;
    'aws-sigv4'?: boolean | undefined;
  },
  credentials: OpenAiCredentialFlags,
) {
  // Before anything starts, as Codex's parser refuses it: its argument errors (exit 2) before the checks below.
  requireSigv4ForAwsFlags(values);
  const conflict = credentialConflict(credentials);
  if (conflict && 'clap' in conflict) clapFail(conflict.clap);
  const id = EnvironmentId.safeParse(values['environment-id']);
  if (!id.success) fail(`--environment-id: ${id.error.issues[0]!.message}`);
  // Codex 0.171's default: a command line that names no transport registers where codex's would.
  const transport = values['remote-transport'] ?? 'noise';
  if (transport !== 'direct' && transport !== 'noise')
    clapFail(
      `invalid value '${transport}' for '--remote-transport <REMOTE_TRANSPORT>'\n  [possible values: noise, direct]`,
    );
  // Codex 0.171's text and exit status (noise is the default, so this is said without the flag too).
  if (transport === 'noise' && values['aws-sigv4'])
    configFail('--aws-sigv4 requires --remote-transport direct');
  return transport;
}

/**
 * The registry client of `exec-server --remote` and `forward`; on Noise with the process's one static hybrid identity
 * (Codex's NoiseChannelIdentity), whose public half the registration sends. Throws on a bad registry URL.
 */
function openRegistry(
  remote: string,
  environmentId: string,
  auth: RegistrationAuth,
  relayHosts: RelayHost[],
  transport: 'direct' | 'noise',
): { registry: RegistryClient; identity: NoiseIdentity | null } {
  const identity = transport === 'noise' ? generateIdentity() : null;
  const noiseKey = identity
    ? publicKeyJson({ dh: identity.dh.publicKey, kem: identity.kem.publicKey })
    : null;
  const registry = new RegistryClient(remote, environmentId, auth, {
    relayHosts,
    ...(noiseKey ? { noiseKey } : {}),
  });
  return { registry, identity };
}

/** The registry's options: `exec-server --remote` and `forward` register the same way (codex 0.171's spelling). */
const REGISTRY_OPTIONS = {
  remote: { type: 'string' },
  'environment-id': { type: 'string' },
  'remote-transport': { type: 'string' },
  name: { type: 'string' },
  'aws-sigv4': { type: 'boolean', default: false },
  'aws-profile': { type: 'string' },
  'aws-region': { type: 'string' },
  'aws-service': { type: 'string' },
  'registration-bearer-stdin': { type: 'boolean', default: false },
  'relay-host': { type: 'string', multiple: true, default: [] as string[] },
} as const;

async function execServerCommand(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      listen: { type: 'string' },
      'ws-auth': { type: 'string', default: 'capability-token' },
      'ws-token-file': { type: 'string' },
      'ws-token-sha256': { type: 'string' },
      'ws-shared-secret-file': { type: 'string' },
      'ws-issuer': { type: 'string' },
      'ws-audience': { type: 'string' },
      'ws-max-clock-skew-seconds': { type: 'string' },
      'concurrent-requests': { type: 'string', default: '1' },
      'exit-on-stdin-close': { type: 'boolean', default: false },
      ...REGISTRY_OPTIONS,
      'panel-token-file': { type: 'string' },
      'allow-origin': { type: 'string', multiple: true, default: [] },
      'allow-host': { type: 'string', multiple: true, default: [] },
      'resume-grace-ms': { type: 'string', default: '10000' },
      ...LIMIT_OPTIONS,
      'log-level': { type: 'string', default: 'info' },
      'log-file': { type: 'string' },
      'allow-non-loopback': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
      ...AUDIT_OPTIONS,
      ...SANDBOX_OPTIONS,
      ...CODEX_171_OPTIONS,
      ...CODEX_171_CREDENTIAL_OPTIONS,
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const codex = codexServerFlags(values, process.env);
  const level = values['log-level'] as LogLevel;
  if (!['error', 'warn', 'info', 'debug'].includes(level)) fail(`--log-level: unknown level ${level}`);
  const log = createLogger({ level, file: values['log-file'] ?? null });
  for (const o of codex.config.ignored)
    log.warn(
      `-c ${o}: not honoured by Corral (it honours features.<name>); ignored (--strict-config refuses it)`,
    );
  const resumeGraceMs = Number(values['resume-grace-ms']);
  if (!Number.isInteger(resumeGraceMs) || resumeGraceMs < 0)
    fail('--resume-grace-ms must be a whole number ≥ 0');
  const limits = parseLimits(values);
  const concurrentRequests = positiveInt('concurrent-requests', values['concurrent-requests']);
  const remote = values.remote;
  let transport: 'direct' | 'noise' = 'direct';
  let chatgpt: RegistrationAuth | undefined;
  if (remote === undefined) {
    for (const f of [
      'environment-id',
      'remote-transport',
      'name',
      'aws-profile',
      'aws-region',
      'aws-service',
    ])
      if (values[f as keyof typeof values] !== undefined) fail(`--${f} requires --remote`);
    if (values['aws-sigv4'] || values['registration-bearer-stdin'])
      fail('--aws-sigv4 and --registration-bearer-stdin require --remote');
    if (values['relay-host'].length > 0) fail('--relay-host requires --remote');
    if (wantsOpenAiCredential(values) || values['chatgpt-account-id'] !== undefined)
      fail(
        '--chatgpt-token-stdin, --chatgpt-account-id, --use-agent-identity-auth and --executor-credential-stdin require --remote',
      );
  } else {
    if (values.listen !== undefined) fail('--listen and --remote exclude each other');
    const explicitAuth = argv.some((a) => /^--ws-(auth|token|shared|issuer|audience|max-clock)/.test(a));
    if (explicitAuth) fail('WebSocket listener auth cannot be used with --remote');
    if (!values['environment-id']) fail('--environment-id is required when --remote is set');
    transport = checkRegistration(values, values);
    // Before anything is started (audit database, log, listener): a refused credential leaves nothing behind.
    chatgpt = await openAiCredential(values, remote, codex.config.chatgptBaseUrl);
  }
  // The first executor credential frame, read and checked before anything is started.
  const credential =
    remote !== undefined && values['executor-credential-stdin']
      ? await firstExecutorCredential(values['environment-id']!)
      : null;
  const listening = remote === undefined ? withPanelCredential(listenerAuth(values), values) : null;
  // Checked before anything is started (audit database, cgroups, log): a bad value leaves nothing behind.
  const target = remote === undefined ? listenTarget(values.listen, values['allow-non-loopback']) : null;
  const origins = allowedOrigins(values['allow-origin']);
  const hosts = allowedHosts(values['allow-host']);
  let relayHosts: RelayHost[] = [];
  try {
    relayHosts = values['relay-host'].map(parseRelayHost);
  } catch (e) {
    fail((e as Error).message);
  }
  if (remote !== undefined && values['panel-token-file'])
    fail('--panel-token-file requires a listener, not --remote');
  const sandbox = {
    ...sandboxOptions(values),
    pidNamespace: codex.pidNamespace,
    ...(codex.transparentTcp ? { transparentTcp: true } : {}),
  };
  await logLinuxSandbox(sandbox, log);
  const { server, audit } = await composeServer({
    server: {
      resumeGraceMs,
      ...limits,
      concurrentRequests,
      launcher: { sandbox, upstream: codex.upstream },
    },
    log,
    audit: auditOptions(values),
    logFile: values['log-file'] ?? null,
    hiddenPaths: listening?.hiddenPaths ?? [],
    // With a panel credential, a fleet host (or a panel) can watch this server with the monitor.
    panel: listening?.panel ? {} : false,
  }).catch((e: Error) => fatal(e.message));
  joinCommandsCpuGroup(log);
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
  const watchStdin = () => {
    if (!codex.exitOnStdinClose) return;
    process.stdin.on('end', () => stop('stdin closed'));
    process.stdin.on('error', () => stop('stdin closed'));
    process.stdin.resume();
  };

  if (remote !== undefined) {
    const auth = await registrationAuth(
      values,
      remote,
      credential ? executorCredentialAuth(credential) : chatgpt,
    );
    let registry: RegistryClient;
    let identity: NoiseIdentity | null;
    try {
      ({ registry, identity } = openRegistry(remote, values['environment-id']!, auth, relayHosts, transport));
    } catch (e) {
      process.stderr.write(`corral: ${escapeTerminalLines((e as Error).message)}\n`);
      process.exit(2);
    }
    if (!credential) watchStdin();
    const executor = identity
      ? startNoiseExecutor(server, { registry, auth, log, identity })
      : startDirectExecutor(server, { registry, auth, log });
    closeListener = async () => executor.stop();
    if (credential) {
      // Codex's rule: the executor lives as long as the credential pipe; closed before it registered, an error.
      credential.ended.then(
        () => {
          if (executor.registration) stop('executor credential pipe closed');
          else credentialFailed(new Error(CREDENTIAL_TEXT.pipeClosed));
        },
        (e: Error) => credentialFailed(e),
      );
    }
    const credentialFailed = (e: Error) => {
      if (stopping) return;
      stopping = true;
      process.stderr.write(`Error: ${escapeTerminalLines(e.message)}\n`);
      void server
        .shutdown()
        .then(() => executor.stop())
        .then(() => audit.stop())
        .finally(() => process.exit(1));
    };
    log.info(
      `exec-server registering with ${registry.base.origin} as environment ${registry.environmentId}${values.name ? ` (${values.name})` : ''}, ${transport} transport, ${chatgpt ? 'ChatGPT token from stdin' : auth.kind === 'bearer' && !values['registration-bearer-stdin'] ? 'CODEX_API_KEY' : AUTH_DESCRIPTION[auth.kind]}`,
    );
    executor.done.then(
      () => {},
      (e) => {
        process.stderr.write(`corral: remote executor: ${escapeTerminalLines((e as Error).message)}\n`);
        void server
          .shutdown()
          .then(() => audit.stop())
          .finally(() => process.exit(1));
      },
    );
    return;
  }

  if (target === null || target === 'stdio') {
    serveStdio(server, () => stop('stdin closed'));
    log.info('exec-server listening on stdio');
    return;
  }
  const { host, port } = target;
  const { auth, printedToken, describe } = listening!;
  const listener = await listenWebSocket(server, {
    host,
    port,
    auth,
    allowedOrigins: origins,
    allowedHosts: hosts,
  });
  listener.readiness.register('audit', audit.ready);
  closeListener = () => listener.close();
  watchStdin();
  // The first line is what a client connects to; a token the caller chose (file, digest) is not echoed.
  const printed =
    printedToken !== null ? `${listener.url}/?token=${encodeURIComponent(printedToken)}` : listener.url;
  process.stdout.write(`${printed}\n`);
  if (!auth.required) {
    process.stderr.write(
      `corral: WARNING: --ws-auth none: anyone who can reach ${listener.url} (every local user, and any sandboxed ` +
        'process with network access) can run commands as this user, unsandboxed\n',
    );
  }
  log.info(`exec-server listening on ${listener.url} (${describe})`);
}

/**
 * Codex 0.171's OpenAI-account credentials (remote/credentials.ts), checked as Codex checks them and before anything
 * is started. `--chatgpt-token-stdin`: the token read and checked, the ChatGPT account policy loaded from
 * `chatgpt_base_url` (remote/chatgptPolicy.ts), then the registry credential (the token and its account) returned.
 * `--use-agent-identity-auth` is refused (it needs OpenAI's identity service). Returns undefined when none was asked.
 */
async function openAiCredential(
  values: OpenAiCredentialFlags,
  remote: string,
  chatgptBaseUrl: string | undefined,
): Promise<RegistrationAuth | undefined> {
  const conflict = credentialConflict(values);
  if (conflict) 'clap' in conflict ? clapFail(conflict.clap) : configFail(conflict.error);
  if (!wantsOpenAiCredential(values)) return undefined;
  if (values['chatgpt-token-stdin']) {
    const problem = chatgptRegistryProblem(remote);
    if (problem) configFail(problem);
    const read = await readChatgptTokenLine();
    if ('error' in read) configFail(read.error);
    const checked = chatgptAccount(read.line, values['chatgpt-account-id']);
    if ('error' in checked) configFail(checked.error);
    const endpoint = policyUrl(chatgptBaseUrl ?? DEFAULT_CHATGPT_BASE_URL);
    if ('error' in endpoint) configFail(endpoint.error);
    try {
      await loadChatgptAccountPolicy(endpoint.url, read.line, checked.account);
    } catch (e) {
      if (e instanceof PolicyError) process.stderr.write(`corral: account policy: ${e.detail}\n`);
      configFail((e as Error).message);
    }
    return chatgptAuth(read.line, checked.account);
  }
  if (values['use-agent-identity-auth']) {
    if (!process.env.CODEX_ACCESS_TOKEN)
      configFail('CODEX_ACCESS_TOKEN is required when --use-agent-identity-auth is set');
    process.stderr.write(`corral: ${UNSUPPORTED_OPENAI_CREDENTIAL['use-agent-identity-auth']}\n`);
    configFail(AGENT_IDENTITY_UNAVAILABLE);
  }
  return undefined;
}

const AUTH_DESCRIPTION: Record<RegistrationAuth['kind'], string> = {
  none: 'no registry credential',
  sigv4: 'AWS SigV4',
  bearer: 'bearer from stdin',
  'executor-credential': 'rotating executor credentials from stdin',
};

/**
 * `--executor-credential-stdin`: starts reading the frames (remote/executorCredential.ts) and waits for the first;
 * a bad one, none within 30 s, or the pipe closing first is Codex's error (exit 1), before anything is started.
 */
async function firstExecutorCredential(environmentId: string): Promise<ExecutorCredentialStream> {
  const stream = new ExecutorCredentialStream(process.stdin, { environmentId, clock: realClock });
  try {
    await stream.first;
  } catch (e) {
    configFail((e as Error).message);
  }
  return stream;
}

/**
 * `corral exec-server forward --remote URL --environment-id ID --connect URL` (codex 0.171): registers an existing
 * exec server as a remote environment and relays each link to it (remote/forward.ts). The sandbox and proxy options
 * are accepted (Codex's spelling) and belong to the destination server, which runs the commands.
 */
async function forwardCommand(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      connect: { type: 'string' },
      ...REGISTRY_OPTIONS,
      'exit-on-stdin-close': { type: 'boolean', default: false },
      'log-level': { type: 'string', default: 'info' },
      help: { type: 'boolean', short: 'h', default: false },
      ...CODEX_171_OPTIONS,
      'use-agent-identity-auth': CODEX_171_CREDENTIAL_OPTIONS['use-agent-identity-auth'],
      'executor-credential-stdin': CODEX_171_CREDENTIAL_OPTIONS['executor-credential-stdin'],
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const missing = (['remote', 'environment-id', 'connect'] as const).filter((f) => values[f] === undefined);
  if (missing.length > 0)
    clapFail(
      `the following required arguments were not provided:\n${missing.map((f) => `  --${f} <${f === 'environment-id' ? 'ID' : 'URL'}>`).join('\n')}`,
    );
  const codex = codexServerFlags(values, process.env);
  const level = values['log-level'] as LogLevel;
  if (!['error', 'warn', 'info', 'debug'].includes(level)) fail(`--log-level: unknown level ${level}`);
  const log = createLogger({ level, file: null });
  const remote = values.remote!;
  const transport = checkRegistration(values, { ...values, 'chatgpt-token-stdin': false });
  let connect: URL;
  let relayHosts: RelayHost[];
  try {
    connect = parseConnectUrl(values.connect!);
    relayHosts = values['relay-host'].map(parseRelayHost);
  } catch (e) {
    fail((e as Error).message);
  }
  await openAiCredential({ ...values, 'chatgpt-token-stdin': false }, remote, undefined);
  const credential = values['executor-credential-stdin']
    ? await firstExecutorCredential(values['environment-id']!)
    : null;
  const auth = await registrationAuth(
    values,
    remote,
    credential ? executorCredentialAuth(credential) : undefined,
  );
  let registry: RegistryClient;
  let identity: NoiseIdentity | null;
  try {
    ({ registry, identity } = openRegistry(remote, values['environment-id']!, auth, relayHosts, transport));
  } catch (e) {
    fail((e as Error).message);
  }
  const forwarder = identity
    ? startNoiseForwarder({ registry, auth, log, connect, identity })
    : startForwarder({ registry, auth, log, connect });
  let stopping = false;
  const stop = (why: string) => {
    if (stopping) return;
    stopping = true;
    log.info(`forward: stopping (${why})`);
    forwarder.stop();
    void forwarder.done.finally(() => process.exit(0));
  };
  for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(s, () => stop(s));
  credential?.ended.then(
    () =>
      forwarder.registration
        ? stop('executor credential pipe closed')
        : configFail(CREDENTIAL_TEXT.pipeClosed),
    (e: Error) => configFail(e.message),
  );
  if (codex.exitOnStdinClose && !credential) {
    process.stdin.on('end', () => stop('stdin closed'));
    process.stdin.on('error', () => stop('stdin closed'));
    process.stdin.resume();
  }
  log.info(
    `forward: registering with ${registry.base.origin} as environment ${registry.environmentId}, relaying to ${connect.origin} (${transport} transport)`,
  );
  forwarder.done.catch((e: Error) => {
    process.stderr.write(`corral: forward: ${escapeTerminalLines(e.message)}\n`);
    process.exit(1);
  });
}

/** The `--join` values, each checked, and no server twice (the fleet would refuse the second at start). */
function parseJoins(texts: readonly string[]): JoinParams[] {
  const seen = new Set<string>();
  return texts.map((text) => {
    const j = parseJoin(text);
    const t = joinTarget(j);
    const key = joinKey(t);
    if (seen.has(key)) fail(`--join: ${t.shownUrl} is given twice`);
    seen.add(key);
    return j;
  });
}

/** One `--join URL`: the credential from #token-file= (never the URL: argv is public), headers and name. */
function parseJoin(text: string): JoinParams {
  let t: ReturnType<typeof parseJoinText>;
  try {
    t = parseJoinText(text);
  } catch (e) {
    fail(`--join: ${(e as Error).message}`);
  }
  // argv is readable by every local user (ps, /proc/PID/cmdline): a credential there would be theirs.
  if (new URLSearchParams(t.url.split('?')[1] ?? '').has('token'))
    fail(
      '--join: a ?token= on the command line can be read by every local user (ps, /proc/PID/cmdline): put the ' +
        "server's panel token in a file (mode 0600) and give #token-file=PATH",
    );
  const token = t.tokenFile ? readSecretFile(t.tokenFile, '--join token-file', 16).token : null;
  const r = JoinParams.safeParse({ url: t.url, token, headers: t.headers, name: t.name });
  if (!r.success) {
    const i = r.error.issues[0]!;
    fail(`--join: ${i.path.join('.') || 'url'}: ${i.message}`);
  }
  if (!token) fail("--join: the server's panel token is missing (#token-file=PATH)");
  // The URL as the fleet will take it, checked before anything is started.
  try {
    joinTarget(r.data);
  } catch (e) {
    fail(`--join: ${(e as Error).message.replace(/^fleet\/join: /, '')}`);
  }
  return r.data;
}

/** `corral serve`: the headless host — exec server with a generated token, and the panel at /panel/ on that port. */
async function serveCommand(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '0' },
      'resume-grace-ms': { type: 'string', default: '10000' },
      join: { type: 'string', multiple: true, default: [] },
      ...LIMIT_OPTIONS,
      'log-level': { type: 'string', default: 'info' },
      'log-file': { type: 'string' },
      ...AUDIT_OPTIONS,
      ...SANDBOX_OPTIONS,
    },
    strict: true,
  });
  const level = values['log-level'] as LogLevel;
  if (!['error', 'warn', 'info', 'debug'].includes(level)) fail(`--log-level: unknown level ${level}`);
  const audit = auditOptions(values);
  const join = parseJoins(values.join);
  const sandbox = sandboxOptions(values);
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) fail('--port must be 0..65535');
  const resumeGraceMs = Number(values['resume-grace-ms']);
  if (!Number.isInteger(resumeGraceMs) || resumeGraceMs < 0)
    fail('--resume-grace-ms must be a whole number ≥ 0');
  if (!isLoopback(values.host)) fail(`--host: ${values.host} is not a loopback address`);
  const log = createLogger({ level, file: values['log-file'] ?? null });
  await logLinuxSandbox(sandbox, log);
  const host = await startHost({
    host: values.host,
    ...(port !== 0 ? { port } : {}),
    resumeGraceMs,
    server: { ...parseLimits(values), launcher: { sandbox } },
    log,
    servePanel: true,
    logFile: values['log-file'] ?? null,
    audit,
    join,
    localState: localStatePath(),
  }).catch((e: Error) => fatal(e.message));
  joinCommandsCpuGroup(log);
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

/** `corral audit export|verify …` (src/audit/cli.ts). */
async function auditCommand(argv: string[]): Promise<void> {
  process.exitCode = await auditMain(argv).catch((e: Error) =>
    isAuditUsageError(e) ? fail(e.message) : fatal(e.message),
  );
}

/**
 * `--listen` (default ws://127.0.0.1:0): `stdio`, or the host and port of a ws:// URL on a loopback address (any with
 * --allow-non-loopback). A bad value fails (exit 2) naming what is wrong.
 */
function listenTarget(
  listen = 'ws://127.0.0.1:0',
  allowNonLoopback = false,
): 'stdio' | { host: string; port: number } {
  if (listen === 'stdio' || listen === 'stdio://') return 'stdio';
  const port = /^ws:\/\/(?:\[[^\]]*\]|[^/:?#]*):(\d+)(?:[/?#]|$)/i.exec(listen)?.[1];
  if (port !== undefined && Number(port) > 65535)
    fail(`--listen: port ${shown(port)} is out of range (0-65535)`);
  let url: URL;
  try {
    url = new URL(listen);
  } catch {
    fail(`--listen: not a URL: ${shown(listen)}`);
  }
  if (url.protocol !== 'ws:') fail(`--listen: expected ws://HOST:PORT or stdio, got ${shown(listen)}`);
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (!isLoopback(host) && !allowNonLoopback)
    fail(
      `--listen: ${shown(host)} is not a loopback address; pass --allow-non-loopback to expose the server`,
    );
  return { host, port: url.port === '' ? 0 : Number(url.port) };
}

/** `--help` or `-h` among a command's own options (not after a `--`). */
function asksForHelp(args: readonly string[]): boolean {
  const end = args.indexOf('--');
  return (end === -1 ? args : args.slice(0, end)).some((a) => a === '--help' || a === '-h');
}

async function main(): Promise<void> {
  const [command, ...rest] = process.argv.slice(2);
  // Every command answers --help with the usage (exec-server and approvals parse it themselves).
  if (
    (command === 'serve' || command === 'audit' || command === 'doctor' || command === 'selftest') &&
    asksForHelp(rest)
  ) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  switch (command) {
    case 'exec-server':
      if (rest[0] === 'forward') await forwardCommand(rest.slice(1));
      else await execServerCommand(rest);
      break;
    case 'serve':
      await serveCommand(rest);
      break;
    case 'audit':
      await auditCommand(rest);
      break;
    case 'approvals':
      await approvalsMain(rest);
      break;
    case 'selftest':
    case 'doctor': {
      // Both probe this host's sandbox with the server's sandbox options: `--json` and those.
      const { values } = parseArgs({
        args: rest,
        options: { json: { type: 'boolean', default: false }, ...SANDBOX_OPTIONS },
        strict: true,
      });
      const run = command === 'doctor' ? doctorCommand : selftestCommand;
      // Interrupted (Ctrl-C, a kill), a probe exits through process.exit, as a shell's 128 + the signal: its 'exit'
      // listeners remove its scratch workspace, and its sandboxed commands die with it (their parent-death signal).
      for (const [signal, n] of [
        ['SIGINT', 2],
        ['SIGTERM', 15],
        ['SIGHUP', 1],
      ] as const)
        process.once(signal, () => process.exit(128 + n));
      process.exitCode = await run({ json: values.json, sandbox: sandboxOptions(values) });
      break;
    }
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
  process.stderr.write(`corral: ${escapeTerminalLines(e instanceof Error ? e.message : String(e))}\n`);
  process.exit(1);
});

/**
 * The headless server (exec-server, serve) joins its commands' CPU group: it and its commands weigh as one program,
 * and a command starts without waiting out the scheduler's slices (src/process/cgroup.ts, "CPU"; issue 32). Not the
 * desktop app: its windows, spawned later, would weigh with the commands.
 */
function joinCommandsCpuGroup(log: Logger): void {
  const why = cgroupHost().joinCpuGroup();
  if (why) log.info(`the server is not in its commands' CPU group: ${why}`);
}
