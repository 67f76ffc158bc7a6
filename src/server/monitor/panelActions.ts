/**
 * What a panel connection may do to any session's processes (panel credentials only, gated by the method table):
 * read their retained output, write to their stdin, terminate one, kill a whole session. Each action is logged.
 *
 * On a fleet host a request that names a joined `server` is forwarded to that server only (joinedServers.ts), with
 * that server's own credential, and its answer is checked against the method's result schema by the fleet.
 */
import type { ManagedProcess } from '../../process/managedProcess.js';
import { invalidRequest } from '../../protocol/errors.js';
import type { OutputChunk } from '../../protocol/exec.js';
import { decodeBase64Strict } from '../core/base64.js';
import type { MethodRegistry } from '../core/dispatch.js';
import type { Logger } from '../core/log.js';
import type { SessionTable } from '../core/sessions.js';
import { readResult, terminate, write } from '../process/processMethods.js';
import { type JoinedServers, remoteServer } from './joinedServers.js';

/** Output that monitor/follow returns with its answer, and a read back (`beforeSeq`) by default: the newest bytes. */
export const TAIL_BYTES = 256 * 1024;

export interface PanelActionsHost {
  readonly sessions: Pick<SessionTable, 'get'>;
  readonly log: Logger;
}

/**
 * `finished(sessionId, processId)`: the feed still lists the process, though its session (and output) is gone.
 * `joined()`: the servers a fleet host joined, or null.
 */
export function registerPanelActions(
  registry: MethodRegistry,
  host: PanelActionsHost,
  finished: (sessionId: string, processId: string) => boolean,
  joined: () => JoinedServers | null = () => null,
): void {
  const lookup = (ref: { sessionId: string; processId: string }) =>
    host.sessions.get(ref.sessionId)?.get(ref.processId);
  /** The joined server a request names, or null for this host's own process. */
  const remote = (server: string | null | undefined) => remoteServer(joined(), server);
  const forward = <T>(server: string, method: string, params: Record<string, unknown>) =>
    joined()!.forward(server, method, params) as Promise<T>;

  registry.handle('monitor/read', async (p) => {
    const server = remote(p.server);
    if (server !== null) {
      const { server: _s, ...rest } = p;
      return forward(server, 'monitor/read', rest);
    }
    const proc = lookup(p);
    if (!proc) {
      if (finished(p.sessionId, p.processId)) return { chunks: [], nextSeq: 0, retained: false };
      throw invalidRequest(`unknown process id ${p.processId} in session ${p.sessionId}`);
    }
    if (p.beforeSeq !== null && p.beforeSeq !== undefined) {
      const { chunks, earlier } = outputTail(proc, p.beforeSeq, p.maxBytes ?? TAIL_BYTES);
      return { chunks, nextSeq: p.beforeSeq, retained: !proc.outputEvicted, earlier };
    }
    const { chunks, nextSeq } = readResult(proc, p.afterSeq ?? 0, p.maxBytes ?? null);
    return { chunks, nextSeq, retained: !proc.outputEvicted };
  });

  registry.handle('monitor/terminate', async (p) => {
    const server = remote(p.server);
    if (server !== null)
      return forward(server, 'monitor/terminate', { sessionId: p.sessionId, processId: p.processId });
    const proc = lookup(p);
    const r = terminate(proc);
    if (proc) {
      host.log.info(
        `panel terminated process ${p.processId} of session ${p.sessionId} (pid ${proc.pid}, running ${r.running})`,
      );
    }
    return r;
  });

  registry.handle('monitor/write', async (p) => {
    const server = remote(p.server);
    if (server === null) return write(lookup(p), p.chunk);
    // Refused here, as the host would refuse it: the joined server never sees bytes that are not base64.
    decodeBase64Strict(p.chunk);
    return forward(server, 'monitor/write', {
      sessionId: p.sessionId,
      processId: p.processId,
      chunk: p.chunk,
    });
  });

  // The panel's button on a detached session's countdown.
  registry.handle('monitor/killSession', async (p) => {
    const server = remote(p.server);
    if (server !== null) return forward(server, 'monitor/killSession', { sessionId: p.sessionId });
    const session = host.sessions.get(p.sessionId);
    if (!session) return { killed: 0 };
    let killed = 0;
    for (const proc of session.processes) if (proc.state === 'running') killed++;
    session.killAll();
    host.log.info(`panel killed the ${killed} running process(es) of session ${p.sessionId}`);
    return { killed };
  });
}

/** The newest retained chunks (before `beforeSeq`, if given) totalling at most maxBytes (at least one). */
export function outputTail(
  proc: ManagedProcess,
  beforeSeq: number | null,
  maxBytes: number,
): { chunks: OutputChunk[]; earlier: boolean } {
  const all = proc.buffer.since(0);
  let end = all.length;
  if (beforeSeq !== null) while (end > 0 && all[end - 1]!.seq >= beforeSeq) end--;
  let start = end;
  let total = 0;
  while (start > 0 && (start === end || total + all[start - 1]!.data.length <= maxBytes)) {
    total += all[--start]!.data.length;
  }
  return {
    chunks: all
      .slice(start, end)
      .map((c) => ({ seq: c.seq, stream: c.stream, chunk: c.data.toString('base64') })),
    earlier: start > 0,
  };
}
