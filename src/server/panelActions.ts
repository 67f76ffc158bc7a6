/**
 * What a panel connection may do to any session's processes (panel credentials only, gated by the method table):
 * read their retained output, write to their stdin, terminate one, kill a whole session. Each action is logged.
 */
import { invalidRequest } from '../protocol/errors.js';
import type { MethodRegistry } from './dispatch.js';
import type { Logger } from './log.js';
import { readResult, terminate, write } from './processMethods.js';
import type { SessionTable } from './sessions.js';

export interface PanelActionsHost {
  readonly sessions: Pick<SessionTable, 'get'>;
  readonly log: Logger;
}

/** `finished(sessionId, processId)`: the feed still lists the process, though its session (and output) is gone. */
export function registerPanelActions(
  registry: MethodRegistry,
  host: PanelActionsHost,
  finished: (sessionId: string, processId: string) => boolean,
): void {
  const lookup = (ref: { sessionId: string; processId: string }) =>
    host.sessions.get(ref.sessionId)?.get(ref.processId);

  registry.handle('monitor/read', (p) => {
    const proc = lookup(p);
    if (!proc) {
      if (finished(p.sessionId, p.processId)) return { chunks: [], nextSeq: 0, retained: false };
      throw invalidRequest(`unknown process id ${p.processId} in session ${p.sessionId}`);
    }
    const { chunks, nextSeq } = readResult(proc, p.afterSeq ?? 0, p.maxBytes ?? null);
    return { chunks, nextSeq, retained: !proc.outputEvicted };
  });

  registry.handle('monitor/terminate', (p) => {
    const proc = lookup(p);
    const r = terminate(proc);
    if (proc) {
      host.log.info(
        `panel terminated process ${p.processId} of session ${p.sessionId} (pid ${proc.pid}, running ${r.running})`,
      );
    }
    return r;
  });

  registry.handle('monitor/write', (p) => write(lookup(p), p.chunk));

  // The panel's button on a detached session's countdown.
  registry.handle('monitor/killSession', (p) => {
    const session = host.sessions.get(p.sessionId);
    if (!session) return { killed: 0 };
    let killed = 0;
    for (const proc of session.processes) if (proc.state === 'running') killed++;
    session.killAll();
    host.log.info(`panel killed the ${killed} running process(es) of session ${p.sessionId}`);
    return { killed };
  });
}
