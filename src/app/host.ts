/**
 * The Corral host, shared by the Electron app and the headless `corral serve`: the exec server on loopback with a
 * generated token, the monitor feed, and (headless) the panel served at `/panel/` on the same port. No Electron
 * import here, so it runs under plain Node and in tests.
 */
import type { AuditOptions } from '../audit/index.js';
import { doctorReport } from '../doctor/report.js';
import { Fleet } from '../fleet/fleet.js';
import type { NetworkEvents } from '../network/events.js';
import type { DoctorReport } from '../protocol/doctor.js';
import type { JoinParams } from '../protocol/fleet.js';
import type { HostInfo } from '../protocol/host.js';
import { type IpcMainLike, type IpcSenderLike, type IpcServer, serveIpc } from '../rpc/ipcTransport.js';
import { type Listener, listenWebSocket } from '../server/connection/wsListener.js';
import { type HostTokens, hostAuth, hostTokens, IPC_PANEL } from '../server/core/auth.js';
import { type Logger, silentLogger } from '../server/core/log.js';
import type { ExecServer, ExecServerOptions } from '../server/execServer.js';
import type { Monitor } from '../server/monitor/monitor.js';
import type { PreviewFn } from '../server/monitor/policyDebugger.js';
import type { LaunchPreparer } from '../server/process/launcher.js';
import { composeServer } from './compose.js';
import { writeLocalState } from './localState.js';
import { findPanelDir, panelCsp, panelHandler } from './panelHttp.js';
import { sandboxPreview } from './preview.js';

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
  /** Where to write the URL and panel token for `corral approvals` (./localState.ts; absent: nowhere). */
  localState?: string | null;
  /** The approvals' project-rule file (./approvalRuleStore.ts; default: beside the audit database). */
  approvalRules?: string | null;
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

/** A free loopback port (so the panel's own origin can be allow-listed before the listener starts). */
export async function startHost(opts: HostOptions = {}): Promise<Host> {
  const host = opts.host ?? '127.0.0.1';
  const tokens = hostTokens(opts.tokens);
  const resumeGraceMs = opts.resumeGraceMs ?? 10_000;
  const log = opts.log ?? silentLogger;
  const { server, audit, monitor } = await composeServer({
    server: {
      ...opts.server,
      resumeGraceMs,
      ...(opts.maxProcessesPerSession !== undefined
        ? { maxProcessesPerSession: opts.maxProcessesPerSession }
        : {}),
      ...(opts.preparer ? { preparer: opts.preparer } : {}),
    },
    log,
    audit: opts.audit ?? null,
    logFile: opts.logFile ?? null,
    panel: { preview: opts.preview ?? sandboxPreview },
    network: opts.network ?? [],
    ...(opts.approvalRules !== undefined ? { approvalRules: opts.approvalRules } : {}),
    hiddenPaths: opts.localState ? [opts.localState] : [],
  });
  const launcher = opts.server?.launcher;
  if (!monitor) throw new Error('unreachable: the host serves the panel methods');
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
  const localState = opts.localState
    ? writeLocalState(opts.localState, { url: listener.url, token: tokens.panel, pid: process.pid })
    : null;
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
        localState?.remove();
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
