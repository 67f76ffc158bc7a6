/**
 * The panel's monitor feed: a subscription any panel connection (the app's IPC, or a WebSocket client holding the
 * panel token) opens with `monitor/subscribe` to see ALL sessions — processes, their output, proxy audit events and
 * blocked requests — as a snapshot followed by live `monitor/batch` notifications (delivery: monitorFeed.ts). (What a
 * panel may do to those processes is panelActions.ts; the policy debugger is policyDebugger.ts; panel.ts puts them
 * together.)
 *
 * On a fleet host the rows of the servers it joined (src/fleet) are relayed into the same feed, tagged with their
 * `server`, and following such a process's output is asked of that server (joinedServers.ts).
 *
 * Memory is bounded: the network events live in fixed rings (monitorNetwork.ts), finished processes of expired
 * sessions in a fixed list, and each subscriber's queue is bounded (monitorFeed.ts). Env values are never sent.
 */
import { type Clock, realClock, type Timer } from '../../clock.js';
import type { NetworkEvents } from '../../network/events.js';
import type { ManagedProcess } from '../../process/managedProcess.js';
import { invalidRequest } from '../../protocol/errors.js';
import type { OutputStream } from '../../protocol/exec.js';
import type {
  FollowParams,
  FollowResult,
  MonitorAudit,
  MonitorBlocked,
  MonitorProcess,
  MonitorServer,
  MonitorSession,
  MonitorSnapshot,
  SessionChangeKind,
} from '../../protocol/monitor.js';
import { ResultWithCallback, type RpcConnection } from '../../rpc/connection.js';
import { type OutputHead, outputHead } from '../../rpc/output.js';
import type { ConnState, MethodRegistry } from '../core/dispatch.js';
import type { ServerEvents } from '../core/events.js';
import type { Session } from '../core/session.js';
import type { SessionTable } from '../core/sessions.js';
import { type JoinedServers, remoteServer } from './joinedServers.js';
import { describeProcess, describeSession, processJson, processKey } from './monitorDescribe.js';
import { Feed, type FeedSource, type FeedSubscriber } from './monitorFeed.js';
import { AUDIT_RING, BLOCKED_RING, NetworkLog } from './monitorNetwork.js';
import { outputTail, TAIL_BYTES } from './panelActions.js';

export const SUBSCRIBER_HIGH_WATER = 4 * 1024 * 1024;
const SUBSCRIBER_LOW_WATER = 1024 * 1024;
export const FINISHED_PROCESSES = 500;
const BYTES_TICK_MS = 1000;

export interface MonitorOptions {
  /** The server's resume grace (ms), to show detached sessions' countdown. */
  resumeGraceMs?: number;
  /** Whether policy/preview can show launches (the snapshot tells the panel). */
  previewWired?: boolean;
  highWaterBytes?: number;
  /** At most one batch per this many ms (default 50). */
  batchMs?: number;
  /** Dirty processes a stuck subscriber may accumulate before it is dropped to a resync (default 20 000). */
  maxDirty?: number;
  /** Processes per snapshot page (default 2000; a test pages with fewer). */
  snapshotPage?: number;
  /** The host's own name in the server list of a fleet host. */
  serverName?: string;
}

/** What the feed watches: the server's events and sessions, on its clock. */
export interface MonitorHost {
  readonly events: ServerEvents;
  readonly sessions: Pick<SessionTable, 'values' | 'holds' | 'processes' | 'get'>;
  readonly clock?: Clock;
}

/** A process of the feed: one of ours, a record of an expired session's, or a joined server's row. */
type FeedProcess = ManagedProcess | MonitorProcess;
/** A session of the feed: one of ours, or a joined server's. */
type FeedSession = Session | MonitorSession;

const isLocal = (p: FeedProcess): p is ManagedProcess => (p as ManagedProcess).info !== undefined;

export { type JoinedServers, processKey };

export class Monitor {
  private readonly feed: Feed<FeedProcess, FeedSession>;
  private readonly network = new NetworkLog();
  /** Processes of expired sessions, newest last (info only: their output is gone). */
  private readonly finished = new Map<string, MonitorProcess>();
  private forgotten = 0;
  private networkWired = false;
  private readonly highWater: number;
  private readonly detachListeners: (() => void)[] = [];
  private outputAttached = false;
  private ticker: Timer | null = null;
  private readonly clock: Clock;
  private readonly reportedBytes = new WeakMap<ManagedProcess, number>();
  private readonly recordJson = new WeakMap<object, string>();
  /** The start of each process's monitor/output notifications, built once. */
  private readonly outputHeads = new WeakMap<object, OutputHead>();
  private joined: JoinedServers | null = null;
  private readonly onOutput = (proc: ManagedProcess, seq: number, stream: OutputStream, data: Buffer) =>
    this.feed.output(this.localKey(proc), proc, seq, stream, data);

  constructor(
    private readonly server: MonitorHost,
    private readonly opts: MonitorOptions = {},
  ) {
    this.clock = server.clock ?? realClock;
    this.highWater = opts.highWaterBytes ?? SUBSCRIBER_HIGH_WATER;
    this.feed = new Feed(this.source(), {
      ...(opts.batchMs !== undefined ? { batchMs: opts.batchMs } : {}),
      ...(opts.maxDirty !== undefined ? { maxDirty: opts.maxDirty } : {}),
      ...(opts.snapshotPage !== undefined ? { page: opts.snapshotPage } : {}),
      highWaterBytes: this.highWater,
      lowWaterBytes: Math.min(SUBSCRIBER_LOW_WATER, Math.floor(this.highWater / 4)),
      clock: this.clock,
      counters: () => ({ evicted: this.network.evicted, forgottenProcesses: this.forgotten }),
      onRemove: (sub) => this.removed(sub),
    });
    const onProcess = (_kind: string, proc: ManagedProcess) => this.processChanged(proc);
    const onSession = (kind: SessionChangeKind, s: Session) => this.sessionChanged(kind, s);
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
    const offBlocked = bus.on('blocked', (e) => this.feed.network('blocked', this.network.addBlocked(e)));
    const offAudit = bus.on('audit', (e) => this.feed.network('audit', this.network.addAudit(e)));
    const off = () => {
      offBlocked();
      offAudit();
    };
    this.detachListeners.push(off);
    return off;
  }

  /** The servers of a fleet host: their rows join the feed through the relay* methods. */
  attachJoined(joined: JoinedServers): void {
    this.joined = joined;
  }

  get joinedServers(): JoinedServers | null {
    return this.joined;
  }

  /** Stops observing the server (tests, shutdown). */
  dispose(): void {
    for (const f of this.detachListeners) f();
    this.detachListeners.length = 0;
    this.feed.dispose();
    this.updateOutputListener();
  }

  get subscriberCount(): number {
    return this.feed.subscribers.size;
  }

  /** Bytes currently queued for subscribers (for tests of the memory bound). */
  queuedBytes(): number {
    let n = 0;
    for (const s of this.feed.subscribers) n += s.queued;
    return n;
  }

  /** Entries queued for subscribers (dirty processes, sessions, network events), for tests of the bound. */
  queuedEntries(): number {
    let n = 0;
    for (const s of this.feed.subscribers)
      n += s.dirty.size + s.sessions.size + s.blocked.length + s.audit.length;
    return n;
  }

  // ---- what a fleet relays ---------------------------------------------------------------------------------------

  relayProcess(rec: MonitorProcess): void {
    this.feed.process(processKey(rec.server ?? '', rec.sessionId, rec.processId), rec);
  }

  relaySession(kind: SessionChangeKind, rec: MonitorSession): void {
    this.feed.session(`${rec.server ?? ''}\u0000${rec.sessionId}`, kind, rec);
  }

  relayNetwork(kind: 'blocked' | 'audit', rec: MonitorBlocked | MonitorAudit): void {
    this.feed.network(kind, rec);
  }

  relayServer(rec: MonitorServer): void {
    this.feed.server(rec.id, rec);
  }

  /** Live output of a joined server's process (`data` decoded), to the subscribers that follow it. */
  relayOutput(rec: MonitorProcess, seq: number, stream: OutputStream, data: Buffer): void {
    this.feed.output(processKey(rec.server ?? '', rec.sessionId, rec.processId), rec, seq, stream, data);
  }

  /** Whether some subscriber follows this joined server's process. */
  followsRemote(server: string, sessionId: string, processId: string): boolean {
    return this.feed.wantsOutput(processKey(server, sessionId, processId));
  }

  // ---- methods -----------------------------------------------------------------------------------------------

  /** Serves `monitor/subscribe`, `monitor/unsubscribe` and `monitor/follow`. */
  register(registry: MethodRegistry): void {
    registry.handle('monitor/subscribe', (p, { conn }) => this.subscribe(p?.output ?? 'all', conn));
    registry.handle('monitor/unsubscribe', (_p, { conn }) => {
      const sub = this.feed.find(conn);
      if (sub) this.feed.remove(sub);
      this.updateOutputListener();
      return {};
    });
    registry.handle('monitor/follow', (p, { conn }) => this.follow(p, conn));
  }

  /** True while the feed still lists a process of an expired session (its output is gone). */
  remembers(sessionId: string, processId: string): boolean {
    return this.finished.has(processKey('', sessionId, processId));
  }

  private subscribe(output: 'all' | 'followed', conn: RpcConnection): ResultWithCallback<MonitorSnapshot> {
    const self = (conn.state as ConnState | undefined)?.session ?? null;
    const { sub, snapshot } = this.feed.subscribe(conn, self, output === 'all');
    this.updateOutputListener();
    // Live batches (and the rest of the snapshot's pages) start right after the answer is on the wire.
    return new ResultWithCallback(snapshot, () => this.feed.start(sub));
  }

  /** Starts (with the retained tail) or stops the live output of one process for this subscriber. */
  private async follow(p: FollowParams, conn: RpcConnection): Promise<FollowResult> {
    const sub = this.feed.find(conn);
    if (!sub) throw invalidRequest('monitor/follow needs monitor/subscribe first');
    const server = remoteServer(this.joined, p.server);
    const k = processKey(server ?? '', p.sessionId, p.processId);
    const had = sub.followed.has(k);
    if (p.follow) sub.followed.add(k);
    else sub.followed.delete(k);
    if (server !== null) {
      if (had === p.follow) return { following: p.follow };
      return this.joined!.follow(server, { sessionId: p.sessionId, processId: p.processId }, p.follow);
    }
    this.updateOutputListener();
    const proc = p.follow ? this.server.sessions.get(p.sessionId)?.get(p.processId) : undefined;
    if (!proc) return { following: p.follow };
    // The tail now; live chunks (seq > the tail's) follow in the next batches.
    const { chunks, earlier } = outputTail(proc, null, TAIL_BYTES);
    return { following: true, chunks, earlier, retained: !proc.outputEvicted };
  }

  /** The whole state for `self`, processes newest first. */
  snapshot(self: Session | null = null): MonitorSnapshot {
    const { snapshot, rest } = this.snapshotPages(self);
    for (const p of rest) snapshot.processes.push(isLocal(p) ? describeProcess(p) : p);
    delete snapshot.pendingProcesses;
    return snapshot;
  }

  private snapshotPages(self: unknown): { snapshot: MonitorSnapshot; rest: FeedProcess[] } {
    const all: FeedProcess[] = [...this.finished.values()];
    for (const p of this.server.sessions.processes()) all.push(p);
    const joined = this.joined;
    if (joined) for (const p of joined.processes()) all.push(p);
    all.sort((a, b) => b.startedAt - a.startedAt);
    const first = all.slice(0, this.feed.page);
    const rest = all.slice(this.feed.page);
    const sessions = [...this.server.sessions.values()].map((s) =>
      describeSession(s, self as Session | null, this.opts.resumeGraceMs),
    );
    const servers: MonitorServer[] = [this.localServer()];
    if (joined) {
      sessions.push(...joined.sessions());
      servers.push(...joined.servers());
    }
    return {
      snapshot: {
        processes: first.map((p) => (isLocal(p) ? describeProcess(p) : p)),
        pendingProcesses: rest.length,
        sessions,
        blocked: joined ? [...this.network.blocked, ...joined.blocked()] : [...this.network.blocked],
        audit: joined ? [...this.network.audit, ...joined.audit()] : [...this.network.audit],
        hosts: this.network.hostCounts(),
        dropped: { output: 0, network: 0, evicted: this.network.evicted, forgottenProcesses: this.forgotten },
        limits: {
          blockedRing: BLOCKED_RING,
          auditRing: AUDIT_RING,
          finishedProcesses: FINISHED_PROCESSES,
          subscriberHighWaterBytes: this.highWater,
          batchMs: this.feed.batchMs,
        },
        networkWired: this.networkWired,
        previewWired: this.opts.previewWired ?? false,
        serverTime: this.clock.now(),
        servers,
      },
      rest,
    };
  }

  private localServer(): MonitorServer {
    let processes = this.finished.size;
    for (const s of this.server.sessions.values()) processes += s.processCount;
    return {
      id: '',
      name: this.opts.serverName ?? 'this host',
      url: null,
      state: 'local',
      since: 0,
      lastError: null,
      retryAt: null,
      ready: null,
      processes,
      rejected: 0,
    };
  }

  private source(): FeedSource<FeedProcess, FeedSession> {
    return {
      processJson: (p) => (isLocal(p) ? processJson(p) : this.jsonOf(p)),
      sessionJson: (kind, s, self) =>
        `{"kind":"${kind}","session":${
          (s as Session).processes !== undefined
            ? JSON.stringify(describeSession(s as Session, self as Session | null, this.opts.resumeGraceMs))
            : this.jsonOf(s)
        }}`,
      networkJson: (rec) => this.jsonOf(rec),
      outputHead: (p) => {
        let head = this.outputHeads.get(p);
        if (head === undefined) {
          head = outputHead(
            'monitor/output',
            isLocal(p)
              ? { sessionId: p.info.sessionId, processId: p.info.processId }
              : { server: p.server ?? '', sessionId: p.sessionId, processId: p.processId },
          );
          this.outputHeads.set(p, head);
        }
        return head;
      },
      snapshot: (self) => this.snapshotPages(self),
    };
  }

  /** JSON of an immutable record (records are replaced, never changed, so the text is kept). */
  private jsonOf(rec: object): string {
    let t = this.recordJson.get(rec);
    if (t === undefined) {
      t = JSON.stringify(rec);
      this.recordJson.set(rec, t);
    }
    return t;
  }

  // ---- events ------------------------------------------------------------------------------------------------

  private localKey(p: ManagedProcess): string {
    return processKey('', p.info.sessionId, p.info.processId);
  }

  private processChanged(proc: ManagedProcess): void {
    if (this.feed.subscribers.size === 0) return;
    this.feed.process(this.localKey(proc), proc);
  }

  private sessionChanged(kind: SessionChangeKind, s: Session): void {
    if (kind === 'detached' || kind === 'expired') {
      for (const sub of this.feed.subscribers) if (sub.self === s) this.feed.remove(sub);
      this.updateOutputListener();
    }
    if (kind === 'expired') this.rememberFinished(s);
    if (this.feed.subscribers.size === 0) return;
    this.feed.session(`\u0000${s.id}`, kind, s);
    if (kind === 'expired') {
      for (const p of s.processes) {
        const k = processKey('', s.id, p.info.processId);
        const rec = this.finished.get(k);
        if (rec) this.feed.process(k, rec);
      }
    }
  }

  /** A subscriber is gone: stop the joined servers' output it followed. */
  private removed(sub: FeedSubscriber<FeedProcess, FeedSession>): void {
    if (!this.joined) return;
    for (const k of sub.followed) {
      const [server, sessionId, processId] = k.split('\u0000') as [string, string, string];
      if (server !== '' && !this.feed.wantsOutput(k))
        this.joined.follow(server, { sessionId, processId }, false).catch(() => {});
    }
  }

  private rememberFinished(s: Session): void {
    for (const p of s.processes) {
      this.finished.set(processKey('', s.id, p.info.processId), { ...describeProcess(p), retained: false });
    }
    while (this.finished.size > FINISHED_PROCESSES) {
      const oldest = this.finished.keys().next().value as string;
      this.finished.delete(oldest);
      this.forgotten++;
    }
  }

  /** The output hook is installed only while some subscriber wants output (the hot path stays untouched). */
  private updateOutputListener(): void {
    const want = this.feed.wantsAnyOutput;
    if (want !== this.outputAttached) {
      this.outputAttached = want;
      if (want) this.server.events.on('output', this.onOutput);
      else this.server.events.off('output', this.onOutput);
    }
    const subscribers = this.feed.subscribers.size;
    if (subscribers > 0 && !this.ticker) {
      this.scheduleTick();
    } else if (subscribers === 0 && this.ticker) {
      this.clock.clearTimeout(this.ticker);
      this.ticker = null;
    }
  }

  private scheduleTick(): void {
    this.ticker = this.clock
      .setTimeout(() => {
        this.tick();
        if (this.feed.subscribers.size > 0) this.scheduleTick();
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
}
