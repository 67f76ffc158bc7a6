/**
 * The composition root: the one place an exec server is put together with what watches it — the audit trail, the
 * monitor and the panel's methods, the proxies' event buses. `corral exec-server` (src/cli.ts), `corral serve` and the
 * desktop app (both through `startHost`, ./host.ts) assemble their server here and nowhere else, so the three cannot
 * drift apart (what the sandbox hides, which observers see a process, in which order).
 */
import { type Audit, type AuditOptions, startAudit } from '../audit/index.js';
import type { NetworkEvents } from '../network/events.js';
import { readLastSelftest } from '../selftest/lastResult.js';
import { type Logger, silentLogger } from '../server/core/log.js';
import { ExecServer, type ExecServerOptions } from '../server/execServer.js';
import type { Monitor } from '../server/monitor/monitor.js';
import { servePanel } from '../server/monitor/panel.js';
import type { PreviewFn } from '../server/monitor/policyDebugger.js';
import { projectRuleStore } from './approvalRuleStore.js';
import { sandboxPreview } from './preview.js';

export interface ComposeOptions {
  /** The server's options (limits, resume grace, the launcher's sandbox options, a test's preparer). */
  server?: Partial<ExecServerOptions>;
  log?: Logger;
  /** The audit trail (null or absent: off). Its files are hidden from every sandbox. */
  audit?: AuditOptions | null;
  /** The server's log file, hidden from every sandbox (it names every session's commands). */
  logFile?: string | null;
  /** More paths no sandbox may read (the secret files the listener's credentials come from). */
  hiddenPaths?: string[];
  /** Serve the panel's methods (monitor, approvals, policy debugger): a panel principal can then watch and steer. */
  panel?: { preview?: PreviewFn } | false;
  /** More proxy event buses to feed into the monitor and the audit trail (tests, a host's own proxies). */
  network?: NetworkEvents[];
  /** The approvals' project-rule file (default: beside the audit database; null: project rules off). */
  approvalRules?: string | null;
}

export interface Composed {
  server: ExecServer;
  audit: Audit;
  /** The monitor, when the panel's methods are served. */
  monitor: Monitor | null;
  log: Logger;
}

export async function composeServer(opts: ComposeOptions = {}): Promise<Composed> {
  const log = opts.log ?? opts.server?.log ?? silentLogger;
  const audit = await startAudit(opts.audit ?? null, log);
  const launcher = opts.server?.launcher;
  // No sandbox may read a secret file, our log, or the audit database (its directory) (sandbox.md: masked like any
  // unreadable path).
  const hiddenPaths = [
    ...(launcher?.sandbox?.hiddenPaths ?? []),
    ...(opts.hiddenPaths ?? []),
    ...(opts.logFile ? [opts.logFile] : []),
    ...audit.hiddenPaths,
  ];
  const rules = projectRuleStore(opts.approvalRules, opts.audit?.dbPath ?? null, log);
  hiddenPaths.push(...rules.hiddenPaths);
  const server = new ExecServer({
    ...opts.server,
    launcher: { ...launcher, sandbox: { ...launcher?.sandbox, hiddenPaths } },
    approvals: { ...opts.server?.approvals, rules: rules.store, rulesProblem: rules.problem },
    log,
  });
  let monitor: Monitor | null = null;
  if (opts.panel) {
    const resumeGraceMs = opts.server?.resumeGraceMs;
    monitor = servePanel(server, {
      ...(resumeGraceMs !== undefined ? { resumeGraceMs } : {}),
      preview: opts.panel.preview ?? sandboxPreview,
      lastSelftest: () => readLastSelftest(),
    });
    // The proxies of process/start report blocked requests and policy decisions on the launcher's bus (a test's own
    // preparer has none).
    if (!opts.server?.preparer) monitor.attachNetwork(server.launcher.networkEvents);
  }
  audit.attach(server);
  for (const bus of opts.network ?? []) {
    monitor?.attachNetwork(bus);
    audit.attachNetwork(bus);
  }
  return { server, audit, monitor, log };
}
