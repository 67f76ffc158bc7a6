import { randomUUID } from 'node:crypto';
import { buildChildEnv, sanitizedServerEnv, withoutSecrets } from '../process/env.js';
import type { LaunchSpec, PreparedLaunch } from '../process/launch.js';
import { type DenialClassifier, ManagedProcess } from '../process/managedProcess.js';
import { checkCwd, LaunchCheckError, resolveProgram } from '../process/resolveProgram.js';
import { SpawnError } from '../process/spawner.js';
import {
  ErrorCode,
  internalError,
  invalidParams,
  invalidRequest,
  methodNotFound,
  RpcError,
} from '../protocol/errors.js';
import {
  ExecParams,
  InitializeParams,
  ReadParams,
  type ReadResult,
  SignalParams,
  type StartResult,
  TerminateParams,
  WriteParams,
} from '../protocol/exec.js';
import {
  Deferred,
  type Dispatcher,
  ResultWithCallback,
  RpcConnection,
  type Transport,
} from '../rpc/connection.js';
import { ApprovalBroker, type ApprovalOptions } from './approvals.js';
import { LOCAL_AGENT, type Principal } from './auth.js';
import { decodeBase64Strict } from './base64.js';
import { ServerEvents } from './events.js';
import { createFsMethods, type FsContextResolver, FsLane } from './fsHandlers.js';
import type { FsLimits } from './fsIo.js';
import { Launcher, type LauncherOptions } from './launcher.js';
import { parseParams } from './params.js';
import { RetentionLedger, type RetentionLimits } from './retention.js';
import { Session } from './session.js';

export interface Logger {
  info(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
  debug(...args: unknown[]): void;
}

export const silentLogger: Logger = { info() {}, warn() {}, error() {}, debug() {} };

/** What process/start asks of the sandbox and proxy layers: turn a plain launch into the one that runs. */
export interface LaunchPreparer {
  prepare(
    params: ExecParams,
    spec: LaunchSpec,
    ctx: { sessionId: string },
  ): PreparedLaunch | Promise<PreparedLaunch>;
  classify: DenialClassifier;
}

export interface ExecServerOptions {
  /** How long a detached session survives for `initialize {resumeSessionId}` (ms). 0 kills at once. */
  resumeGraceMs?: number;
  /** Live (not yet closed) processes allowed per session (`--max-processes`). */
  maxProcessesPerSession?: number;
  /** Live processes allowed at once on the whole server (`--max-total-processes`). */
  maxProcessesTotal?: number;
  /** Sessions of agents allowed at once, attached or detached (`--max-sessions`); panel sessions are not counted. */
  maxSessions?: number;
  /** Bytes of retained output (for process/read) per session and server-wide. */
  retention?: Partial<RetentionLimits>;
  log?: Logger;
  /** Options of the default launch pipeline (sandbox engine + managed proxy). */
  launcher?: Omit<LauncherOptions, 'log'>;
  /** Replaces the launch pipeline entirely (tests). */
  preparer?: LaunchPreparer;
  /** The environment `envPolicy` inherits from (already sanitised). Defaults to this process's, sanitised. */
  baseEnv?: Record<string, string>;
  /** Resolves the sandbox context that fs/* requests may carry (default: the launcher's, as for processes). */
  fsContext?: FsContextResolver;
  /** Bounds of fs/* requests (read size cap, timeout, listing size). */
  fsLimits?: Partial<FsLimits>;
  /** Interactive network approvals (the `approvals/*` methods; default prompt timeout). */
  approvals?: ApprovalOptions;
}

type Phase = 'new' | 'initializing' | 'ready';

interface ConnState {
  phase: Phase;
  session: Session | null;
  clientName: string;
  /** What the connection proved (src/server/auth.ts): sessions it creates are bound to it. */
  principal: Principal;
  /** This connection's fs/* requests, in order among themselves but apart from its process/* requests. */
  fsLane: FsLane;
}

export const DEFAULT_MAX_PROCESSES = 1024;
export const DEFAULT_MAX_TOTAL_PROCESSES = 4096;
export const DEFAULT_MAX_SESSIONS = 256;

type MethodKind = 'exec' | 'fs' | 'handshake';
interface Method {
  kind: MethodKind;
  handle(params: unknown, conn: RpcConnection, state: ConnState): unknown;
}

/**
 * The exec server: sessions, processes and the method table of protocol.md, independent of any transport.
 * `connect(transport)` makes one client connection (WebSocket, Electron IPC, stdio, tests).
 */
export class ExecServer implements Dispatcher {
  readonly events = new ServerEvents();
  readonly sessions = new Map<string, Session>();
  readonly log: Logger;
  private readonly resumeGraceMs: number;
  private readonly maxProcesses: number;
  private readonly maxProcessesTotal: number;
  private readonly maxSessions: number;
  /** Sessions by their resume key (the `sessionId` a client was given; the panel never sees it). */
  private readonly byResumeKey = new Map<string, Session>();
  private agentSessions = 0;
  /** Credential strings no child may see in its environment. */
  private readonly secrets = new Set<string>();
  readonly retention: RetentionLedger;
  readonly launcher: Launcher;
  preparer: LaunchPreparer;
  private readonly baseEnv: Record<string, string>;
  private readonly methods = new Map<string, Method>();
  private shuttingDown = false;
  private readonly fsContext: FsContextResolver;
  private readonly fsLimits: Partial<FsLimits> | undefined;
  /** Holds allowlist misses of proxies that ask for approvals and asks the subscribed panel(s). */
  readonly approvals: ApprovalBroker;

  constructor(opts: ExecServerOptions = {}) {
    this.resumeGraceMs = opts.resumeGraceMs ?? 10_000;
    this.maxProcesses = opts.maxProcessesPerSession ?? DEFAULT_MAX_PROCESSES;
    this.maxProcessesTotal = opts.maxProcessesTotal ?? DEFAULT_MAX_TOTAL_PROCESSES;
    this.maxSessions = opts.maxSessions ?? DEFAULT_MAX_SESSIONS;
    this.retention = new RetentionLedger(opts.retention);
    this.log = opts.log ?? silentLogger;
    this.launcher = new Launcher({ log: this.log, ...opts.launcher });
    this.preparer = opts.preparer ?? this.launcher;
    this.baseEnv = opts.baseEnv ?? sanitizedServerEnv();
    this.fsContext = opts.fsContext ?? this.launcher.fsContext;
    this.fsLimits = opts.fsLimits;
    this.registerMethods();
    this.approvals = new ApprovalBroker(this, opts.approvals);
  }

  /** A client connection, as `principal` (what its transport authenticated; the panel's gates read it). */
  connect(transport: Transport, principal: Principal = LOCAL_AGENT): RpcConnection {
    const conn = new RpcConnection(transport, this);
    conn.privileged = principal.role === 'panel';
    conn.state = {
      phase: 'new',
      session: null,
      clientName: '',
      principal,
      fsLane: new FsLane(),
    } satisfies ConnState;
    return conn;
  }

  /** Values that must never reach a child: any variable whose value contains one is dropped (src/process/env.ts). */
  protectSecrets(values: Iterable<string>): void {
    for (const v of values) if (v !== '') this.secrets.add(v);
  }

  /** The session a client's `sessionId` (its resume key) names. */
  sessionByResumeKey(key: string): Session | undefined {
    return this.byResumeKey.get(key);
  }

  /** Live processes (and starts in progress) of every session. */
  liveProcessCount(): number {
    let n = 0;
    for (const s of this.sessions.values()) n += s.liveProcessCount();
    return n;
  }

  /** Registers (or replaces) a method. Used by the panel's monitor/policy methods. */
  registerMethod(name: string, kind: MethodKind, handle: Method['handle']): void {
    this.methods.set(name, { kind, handle });
  }

  // ---- Dispatcher ------------------------------------------------------------------------------------------------

  request(method: string, params: unknown, conn: RpcConnection): unknown {
    const m = this.methods.get(method);
    if (!m) throw methodNotFound(method);
    const state = conn.state as ConnState;
    if (m.kind !== 'handshake' && state.phase !== 'ready') {
      const what = m.kind === 'fs' ? 'filesystem' : 'exec';
      throw invalidRequest(
        state.phase === 'new'
          ? `client must call initialize before using ${what} methods`
          : `client must send initialized before using ${what} methods`,
      );
    }
    return m.handle(params, conn, state);
  }

  notification(method: string, _params: unknown, conn: RpcConnection): boolean {
    const state = conn.state as ConnState;
    if (method !== 'initialized' || state.phase === 'new') return false;
    state.phase = 'ready';
    return true;
  }

  closed(conn: RpcConnection): void {
    const state = conn.state as ConnState;
    const session = state.session;
    if (!session || session.conn !== conn) return;
    session.detach();
    this.events.emitSession('detached', session);
    if (this.resumeGraceMs <= 0 || this.shuttingDown) {
      this.expire(session);
      return;
    }
    session.graceTimer = setTimeout(() => this.expire(session), this.resumeGraceMs);
    session.graceTimer.unref?.();
  }

  private expire(session: Session): void {
    if (session.conn) return;
    session.killAll();
    if (this.sessions.delete(session.id) && session.owner.role !== 'panel') this.agentSessions--;
    this.byResumeKey.delete(session.resumeKey);
    this.retention.forget(session.retention);
    this.events.emitSession('expired', session);
  }

  /**
   * Kills every process of every session (app quit, SIGTERM, SIGINT), then waits (at most `timeoutMs`) until each has
   * closed, so that sandbox and proxy cleanup (mount targets, bridge sockets, listeners) has run before exit.
   */
  async shutdown(timeoutMs = 3000): Promise<void> {
    this.shuttingDown = true;
    const open: ManagedProcess[] = [];
    for (const s of this.sessions.values()) {
      if (s.graceTimer) clearTimeout(s.graceTimer);
      s.killAll();
      for (const p of s.processes) if (p.state !== 'closed') open.push(p);
    }
    const deadline = Date.now() + timeoutMs;
    for (const p of open) {
      while (p.state !== 'closed') {
        const left = deadline - Date.now();
        if (left <= 0) return;
        await p.waitForEvent(left);
      }
    }
  }

  /** Every process of every session, for observers. */
  *allProcesses(): Generator<ManagedProcess> {
    for (const s of this.sessions.values()) yield* s.processes;
  }

  // ---- methods ---------------------------------------------------------------------------------------------------

  private registerMethods(): void {
    this.registerMethod('initialize', 'handshake', (p, conn, st) => this.initialize(p, conn, st));
    this.registerMethod('process/start', 'exec', (p, _c, st) => this.start(p, st.session!));
    this.registerMethod('process/read', 'exec', (p, _c, st) => this.read(p, st.session!));
    this.registerMethod('process/write', 'exec', (p, _c, st) => this.write(p, st.session!));
    this.registerMethod('process/terminate', 'exec', (p, _c, st) => this.terminate(p, st.session!));
    this.registerMethod('process/signal', 'exec', (p, _c, st) => this.signal(p, st.session!));
    const fs = createFsMethods({ rulesFor: this.fsContext, limits: this.fsLimits });
    for (const [name, handle] of Object.entries(fs)) {
      // Answered when done, without holding the connection's queue (protocol.md §3.6): a FIFO, a slow disk or a
      // big copy must not delay process/terminate.
      this.registerMethod(
        name,
        'fs',
        (p, _c, st) =>
          new Deferred(
            st.fsLane.run(() =>
              this.events.hasFsListeners() ? this.observedFs(name, handle, p, st) : handle(p),
            ),
          ),
      );
    }
  }

  /** Runs an fs/* handler and reports how it ended on the event bus (the audit trail listens). */
  private async observedFs(
    method: string,
    handle: (params: unknown) => Promise<unknown>,
    params: unknown,
    state: ConnState,
  ): Promise<unknown> {
    const time = Date.now();
    const session = state.session;
    try {
      const result = await handle(params);
      this.events.emit('fs', { method, time, params, session, error: null, refused: false });
      return result;
    } catch (e) {
      const error = e instanceof Error ? e : new Error(String(e));
      // The fs layer words every refusal of a request's sandbox context "sandbox denied …" / "sandbox: …" (-32603).
      const refused =
        e instanceof RpcError && e.code === ErrorCode.InternalError && /^sandbox( denied|:)/.test(e.message);
      this.events.emit('fs', { method, time, params, session, error, refused });
      throw e;
    }
  }

  private initialize(params: unknown, conn: RpcConnection, state: ConnState): unknown {
    if (state.phase !== 'new') throw invalidRequest('initialize may only be sent once per connection');
    const p = parseParams(InitializeParams, params, 'InitializeParams');
    let session: Session;
    if (p.resumeSessionId) {
      // The resume key is a secret only its creator was given, and the session is bound to the creator's credential:
      // another agent (even one holding the same token) cannot take over a detached session.
      const existing = this.byResumeKey.get(p.resumeSessionId);
      if (!existing || !sameCredential(existing.owner, state.principal))
        throw invalidRequest(`unknown session id ${p.resumeSessionId}`);
      if (existing.conn)
        throw invalidRequest(`session ${p.resumeSessionId} is already attached to another connection`);
      session = existing;
    } else {
      const panel = state.principal.role === 'panel';
      if (!panel && this.agentSessions >= this.maxSessions) {
        throw invalidRequest(
          `too many sessions on this server (limit ${this.maxSessions}, --max-sessions): close or let detached sessions expire first`,
        );
      }
      session = new Session(randomUUID(), p.clientName, this.events, {
        resumeKey: randomUUID(),
        owner: state.principal,
        retention: this.retention.share(() => session.processes),
      });
      this.sessions.set(session.id, session);
      this.byResumeKey.set(session.resumeKey, session);
      if (!panel) this.agentSessions++;
      this.events.emitSession('created', session);
    }
    session.attach(conn);
    state.session = session;
    state.clientName = p.clientName;
    state.phase = 'initializing';
    this.events.emitSession('attached', session);
    return new ResultWithCallback({ sessionId: session.resumeKey }, () => session.replayAll());
  }

  private start(params: unknown, session: Session): unknown {
    const p = parseParams(ExecParams, params, 'ExecParams');
    if (p.argv.length === 0) throw invalidParams('argv must not be empty');
    if (session.has(p.processId)) throw invalidRequest(`process ${p.processId} already exists`);
    if (session.liveProcessCount() >= this.maxProcesses) {
      throw invalidRequest(
        `too many live processes in this session (limit ${this.maxProcesses}, --max-processes)`,
      );
    }
    if (this.liveProcessCount() >= this.maxProcessesTotal) {
      throw invalidRequest(
        `too many live processes on this server (limit ${this.maxProcessesTotal}, --max-total-processes)`,
      );
    }
    const program = p.argv[0]!;
    if (program === '') throw internalError(`missing program for ${p.tty ? 'pty' : 'pipe'} spawn`);
    const { env } = withoutSecrets(buildChildEnv(p.env, p.envPolicy, this.baseEnv).env, this.secrets);
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
      prepared = this.preparer.prepare(p, spec, { sessionId: session.id });
    } catch (e) {
      session.unreserve(p.processId);
      throw e;
    }
    if (prepared instanceof Promise) {
      return prepared.then(
        (launch) => this.spawn(p, session, launch),
        (e) => {
          session.unreserve(p.processId);
          throw e;
        },
      );
    }
    return this.spawn(p, session, prepared);
  }

  private async spawnAsync(proc: ManagedProcess, afterSpawn: (pid: number) => Promise<void>): Promise<void> {
    try {
      await afterSpawn(proc.pid);
    } catch (e) {
      this.log.error(
        `process ${proc.info.processId}: post-spawn setup failed, killing it: ${(e as Error).message}`,
      );
      proc.kill('SIGKILL');
      throw e;
    }
  }

  private spawn(p: ExecParams, session: Session, launch: PreparedLaunch): unknown {
    if (session.conn === null && this.shuttingDown) {
      session.unreserve(p.processId);
      launch.cleanup();
      throw internalError('server is shutting down');
    }
    if (this.sessions.get(session.id) !== session) {
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
      this.preparer.classify,
    );
    try {
      proc.start();
    } catch (e) {
      session.unreserve(p.processId);
      launch.cleanup();
      if (e instanceof SpawnError) throw internalError(e.osMessage);
      throw internalError(e instanceof Error ? e.message : String(e));
    }
    session.add(proc);
    this.events.emitProcess('started', proc);
    const result: StartResult = { processId: p.processId, sandboxType: launch.sandboxType };
    const respond = () => new ResultWithCallback(result, () => session.release(proc));
    if (launch.afterSpawn) {
      return this.spawnAsync(proc, launch.afterSpawn.bind(launch)).then(respond, (e) => {
        throw internalError(`sandbox setup failed: ${(e as Error).message}`);
      });
    }
    return respond();
  }

  private lookup(session: Session, processId: string): ManagedProcess {
    const proc = session.get(processId);
    if (!proc) throw invalidRequest(`unknown process id ${processId}`);
    return proc;
  }

  private read(params: unknown, session: Session): unknown {
    const p = parseParams(ReadParams, params, 'ReadParams');
    const proc = this.lookup(session, p.processId);
    const afterSeq = p.afterSeq ?? 0;
    const maxBytes = p.maxBytes ?? null;
    const result = readResult(proc, afterSeq, maxBytes);
    const waitMs = p.waitMs ?? 0;
    if (result.chunks.length > 0 || result.closed || waitMs <= 0) return result;
    // Park without blocking the connection's later requests (Codex serialises them; we must not).
    const seqBefore = proc.lastSeq;
    return new Deferred(
      (async () => {
        const deadline = Date.now() + waitMs;
        while (proc.lastSeq === seqBefore && proc.state !== 'closed') {
          const left = deadline - Date.now();
          if (left <= 0) break;
          await proc.waitForEvent(left);
        }
        return readResult(proc, afterSeq, maxBytes);
      })(),
    );
  }

  private write(params: unknown, session: Session): unknown {
    const p = parseParams(WriteParams, params, 'WriteParams');
    const data = decodeBase64Strict(p.chunk);
    const proc = session.get(p.processId);
    if (!proc) return { status: 'unknownProcess' };
    return { status: proc.write(data) };
  }

  private terminate(params: unknown, session: Session): unknown {
    const p = parseParams(TerminateParams, params, 'TerminateParams');
    const proc = session.get(p.processId);
    if (!proc) return { running: false };
    const running = proc.kill('SIGKILL');
    if (proc.state !== 'closed') proc.killGroup();
    return { running };
  }

  private signal(params: unknown, session: Session): unknown {
    const p = parseParams(SignalParams, params, 'SignalParams');
    const proc = session.get(p.processId);
    if (proc && proc.exitCode === null) {
      const sig = p.signal === 'interrupt' ? 'SIGINT' : p.signal === 'terminate' ? 'SIGTERM' : 'SIGKILL';
      proc.kill(sig);
    }
    return {};
  }
}

function readResult(proc: ManagedProcess, afterSeq: number, maxBytes: number | null): ReadResult {
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
  };
}

function sameCredential(a: Principal, b: Principal): boolean {
  return a.role === b.role && a.credential === b.credential;
}
