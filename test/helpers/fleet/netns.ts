/**
 * Sockets into another network namespace, for the one-machine stand-in of a cluster (issue 19.3): a pod is a process
 * in a network namespace of its own, and "dialing the pod IP" is connecting to 127.0.0.1:PORT inside that namespace.
 * A `NetnsDialer` keeps one helper process in the namespace (`nsenter --net=/proc/PID/ns/net node netnsDialer.mjs`)
 * that connects there and hands each connected socket back over Node's IPC channel (SCM_RIGHTS underneath), so the
 * caller holds an ordinary net.Socket into the pod, with no relay in between. Root only (nsenter needs CAP_SYS_ADMIN).
 */
import { type ChildProcess, type ChildProcessByStdio, execFileSync, spawn } from 'node:child_process';
import { readlinkSync } from 'node:fs';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';

const HELPER = join(import.meta.dirname, 'netnsDialer.mjs');

/** A dial that failed the way a connect(2) fails (ECONNREFUSED, …), or because the namespace is gone. */
export class DialError extends Error {
  constructor(readonly code: string) {
    super(`dial failed: ${code}`);
  }
}

export class NetnsDialer {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (s: Socket) => void; reject: (e: Error) => void }>();
  private closed = false;

  private constructor(
    private readonly child: ChildProcess,
    /** The namespace this dialer is in (`net:[inode]`). */
    readonly netns: string,
  ) {
    child.on('message', (m: { id?: number; ok?: boolean; code?: string }, handle?: Socket) => {
      const p = m.id === undefined ? undefined : this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id!);
      if (m.ok && handle) p.resolve(handle);
      else p.reject(new DialError(m.code ?? 'EIO'));
    });
    child.on('exit', () => this.fail('ENETDOWN'));
  }

  /** Starts the helper inside the network namespace of `pid` and resolves once it answers. */
  static async enter(pid: number): Promise<NetnsDialer> {
    const netns = readlinkSync(`/proc/${pid}/ns/net`);
    const child = spawn('nsenter', [`--net=/proc/${pid}/ns/net`, '--', process.execPath, HELPER], {
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    });
    await new Promise<void>((resolve, reject) => {
      child.once('message', () => resolve());
      child.once('exit', (code) => reject(new Error(`netns dialer for pid ${pid} exited (${code})`)));
      child.once('error', reject);
    });
    return new NetnsDialer(child, netns);
  }

  /** A socket connected to host:port in the namespace (host defaults to its 127.0.0.1), from localPort if given. */
  dial(port: number, host = '127.0.0.1', localPort?: number): Promise<Socket> {
    if (this.closed) return Promise.reject(new DialError('ENETDOWN'));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.child.send({ id, host, port, localPort });
    });
  }

  private fail(code: string): void {
    this.closed = true;
    for (const p of this.pending.values()) p.reject(new DialError(code));
    this.pending.clear();
  }

  close(): void {
    this.fail('ENETDOWN');
    if (this.child.connected) this.child.disconnect();
    this.child.kill('SIGKILL');
  }
}

/** Whether this machine can run the stand-in (root, util-linux unshare/nsenter, iproute2), and why not. */
export function netnsAvailable(): { ok: boolean; reason: string } {
  if (process.getuid?.() !== 0)
    return { ok: false, reason: 'network namespaces need root (nsenter, unshare -n)' };
  try {
    execFileSync('unshare', ['-n', '--', 'sh', '-c', 'ip link set lo up && nsenter --version >/dev/null'], {
      stdio: 'pipe',
      timeout: 10_000,
    });
    return { ok: true, reason: '' };
  } catch (e) {
    const err = e as { stderr?: Buffer; message: string };
    return { ok: false, reason: `unshare -n failed: ${(err.stderr?.toString() || err.message).trim()}` };
  }
}

/** A process started in a network namespace of its own (only `lo`, up), once it printed its first stdout line. */
export interface NetnsProcess {
  proc: ChildProcessByStdio<null, Readable, Readable>;
  firstLine: string;
  stderr(): string;
  exited: Promise<void>;
}

/**
 * Runs argv in a new network namespace (`unshare -n`, `lo` brought up) and resolves when it prints its first line
 * (by then the namespace exists and the process listens). The pid stays the same through the execs, so
 * /proc/PID/ns/net is the namespace for as long as the process lives.
 */
export async function spawnInNetns(
  argv: string[],
  opts: {
    cwd?: string;
    env?: NodeJS.ProcessEnv;
    /** A cgroup's `cgroup.procs` the process enters before argv runs (so everything it starts is in it too). */
    cgroupProcs?: string;
  } = {},
): Promise<NetnsProcess> {
  // $1 is the cgroup.procs file ('' for none), the rest argv; the prologue runs as the caller (root) before argv.
  const prologue = '{ [ -z "$1" ] || echo $$ > "$1"; } && shift && ip link set lo up && exec "$@"';
  const proc = spawn(
    'unshare',
    ['-n', '--', '/bin/sh', '-c', prologue, 'netns', opts.cgroupProcs ?? '', ...argv],
    {
      cwd: opts.cwd,
      env: opts.env ?? { PATH: '/usr/local/bin:/usr/bin:/bin' },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let err = '';
  proc.stderr.on('data', (d) => {
    err += d;
  });
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const firstLine = await new Promise<string | null>((resolve) => {
    createInterface({ input: proc.stdout }).once('line', resolve);
    void exited.then(() => resolve(null));
  });
  if (firstLine === null) throw new Error(`${argv.join(' ')} exited before its first line: ${err}`);
  return { proc, firstLine, stderr: () => err, exited };
}
