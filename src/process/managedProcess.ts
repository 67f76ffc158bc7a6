import type { Writable } from 'node:stream';
import { type Clock, realClock } from '../clock.js';
import type { ChildRusage } from '../platform/spawn.js';
import { groupWatchdog } from '../platform/watchdog.js';
import type { OutputStream, ProcessUsage } from '../protocol/exec.js';
import {
  type CgroupHost,
  childNprocMax,
  type LimitKind,
  type ProcessCgroup,
  type ResourceLimits,
  wrapArgv,
} from './cgroup.js';
import type { PreparedLaunch, SandboxType } from './launch.js';
import { OutputBuffer, type RetainedChunk } from './outputBuffer.js';
import { type PtyChild, spawnPty } from './pty.js';
import { type OutputPipe, spawnPiped } from './spawner.js';
import { processUsage } from './usage.js';

/** Largest output chunk on the wire (protocol.md §5.9). */
export const MAX_CHUNK = 8192;

/** Receives a process's events in seq order. */
export interface ProcessEventSink {
  output(p: ManagedProcess, seq: number, stream: OutputStream, data: Buffer): void;
  /**
   * Optional, replaces `output` for a whole read: the chunks are `data` cut into MAX_CHUNK pieces, with seqs from
   * firstSeq. `data` is only valid during the call.
   */
  outputs?(p: ManagedProcess, firstSeq: number, stream: OutputStream, data: Buffer): void;
  exited(p: ManagedProcess, seq: number, exitCode: number): void;
  closed(p: ManagedProcess, seq: number): void;
  /** Optional: the outputs of one read have all been reported (a sink may batch them until here). */
  flush?(): void;
  /** Optional: the memory the process's retained output holds changed by `delta` bytes (a retention budget). */
  retainedResized?(p: ManagedProcess, delta: number): void;
}

export interface ProcessInfo {
  processId: string;
  sessionId: string;
  clientName: string;
  argv: string[];
  cwd: string;
  tty: boolean;
  pipeStdin: boolean;
  metadata?: Record<string, unknown> | null;
}

export type ProcessState = 'running' | 'exited' | 'closed';

/** The cgroup a process runs in (src/process/cgroup.ts): where from, and with which limits. */
export interface ProcessResources {
  cgroups: CgroupHost;
  limits: ResourceLimits;
}

/**
 * What a process keeps of its launch once it has closed, for as long as its session keeps it (the panel's and the
 * audit trail's description): the launch spec (argv, the whole environment), its descriptors and its cleanup go.
 */
export type LaunchRecord = Pick<PreparedLaunch, 'sandboxType' | 'summary' | 'guarantees'>;

const NOTHING = () => {};

/** Decides `sandboxDenied` from the exit code and the retained stderr/pty text (sandbox.md §11.6). */
export type DenialClassifier = (sandboxType: SandboxType, exitCode: number, output: string) => boolean;

/**
 * One started process: its child (pipes or PTY), its seq counter shared by output/exited/closed, its retained output
 * and its state. Events go to a sink; readers can wait for the next event.
 */
export class ManagedProcess {
  readonly buffer = new OutputBuffer();
  readonly startedAt: number;
  pid = 0;
  state: ProcessState = 'running';
  exitCode: number | null = null;
  exitedAt: number | null = null;
  closedAt: number | null = null;
  sandboxDenied = false;
  /** The retained output was freed (a closed process, past its session's retention budget): reads return nothing. */
  outputEvicted = false;
  /** The signal that ended the child, when the spawner reports it (pipes; a PTY's exit code says 128+n). */
  exitSignal: NodeJS.Signals | null = null;
  /** The cgroup limit the process ran into (read when it exited), or null. */
  limitHit: LimitKind | null = null;
  /** What it used (usage.ts), read when it exited; null before, or when neither its cgroup nor its reap could say. */
  usage: ProcessUsage | null = null;
  bytesOut = 0;
  /** seq of the last event (0 before any). */
  lastSeq = 0;
  exitSeq = 0;
  closeSeq = 0;
  private waiters: (() => void)[] = [];
  private stdin: Writable | null = null;
  private streams: OutputPipe[] = [];
  private term: PtyChild | null = null;
  private openStreams = 0;
  private paused = false;
  /** Output events so far (pipes), to tell when a drain round saw no more data. */
  private dataEvents = 0;
  /** The child has been reaped (its exit may not be reported yet): never signal its pid again. */
  private reaped = false;
  /** The first output bytes, kept for an observer that asked (keepHead: the audit trail). */
  private headLimit = 0;
  private headParts: Buffer[] = [];
  private headBytes = 0;
  /** Ends the server-death protection of the child's process group (see SpawnedChild.releaseGroup). */
  private releaseGroup: () => void = NOTHING;
  /**
   * The launch, until the process has closed; then only its record (`launch`). A session keeps every process it
   * started until it ends (protocol.md §5.3: an id is never removed), so whatever a closed process still references
   * is kept that long and, while young, copied by every scavenge: the environment's values, the pipes and their
   * callbacks were ~2 KB a process here (issue 32: a fresh server's scavenges took 4 ms every ~300 starts).
   */
  private prepared: PreparedLaunch | null;
  private record: LaunchRecord | null = null;
  private envNamesKept: readonly string[] | null = null;
  /**
   * The process's cgroup, while it is ours to kill: until the process has closed, and after that while the cgroup
   * still holds processes it left behind (it is then never handed to another process).
   */
  private cgroup: ProcessCgroup | null = null;

  constructor(
    readonly info: ProcessInfo,
    launch: PreparedLaunch,
    private readonly sink: ProcessEventSink,
    private readonly classify: DenialClassifier,
    /** The time of its timestamps and of `waitForEvent` (the server's). */
    private readonly clock: Clock = realClock,
    /** null: no cgroup (none usable, or turned off). */
    private resources: ProcessResources | null = null,
  ) {
    this.prepared = launch;
    this.startedAt = clock.now();
    if (sink.retainedResized) this.buffer.onResize = (delta) => sink.retainedResized!(this, delta);
  }

  /** Frees the retained output for good (later reads say `outputEvicted`); returns the bytes released. */
  evictOutput(): number {
    this.outputEvicted = true;
    return this.buffer.release();
  }

  /** The launch's sandbox type, summary and guarantees (the whole launch until the process has closed). */
  get launch(): LaunchRecord {
    return this.prepared ?? this.record!;
  }

  get sandboxType(): SandboxType {
    return this.launch.sandboxType;
  }

  /** The names of the command's environment variables, sorted (their values are not kept past its close). */
  get envNames(): readonly string[] {
    if (this.envNamesKept === null) this.envNamesKept = Object.keys(this.prepared!.spec.env).sort();
    return this.envNamesKept;
  }

  get running(): boolean {
    return this.state === 'running';
  }

  /**
   * Spawns the child, in a cgroup of its own when resources were given. Throws SpawnError (or node-pty's error) when
   * exec fails, CgroupError when the cgroup cannot be made; nothing is left running then.
   */
  start(): void {
    if (this.resources) this.cgroup = this.resources.cgroups.acquire(this.resources.limits);
    try {
      this.spawn();
    } catch (e) {
      this.cgroup?.release();
      this.cgroup = null;
      throw e;
    }
  }

  private spawn(): void {
    const spec = this.prepared!.spec;
    const cgroupEntry = this.cgroup?.entryFiles ?? [];
    if (this.info.tty) {
      // node-pty always sets TERM (to "xterm" when absent): take it out again unless the client asked for it.
      const dropTerm = spec.env.TERM === undefined;
      const needPrologue =
        cgroupEntry.length > 0 ||
        childNprocMax() > 0 || // the prologue sets it (cgroup.ts, "Pids budget")
        dropTerm ||
        (spec.argv[0] !== undefined && spec.argv[0] !== spec.file);
      // spawnPty reports the exit only after the output the child wrote before it (src/process/pty.ts).
      const term = spawnPty(spec.file, spec.argv.slice(1), {
        cwd: spec.cwd,
        env: spec.env,
        cols: 80,
        rows: 24,
        extraFds: spec.extraFds,
        freshSessionKeyring: spec.freshSessionKeyring,
        ...(spec.argv[0] !== undefined ? { argv0: spec.argv[0] } : {}),
        // node-pty cannot set argv[0], nor enter a cgroup before the exec: a bash prologue does both.
        ...(needPrologue
          ? {
              prologue: (f: string, argv: string[]) =>
                wrapArgv(cgroupEntry, f, argv, dropTerm ? 'unset TERM; ' : '', spec.env),
            }
          : {}),
        ...(spec.confine ? { confine: spec.confine } : {}),
      });
      this.term = term;
      this.pid = term.pid;
      // node-pty's child leads its own session: without a cgroup, its group dies with the server by the watchdog;
      // with one, the watchdog empties the cgroup.
      if (!this.cgroup) this.releaseGroup = groupWatchdog?.watchGroup(term.pid) ?? (() => {});
      else groupWatchdog?.ensure();
      this.openStreams = 1;
      term.onData((d) => this.onData('pty', d));
      term.onExit((exitCode) => {
        this.onExit(exitCode);
        this.streamEnded();
      });
      return;
    }
    const child = spawnPiped(spec, {
      stdin: this.info.pipeStdin ? 'pipe' : 'null',
      ...(this.cgroup
        ? { cgroup: { fds: this.cgroup.entryFds, paths: cgroupEntry, dirFd: this.cgroup.dirFd } }
        : {}),
    });
    this.releaseGroup = child.releaseGroup;
    this.pid = child.pid;
    this.stdin = child.stdin;
    this.stdin?.on('error', () => {});
    this.streams = [child.stdout, child.stderr];
    this.openStreams = 2;
    this.attach(child.stdout, 'stdout');
    this.attach(child.stderr, 'stderr');
    child.onExit((code, signal, rusage) => {
      this.reaped = true;
      this.exitSignal = signal;
      this.drainThen(() => this.onExit(code, rusage));
    });
  }

  private attach(stream: OutputPipe, name: OutputStream): void {
    stream.on('data', (d: Buffer) => this.onData(name, d));
    stream.on('close', () => this.streamEnded());
  }

  /**
   * The exit can be observed before the output the child wrote just before it (pidfd/SIGCHLD and the pipes are
   * separate events in one loop turn). Report the exit only once the pipes are closed or a loop turn brought no new
   * data (bounded: a grandchild that keeps writing does not hold the exit back for more than 50 ms).
   */
  private drainThen(report: () => void): void {
    // Real time: bounds a drain of output already in the pipes over a few loop turns (no policy in it).
    const deadline = Date.now() + 50;
    // The first round runs before the loop has polled again (child_process reaps every exited child on one SIGCHLD,
    // possibly before their pipes were polled), so only a later round that saw a poll without new data counts.
    const round = (seen: number, first: boolean) => {
      const quiet = !first && this.dataEvents === seen;
      if (this.openStreams === 0 || this.paused || quiet || Date.now() > deadline) report();
      else setImmediate(round, this.dataEvents, false);
    };
    setImmediate(round, this.dataEvents, true);
  }

  private onData(stream: OutputStream, data: Buffer): void {
    this.dataEvents++;
    this.bytesOut += data.length;
    if (this.headBytes < this.headLimit) this.keepHeadOf(data);
    if (this.sink.outputs) {
      const first = this.lastSeq + 1;
      this.lastSeq += Math.ceil(data.length / MAX_CHUNK);
      this.buffer.pushRead(first, stream, data, MAX_CHUNK);
      this.sink.outputs(this, first, stream, data);
    } else {
      for (let off = 0; off < data.length; off += MAX_CHUNK) {
        const piece = off === 0 && data.length <= MAX_CHUNK ? data : data.subarray(off, off + MAX_CHUNK);
        const seq = ++this.lastSeq;
        this.buffer.pushData(seq, stream, piece);
        this.sink.output(this, seq, stream, piece);
      }
    }
    this.sink.flush?.();
    this.wake();
  }

  /** Keeps a copy of the first `bytes` of output (all streams, in order) until the process is dropped. */
  keepHead(bytes: number): void {
    this.headLimit = Math.max(this.headLimit, bytes);
  }

  /** Hands over the first output bytes kept by keepHead (at most its limit) and stops keeping them. */
  takeHead(): Buffer {
    const head = this.headParts.length === 1 ? this.headParts[0]! : Buffer.concat(this.headParts);
    this.headParts = [];
    this.headLimit = 0;
    return head;
  }

  private keepHeadOf(data: Buffer): void {
    const n = Math.min(data.length, this.headLimit - this.headBytes);
    // A copy: `data` may be a view of a buffer the reader reuses.
    this.headParts.push(Buffer.from(data.subarray(0, n)));
    this.headBytes += n;
  }

  private onExit(code: number, rusage: ChildRusage | null = null): void {
    if (this.exitCode !== null) return;
    this.exitCode = code;
    this.exitedAt = this.clock.now();
    this.state = 'exited';
    this.limitHit = this.cgroup?.limitHit() ?? null;
    this.usage = processUsage(this.exitedAt - this.startedAt, this.cgroup?.usage() ?? null, rusage);
    this.sandboxDenied = this.classify(this.sandboxType, code, this.buffer.text(['stderr', 'pty']));
    this.exitSeq = ++this.lastSeq;
    this.sink.exited(this, this.exitSeq, code);
    this.wake();
    this.maybeClose();
  }

  private streamEnded(): void {
    this.openStreams--;
    this.maybeClose();
  }

  private maybeClose(): void {
    if (this.openStreams > 0 || this.exitCode === null || this.state === 'closed') return;
    this.state = 'closed';
    this.closedAt = this.clock.now();
    this.closeSeq = ++this.lastSeq;
    this.stdin?.destroy();
    this.term = null;
    this.releaseGroup();
    this.releaseGroup = NOTHING;
    if (this.cgroup && !this.cgroup.release()) this.cgroup = null;
    try {
      this.prepared?.cleanup();
    } catch {
      // cleanup must not throw; never let it break the event sequence
    }
    this.forgetLaunch();
    this.sink.closed(this, this.closeSeq);
    this.wake();
  }

  /** Keeps of the closed process only what it is described and read by (see `prepared`). */
  private forgetLaunch(): void {
    const l = this.prepared;
    if (!l) return;
    this.envNamesKept = this.envNames;
    this.record = {
      sandboxType: l.sandboxType,
      ...(l.summary ? { summary: l.summary } : {}),
      ...(l.guarantees ? { guarantees: l.guarantees } : {}),
    };
    this.prepared = null;
    this.streams = [];
    this.stdin = null;
    this.resources = null;
  }

  /** Writes to the child's stdin (PTY or pipe). */
  write(data: Buffer): 'accepted' | 'stdinClosed' {
    if (this.info.tty) {
      if (this.term && this.state === 'running') this.term.write(data);
      return 'accepted';
    }
    if (!this.stdin || this.stdin.destroyed || this.stdin.writableEnded) return 'stdinClosed';
    this.stdin.write(data);
    return 'accepted';
  }

  /**
   * Signals the whole process group (sandboxed: the outer bwrap, whose pid namespace takes everything along). SIGKILL
   * also kills the process's whole cgroup, descendants that left the group (`setsid`) included.
   */
  kill(signal: NodeJS.Signals = 'SIGKILL'): boolean {
    const wasRunning = this.state === 'running';
    if (signal === 'SIGKILL') this.cgroup?.kill();
    if (this.exitCode === null && !this.reaped && this.pid > 0) {
      try {
        process.kill(-this.pid, signal);
      } catch {
        try {
          process.kill(this.pid, signal);
        } catch {
          // already gone
        }
      }
    }
    return wasRunning;
  }

  /**
   * Also kills a group that outlived its leader (background grandchildren holding the pipes open), and whatever is
   * left in the process's cgroup. Once the process has closed its group is never signalled again: its pgid may
   * belong to an unrelated process group by then (pids wrap, at 32768 on many systems; a session that started a few
   * thousand processes, expiring or shut down, killed unrelated process groups of the machine).
   */
  killGroup(): void {
    this.cgroup?.kill();
    if (this.pid <= 0 || this.state === 'closed') return;
    try {
      process.kill(-this.pid, 'SIGKILL');
    } catch {
      // no such group
    }
  }

  /** Applies or releases backpressure on the child's output. */
  setPaused(paused: boolean): void {
    if (paused === this.paused) return;
    this.paused = paused;
    if (this.term) {
      if (paused) this.term.pause();
      else this.term.resume();
    }
    for (const s of this.streams) {
      if (paused) s.pause();
      else s.resume();
    }
  }

  /** Resolves at the next event, or after `ms` (of `clock`: the process's own unless given). */
  waitForEvent(ms: number, clock: Clock = this.clock): Promise<void> {
    return new Promise((resolve) => {
      const timer = clock.setTimeout(done, ms);
      function done() {
        clock.clearTimeout(timer);
        resolve();
      }
      this.waiters.push(done);
    });
  }

  private wake(): void {
    if (this.waiters.length === 0) return;
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  /** Retained chunks after `afterSeq`, capped by maxBytes (at least one chunk). */
  read(afterSeq: number, maxBytes: number | null): RetainedChunk[] {
    return this.buffer.read(afterSeq, maxBytes);
  }
}
