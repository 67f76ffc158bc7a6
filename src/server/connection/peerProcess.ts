/**
 * Is a connection one of our own sandboxed commands calling back? (issue 30 item 1, defence in depth.) A sandbox with
 * network enabled shares the host's network namespace; if it ever learnt a credential, it could connect to the
 * server's port and start a process outside its sandbox. The scrub of the environment (src/process/secretScrub.ts)
 * is the first wall; this is the second: such a connection is refused whatever it presents.
 *
 * How the server tells, on a connection from an address of this machine (loopback or one of its interfaces):
 * 1. the peer's socket: the row of /proc/net/tcp or tcp6 (our network namespace) whose local end is the peer's
 *    address and port and whose remote end is ours; its inode;
 * 2. who holds it: the processes of our sandboxed commands only — those in a command's cgroup (`p-<n>` under the
 *    server's `corral-<tag>`, src/process/cgroup.ts) whose command is sandboxed, or whose command is gone (a daemon it
 *    left behind); without cgroups, the descendants of the sandboxed commands — each with its /proc/<pid>/fd read
 *    for `socket:[inode]`.
 * A socket held by one of them: refused. Only on a new connection, never on process/start; with no sandboxed command
 * running and no cgroup left populated by one, nothing is read but the cgroup directories; the walk yields to the
 * event loop as it goes and is bounded in time: past `budgetMs` the server cannot tell, and refuses (a sandboxed
 * fork bomb must not buy a way in by making the walk long).
 *
 * Not promised: a peer in another network namespace (its socket is not in ours: it reaches us only through a proxy
 * of ours, which is this process), a command's process that left both its cgroup and its parent's tree (Landlock
 * without cgroups: a `setsid` daemon reparented to init), a socket handed to an unrelated process.
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { isIPv4, isIPv6 } from 'node:net';
import { networkInterfaces } from 'node:os';

/** What the check needs of the server: its live commands and where their cgroups are. */
export interface CommandTable {
  /** The live commands' root pids (bwrap's or the command's own) and whether each runs in a sandbox. */
  commands(): Iterable<{ pid: number; sandboxed: boolean }>;
  /** The server's command cgroup bases (`corral-<tag>`, one per hierarchy); empty without cgroups. */
  readonly cgroupBases: readonly string[];
}

export interface PeerEnds {
  remoteAddress?: string | undefined;
  remotePort?: number | undefined;
  localAddress?: string | undefined;
  localPort?: number | undefined;
}

/** How long the walk may take before the server gives up telling (and refuses). */
export const DEFAULT_PEER_BUDGET_MS = 500;
/** Pids looked at between two yields to the event loop. */
const CHUNK = 64;

/** An address as /proc/net/tcp{,6} prints it (each 32-bit word in host order: little-endian here), or null. */
export function procNetAddress(address: string): { file: 'tcp' | 'tcp6'; hex: string }[] | null {
  const a = address.replace(/^\[|\]$/g, '').replace(/%.*$/, '');
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(a);
  const v4 = mapped ? mapped[1]! : isIPv4(a) ? a : null;
  if (v4 !== null) {
    const bytes = v4.split('.').map(Number);
    const word = (b: number[]) =>
      b
        .map((x) => x.toString(16).padStart(2, '0'))
        .join('')
        .toUpperCase();
    // A v4 socket is in tcp; a v6 socket talking to a v4 peer holds it as ::ffff:a.b.c.d, in tcp6.
    return [
      { file: 'tcp', hex: word([...bytes].reverse()) },
      { file: 'tcp6', hex: `0000000000000000FFFF0000${word([...bytes].reverse())}` },
    ];
  }
  if (!isIPv6(a)) return null;
  const [head, tail] = a.includes('::') ? a.split('::') : [a, null];
  const parts = (s: string | undefined) => (s ? s.split(':') : []);
  const left = parts(head);
  const right = tail === null ? [] : parts(tail);
  const groups = [...left, ...Array(8 - left.length - right.length).fill('0'), ...right];
  if (groups.length !== 8) return null;
  const bytes = groups.flatMap((g) => {
    const n = Number.parseInt(g, 16);
    return [n >> 8, n & 0xff];
  });
  let hex = '';
  for (let w = 0; w < 4; w++)
    for (const b of bytes.slice(w * 4, w * 4 + 4).reverse()) hex += b.toString(16).padStart(2, '0');
  return [{ file: 'tcp6', hex: hex.toUpperCase() }];
}

function isLocalAddress(address: string): boolean {
  const a = address.replace(/^::ffff:/i, '');
  if (/^127\./.test(a) || a === '::1') return true;
  return Object.values(networkInterfaces()).some((list) => list?.some((i) => i.address === a));
}

/**
 * The inode of the peer's socket (local end = the peer, remote end = us) in our network namespace, or null. Read off
 * the event loop: the kernel takes ~1.5 ms to print /proc/net/tcp (it walks its whole socket hash), however few
 * sockets there are.
 */
export async function peerSocketInode(ends: PeerEnds): Promise<string | null> {
  const { remoteAddress, remotePort, localAddress, localPort } = ends;
  if (!remoteAddress || !localAddress || !remotePort || !localPort) return null;
  const peer = procNetAddress(remoteAddress);
  const us = procNetAddress(localAddress);
  if (!peer || !us) return null;
  const port = (p: number) => p.toString(16).toUpperCase().padStart(4, '0');
  for (const file of ['tcp', 'tcp6'] as const) {
    const locals = peer.filter((p) => p.file === file).map((p) => `${p.hex}:${port(remotePort)}`);
    const remotes = us.filter((p) => p.file === file).map((p) => `${p.hex}:${port(localPort)}`);
    if (locals.length === 0 || remotes.length === 0) continue;
    let text: string;
    try {
      text = await readFile(`/proc/net/${file}`, 'latin1');
    } catch {
      continue;
    }
    for (const line of text.split('\n')) {
      const f = line.trim().split(/\s+/);
      if (f.length < 10 || !locals.includes(f[1]!)) continue;
      if (!remotes.includes(f[2]!)) continue;
      if (f[9] !== '0') return f[9]!;
    }
  }
  return null;
}

function readPids(file: string): number[] {
  try {
    return readFileSync(file, 'utf8')
      .split('\n')
      .filter((l) => l !== '')
      .map(Number);
  } catch {
    return [];
  }
}

function ppidOf(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return null;
  }
}

/** The processes of our sandboxed commands (and of cgroups whose command is gone), the ones to look at. */
function sandboxedPids(table: CommandTable): number[] {
  const commands = [...table.commands()];
  const unsandboxed = new Set(commands.filter((c) => !c.sandboxed).map((c) => c.pid));
  const out = new Set<number>();
  if (table.cgroupBases.length > 0) {
    // Every cgroup below a base but the server's own (`server`): the commands' (`p-<n>`, or deeper).
    const walk = (dir: string, depth: number) => {
      let entries: string[];
      try {
        entries = readdirSync(dir, { withFileTypes: true })
          .filter((e) => e.isDirectory() && !(depth === 0 && e.name === 'server'))
          .map((e) => `${dir}/${e.name}`);
      } catch {
        return;
      }
      for (const g of entries) {
        const pids = readPids(`${g}/cgroup.procs`);
        if (!pids.some((p) => unsandboxed.has(p))) for (const p of pids) out.add(p);
        if (depth < 3) walk(g, depth + 1);
      }
    };
    for (const base of table.cgroupBases) walk(base, 0);
    return [...out];
  }
  // No cgroups: the sandboxed commands' trees, from every process's parent.
  const roots = new Set(commands.filter((c) => c.sandboxed).map((c) => c.pid));
  if (roots.size === 0) return [];
  const parent = new Map<number, number>();
  let all: string[];
  try {
    all = readdirSync('/proc');
  } catch {
    return [];
  }
  for (const d of all) {
    if (!/^\d+$/.test(d)) continue;
    const pp = ppidOf(Number(d));
    if (pp !== null) parent.set(Number(d), pp);
  }
  for (const pid of parent.keys()) {
    for (let p: number | undefined = pid, depth = 0; p !== undefined && p > 1 && depth < 256; depth++) {
      if (roots.has(p)) {
        out.add(pid);
        break;
      }
      p = parent.get(p);
    }
  }
  return [...out];
}

function holds(pid: number, link: string): boolean {
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return false;
  }
  for (const fd of fds) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`) === link) return true;
    } catch {}
  }
  return false;
}

/**
 * Why this connection is refused — it comes from one of our sandboxed commands, or the server could not tell within
 * `budgetMs` — or null (not ours, or not local, or not on Linux).
 */
export async function sandboxedPeer(
  ends: PeerEnds,
  table: CommandTable,
  budgetMs = DEFAULT_PEER_BUDGET_MS,
): Promise<string | null> {
  if (process.platform !== 'linux' || !ends.remoteAddress || !isLocalAddress(ends.remoteAddress)) return null;
  // A CPU budget for this one scan of /proc (monotonic, real): the work it bounds is real, not policy time.
  const started = performance.now();
  // Nothing sandboxed is running (the usual case when a client connects): nothing to look for.
  const pids = sandboxedPids(table);
  if (pids.length === 0) return null;
  const inode = await peerSocketInode(ends);
  if (inode === null) return null;
  const link = `socket:[${inode}]`;
  for (let i = 0; i < pids.length; i++) {
    if (holds(pids[i]!, link)) return `the connection comes from process ${pids[i]}, a sandboxed command's`;
    if (i % CHUNK === CHUNK - 1) {
      if (performance.now() - started > budgetMs)
        return `could not tell within ${budgetMs} ms whether it comes from a sandboxed command (${pids.length} processes)`;
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }
  return null;
}
