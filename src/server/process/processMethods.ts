/**
 * The process methods of protocol.md §5 (`process/start|read|write|terminate|signal`) on the caller's session:
 * validate, build the child's launch (its environment, its program), hand it to the launch pipeline (sandbox,
 * managed proxy), spawn it, and answer from its retained output and state.
 */
import { type Clock, realClock } from '../../clock.js';
import { CgroupError, type CgroupHost, type ResourceLimits } from '../../process/cgroup.js';
import type { LaunchSpec, PreparedLaunch } from '../../process/launch.js';
import { ManagedProcess } from '../../process/managedProcess.js';
import { checkCwd, LaunchCheckError, resolveProgram } from '../../process/resolveProgram.js';
import { SpawnError } from '../../process/spawner.js';
import { internalError, invalidParams, invalidRequest } from '../../protocol/errors.js';
import type { ExecParams, ReadResult, StartResult } from '../../protocol/exec.js';
import { Deferred, ResultWithCallback } from '../../rpc/connection.js';
import { decodeBase64Strict } from '../core/base64.js';
import type { MethodRegistry } from '../core/dispatch.js';
import type { ServerEvents } from '../core/events.js';
import type { Logger } from '../core/log.js';
import type { Session } from '../core/session.js';
import type { SessionTable } from '../core/sessions.js';
import type { LaunchPreparer } from './launcher.js';

export const DEFAULT_MAX_PROCESSES = 1024;
export const DEFAULT_MAX_TOTAL_PROCESSES = 4096;

export interface ProcessLimits {
  /** Live (not yet closed) processes allowed per session (`--max-processes`). */
  perSession: number;
  /** Live processes allowed at once on the whole server (`--max-total-processes`). */
  total: number;
}

/** What the process methods need of the server. */
export interface ProcessHost {
  readonly sessions: Pick<SessionTable, 'liveProcessCount' | 'holds'>;
  readonly events: Pick<ServerEvents, 'emitProcess'>;
  readonly preparer: LaunchPreparer;
  readonly log: Logger;
  readonly clock: Clock;
  readonly shuttingDown: boolean;
  /** The environment a child gets for these params (`env` over `envPolicy`, without the server's secrets). */
  childEnv(p: ExecParams): Record<string, string>;
  /** Each command's cgroup and the server's limits for it (defaults, and maxima for a start's `limits`). */
  readonly commandResources: CommandResources;
  /** What the start's result says of a started process beyond its launch's warnings (learning mode, issue 36). */
  startWarnings?(sessionId: string, processId: string): readonly string[];
}

/** What bounds each command (src/process/cgroup.ts). */
export interface CommandResources {
  cgroups: CgroupHost;
  limits: ResourceLimits;
}

const SIGNALS = { interrupt: 'SIGINT', terminate: 'SIGTERM', kill: 'SIGKILL' } as const;

export function registerProcessMethods(
  registry: MethodRegistry,
  host: ProcessHost,
  limits: ProcessLimits,
): void {
  const processes = new ProcessMethods(host, limits);
  registry.handle('process/start', (p, { state }) => processes.start(p, state.session!));
  registry.handle('process/read', (p, { state }) =>
    processes.read(state.session!, p.processId, p.afterSeq ?? 0, p.maxBytes ?? null, p.waitMs ?? 0),
  );
  registry.handle('process/write', (p, { state }) => write(state.session!.get(p.processId), p.chunk));
  registry.handle('process/terminate', (p, { state }) => terminate(state.session!.get(p.processId)));
  registry.handle('process/signal', (p, { state }) => {
    const proc = state.session!.get(p.processId);
    if (proc && proc.exitCode === null) proc.kill(SIGNALS[p.signal]);
    return {};
  });
}

class ProcessMethods {
  constructor(
    private readonly host: ProcessHost,
    private readonly limits: ProcessLimits,
  ) {}

  start(p: ExecParams, session: Session) {
    this.host.preparer.checkStart?.(p);
    if (p.argv.length === 0) throw invalidParams('argv must not be empty');
    if (session.has(p.processId)) throw invalidRequest(`process ${p.processId} already exists`);
    if (session.liveProcessCount() >= this.limits.perSession) {
      throw invalidRequest(
        `too many live processes in this session (limit ${this.limits.perSession}, --max-processes)`,
      );
    }
    if (this.host.sessions.liveProcessCount() >= this.limits.total) {
      throw invalidRequest(
        `too many live processes on this server (limit ${this.limits.total}, --max-total-processes)`,
      );
    }
    const limits = this.limitsFor(p);
    const program = p.argv[0]!;
    if (program === '') throw internalError(`missing program for ${p.tty ? 'pty' : 'pipe'} spawn`);
    const env = this.host.childEnv(p);
    let file: string;
    try {
      checkCwd(p.cwd);
      file = resolveProgram(program, p.cwd, env);
    } catch (e) {
      if (e instanceof LaunchCheckError) throw internalError(e.message);
      throw e;
    }
    const spec: LaunchSpec = { file, argv: [p.arg0 ?? program, ...p.argv.slice(1)], env, cwd: p.cwd };
    session.reserve(p.processId);
    let prepared: PreparedLaunch | Promise<PreparedLaunch>;
    try {
      prepared = this.host.preparer.prepare(p, spec, { sessionId: session.id });
    } catch (e) {
      session.unreserve(p.processId);
      throw e;
    }
    if (prepared instanceof Promise) {
      return prepared.then(
        (launch) => this.spawn(p, session, launch, limits),
        (e) => {
          session.unreserve(p.processId);
          throw e;
        },
      );
    }
    // Nothing wrapped it and no time has passed since the checks above: the spawner need not make them again.
    if (prepared.spec === spec) spec.checked = { file, cwd: p.cwd };
    return this.spawn(p, session, prepared, limits);
  }

  /** The cgroup limits for one start: the server's, lowered by the start's `limits`; null without cgroups. */
  private limitsFor(p: ExecParams): ResourceLimits | null {
    const { cgroups, limits: server } = this.host.commandResources;
    const asked = p.limits ?? {};
    const st = cgroups.status;
    const check = (field: 'pidsMax' | 'memoryMaxBytes', kind: 'pids' | 'memory') => {
      const v = asked[field];
      if (v === undefined || v === null) return;
      if (!cgroups.usable || !st.enforced.includes(kind))
        throw internalError(
          `limits.${field}: this server cannot enforce a ${kind} limit (${st.problem ?? 'no cgroup'}); refusing to start`,
        );
      if (v > server[field])
        throw invalidParams(`limits.${field}: ${v} is above this server's maximum of ${server[field]}`);
    };
    check('pidsMax', 'pids');
    check('memoryMaxBytes', 'memory');
    if (!cgroups.usable) return null;
    return {
      pidsMax: asked.pidsMax ?? server.pidsMax,
      memoryMaxBytes: asked.memoryMaxBytes ?? server.memoryMaxBytes,
    };
  }

  private async spawnAsync(proc: ManagedProcess, afterSpawn: (pid: number) => Promise<void>): Promise<void> {
    try {
      await afterSpawn(proc.pid);
    } catch (e) {
      proc.kill('SIGKILL');
      // Why the sandbox failed is most often in what its setup wrote (bwrap: "Can't find source path …").
      const said = await setupOutput(proc);
      const message = said ? `${(e as Error).message} (it wrote: ${said})` : (e as Error).message;
      this.host.log.error(`process ${proc.info.processId}: post-spawn setup failed, killed it: ${message}`);
      throw new Error(message);
    }
  }

  private spawn(p: ExecParams, session: Session, launch: PreparedLaunch, limits: ResourceLimits | null) {
    if (session.conn === null && this.host.shuttingDown) {
      session.unreserve(p.processId);
      launch.cleanup();
      throw internalError('server is shutting down');
    }
    if (!this.host.sessions.holds(session)) {
      // The session expired while an async prepare ran: nothing would ever kill this process.
      session.unreserve(p.processId);
      launch.cleanup();
      throw internalError(`session ${session.id} has expired`);
    }
    const proc = new ManagedProcess(
      {
        processId: p.processId,
        sessionId: session.id,
        clientName: session.clientName,
        argv: p.argv,
        cwd: p.cwd,
        tty: p.tty,
        pipeStdin: p.pipeStdin ?? false,
        metadata: p.metadata ?? null,
      },
      launch,
      session,
      this.host.preparer.classify,
      this.host.clock,
      limits ? { cgroups: this.host.commandResources.cgroups, limits } : null,
    );
    try {
      proc.start();
    } catch (e) {
      session.unreserve(p.processId);
      launch.cleanup();
      if (e instanceof SpawnError) throw internalError(e.osMessage);
      if (e instanceof CgroupError) throw internalError(e.message);
      throw internalError(e instanceof Error ? e.message : String(e));
    }
    session.add(proc);
    this.host.events.emitProcess('started', proc);
    // After `started`: its observers (the approval broker) know the process now.
    const more = this.host.startWarnings?.(session.id, p.processId) ?? [];
    const warnings = more.length > 0 ? [...(launch.warnings ?? []), ...more] : launch.warnings;
    const result: StartResult = {
      processId: p.processId,
      sandboxType: launch.sandboxType,
      ...(launch.guarantees ? { sandboxGuarantees: launch.guarantees } : {}),
      ...(warnings && warnings.length > 0 ? { warnings } : {}),
    };
    const respond = () => new ResultWithCallback(result, () => session.release(proc));
    if (launch.afterSpawn) {
      return this.spawnAsync(proc, launch.afterSpawn.bind(launch)).then(respond, (e) => {
        throw internalError(`sandbox setup failed: ${(e as Error).message}`);
      });
    }
    return respond();
  }

  read(
    session: Session,
    processId: string,
    afterSeq: number,
    maxBytes: number | null,
    waitMs: number,
  ): ReadResult | Deferred<ReadResult> {
    const proc = session.get(processId);
    if (!proc) throw invalidRequest(`unknown process id ${processId}`);
    const result = readResult(proc, afterSeq, maxBytes);
    if (result.chunks.length > 0 || result.closed || waitMs <= 0) return result;
    // Park without blocking the connection's later requests (Codex serialises them; we must not).
    const seqBefore = proc.lastSeq;
    return new Deferred(
      (async () => {
        const deadline = this.host.clock.now() + waitMs;
        while (proc.lastSeq === seqBefore && proc.state !== 'closed') {
          const left = deadline - this.host.clock.now();
          if (left <= 0) break;
          await proc.waitForEvent(left);
        }
        return readResult(proc, afterSeq, maxBytes);
      })(),
    );
  }
}

/** Writes base64 `chunk` to a process's stdin (`process/write`, `monitor/write`). */
export function write(
  proc: ManagedProcess | undefined,
  chunk: string,
): { status: ReturnType<ManagedProcess['write']> | 'unknownProcess' } {
  const data = decodeBase64Strict(chunk);
  return { status: proc ? proc.write(data) : 'unknownProcess' };
}

/** SIGKILLs a process and its group (`process/terminate`, `monitor/terminate`). */
export function terminate(proc: ManagedProcess | undefined): { running: boolean } {
  if (!proc) return { running: false };
  const running = proc.kill('SIGKILL');
  if (proc.state !== 'closed') proc.killGroup();
  return { running };
}

/** What `process/read` answers: the chunks after `afterSeq` and the process's state. */
export function readResult(proc: ManagedProcess, afterSeq: number, maxBytes: number | null): ReadResult {
  const chunks = proc.read(afterSeq, maxBytes);
  const last = chunks[chunks.length - 1];
  return {
    chunks: chunks.map((c) => ({ seq: c.seq, stream: c.stream, chunk: c.data.toString('base64') })),
    nextSeq: last ? last.seq + 1 : proc.lastSeq + 1,
    exited: proc.exitCode !== null,
    exitCode: proc.exitCode,
    closed: proc.state === 'closed',
    failure: null,
    sandboxDenied: proc.sandboxDenied,
    // Additive (protocol.md §5.3, ours): the session's retention budget freed this closed process's output.
    ...(proc.outputEvicted ? { outputEvicted: true } : {}),
    // Additive (ours): the cgroup limit the process ran into.
    ...(proc.limitHit ? { limitHit: proc.limitHit } : {}),
  };
}

/** How long a failed setup's process is waited for to close, for what it wrote (real time: no policy in it). */
const SETUP_OUTPUT_WAIT_MS = 1000;
/** At most this many characters of it go into the error (its end: bwrap's message is its last line). */
const SETUP_OUTPUT_CHARS = 500;

/**
 * What a killed process wrote to stderr (or its terminal) before it closed, on one line: control characters made
 * spaces, its last SETUP_OUTPUT_CHARS characters; '' when it wrote nothing or did not close in time.
 */
async function setupOutput(proc: ManagedProcess): Promise<string> {
  const deadline = Date.now() + SETUP_OUTPUT_WAIT_MS;
  while (proc.state !== 'closed' && Date.now() < deadline)
    await proc.waitForEvent(deadline - Date.now(), realClock);
  const text = proc.buffer
    .text(['stderr', 'pty'])
    // Control characters (a terminal's escapes and line ends among them) become spaces.
    .replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]+/g, ' ')
    .trim();
  return text.length > SETUP_OUTPUT_CHARS ? `…${text.slice(-SETUP_OUTPUT_CHARS)}` : text;
}
