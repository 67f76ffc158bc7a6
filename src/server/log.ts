import log from 'electron-log/node';

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
 * with `--listen stdio`, the protocol), and optionally a log file.
 */
export function createLogger(opts: { level?: LogLevel; file?: string | null } = {}): Logger {
  const level = opts.level ?? 'info';
  log.transports.console.level = level;
  log.transports.console.writeFn = ({ message }) => {
    const text = message.data.map((d) => (typeof d === 'string' ? d : JSON.stringify(d))).join(' ');
    process.stderr.write(`[corral] ${message.level}: ${text}\n`);
  };
  if (opts.file) {
    log.transports.file.level = level;
    log.transports.file.resolvePathFn = () => opts.file!;
  } else {
    log.transports.file.level = false;
  }
  return {
    info: (...a) => log.info(...a),
    warn: (...a) => log.warn(...a),
    error: (...a) => log.error(...a),
    debug: (...a) => log.debug(...a),
  };
}
