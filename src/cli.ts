import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { ExecServer } from './server/execServer.js';
import { startHost } from './server/host.js';
import { createLogger, type LogLevel } from './server/log.js';
import { serveStdio } from './server/stdio.js';
import { listenWebSocket } from './server/wsListener.js';

const USAGE = `usage: corral exec-server --listen ws://127.0.0.1:0 [options]
       corral exec-server --listen stdio
       corral serve [--port N] [--resume-grace-ms N] [--log-level L] [--log-file F]
                               exec server with a generated token + the panel at /panel/

options:
  --listen URL            ws://HOST:PORT (PORT 0 picks a free port) or stdio  [ws://127.0.0.1:0]
  --ws-token-file FILE    require this token (Authorization: Bearer, or ?token=) on WebSocket upgrades
  --allow-origin ORIGIN   allow a browser Origin to connect (repeatable); any other Origin gets 403
  --resume-grace-ms N     keep a disconnected session's processes N ms for resume, then kill them  [10000]
  --max-processes N       live processes allowed per session  [1024]
  --log-level LEVEL       error | warn | info | debug  [info]
  --log-file FILE         also log to FILE
  --allow-non-loopback    permit --listen on a non-loopback address`;

function fail(message: string): never {
  process.stderr.write(`corral: ${message}\n${USAGE}\n`);
  process.exit(2);
}

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

async function execServerCommand(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      listen: { type: 'string', default: 'ws://127.0.0.1:0' },
      'ws-token-file': { type: 'string' },
      'allow-origin': { type: 'string', multiple: true, default: [] },
      'resume-grace-ms': { type: 'string', default: '10000' },
      'max-processes': { type: 'string', default: '1024' },
      'log-level': { type: 'string', default: 'info' },
      'log-file': { type: 'string' },
      'allow-non-loopback': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
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
  const maxProcesses = Number(values['max-processes']);
  if (!Number.isInteger(maxProcesses) || maxProcesses < 1) fail('--max-processes must be a whole number ≥ 1');
  let token: string | undefined;
  if (values['ws-token-file']) {
    try {
      token = readFileSync(values['ws-token-file'], 'utf8').trim();
    } catch (e) {
      fail(`--ws-token-file: ${(e as Error).message}`);
    }
    if (!token) fail('--ws-token-file: the file is empty');
  }

  const server = new ExecServer({ resumeGraceMs, maxProcessesPerSession: maxProcesses, log });
  let stopping = false;
  let closeListener: (() => Promise<void>) | null = null;
  const stop = (why: string) => {
    if (stopping) return;
    stopping = true;
    log.info(`stopping (${why}): killing every child process`);
    void server
      .shutdown()
      .then(() => closeListener?.())
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
    token,
    allowedOrigins: values['allow-origin'],
  });
  closeListener = () => listener.close();
  process.stdout.write(`${listener.url}\n`);
  log.info(`exec-server listening on ${listener.url}${token ? ' (token required)' : ''}`);
}

/** `corral serve`: the headless host — exec server with a generated token, and the panel at /panel/ on that port. */
async function serveCommand(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '0' },
      'resume-grace-ms': { type: 'string', default: '10000' },
      'log-level': { type: 'string', default: 'info' },
      'log-file': { type: 'string' },
    },
    strict: true,
  });
  const level = values['log-level'] as LogLevel;
  if (!['error', 'warn', 'info', 'debug'].includes(level)) fail(`--log-level: unknown level ${level}`);
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
    log,
    servePanel: true,
    logFile: values['log-file'] ?? null,
  });
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

async function main(): Promise<void> {
  const [command, ...rest] = process.argv.slice(2);
  switch (command) {
    case 'exec-server':
      await execServerCommand(rest);
      break;
    case 'serve':
      await serveCommand(rest);
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
