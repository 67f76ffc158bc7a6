/**
 * The panel's monitor feed: a subscription any panel connection (the app's IPC, or a WebSocket client holding the
 * panel token) opens with `monitor/subscribe` to see ALL sessions — processes, their output, proxy audit events and
 * blocked requests — as a snapshot followed by live `monitor/*` notifications. (What a panel may do to those processes
 * is panelActions.ts; the policy debugger is policyDebugger.ts; panel.ts puts them together.)
 *
 * Memory is bounded: the network events live in fixed rings, finished processes of expired sessions in a fixed list,
 * and each subscriber has a byte budget for what is queued on its transport; past it, output chunks and network
 * events are dropped (and counted, reported as `monitor/dropped`), and process/session updates are coalesced into a
 * set of dirty keys that is flushed once the subscriber has drained. Env values are never sent.
 */
import { type Clock, realClock, type Timer } from '../clock.js';
import type { NetworkEvents } from '../network/events.js';
import type { ManagedProcess } from '../process/managedProcess.js';
import { invalidRequest } from '../protocol/errors.js';
import type { OutputStream } from '../protocol/exec.js';
import type {
  DroppedCounts,
  HostCount,
  MonitorAudit,
  MonitorBlocked,
  MonitorProcess,
  MonitorSession,
  MonitorSnapshot,
} from '../protocol/monitor.js';
import { redact } from '../protocol/monitor.js';
import { auditMetadataOf, type BlockedEvent, type NetworkAuditEvent } from '../protocol/network.js';
import { ResultWithCallback, type RpcConnection } from '../rpc/connection.js';
import { isClientWrapped, readLauncherArgs } from '../sandbox/codexWrapped.js';
import type { ConnState, MethodRegistry } from './dispatch.js';
import type { ServerEvents } from './events.js';
import type { Session } from './session.js';
import type { SessionTable } from './sessions.js';

/** Above this many bytes queued on a subscriber's transport, output and network events are dropped for it. */
export const SUBSCRIBER_HIGH_WATER = 4 * 1024 * 1024;
const SUBSCRIBER_LOW_WATER = 1024 * 1024;
export const BLOCKED_RING = 500;
export const AUDIT_RING = 1000;
export const FINISHED_PROCESSES = 500;
const MAX_HOSTS = 2000;
const BYTES_TICK_MS = 1000;

export interface MonitorOptions {
  /** The server's resume grace (ms), to show detached sessions' countdown. */
  resumeGraceMs?: number;
  /** Whether policy/preview can show launches (the snapshot tells the panel). */
  previewWired?: boolean;
  highWaterBytes?: number;
}

/** What the feed watches: the server's events and sessions, on its clock. */
export interface MonitorHost {
  readonly events: ServerEvents;
  readonly sessions: Pick<SessionTable, 'values' | 'holds' | 'processes'>;
  readonly clock?: Clock;
}

/** The badge for a process: the server's own sandbox type, or a client-side wrapper recognised from argv[0]. */
export function sandboxBadge(sandboxType: string, argv: readonly string[]): MonitorProcess['badge'] {
  if (sandboxType === 'linuxSeccomp') return 'linux-seccomp';
  if (sandboxType === 'macosSeatbelt') return 'macos-seatbelt';
  return isClientWrapped(argv) ? 'client-wrapped' : 'none';
}

class Subscriber {
  live = false;
  outputAll = true;
  readonly followed = new Set<string>();
  queued = 0;
  overflowing = false;
  readonly dirtyProcesses = new Map<string, ManagedProcess>();
  readonly dirtySessions = new Set<Session>();
  readonly dropped = { output: 0, network: 0 };
  droppedChanged = false;

  constructor(
    readonly conn: RpcConnection,
    readonly session: Session | null,
  ) {}
}

const key = (sessionId: string, processId: string) => `${sessionId}\u0000${processId}`;

export class Monitor {
  private readonly subscribers = new Set<Subscriber>();
  private readonly blocked: MonitorBlocked[] = [];
  private readonly audit: MonitorAudit[] = [];
  private readonly hosts = new Map<string, HostCount>();
  /** Processes of expired sessions, newest last (info only: their output is gone). */
  private readonly finished = new Map<string, MonitorProcess>();
  private evicted = 0;
  private forgotten = 0;
  private nextEventId = 1;
  private networkWired = false;
  private readonly highWater: number;
  private readonly lowWater: number;
  private readonly detachListeners: (() => void)[] = [];
  private outputAttached = false;
  private ticker: Timer | null = null;
  private readonly clock: Clock;
  private readonly reportedBytes = new WeakMap<ManagedProcess, number>();
  private readonly onOutput = (proc: ManagedProcess, seq: number, stream: OutputStream, data: Buffer) =>
    this.output(proc, seq, stream, data);

  constructor(
    private readonly server: MonitorHost,
    private readonly opts: MonitorOptions = {},
  ) {
    this.clock = server.clock ?? realClock;
    this.highWater = opts.highWaterBytes ?? SUBSCRIBER_HIGH_WATER;
    this.lowWater = Math.min(SUBSCRIBER_LOW_WATER, Math.floor(this.highWater / 4));
    const onProcess = (_kind: string, proc: ManagedProcess) => this.processChanged(proc);
    const onSession = (kind: 'created' | 'attached' | 'detached' | 'expired', s: Session) =>
      this.sessionChanged(kind, s);
    server.events.on('process', onProcess);
    server.events.on('session', onSession);
    this.detachListeners.push(
      () => server.events.off('process', onProcess),
      () => server.events.off('session', onSession),
    );
  }

  /** Feeds a proxy event bus (blocked requests and audit events) into the feed. May be called for several buses. */
  attachNetwork(bus: NetworkEvents): () => void {
    this.networkWired = true;
    const offBlocked = bus.on('blocked', (e) => this.onBlocked(e));
    const offAudit = bus.on('audit', (e) => this.onAudit(e));
    const off = () => {
      offBlocked();
      offAudit();
    };
    this.detachListeners.push(off);
    return off;
  }

  /** Stops observing the server (tests, shutdown). */
  dispose(): void {
    for (const f of this.detachListeners) f();
    this.detachListeners.length = 0;
    this.subscribers.clear();
    this.updateOutputListener();
  }

  get subscriberCount(): number {
    return this.subscribers.size;
  }

  /** Bytes currently queued for subscribers (for tests of the memory bound). */
  queuedBytes(): number {
    let n = 0;
    for (const s of this.subscribers) n += s.queued;
    return n;
  }

  // ---- methods -----------------------------------------------------------------------------------------------

  /** Serves `monitor/subscribe`, `monitor/unsubscribe` and `monitor/follow`. */
  register(registry: MethodRegistry): void {
    registry.handle('monitor/subscribe', (p, { conn }) => this.subscribe(p?.output ?? 'all', conn));
    registry.handle('monitor/unsubscribe', (_p, { conn }) => {
      for (const sub of this.subscribers) if (sub.conn === conn) this.subscribers.delete(sub);
      this.updateOutputListener();
      return {};
    });
    registry.handle('monitor/follow', (p, { conn }) => this.follow(p.sessionId, p.processId, p.follow, conn));
  }

  /** True while the feed still lists a process of an expired session (its output is gone). */
  remembers(sessionId: string, processId: string): boolean {
    return this.finished.has(key(sessionId, processId));
  }

  private subscribe(output: 'all' | 'followed', conn: RpcConnection): ResultWithCallback<MonitorSnapshot> {
    for (const sub of this.subscribers) if (sub.conn === conn) this.subscribers.delete(sub);
    const session = (conn.state as ConnState | undefined)?.session ?? null;
    const sub = new Subscriber(conn, session);
    sub.outputAll = output === 'all';
    this.subscribers.add(sub);
    this.updateOutputListener();
    const snapshot = this.snapshot(session);
    // Live notifications start right after the snapshot response is on the wire.
    return new ResultWithCallback(snapshot, () => {
      sub.live = true;
    });
  }

  snapshot(self: Session | null = null): MonitorSnapshot {
    const processes: MonitorProcess[] = [...this.finished.values()];
    for (const p of this.server.sessions.processes()) processes.push(this.describe(p));
    processes.sort((a, b) => a.startedAt - b.startedAt);
    return {
      processes,
      sessions: [...this.server.sessions.values()].map((s) => this.describeSession(s, self)),
      blocked: [...this.blocked],
      audit: [...this.audit],
      hosts: [...this.hosts.values()],
      dropped: { output: 0, network: 0, evicted: this.evicted, forgottenProcesses: this.forgotten },
      limits: {
        blockedRing: BLOCKED_RING,
        auditRing: AUDIT_RING,
        finishedProcesses: FINISHED_PROCESSES,
        subscriberHighWaterBytes: this.highWater,
      },
      networkWired: this.networkWired,
      previewWired: this.opts.previewWired ?? false,
      serverTime: this.clock.now(),
    };
  }

  // ---- events ------------------------------------------------------------------------------------------------

  describe(p: ManagedProcess): MonitorProcess {
    const summary = p.launch.summary;
    return {
      sessionId: p.info.sessionId,
      processId: p.info.processId,
      clientName: p.info.clientName,
      argv: p.info.argv,
      cwd: p.info.cwd,
      tty: p.info.tty,
      pipeStdin: p.info.pipeStdin,
      pid: p.pid,
      state: p.state,
      exitCode: p.exitCode,
      sandboxDenied: p.sandboxDenied,
      ...(p.limitHit ? { limitHit: p.limitHit } : {}),
      sandboxType: p.sandboxType,
      badge: sandboxBadge(p.sandboxType, p.info.argv),
      launcherFlags: isClientWrapped(p.info.argv) ? readLauncherArgs(p.info.argv).flags : null,
      policy: summary ? (redact(summary) as Record<string, unknown>) : null,
      metadata: p.info.metadata ? (redact(p.info.metadata) as Record<string, unknown>) : null,
      envKeys: Object.keys(p.launch.spec.env).sort(),
      startedAt: p.startedAt,
      exitedAt: p.exitedAt,
      closedAt: p.closedAt,
      bytesOut: p.bytesOut,
      lastSeq: p.lastSeq,
      retained: !p.outputEvicted,
    };
  }

  private describeSession(s: Session, self: Session | null): MonitorSession {
    const grace = this.opts.resumeGraceMs;
    return {
      sessionId: s.id,
      clientName: s.clientName,
      attached: s.conn !== null,
      detachedAt: s.detachedAt,
      expiresAt: s.detachedAt !== null && grace !== undefined ? s.detachedAt + grace : null,
      processCount: s.processCount,
      self: s === self,
    };
  }

  private processChanged(proc: ManagedProcess): void {
    if (this.subscribers.size === 0) return;
    const k = key(proc.info.sessionId, proc.info.processId);
    let text: string | null = null;
    for (const sub of this.subscribers) {
      if (!this.usable(sub)) continue;
      if (sub.overflowing) {
        sub.dirtyProcesses.set(k, proc);
        continue;
      }
      text ??= notification('monitor/process', { process: this.describe(proc) });
      this.send(sub, text);
    }
  }

  private sessionChanged(kind: 'created' | 'attached' | 'detached' | 'expired', s: Session): void {
    if (kind === 'detached' || kind === 'expired') {
      for (const sub of this.subscribers) {
        if (sub.session === s) this.subscribers.delete(sub);
      }
      this.updateOutputListener();
    }
    if (kind === 'expired') this.rememberFinished(s);
    for (const sub of this.subscribers) {
      if (!this.usable(sub)) continue;
      if (sub.overflowing) {
        sub.dirtySessions.add(s);
        continue;
      }
      this.send(
        sub,
        notification('monitor/session', { kind, session: this.describeSession(s, sub.session) }),
      );
      if (kind === 'expired') {
        for (const p of s.processes) {
          const rec = this.finished.get(key(s.id, p.info.processId));
          if (rec) this.send(sub, notification('monitor/process', { process: rec }));
        }
      }
    }
  }

  private rememberFinished(s: Session): void {
    for (const p of s.processes) {
      this.finished.set(key(s.id, p.info.processId), { ...this.describe(p), retained: false });
    }
    while (this.finished.size > FINISHED_PROCESSES) {
      const oldest = this.finished.keys().next().value as string;
      this.finished.delete(oldest);
      this.forgotten++;
    }
  }

  private output(proc: ManagedProcess, seq: number, stream: OutputStream, data: Buffer): void {
    let text: string | null = null;
    let k: string | null = null;
    for (const sub of this.subscribers) {
      if (!sub.outputAll) {
        k ??= key(proc.info.sessionId, proc.info.processId);
        if (!sub.followed.has(k)) continue;
      }
      if (!this.usable(sub)) continue;
      if (sub.overflowing || sub.queued > this.highWater) {
        sub.dropped.output++;
        sub.droppedChanged = true;
        sub.overflowing = true;
        continue;
      }
      text ??=
        `{"method":"monitor/output","params":{"sessionId":${JSON.stringify(proc.info.sessionId)},` +
        `"processId":${JSON.stringify(proc.info.processId)},"seq":${seq},"stream":"${stream}",` +
        `"chunk":"${data.toString('base64')}"}}`;
      this.send(sub, text);
    }
  }

  private onBlocked(e: BlockedEvent): void {
    const r = e.record;
    const rec: MonitorBlocked = {
      id: this.nextEventId++,
      processId: e.processId,
      sessionId: e.sessionId ?? null,
      host: r.host,
      port: r.port ?? null,
      reason: r.reason,
      method: r.method,
      protocol: r.protocol,
      mode: r.mode,
      decision: r.decision ?? null,
      source: r.source ?? null,
      client: r.client,
      timestamp: r.timestamp,
      blockedTotal: e.blocked_total,
    };
    this.blocked.push(rec);
    if (this.blocked.length > BLOCKED_RING) {
      this.blocked.shift();
      this.evicted++;
    }
    this.countHost(rec.host, 'blocked');
    this.broadcastNetwork(notification('monitor/blocked', { event: rec }));
  }

  private onAudit(e: NetworkAuditEvent): void {
    const metadata = auditMetadataOf(e);
    const rec: MonitorAudit = {
      id: this.nextEventId++,
      processId: e.processId,
      sessionId: e.sessionId ?? null,
      host: e['server.address'],
      port: e['server.port'],
      decision: e['network.policy.decision'],
      reason: e['network.policy.reason'],
      source: e['network.policy.source'],
      protocol: e['network.transport.protocol'],
      method: e['http.request.method'],
      scope: e['network.policy.scope'],
      override: e['network.policy.override'],
      timestamp: e['event.timestamp'],
      metadata: redact(metadata) as Record<string, unknown>,
    };
    this.audit.push(rec);
    if (this.audit.length > AUDIT_RING) {
      this.audit.shift();
      this.evicted++;
    }
    if (rec.decision === 'allow') this.countHost(rec.host, 'allowed');
    this.broadcastNetwork(notification('monitor/audit', { event: rec }));
  }

  private countHost(host: string, what: 'allowed' | 'blocked'): void {
    let c = this.hosts.get(host);
    if (!c) {
      c = { host, allowed: 0, blocked: 0 };
      this.hosts.set(host, c);
      if (this.hosts.size > MAX_HOSTS) this.hosts.delete(this.hosts.keys().next().value as string);
    }
    c[what]++;
  }

  private broadcastNetwork(text: string): void {
    for (const sub of this.subscribers) {
      if (!this.usable(sub)) continue;
      if (sub.overflowing || sub.queued > this.highWater) {
        sub.dropped.network++;
        sub.droppedChanged = true;
        sub.overflowing = true;
        continue;
      }
      this.send(sub, text);
    }
  }

  // ---- delivery ----------------------------------------------------------------------------------------------

  private usable(sub: Subscriber): boolean {
    if (sub.conn.closed) {
      this.subscribers.delete(sub);
      this.updateOutputListener();
      return false;
    }
    return sub.live;
  }

  private send(sub: Subscriber, text: string): void {
    const len = text.length;
    sub.queued += len;
    sub.conn.sendRaw(text, () => {
      sub.queued -= len;
      if (sub.overflowing && sub.queued <= this.lowWater) this.flush(sub);
    });
    if (sub.queued > this.highWater) sub.overflowing = true;
  }

  /** The subscriber has drained: send the coalesced updates and what it missed. */
  private flush(sub: Subscriber): void {
    if (!this.subscribers.has(sub) || sub.conn.closed) return;
    sub.overflowing = false;
    const procs = [...sub.dirtyProcesses.values()];
    const sessions = [...sub.dirtySessions];
    sub.dirtyProcesses.clear();
    sub.dirtySessions.clear();
    for (const s of sessions) {
      const kind = this.server.sessions.holds(s) ? (s.conn ? 'attached' : 'detached') : 'expired';
      this.send(
        sub,
        notification('monitor/session', { kind, session: this.describeSession(s, sub.session) }),
      );
    }
    for (const p of procs) {
      const rec = this.finished.get(key(p.info.sessionId, p.info.processId)) ?? this.describe(p);
      this.send(sub, notification('monitor/process', { process: rec }));
    }
    if (sub.droppedChanged) {
      sub.droppedChanged = false;
      const dropped: DroppedCounts = {
        output: sub.dropped.output,
        network: sub.dropped.network,
        evicted: this.evicted,
        forgottenProcesses: this.forgotten,
      };
      this.send(sub, notification('monitor/dropped', { dropped }));
    }
  }

  /** The output hook is installed only while some subscriber wants output (the hot path stays untouched). */
  private updateOutputListener(): void {
    let want = false;
    for (const s of this.subscribers) if (s.outputAll || s.followed.size > 0) want = true;
    if (want !== this.outputAttached) {
      this.outputAttached = want;
      if (want) this.server.events.on('output', this.onOutput);
      else this.server.events.off('output', this.onOutput);
    }
    if (this.subscribers.size > 0 && !this.ticker) {
      this.scheduleTick();
    } else if (this.subscribers.size === 0 && this.ticker) {
      this.clock.clearTimeout(this.ticker);
      this.ticker = null;
    }
  }

  private scheduleTick(): void {
    this.ticker = this.clock
      .setTimeout(() => {
        this.tick();
        if (this.subscribers.size > 0) this.scheduleTick();
        else this.ticker = null;
      }, BYTES_TICK_MS)
      .unref();
  }

  /** About once a second: fresh byte counts of running processes whose output grew. */
  private tick(): void {
    for (const p of this.server.sessions.processes()) {
      if (p.state !== 'running') continue;
      if (this.reportedBytes.get(p) === p.bytesOut) continue;
      this.reportedBytes.set(p, p.bytesOut);
      this.processChanged(p);
    }
  }

  private follow(sessionId: string, processId: string, follow: boolean, conn: RpcConnection) {
    const sub = [...this.subscribers].find((s) => s.conn === conn);
    if (!sub) throw invalidRequest('monitor/follow needs monitor/subscribe first');
    const k = key(sessionId, processId);
    if (follow) sub.followed.add(k);
    else sub.followed.delete(k);
    this.updateOutputListener();
    return { following: follow };
  }
}

function notification(method: string, params: unknown): string {
  return `{"method":${JSON.stringify(method)},"params":${JSON.stringify(params)}}`;
}
