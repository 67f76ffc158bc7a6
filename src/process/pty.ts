/**
 * PTY children (node-pty) whose last output is never lost.
 *
 * The problem: node-pty reads the master through a libuv stream. When the child exits, the last slave fd closes and
 * the master polls readable *and* hung up. libuv reads once; when that read is short (the kernel's line discipline
 * held only part of the output: the rest was still queued for the tty's flip-buffer worker) and the poll said
 * POLLHUP, libuv reports end-of-file without reading again, node-pty destroys the stream, and the bytes the child
 * wrote just before exiting are gone (~1% of runs on a loaded machine).
 *
 * The fix:
 *  1. Right after the spawn we open the slave ourselves (O_NOCTTY: no controlling-tty side effects) and hold it, so
 *     the master never hangs up while the child's output is still being read.
 *  2. We learn of the child's exit independently of node-pty, from a pidfd (spawner's watchExit; it never reaps:
 *     node-pty's waitpid thread does).
 *  3. On that exit we drain the master ourselves with non-blocking reads until one reports EAGAIN: on Linux a tty
 *     read that finds the line discipline empty first flushes the pending flip-buffer work, so EAGAIN means the
 *     child's output has all been delivered. The drain reads node-pty's master fd (its public `fd`) only while that
 *     number still names this pty's master (/proc/self/fdinfo: the devpts mount and pty index, which no other pty
 *     can have while we hold the slave): node-pty closes the fd when its stream ends, and the number may be reused.
 *     It reads only while node-pty's stream is not paused, so the bytes keep their order. Then we close the held slave: the master reads EIO, node-pty
 *     closes its stream and emits its 'exit' (with the status its waitpid got), which we report.
 *  The drain is bounded (DRAIN_MS): a background grandchild that keeps the pty open and keeps writing does not hold
 *  the exit back; its later output is then cut off as before (node-pty destroys its stream 200 ms after the reap).
 *
 * Fallback (no watch on the child's exit, a kernel without the pty index in fdinfo, a node-pty without these getters,
 * or a slave we cannot open): node-pty's own behaviour, with the loss described above.
 *
 * File descriptors: node-pty's fork closes nothing, and its master fd is not close-on-exec. Right before the fork we
 * mark every fd of this process close-on-exec (the addon's sealFds), and right after it the new master too, so a
 * terminal child holds its terminal and nothing else: no fd the server inherited, no other terminal's master.
 * Extra fds (a sandbox's setup pipes) and a fresh session keyring go through the sandbox launcher, which moves the
 * fds it is given to 3, 4, … and closes everything else; those fds are inheritable only for the length of the fork.
 */
import { closeSync, constants as fsConstants, openSync, readFileSync, readSync } from 'node:fs';
import * as pty from 'node-pty';
import { sandboxNative } from '../platform/sandbox.js';
import { endSpawnBatch, watchExit } from '../platform/spawn.js';
import type { LaunchSpec } from './launch.js';
import { confineFds, SpawnError, throughLauncher } from './spawner.js';

/** How long, after the child's exit, output is still read before the pty is let go. */
const DRAIN_MS = 100;
/** Reads per drain turn, so a grandchild writing without pause cannot hog the event loop. */
const READS_PER_TURN = 16;

export interface PtyChild {
  readonly pid: number;
  /** Whether the lossless exit path is active (false: node-pty's own behaviour, see the module comment). */
  readonly lossless: boolean;
  onData(cb: (data: Buffer) => void): void;
  /** Once, after the output: the exit status, 128+signo when killed by a signal. */
  onExit(cb: (exitCode: number) => void): void;
  write(data: Buffer): void;
  pause(): void;
  resume(): void;
}

/** node-pty 1.x UnixTerminal's public getters we rely on (not in its IPty interface, which covers Windows too). */
interface UnixTerminalMembers {
  fd?: unknown;
  ptsName?: unknown;
}

export interface PtySpawnOptions {
  cwd: string;
  env: Record<string, string>;
  cols: number;
  rows: number;
  /** Fds the child gets at 3, 4, … (through the sandbox launcher). */
  extraFds?: LaunchSpec['extraFds'];
  /** The child joins a new session keyring (through the sandbox launcher). */
  freshSessionKeyring?: boolean;
  /** The child confines itself with Landlock + seccomp before exec (through the sandbox launcher). */
  confine?: LaunchSpec['confine'];
  /** The child's argv[0] (default: file), for the prologue. */
  argv0?: string;
  /**
   * A shell prologue (cgroup.ts wrapArgv: entering the cgroup, argv[0]) that runs first, outside the sandbox launcher:
   * a child that confined itself could no longer write its cgroup's entry file.
   */
  prologue?: (file: string, argv: string[]) => { file: string; args: string[] };
}

/**
 * Starts `file args` on a new PTY, as pty.spawn does (binary output: Buffers). Throws node-pty's error when the start
 * fails; nothing is held then.
 */
export function spawnPty(file: string, args: string[], opts: PtySpawnOptions): PtyChild {
  const { extraFds: given = [], freshSessionKeyring = false, confine, argv0, prologue, ...ptyOpts } = opts;
  const extraFds = confine ? [...given, ...confineFds(confine)] : given;
  let argv = [argv0 ?? file, ...args];
  if (extraFds.length > 0 || freshSessionKeyring) {
    if (extraFds.some((fd) => fd === null) || (extraFds.length > 0 && !sandboxNative))
      throw new SpawnError('EINVAL', 'a terminal cannot get these fds (slot left closed, or no addon)');
    // A confined (Landlock) terminal always runs under the launcher's supervisor: nothing it started outlives it,
    // whether a cgroup holds it or not (src/platform/native/supervise.c).
    const l = throughLauncher(
      { file, argv, env: opts.env, cwd: opts.cwd, ...(confine ? { confine } : {}) },
      extraFds as number[],
      confine !== undefined,
    );
    file = l.file;
    argv = l.argv;
  }
  if (prologue) ({ file, args } = prologue(file, argv));
  else args = argv.slice(1);
  endSpawnBatch(); // node-pty forks this thread: its child must not inherit SCHED_BATCH
  sandboxNative?.sealFds();
  const passed = extraFds as number[];
  let term: pty.IPty;
  try {
    for (const fd of passed) sandboxNative!.setInheritable(fd, true);
    term = pty.spawn(file, args, { ...ptyOpts, encoding: null });
  } finally {
    for (const fd of passed) sandboxNative?.setInheritable(fd, false);
    sandboxNative?.sealFds(); // the new master fd (forkpty does not mark it)
  }
  return new PtyProcess(term);
}

/** A pty master fd's devpts mount and pty index (`mnt:index`, from /proc/self/fdinfo), or null if it is none. */
function masterIdentity(fd: number): string | null {
  let info: string;
  try {
    info = readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8');
  } catch {
    return null;
  }
  const index = /^tty-index:\s*(\d+)$/m.exec(info)?.[1];
  const mount = /^mnt_id:\s*(\d+)$/m.exec(info)?.[1];
  return index !== undefined && mount !== undefined ? `${mount}:${index}` : null;
}

class PtyProcess implements PtyChild {
  readonly pid: number;
  lossless = false;
  private dataCbs: ((data: Buffer) => void)[] = [];
  private exitCbs: ((exitCode: number) => void)[] = [];
  private paused = false;
  /** Our hold on the slave side; null when not held (fallback) or let go. */
  private slaveFd: number | null = null;
  /** node-pty's master fd, and what it named when we started holding the slave (masterIdentity). */
  private masterFd = -1;
  private masterId: string | null = null;
  /** Set once the child has terminated (pidfd): the drain runs until this deadline at most. */
  private drainDeadline: number | null = null;
  private drainScheduled = false;
  private readBuf: Buffer | null = null;

  constructor(private readonly term: pty.IPty) {
    this.pid = term.pid;
    term.onData((d) => this.emitData(d as unknown as Buffer));
    term.onExit(({ exitCode, signal }) => {
      this.releaseSlave(); // node-pty gave up waiting (its 200 ms timer) or the stream failed
      const code = signal ? 128 + signal : exitCode;
      for (const cb of this.exitCbs) cb(code);
      this.exitCbs = [];
    });
    this.holdSlave();
  }

  private holdSlave(): void {
    const t = this.term as unknown as UnixTerminalMembers;
    if (typeof t.fd !== 'number' || typeof t.ptsName !== 'string') return;
    const identity = masterIdentity(t.fd);
    if (identity === null || !identity.endsWith(`:${t.ptsName.slice(t.ptsName.lastIndexOf('/') + 1)}`))
      return;
    let fd: number;
    try {
      // libuv adds O_CLOEXEC: no other child inherits the hold.
      fd = openSync(t.ptsName, fsConstants.O_RDWR | fsConstants.O_NOCTTY | fsConstants.O_NONBLOCK);
    } catch {
      return;
    }
    this.slaveFd = fd;
    this.masterFd = t.fd;
    this.masterId = identity;
    if (!watchExit(this.pid, () => this.childExited())) {
      this.releaseSlave(); // nobody would tell us when to let go
      return;
    }
    this.lossless = true;
  }

  private childExited(): void {
    if (this.slaveFd === null || this.drainDeadline !== null) return;
    // Real time: reads what the kernel still holds on the master after the exit (no policy in it).
    this.drainDeadline = Date.now() + DRAIN_MS;
    this.drain();
  }

  /** Reads what is left on the master, then lets the slave go (see the module comment). */
  private drain(): void {
    this.drainScheduled = false;
    if (this.slaveFd === null) return;
    // Paused (backpressure): resume() continues; node-pty's stream delivers what it buffered first (on the next tick,
    // before this runs again from setImmediate), and while it flows it delivers each read at once.
    if (this.paused) return;
    for (let i = 0; i < READS_PER_TURN; i++) {
      // node-pty closes its fd when its stream ends: the number may name another file by now. Only the JS thread
      // closes it, so nothing can come between this look and the read.
      if (masterIdentity(this.masterFd) !== this.masterId) {
        this.releaseSlave();
        return;
      }
      this.readBuf ??= Buffer.allocUnsafe(64 * 1024);
      let n: number;
      try {
        n = readSync(this.masterFd, this.readBuf, 0, this.readBuf.length, null);
      } catch {
        // EAGAIN: all delivered. EIO: nothing left to read either.
        this.releaseSlave();
        return;
      }
      if (n <= 0) {
        this.releaseSlave();
        return;
      }
      this.emitData(Buffer.from(this.readBuf.subarray(0, n)));
      if (this.paused || this.slaveFd === null) return;
    }
    if (Date.now() >= (this.drainDeadline ?? 0)) this.releaseSlave();
    else this.scheduleDrain();
  }

  private scheduleDrain(): void {
    if (this.drainScheduled) return;
    this.drainScheduled = true;
    setImmediate(() => this.drain());
  }

  private releaseSlave(): void {
    if (this.slaveFd === null) return;
    const fd = this.slaveFd;
    this.slaveFd = null;
    try {
      closeSync(fd);
    } catch {
      // already closed: nothing to release
    }
  }

  private emitData(data: Buffer): void {
    for (const cb of this.dataCbs) cb(data);
  }

  onData(cb: (data: Buffer) => void): void {
    this.dataCbs.push(cb);
  }

  onExit(cb: (exitCode: number) => void): void {
    this.exitCbs.push(cb);
  }

  write(data: Buffer): void {
    this.term.write(data);
  }

  pause(): void {
    this.paused = true;
    this.term.pause();
  }

  resume(): void {
    this.paused = false;
    this.term.resume();
    if (this.drainDeadline !== null && this.slaveFd !== null) this.scheduleDrain();
  }
}
