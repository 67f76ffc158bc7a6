import log from 'electron-log/node';
import { escapeTerminalLines, escapeTerminalText, terminalJson } from '../protocol/terminalText.js';

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
 * A log argument as the line will hold it (terminalText.ts): a string with no terminal control or line break raw, an
 * error's stack one escaped line per frame, anything else as escaped JSON.
 */
function safe(d: unknown): string {
  if (typeof d === 'string') return escapeTerminalText(d);
  if (d instanceof Error) return escapeTerminalLines(d.stack ?? `${d.name}: ${d.message}`);
  try {
    return terminalJson(d);
  } catch {
    return escapeTerminalText(String(d));
  }
}

/**
 * The headless logger: electron-log's Node entry, console output sent to stderr (stdout carries the listen URL and,
 * with `--listen stdio`, the protocol), and optionally a log file. What a peer chose (a client name, a registry's
 * message, a path) reaches a line escaped: one event, one line, no terminal control.
 */
export function createLogger(opts: { level?: LogLevel; file?: string | null } = {}): Logger {
  const level = opts.level ?? 'info';
  log.transports.console.level = level;
  log.transports.console.writeFn = ({ message }) => {
    const text = message.data.map((d) => (typeof d === 'string' ? d : safe(d))).join(' ');
    process.stderr.write(`[corral] ${message.level}: ${text}\n`);
  };
  if (opts.file) {
    log.transports.file.level = level;
    log.transports.file.resolvePathFn = () => opts.file!;
  } else {
    log.transports.file.level = false;
  }
  return {
    info: (...a) => log.info(...a.map(safe)),
    warn: (...a) => log.warn(...a.map(safe)),
    error: (...a) => log.error(...a.map(safe)),
    debug: (...a) => log.debug(...a.map(safe)),
  };
}
