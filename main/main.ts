// Electron main process: hosts the exec server (loopback, generated token) and opens the panel window. The renderer
// is one more privileged client connection of the same dispatcher, over IPC (see src/rpc/ipcTransport.ts).
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { app, BrowserWindow, ipcMain, session, shell } from 'electron';
import log from 'electron-log/main';
import type { Logger } from '../src/server/execServer.js';
import { type Host, startHost } from './host.js';

const here = dirname(fileURLToPath(import.meta.url));

function electronLogger(): Logger {
  // The standard log file: ~/.config/Corral/logs/main.log (Linux), ~/Library/Logs/Corral/main.log (macOS).
  log.initialize();
  log.transports.file.level = 'info';
  return {
    info: (...a) => log.info(...a),
    warn: (...a) => log.warn(...a),
    error: (...a) => log.error(...a),
    debug: (...a) => log.debug(...a),
  };
}

/** Hardens every webContents: no navigation, no new windows, no webviews, no permissions. */
function harden(): void {
  app.on('web-contents-created', (_e, contents) => {
    contents.on('will-navigate', (e) => e.preventDefault());
    contents.on('will-redirect', (e) => e.preventDefault());
    contents.on('will-attach-webview', (e) => e.preventDefault());
    contents.setWindowOpenHandler(({ url }) => {
      // Links the user clicks open in the real browser, never in the app.
      if (/^https:\/\//.test(url)) void shell.openExternal(url);
      return { action: 'deny' };
    });
  });
}

function createWindow(): BrowserWindow {
  const win = new BrowserWindow({
    width: 1280,
    height: 820,
    minWidth: 900,
    minHeight: 560,
    show: false,
    title: 'Corral',
    backgroundColor: '#0f1115',
    webPreferences: {
      preload: join(here, '..', 'preload', 'preload.cjs'),
      contextIsolation: true,
      sandbox: true,
      nodeIntegration: false,
      nodeIntegrationInWorker: false,
      webSecurity: true,
      allowRunningInsecureContent: false,
      webviewTag: false,
      spellcheck: false,
    },
  });
  win.once('ready-to-show', () => win.show());
  void win.loadFile(join(here, '..', 'renderer', 'index.html'));
  return win;
}

async function run(): Promise<void> {
  if (!app.requestSingleInstanceLock()) {
    app.quit();
    return;
  }
  const logger = electronLogger();
  harden();
  await app.whenReady();

  // No remote content: the renderer talks over IPC only; cancel every network request it might make.
  session.defaultSession.setPermissionRequestHandler((_wc, _perm, cb) => cb(false));
  session.defaultSession.webRequest.onBeforeRequest(
    { urls: ['http://*/*', 'https://*/*', 'ws://*/*', 'wss://*/*'] },
    (_details, cb) => cb({ cancel: true }),
  );

  let host: Host;
  try {
    host = await startHost({ log: logger, logFile: log.transports.file.getFile().path, mode: 'desktop' });
  } catch (e) {
    logger.error(`could not start the exec server: ${(e as Error).message}`);
    app.exit(1);
    return;
  }
  logger.info(`exec server listening: ${host.execUrl}`);
  process.stdout.write(`${host.execUrl}\n`);

  let win = createWindow();
  host.serveIpc(ipcMain, (sender) => !win.isDestroyed() && sender.id === win.webContents.id);
  app.on('second-instance', () => {
    if (win.isDestroyed()) win = createWindow();
    if (win.isMinimized()) win.restore();
    win.focus();
  });
  app.on('activate', () => {
    if (BrowserWindow.getAllWindows().length === 0) win = createWindow();
  });
  app.on('window-all-closed', () => app.quit());

  // Clean shutdown: kill every child of every session before the process exits.
  let stopped = false;
  app.on('before-quit', (e) => {
    if (stopped) return;
    e.preventDefault();
    logger.info('quitting: killing every child process');
    void host.shutdown().finally(() => {
      stopped = true;
      app.quit();
    });
  });
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => app.quit());
}

if (process.versions.electron) {
  run().catch((e) => {
    process.stderr.write(`corral: ${e instanceof Error ? e.stack : String(e)}\n`);
    process.exit(1);
  });
}
