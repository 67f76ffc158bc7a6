/**
 * How the monitor describes the server's processes and sessions to the panel (MonitorProcess, MonitorSession), and
 * the same as JSON text for the feed: a process's fixed part (argv, policy, env names, …) is serialised once and
 * kept; each batch only appends its changing fields.
 */
import type { ManagedProcess } from '../../process/managedProcess.js';
import type { MonitorProcess, MonitorSession } from '../../protocol/monitor.js';
import { redactedJson, redactFixed } from '../../protocol/monitor.js';
import { isClientWrapped, readLauncherArgs } from '../../sandbox/codexWrapped.js';
import type { Session } from '../core/session.js';

/** The feed's key of a process (server '' is this one). */
export const processKey = (server: string, sessionId: string, processId: string) =>
  `${server}\u0000${sessionId}\u0000${processId}`;

/** The badge for a process: the server's own sandbox type, or a client-side wrapper recognised from argv[0]. */
export function sandboxBadge(sandboxType: string, argv: readonly string[]): MonitorProcess['badge'] {
  if (sandboxType === 'linuxSeccomp') return 'linux-seccomp';
  if (sandboxType === 'macosSeatbelt') return 'macos-seatbelt';
  return isClientWrapped(argv) ? 'client-wrapped' : 'none';
}

/** The members of a process's description that never change. */
function fixedFields(p: ManagedProcess) {
  const summary = p.launch.summary;
  return {
    sessionId: p.info.sessionId,
    processId: p.info.processId,
    clientName: p.info.clientName,
    argv: p.info.argv,
    cwd: p.info.cwd,
    tty: p.info.tty,
    pipeStdin: p.info.pipeStdin,
    sandboxType: p.sandboxType,
    badge: sandboxBadge(p.sandboxType, p.info.argv),
    launcherFlags: isClientWrapped(p.info.argv) ? readLauncherArgs(p.info.argv).flags : null,
    ...(p.launch.guarantees ? { sandboxGuarantees: p.launch.guarantees } : {}),
    policy: summary ? redactFixed(summary) : null,
    metadata: p.info.metadata ? redactFixed(p.info.metadata) : null,
    envKeys: [...p.envNames],
    startedAt: p.startedAt,
  };
}

export function describeProcess(p: ManagedProcess): MonitorProcess {
  return {
    ...fixedFields(p),
    pid: p.pid,
    state: p.state,
    exitCode: p.exitCode,
    sandboxDenied: p.sandboxDenied,
    ...(p.limitHit ? { limitHit: p.limitHit } : {}),
    ...(p.usage ? { usage: p.usage } : {}),
    exitedAt: p.exitedAt,
    closedAt: p.closedAt,
    bytesOut: p.bytesOut,
    lastSeq: p.lastSeq,
    retained: !p.outputEvicted,
  };
}

const fixedParts = new WeakMap<ManagedProcess, string>();

/**
 * describeProcess(p) as JSON, with the fixed members serialised once per process while it runs. A closed process
 * changes no more (the feed sends it once more, then only in a new panel's snapshot): its text is not kept, which a
 * session would otherwise hold for every process it ever ran (its argv, policy and variable names: 0.5–3 KB each).
 */
export function processJson(p: ManagedProcess): string {
  let fixed = fixedParts.get(p);
  if (fixed === undefined) {
    // The policy's text is the one the audit trail stores (redactedJson: made once per launch summary).
    const { policy: _, ...rest } = fixedFields(p);
    const summary = p.launch.summary;
    fixed = `${JSON.stringify(rest).slice(0, -1)},"policy":${summary ? redactedJson(summary) : 'null'}`;
    if (p.state !== 'closed') fixedParts.set(p, fixed);
  } else if (p.state === 'closed') fixedParts.delete(p);
  return (
    `${fixed},"pid":${p.pid},"state":"${p.state}","exitCode":${p.exitCode},` +
    `"sandboxDenied":${p.sandboxDenied},${p.limitHit ? `"limitHit":"${p.limitHit}",` : ''}${p.usage ? `"usage":${JSON.stringify(p.usage)},` : ''}"exitedAt":${p.exitedAt},"closedAt":${p.closedAt},` +
    `"bytesOut":${p.bytesOut},"lastSeq":${p.lastSeq},"retained":${!p.outputEvicted}}`
  );
}

export function describeSession(s: Session, self: Session | null, resumeGraceMs?: number): MonitorSession {
  return {
    sessionId: s.id,
    clientName: s.clientName,
    attached: s.conn !== null,
    detachedAt: s.detachedAt,
    expiresAt: s.detachedAt !== null && resumeGraceMs !== undefined ? s.detachedAt + resumeGraceMs : null,
    processCount: s.processCount,
    self: s === self,
  };
}
