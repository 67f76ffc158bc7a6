/**
 * The Corral host, shared by the Electron app and the headless `corral serve`: the exec server on loopback with a
 * generated token, the monitor feed, and (headless) the panel served at `/panel/` on the same port. No Electron
 * import here, so it runs under plain Node and in tests.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { dirname, extname, join, normalize, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type AuditOptions, startAudit } from '../audit/index.js';
import { doctorReport } from '../doctor/report.js';
import { Fleet } from '../fleet/fleet.js';
import type { NetworkEvents } from '../network/events.js';
import { resolveProgram } from '../process/resolveProgram.js';
import type { DoctorReport } from '../protocol/doctor.js';
import type { JoinParams } from '../protocol/fleet.js';
import type { HostInfo } from '../protocol/host.js';
import { type IpcMainLike, type IpcSenderLike, type IpcServer, serveIpc } from '../rpc/ipcTransport.js';
import { previewLaunch, startSandbox } from '../sandbox/index.js';
import { type HostTokens, hostAuth, hostTokens, IPC_PANEL } from './auth.js';
import { ExecServer, type ExecServerOptions } from './execServer.js';
import type { LaunchPreparer } from './launcher.js';
import { type Logger, silentLogger } from './log.js';
import type { Monitor } from './monitor.js';
import { servePanel } from './panel.js';
import type { PreviewFn } from './policyDebugger.js';
import { type Listener, listenWebSocket } from './wsListener.js';

const VERSION = '0.1.0';

export interface HostOptions {
  host?: string;
  /** 0 (default) picks a free port. */
  port?: number;
  /** The agent and panel tokens; each defaults to a fresh random one. */
  tokens?: Partial<HostTokens>;
  resumeGraceMs?: number;
  maxProcessesPerSession?: number;
  /** More ExecServer options (the limits of `corral serve`). */
  server?: Partial<ExecServerOptions>;
  log?: Logger;
  /** The sandbox/proxy launch layer. Default: the Launcher (sandbox engine + a managed proxy per process). */
  preparer?: LaunchPreparer;
  /** Proxy event buses to feed into the monitor. */
  network?: NetworkEvents[];
  preview?: PreviewFn;
  /** Serve the panel at /panel/ (headless host). */
  servePanel?: boolean;
  /** Directory holding the built panel (index.html, app.js, app.css). Found next to the bundle by default. */
  panelDir?: string;
  /** Extra browser origins allowed to open the WebSocket. */
  allowedOrigins?: string[];
  /** Shown by `host/info`. */
  logFile?: string | null;
  mode?: 'desktop' | 'headless';
  /** The audit trail (null or absent: off). */
  audit?: AuditOptions | null;
  /** Corral servers to watch from this host (fleet panel), each with its own panel credential. */
  join?: JoinParams[];
  /** Options of the fleet links (tests: faster reconnection). */
  fleet?: { backoffMs?: [number, number] };
}

export interface Host {
  server: ExecServer;
  monitor: Monitor;
  /** The Corral servers this host watches (fleet/join, --join). */
  fleet: Fleet;
  listener: Listener;
  /** `agent`: process/* and fs/* on its own sessions; `panel`: everything (monitor, approvals, policy, host/info). */
  tokens: HostTokens;
  /** ws://127.0.0.1:P/?token=<agent token> — what an agent's exec-server client connects to. */
  execUrl: string;
  /** http://127.0.0.1:P/panel/#token=<panel token> — only when the panel is served. */
  panelUrl: string | null;
  /** Serves the app's own renderer(s) over IPC (privileged connections of the same dispatcher). */
  serveIpc(ipcMain: IpcMainLike, isTrusted?: (sender: IpcSenderLike) => boolean): IpcServer;
  /** Kills every child and closes the listener. */
  shutdown(): Promise<void>;
}

/** Where the built panel lives: next to this bundle (dist/main → dist/renderer, dist/cli.js → dist/renderer). */
export function findPanelDir(): string | null {
  const here = dirname(fileURLToPath(import.meta.url));
  for (const c of [
    join(here, 'renderer'),
    join(here, '..', 'renderer'),
    join(here, '..', 'dist', 'renderer'),
  ]) {
    if (existsSync(join(c, 'index.html')) && existsSync(join(c, 'app.js'))) return c;
  }
  return null;
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.map': 'application/json',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.woff2': 'font/woff2',
};

/** The panel's Content-Security-Policy: own scripts only, no remote content, WebSocket only to this server. */
export function panelCsp(wsOrigins: string[]): string {
  return [
    "default-src 'none'",
    "script-src 'self'",
    // xterm.js writes its theme into a <style> element.
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "font-src 'self' data:",
    `connect-src 'self' ${wsOrigins.join(' ')}`.trim(),
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

/** A static handler for /panel/: files of `dir` only, no traversal, strict CSP. */
export function panelHandler(dir: string, csp: () => string) {
  const root = normalize(dir + sep);
  return (req: IncomingMessage, res: ServerResponse, url: URL): boolean => {
    if (url.pathname === '/panel') {
      res.writeHead(308, { location: '/panel/' }).end();
      return true;
    }
    if (!url.pathname.startsWith('/panel/')) return false;
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return true;
    }
    let rel: string;
    try {
      rel = decodeURIComponent(url.pathname.slice('/panel/'.length)) || 'index.html';
    } catch {
      res.writeHead(400).end();
      return true;
    }
    const file = normalize(join(root, rel));
    if (!file.startsWith(root) || rel.includes('\0')) {
      res.writeHead(404).end('not found');
      return true;
    }
    let body: Buffer;
    try {
      if (!statSync(file).isFile()) throw new Error('not a file');
      body = readFileSync(file);
    } catch {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return true;
    }
    res.writeHead(200, {
      'content-type': TYPES[extname(file)] ?? 'application/octet-stream',
      'content-security-policy': csp(),
      'x-content-type-options': 'nosniff',
      'referrer-policy': 'no-referrer',
      'cache-control': 'no-store',
      'cross-origin-opener-policy': 'same-origin',
    });
    res.end(req.method === 'HEAD' ? undefined : body);
    return true;
  };
}

/** The policy debugger's launch preview: what the sandbox engine would exec, without creating anything. */
export const sandboxPreview: PreviewFn = ({ sandbox, argv, cwd }) => {
  const program = argv[0] ?? '/bin/sh';
  let file = program;
  try {
    file = resolveProgram(program, cwd, { PATH: process.env.PATH ?? '/usr/bin:/bin' });
  } catch {
    // show the preview with the name as given
  }
  // A Seatbelt config is previewed as macOS would run it, wherever the host runs (the debugger is for reading).
  const eff = startSandbox(sandbox, false, cwd);
  const asMac = eff?.requested === 'macos-seatbelt' && process.platform !== 'darwin';
  const p = previewLaunch(
    eff,
    { spec: { file, argv, env: {}, cwd }, tty: false },
    asMac ? { platform: 'darwin' } : undefined,
  );
  const argvOut =
    p.mechanism === 'none'
      ? null
      : [p.spec.file, ...p.spec.argv.slice(1)].map((a) =>
          p.seatbeltProfile !== undefined && a === p.seatbeltProfile ? '<the Seatbelt profile below>' : a,
        );
  return {
    sandboxType: p.sandboxType,
    summary: {
      mechanism: p.mechanism,
      ...p.summary,
      ...(p.seccomp
        ? {
            seccompFilter: `${p.seccomp.mode}, ${p.seccomp.instructions} BPF instructions (${p.seccomp.arch})`,
          }
        : {}),
      ...(p.fdSlots.length > 0 ? { fdSlots: p.fdSlots.join(', ') } : {}),
    },
    argv: argvOut,
    seatbeltProfile: p.seatbeltProfile ?? null,
    note:
      p.mechanism === 'none'
        ? 'nothing to enforce: the command runs unwrapped'
        : asMac
          ? `previewed as on macOS; this host (${process.platform}) cannot run Seatbelt`
          : null,
  };
};

/** A free loopback port (so the panel's own origin can be allow-listed before the listener starts). */
export async function startHost(opts: HostOptions = {}): Promise<Host> {
  const host = opts.host ?? '127.0.0.1';
  const tokens = hostTokens(opts.tokens);
  const resumeGraceMs = opts.resumeGraceMs ?? 10_000;
  const log = opts.log ?? silentLogger;
  const audit = await startAudit(opts.audit ?? null, log);
  // The log file is ours: no sandbox may read it (it names every session's commands); nor the audit database.
  const launcher = opts.server?.launcher;
  const hiddenPaths = [
    ...(launcher?.sandbox?.hiddenPaths ?? []),
    ...(opts.logFile ? [opts.logFile] : []),
    ...audit.hiddenPaths,
  ];
  const server = new ExecServer({
    ...opts.server,
    launcher: { ...launcher, sandbox: { ...launcher?.sandbox, hiddenPaths } },
    resumeGraceMs,
    ...(opts.maxProcessesPerSession !== undefined
      ? { maxProcessesPerSession: opts.maxProcessesPerSession }
      : {}),
    log,
    ...(opts.preparer ? { preparer: opts.preparer } : {}),
  });
  const monitor = servePanel(server, { resumeGraceMs, preview: opts.preview ?? sandboxPreview });
  // The proxies of process/start report blocked requests and policy decisions on the launcher's bus.
  if (!opts.preparer) monitor.attachNetwork(server.launcher.networkEvents);
  audit.attach(server);
  for (const bus of opts.network ?? []) {
    monitor.attachNetwork(bus);
    audit.attachNetwork(bus);
  }
  const fleet = new Fleet(server, monitor, { log, ...opts.fleet });
  for (const j of opts.join ?? []) fleet.join(j);

  const panelDir = opts.servePanel ? (opts.panelDir ?? findPanelDir()) : null;
  if (opts.servePanel && !panelDir) throw new Error('the panel is not built: run `npm run build` first');
  const hostForUrl = host.includes(':') ? `[${host}]` : host;

  // The panel's own origin is only known once the port is bound: the origin check and the CSP read it then.
  let port = 0;
  const panelOrigins = () =>
    panelDir
      ? [`http://${hostForUrl}:${port}`, ...(host === '127.0.0.1' ? [`http://localhost:${port}`] : [])]
      : [];
  const extraOrigins = new Set(opts.allowedOrigins ?? []);
  const listener = await listenWebSocket(server, {
    host,
    port: opts.port ?? 0,
    auth: hostAuth(tokens),
    allowedOrigins: (origin) => extraOrigins.has(origin) || panelOrigins().includes(origin),
    ...(panelDir
      ? {
          httpHandler: panelHandler(panelDir, () =>
            panelCsp(panelOrigins().map((o) => o.replace(/^http/, 'ws'))),
          ),
        }
      : {}),
  });
  port = listener.port;
  listener.readiness.register('audit', audit.ready);
  const base = `http://${hostForUrl}:${listener.port}`;
  const execUrl = `${listener.url}/?token=${encodeURIComponent(tokens.agent)}`;
  const panelUrl = panelDir ? `${base}/panel/#token=${encodeURIComponent(tokens.panel)}` : null;
  const info: HostInfo = {
    execUrl,
    panelUrl,
    logFile: opts.logFile ?? null,
    mode: opts.mode ?? 'headless',
    pid: process.pid,
    platform: process.platform,
    version: VERSION,
    resourceLimits: server.resourceLimits,
  };
  server.handle('host/info', () => info);
  // Made once, on the first host/doctor (a few sandboxed starts of /bin/true with this server's sandbox options): its
  // own method, so that host/info never waits for it.
  let doctor: Promise<DoctorReport> | null = null;
  server.handle('host/doctor', () => {
    doctor ??= doctorReport(launcher?.sandbox).catch((e: Error) => {
      doctor = null; // the next call tries again
      log.warn(`doctor: ${e.message}`);
      throw e;
    });
    return doctor;
  });
  let stopped: Promise<void> | null = null;
  const ipcServers: IpcServer[] = [];
  return {
    server,
    monitor,
    fleet,
    listener,
    tokens,
    execUrl,
    panelUrl,
    serveIpc(ipcMain, isTrusted) {
      const s = serveIpc(server, ipcMain, {
        principal: IPC_PANEL,
        ...(isTrusted ? { isTrusted } : {}),
        onRejected: (sender) =>
          server.log.warn(`ignored IPC from an untrusted renderer (webContents ${sender.id})`),
      });
      ipcServers.push(s);
      return s;
    },
    shutdown() {
      stopped ??= (async () => {
        fleet.close();
        await server.shutdown();
        for (const s of ipcServers) s.close();
        monitor.dispose();
        await listener.close();
        await audit.stop();
      })();
      return stopped;
    },
  };
}
