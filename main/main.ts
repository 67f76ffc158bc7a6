// Electron main process entry: hands the real Electron modules to runDesktop (main/desktop.ts), logs with
// electron-log to the standard log file, and prints the exec-server URL (with its token) on stdout.
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { app, BrowserWindow, ipcMain, session, shell } from 'electron';
import log from 'electron-log/main';
import { defaultAuditPath } from '../src/audit/index.js';
import { escapeLogArgument } from '../src/protocol/terminalText.js';
import type { Logger } from '../src/server/core/log.js';
import { runDesktop } from './desktop.js';

const here = dirname(fileURLToPath(import.meta.url));

function electronLogger(): Logger {
  // The standard log file: ~/.config/Corral/logs/main.log (Linux), ~/Library/Logs/Corral/main.log (macOS).
  log.initialize();
  log.transports.file.level = 'info';
  return {
    // Peer text (client names, paths, a registry's message) reaches the log escaped (src/protocol/terminalText.ts).
    info: (...a) => log.info(...a.map(escapeLogArgument)),
    warn: (...a) => log.warn(...a.map(escapeLogArgument)),
    error: (...a) => log.error(...a.map(escapeLogArgument)),
    debug: (...a) => log.debug(...a.map(escapeLogArgument)),
  };
}

async function main(): Promise<void> {
  const desktop = await runDesktop(
    { app, BrowserWindow, ipcMain, session, shell },
    {
      log: electronLogger(),
      logFile: log.transports.file.getFile().path,
      preloadPath: join(here, '..', 'preload', 'preload.cjs'),
      indexHtml: join(here, '..', 'renderer', 'index.html'),
      // The audit trail, as `corral serve` keeps it (src/audit).
      host: { audit: { dbPath: defaultAuditPath() } },
    },
  );
  if (!desktop) return;
  process.stdout.write(`${desktop.host.execUrl}\n`);
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => app.quit());
}

if (process.versions.electron) {
  main().catch((e) => {
    process.stderr.write(`corral: ${e instanceof Error ? e.stack : String(e)}\n`);
    process.exit(1);
  });
}
