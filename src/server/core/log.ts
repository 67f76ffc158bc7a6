import log from 'electron-log/node';
import { escapeLogArgument } from '../../protocol/terminalText.js';

/** Where the server's log lines go: the headless logger below, Electron's in the app, a test's own. */
export interface Logger {
  info(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
  debug(...args: unknown[]): void;
}

export const silentLogger: Logger = { info() {}, warn() {}, error() {}, debug() {} };

export type LogLevel = 'error' | 'warn' | 'info' | 'debug';

/**
 * The headless logger: electron-log's Node entry, console output sent to stderr (stdout carries the listen URL and,
 * with `--listen stdio`, the protocol), and optionally a log file. What a peer chose (a client name, a registry's
 * message, a path) reaches a line escaped: one event, one line, no terminal control.
 */
export function createLogger(opts: { level?: LogLevel; file?: string | null } = {}): Logger {
  const level = opts.level ?? 'info';
  log.transports.console.level = level;
  log.transports.console.writeFn = ({ message }) => {
    const text = message.data.map((d) => (typeof d === 'string' ? d : escapeLogArgument(d))).join(' ');
    process.stderr.write(`[corral] ${message.level}: ${text}\n`);
  };
  if (opts.file) {
    log.transports.file.level = level;
    log.transports.file.resolvePathFn = () => opts.file!;
  } else {
    log.transports.file.level = false;
  }
  return {
    info: (...a) => log.info(...a.map(escapeLogArgument)),
    warn: (...a) => log.warn(...a.map(escapeLogArgument)),
    error: (...a) => log.error(...a.map(escapeLogArgument)),
    debug: (...a) => log.debug(...a.map(escapeLogArgument)),
  };
}
