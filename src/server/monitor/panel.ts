/**
 * What a panel connection gets beyond the exec-server methods: the monitor feed of every session (monitor.ts), the
 * actions on any session's processes (panelActions.ts) and the policy debugger (policyDebugger.ts). The method table
 * (src/protocol/methods.ts) lets only panel connections call them. And the last `corral selftest` result
 * (monitor/selftest), read by what the composition root gives (the file is src/selftest's).
 */
import type { SelftestReport } from '../../protocol/selftest.js';
import type { MethodRegistry } from '../core/dispatch.js';
import { Monitor, type MonitorHost, type MonitorOptions } from './monitor.js';
import { type PanelActionsHost, registerPanelActions } from './panelActions.js';
import { type PolicyDebuggerOptions, registerPolicyDebugger } from './policyDebugger.js';

export interface PanelOptions extends Omit<MonitorOptions, 'previewWired'>, PolicyDebuggerOptions {
  /** The last `corral selftest` result kept on this machine (monitor/selftest); none: the method answers null. */
  lastSelftest?: () => SelftestReport | null;
}

/** Serves the panel's methods on `server`; the feed, for more proxy event buses and for disposal. */
export function servePanel(
  server: MethodRegistry & MonitorHost & PanelActionsHost,
  opts: PanelOptions = {},
): Monitor {
  const { preview, resolver, lastSelftest, ...feed } = opts;
  const monitor = new Monitor(server, { ...feed, previewWired: preview !== undefined });
  monitor.register(server);
  registerPanelActions(
    server,
    server,
    (sessionId, processId) => monitor.remembers(sessionId, processId),
    () => monitor.joinedServers,
  );
  registerPolicyDebugger(server, { preview, resolver });
  server.handle('monitor/selftest', () => ({ last: lastSelftest?.() ?? null }));
  return monitor;
}
