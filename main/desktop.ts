// The desktop app's logic, with Electron passed in (main.ts hands over the real modules; the unit tests hand over
// fakes): single instance, the host (exec server on loopback with a token, proxies, monitor), a hardened window whose
// renderer is one more privileged client over IPC, and a clean shutdown that kills every child.
import type * as Electron from 'electron';
import { type Host, type HostOptions, startHost } from '../src/app/host.js';
import type { Logger } from '../src/server/core/log.js';

export type ElectronDeps = Pick<typeof Electron, 'app' | 'BrowserWindow' | 'ipcMain' | 'session' | 'shell'>;

export interface DesktopOptions {
  log: Logger;
  logFile: string | null;
  /** dist/preload/preload.cjs */
  preloadPath: string;
  /** dist/renderer/index.html */
  indexHtml: string;
  host?: Omit<HostOptions, 'log' | 'logFile' | 'mode'>;
  /** Called when the host cannot start (default: app.exit(1)). */
  onFatal?: (message: string) => void;
}

/** The renderer's web preferences: isolated, sandboxed, no Node, no webviews. */
export function webPreferences(preloadPath: string): Electron.WebPreferences {
  return {
    preload: preloadPath,
    contextIsolation: true,
    sandbox: true,
    nodeIntegration: false,
    nodeIntegrationInWorker: false,
    nodeIntegrationInSubFrames: false,
    webSecurity: true,
    allowRunningInsecureContent: false,
    webviewTag: false,
    spellcheck: false,
    navigateOnDragDrop: false,
  };
}

/** Hardens every webContents: no navigation, no new windows, no webviews. */
function harden(e: ElectronDeps): void {
  e.app.on('web-contents-created', (_ev, contents) => {
    contents.on('will-navigate', (ev) => ev.preventDefault());
    contents.on('will-redirect', (ev) => ev.preventDefault());
    contents.on('will-attach-webview', (ev) => ev.preventDefault());
    contents.setWindowOpenHandler(({ url }) => {
      // Links the user clicks open in the real browser, never in the app.
      if (/^https:\/\//.test(url)) void e.shell.openExternal(url);
      return { action: 'deny' };
    });
  });
}

export interface Desktop {
  host: Host;
  window(): Electron.BrowserWindow;
}

export async function runDesktop(e: ElectronDeps, opts: DesktopOptions): Promise<Desktop | null> {
  const { app, BrowserWindow, ipcMain, session } = e;
  if (!app.requestSingleInstanceLock()) {
    app.quit();
    return null;
  }
  const log = opts.log;
  harden(e);
  await app.whenReady();

  // No remote content: the renderer talks over IPC only.
  // The only permission granted: writing to the clipboard (the panel's "Copy" of the exec-server URL).
  session.defaultSession.setPermissionRequestHandler((_wc, perm, cb) =>
    cb(perm === 'clipboard-sanitized-write'),
  );
  session.defaultSession.webRequest.onBeforeRequest(
    { urls: ['http://*/*', 'https://*/*', 'ws://*/*', 'wss://*/*'] },
    (_details, cb) => cb({ cancel: true }),
  );

  let host: Host;
  try {
    host = await startHost({ ...opts.host, log, logFile: opts.logFile, mode: 'desktop' });
  } catch (err) {
    const message = `could not start the exec server: ${(err as Error).message}`;
    log.error(message);
    if (opts.onFatal) opts.onFatal(message);
    else app.exit(1);
    return null;
  }
  // Never the token in a log line: the log file is not a secret store (and no sandbox may read it anyway).
  log.info(
    `exec server listening on ${host.listener.url} (the agent URL with its token is printed on stdout)`,
  );

  const createWindow = () => {
    const w = new BrowserWindow({
      width: 1280,
      height: 820,
      minWidth: 900,
      minHeight: 560,
      show: false,
      title: 'Corral',
      backgroundColor: '#0f1115',
      webPreferences: webPreferences(opts.preloadPath),
    });
    w.once('ready-to-show', () => w.show());
    void w.loadFile(opts.indexHtml);
    return w;
  };
  let win = createWindow();
  // Only the app's own window may talk to the server over IPC.
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
  app.on('before-quit', (ev) => {
    if (stopped) return;
    ev.preventDefault();
    log.info('quitting: killing every child process');
    void host.shutdown().finally(() => {
      stopped = true;
      app.quit();
    });
  });
  return { host, window: () => win };
}
