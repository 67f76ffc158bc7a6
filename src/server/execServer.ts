import { type Clock, realClock } from '../clock.js';
import type { NetworkEvents } from '../network/events.js';
import type { ManagedNetworkSpec } from '../network/managedNetwork.js';
import { nativeSpawnAbsence } from '../platform/spawn.js';
import {
  type CgroupHost,
  cgroupHost,
  defaultLimits,
  PREPARED_CGROUPS,
  type ResourceLimits,
} from '../process/cgroup.js';
import { buildChildEnv, sanitizedServerEnv } from '../process/env.js';
import type { ManagedProcess } from '../process/managedProcess.js';
import { SecretScrub } from '../process/secretScrub.js';
import type { ExecParams, InitializeResult } from '../protocol/exec.js';
import type { ResourceLimitsInfo } from '../protocol/host.js';
import type { MethodName } from '../protocol/methods.js';
import { type Dispatcher, ResultWithCallback, RpcConnection, type Transport } from '../rpc/connection.js';
import { registerApprovalMethods } from './approvals/approvalMethods.js';
import { ApprovalBroker, type ApprovalOptions } from './approvals/approvals.js';
import { LOCAL_AGENT, type Principal } from './core/auth.js';
import {
  type Call,
  type ConnState,
  type Handler,
  type HandlerOptions,
  Lane,
  MethodDispatch,
  type MethodRegistry,
} from './core/dispatch.js';
import { ServerEvents } from './core/events.js';
import { type Logger, silentLogger } from './core/log.js';
import { RetentionLedger, type RetentionLimits } from './core/retention.js';
import type { Session } from './core/session.js';
import { SessionTable } from './core/sessions.js';
import { type FsContextResolver, registerFsMethods } from './fs/fsHandlers.js';
import type { FsLimits } from './fs/fsIo.js';
import { Launcher, type LauncherOptions, type LaunchPreparer } from './process/launcher.js';
import {
  type CommandResources,
  DEFAULT_MAX_PROCESSES,
  DEFAULT_MAX_TOTAL_PROCESSES,
  type ProcessHost,
  registerProcessMethods,
} from './process/processMethods.js';

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
  /** The time of grace periods, approval timeouts, `process/read` waits and fs deadlines (tests pass a fake one). */
  clock?: Clock;
  /**
   * Each command's cgroup limits (`--pids-max`, `--memory-max`; default: 4096 pids, half the memory the server may
   * use). A process/start may ask for lower ones (`limits`), never for higher.
   */
  limits?: Partial<ResourceLimits>;
  /** Where commands' cgroups come from (default: this process's, see src/process/cgroup.ts). */
  cgroups?: CgroupHost;
  /** Requests of one connection whose handlers may run at once (`--concurrent-requests`, default 1). */
  concurrentRequests?: number;
}

/**
 * The exec server: sessions, processes and the methods of src/protocol/methods.ts, independent of any transport.
 * `connect(transport)` makes one client connection (WebSocket, Electron IPC, stdio, tests). Other modules serve
 * more methods through `handle` (the panel's monitor, policy debugger and host info).
 */
export class ExecServer implements Dispatcher, MethodRegistry, ProcessHost {
  readonly events = new ServerEvents();
  readonly sessions: SessionTable;
  readonly log: Logger;
  readonly clock: Clock;
  /** Credentials no child may see in its environment, in any form (src/process/secretScrub.ts). */
  private readonly secrets = new SecretScrub();
  readonly retention: RetentionLedger;
  readonly launcher: Launcher;
  readonly preparer: LaunchPreparer;
  private readonly baseEnv: Record<string, string>;
  private readonly methods = new MethodDispatch();
  private stopping = false;
  private readonly concurrentRequests: number;
  /** Holds allowlist misses of proxies that ask for approvals and asks the subscribed panel(s). */
  readonly approvals: ApprovalBroker;
  readonly commandResources: CommandResources;

  constructor(opts: ExecServerOptions = {}) {
    this.clock = opts.clock ?? realClock;
    this.retention = new RetentionLedger(opts.retention);
    this.sessions = new SessionTable({
      events: this.events,
      retention: this.retention,
      clock: this.clock,
      ...(opts.resumeGraceMs !== undefined ? { resumeGraceMs: opts.resumeGraceMs } : {}),
      ...(opts.maxSessions !== undefined ? { maxSessions: opts.maxSessions } : {}),
    });
    this.log = opts.log ?? silentLogger;
    this.launcher = new Launcher({ log: this.log, ...opts.launcher });
    this.preparer = opts.preparer ?? this.launcher;
    this.baseEnv = opts.baseEnv ?? sanitizedServerEnv();
    this.commandResources = {
      cgroups: opts.cgroups ?? cgroupHost(),
      limits: { ...defaultLimits(), ...opts.limits },
    };
    this.commandResources.cgroups.prepare(this.commandResources.limits, PREPARED_CGROUPS);
    this.logResourceLimits();
    this.concurrentRequests = opts.concurrentRequests ?? 1;
    this.handle('initialize', (p, call) => {
      // Before the session attaches: the approval broker asks an attached client that answers approvals.
      if (call.state.phase === 'new')
        call.state.answersNetworkApprovals = p.capabilities?.networkApprovals === true;
      return this.initialize(p.clientName, p.resumeSessionId, call);
    });
    registerProcessMethods(this, this, {
      perSession: opts.maxProcessesPerSession ?? DEFAULT_MAX_PROCESSES,
      total: opts.maxProcessesTotal ?? DEFAULT_MAX_TOTAL_PROCESSES,
    });
    registerFsMethods(this, {
      rulesFor: opts.fsContext ?? this.launcher.fsContext,
      limits: opts.fsLimits,
      clock: this.clock,
      events: this.events,
    });
    this.approvals = new ApprovalBroker(
      {
        events: this.events,
        sessions: this.sessions,
        proxyOf: (sessionId, processId) => this.preparer.proxyOf?.(sessionId, processId),
        log: this.log,
        clock: this.clock,
      },
      opts.approvals,
    );
    registerApprovalMethods(this, this.approvals);
  }

  /** process/start's result: learning mode on for the process's workspace (the approval broker's). */
  startWarnings(sessionId: string, processId: string): readonly string[] {
    return this.approvals.startWarnings(sessionId, processId);
  }

  /** The bus the launcher's managed proxies report their policy decisions on (the audit trail's AuditSource). */
  get networkEvents(): NetworkEvents {
    return this.launcher.networkEvents;
  }

  /**
   * The managed network of a live process (the audit trail's AuditSource): its proxy's, from the launch pipeline in use (a replaced
   * one that keeps no proxies of its own may still launch through this server's launcher).
   */
  networkOf(sessionId: string, processId: string): ManagedNetworkSpec | undefined {
    return (this.preparer.proxyOf?.(sessionId, processId) ?? this.launcher.proxyOf(sessionId, processId))
      ?.spec;
  }

  /** Says at start what bounds each command, or that nothing does (issue 13: never silently). */
  private logResourceLimits(): void {
    if (nativeSpawnAbsence) {
      this.log.warn(
        `${nativeSpawnAbsence}: commands start through child_process, nothing kills them if this server is killed, ` +
          'and sandboxed commands and sandboxed fs/* are refused',
      );
    }
    const { cgroups, limits } = this.commandResources;
    const st = cgroups.status;
    if (st.version === 'none') {
      this.log.warn(`commands are not bounded (no pids or memory limit): ${st.problem}`);
      return;
    }
    if (st.problem) this.log.warn(st.problem);
    const bounds = [
      ...(st.enforced.includes('pids') ? [`${limits.pidsMax} pids`] : []),
      ...(st.enforced.includes('memory')
        ? [`${Math.round(limits.memoryMaxBytes / 2 ** 20)} MiB of memory`]
        : []),
    ];
    this.log.info(
      `each command runs in its own cgroup (${st.version}): at most ${bounds.join(' and ')}` +
        (st.cpuGroup ? '; all commands share one CPU group' : ''),
    );
    if (st.cpuProblem) this.log.info(`commands do not share one CPU group: ${st.cpuProblem}`);
  }

  /** The limits each command gets, and what enforces them (host/info). */
  get resourceLimits(): ResourceLimitsInfo {
    const { cgroups, limits } = this.commandResources;
    const st = cgroups.status;
    return {
      ...st,
      dirs: [...st.dirs],
      enforced: [...st.enforced],
      pidsMax: st.enforced.includes('pids') ? limits.pidsMax : null,
      memoryMaxBytes: st.enforced.includes('memory') ? limits.memoryMaxBytes : null,
    };
  }

  /** Serves `method` with `handler` (replacing any earlier one). */
  handle<M extends MethodName>(method: M, handler: Handler<M>, opts?: HandlerOptions): void {
    this.methods.handle(method, handler, opts);
  }

  /** The methods this server answers. */
  served(): MethodName[] {
    return this.methods.served();
  }

  /** A client connection, as `principal` (what its transport authenticated; the panel's gates read it). */
  connect(transport: Transport, principal: Principal = LOCAL_AGENT): RpcConnection {
    const conn = new RpcConnection(transport, this, this.clock);
    conn.maxConcurrent = this.concurrentRequests;
    conn.state = {
      phase: 'new',
      session: null,
      clientName: '',
      principal,
      fsLane: new Lane(),
      answersNetworkApprovals: false,
    } satisfies ConnState;
    return conn;
  }

  /** True once `shutdown` has begun: no new process starts on a detached session. */
  get shuttingDown(): boolean {
    return this.stopping;
  }

  /** The environment a child gets for these params: `env` over `envPolicy`, without the server's secrets. */
  childEnv(p: ExecParams): Record<string, string> {
    const { env, removed } = this.secrets.scrub(buildChildEnv(p.env, p.envPolicy, this.baseEnv).env);
    if (removed.length > 0)
      this.log.debug(
        `process ${p.processId}: ${removed.join(', ')} not passed on: a server credential is in it`,
      );
    return env;
  }

  /**
   * Values that must never reach a child: any variable whose value or name holds one, in any form (percent-, form-,
   * JSON-escaped, base64, hex), is dropped (src/process/secretScrub.ts). `until` (ms since the epoch): when the value
   * stops being a credential (a presented JWT's `exp`), so that it can be forgotten.
   */
  protectSecrets(values: Iterable<string>, until?: number): void {
    for (const v of values) this.secrets.add(v, until);
  }

  /** The session a client's `sessionId` (its resume key) names. */
  sessionByResumeKey(key: string): Session | undefined {
    return this.sessions.byKey(key);
  }

  /** Every process of every session, for observers. */
  allProcesses(): Generator<ManagedProcess> {
    return this.sessions.processes();
  }

  /** The handler of `method`, so that a module can extend it (the fleet extends approvals/*). */
  handlerOf<M extends MethodName>(method: M): Handler<M> | undefined {
    return this.methods.handlerOf(method);
  }

  // ---- Dispatcher ------------------------------------------------------------------------------------------------

  request(method: string, params: unknown, conn: RpcConnection): unknown {
    return this.methods.call(method, params, conn);
  }

  notification(method: string, _params: unknown, conn: RpcConnection): boolean {
    const state = conn.state as ConnState;
    if (method !== 'initialized' || state.phase === 'new') return false;
    state.phase = 'ready';
    return true;
  }

  closed(conn: RpcConnection): void {
    const session = (conn.state as ConnState).session;
    if (session) this.sessions.detach(session, conn, this.stopping);
  }

  /**
   * Kills every process of every session (app quit, SIGTERM, SIGINT), then waits (at most `timeoutMs`) until each has
   * closed, so that sandbox and proxy cleanup (mount targets, bridge sockets, listeners) has run before exit.
   */
  async shutdown(timeoutMs = 3000): Promise<void> {
    this.stopping = true;
    this.sessions.killAll();
    const open = [...this.sessions.processes()].filter((p) => p.state !== 'closed');
    // Real time, whatever the server's clock: this bounds how long an exit waits for the OS.
    const deadline = realClock.now() + timeoutMs;
    for (const p of open) {
      while (p.state !== 'closed') {
        const left = deadline - realClock.now();
        if (left <= 0) return;
        await p.waitForEvent(left, realClock);
      }
    }
  }

  // ---- methods ---------------------------------------------------------------------------------------------------

  private initialize(
    clientName: string,
    resumeKey: string | null | undefined,
    { conn, state }: Call,
  ): ResultWithCallback<InitializeResult> {
    const session = this.sessions.open(conn, clientName, state.principal, resumeKey);
    state.session = session;
    state.clientName = clientName;
    state.phase = 'initializing';
    const result: InitializeResult = { sessionId: session.resumeKey };
    if (this.preparer.requireSandbox) result.requireSandbox = true;
    return new ResultWithCallback(result, () => session.replayAll());
  }
}
