import type { MonitorProcess } from '../../src/protocol/monitor.js';

/** A MonitorProcess as the monitor sends it, running, with `over` on top (tests of the panel's rows). */
export function monitorProcess(over: Partial<MonitorProcess> & { processId: string }): MonitorProcess {
  return {
    sessionId: 's1',
    clientName: 'agent-a',
    argv: ['/bin/sh', '-c', `echo ${over.processId}`],
    cwd: '/work',
    tty: false,
    pipeStdin: false,
    pid: 1,
    state: 'running',
    exitCode: null,
    sandboxDenied: false,
    sandboxType: 'none',
    badge: 'none',
    launcherFlags: null,
    policy: null,
    metadata: null,
    envKeys: ['PATH'],
    startedAt: 1000,
    exitedAt: null,
    closedAt: null,
    bytesOut: 0,
    lastSeq: 0,
    retained: true,
    ...over,
  };
}

/** A `monitor/subscribe` answer of a server with nothing to show yet (stand-in servers of the fleet tests). */
export function emptySnapshot(): Record<string, unknown> {
  return {
    processes: [],
    sessions: [],
    blocked: [],
    audit: [],
    hosts: [],
    dropped: { output: 0, network: 0, evicted: 0, forgottenProcesses: 0 },
    limits: { blockedRing: 1, auditRing: 1, finishedProcesses: 1, subscriberHighWaterBytes: 1 },
    networkWired: false,
    previewWired: false,
    serverTime: Date.now(),
  };
}

/**
 * An approval prompt as a server sends it in approvals/requested (an HTTPS CONNECT to example.test, one request
 * waiting, a minute to decide), `over` on top.
 */
export const wirePrompt = (over: Record<string, unknown> = {}): Record<string, unknown> => ({
  id: 'p1',
  sessionId: 'x',
  processId: 'p',
  clientName: 'c',
  command: ['curl'],
  cwd: null,
  host: 'example.test',
  port: 443,
  protocol: 'https_connect',
  method: 'CONNECT',
  waiting: 1,
  requestedAt: Date.now(),
  expiresAt: Date.now() + 60_000,
  timeoutMs: 60_000,
  requestedTimeoutMs: null,
  ...over,
});
