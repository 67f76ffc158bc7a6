/**
 * The breakdown of one start for hotpath.bench.ts: an in-process exec server with every default on (agent and panel
 * tokens, the audit trail in a scratch database, a cgroup per command, the monitor feed, the process in its commands'
 * CPU group as the CLI's), with timers hooked onto the prototypes of the classes a start goes through. The hooks are
 * the bench's: the server has no timers of its own. Each phase is the median over 200 `true` starts (after 50 of warm-up),
 * unsandboxed and under Landlock taking turns.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { startAudit } from '../../src/audit/index.js';
import { AuditTrail } from '../../src/audit/trail.js';
import { CgroupHost, cgroupHost } from '../../src/process/cgroup.js';
import { ManagedProcess } from '../../src/process/managedProcess.js';
import { RpcConnection } from '../../src/rpc/connection.js';
import { silentLogger } from '../../src/server/core/log.js';
import { Session } from '../../src/server/core/session.js';
import { ExecServer } from '../../src/server/execServer.js';
import { servePanel } from '../../src/server/monitor/panel.js';
import { Launcher } from '../../src/server/process/launcher.js';
import { startTestServer } from '../helpers/server.js';
import { seedParam, special } from '../integration/sandbox-util.js';
import { BenchClient, pct } from './exec.bench.js';

type Mark =
  | 'recv'
  | 'envIn'
  | 'envOut'
  | 'prepIn'
  | 'prepOut'
  | 'startIn'
  | 'cgIn'
  | 'cgOut'
  | 'spawnIn'
  | 'spawnOut'
  | 'startOut'
  | 'released'
  | 'exited'
  | 'closedIn'
  | 'closedOut';

/** Wraps `proto[name]` so that `before`/`after` run around every call. Returns the undo. */
function hook(
  proto: object,
  name: string,
  before: (self: unknown, args: unknown[]) => void,
  after?: (self: unknown, args: unknown[]) => void,
): () => void {
  const p = proto as Record<string, (...a: unknown[]) => unknown>;
  const original = p[name]!;
  p[name] = function (this: unknown, ...args: unknown[]) {
    before(this, args);
    try {
      return original.apply(this, args);
    } finally {
      after?.(this, args);
    }
  };
  return () => {
    p[name] = original;
  };
}

/**
 * The phases of a plain start, a Landlock start and a bwrap start (the policy of landlock-start.bench.ts: read
 * everything, write the workspace and /tmp), taking turns in one server so that all see the same warmth of its code.
 */
/**
 * The sandboxed benches' workspace in `dir` (ws, with a .git) and their policy's entries: read everything, write the
 * workspace and /tmp.
 */
export function benchWorkspace(dir: string): { ws: string; entries: ReturnType<typeof special>[] } {
  const ws = join(dir, 'ws');
  mkdirSync(join(ws, '.git'), { recursive: true });
  return {
    ws,
    entries: [
      special('root', 'read'),
      special('current_working_directory', 'write'),
      special('slash_tmp', 'write'),
    ],
  };
}

export async function breakdown(): Promise<
  { phase: string; plain: number; plainTail: number; landlock: number; bwrap: number }[]
> {
  // As the headless CLI does (src/cli.ts): this process joins its commands' CPU group (left at exit).
  cgroupHost().joinCpuGroup();
  // Not under /tmp: the Landlock policy makes /tmp writable, where no rule could hide the audit database.
  const cache = join(import.meta.dirname, '..', '..', '.cache', 'hotpath');
  mkdirSync(cache, { recursive: true });
  const dir = mkdtempSync(join(cache, 'phases-'));
  const audit = await startAudit({ dbPath: join(dir, 'audit.db') }, silentLogger);
  const t = await startTestServer({
    tokens: true,
    log: silentLogger,
    launcher: { sandbox: { hiddenPaths: audit.hiddenPaths } },
  });
  audit.attach(t.server);
  servePanel(t.server);
  let cur: Partial<Record<Mark, number>> & { audit?: number } = {};
  const now = () => performance.now();
  const undo = [
    hook(RpcConnection.prototype, 'receive', (_s, [text]) => {
      if (typeof text === 'string' && text.includes('"process/start"')) cur.recv = now();
    }),
    hook(
      ExecServer.prototype,
      'childEnv',
      () => (cur.envIn = now()),
      () => (cur.envOut = now()),
    ),
    hook(
      Launcher.prototype,
      'prepare',
      () => (cur.prepIn = now()),
      () => (cur.prepOut = now()),
    ),
    hook(
      ManagedProcess.prototype,
      'start',
      () => (cur.startIn = now()),
      () => (cur.startOut = now()),
    ),
    hook(
      CgroupHost.prototype,
      'acquire',
      () => (cur.cgIn = now()),
      () => (cur.cgOut = now()),
    ),
    hook(
      ManagedProcess.prototype,
      'spawn',
      () => (cur.spawnIn = now()),
      () => (cur.spawnOut = now()),
    ),
    hook(Session.prototype, 'release', () => (cur.released = now())),
    hook(Session.prototype, 'exited', () => (cur.exited = now())),
    hook(
      Session.prototype,
      'closed',
      () => (cur.closedIn = now()),
      () => (cur.closedOut = now()),
    ),
  ];
  let auditIn = 0;
  undo.push(
    hook(
      AuditTrail.prototype,
      'record',
      () => (auditIn = now()),
      () => (cur.audit = (cur.audit ?? 0) + now() - auditIn),
    ),
  );
  const phases: [string, (c: typeof cur, sent: number, done: number) => number][] = [
    ['client send → request parsed, dispatched, checked', (c, s) => c.envIn! - s],
    ['  of which: the client and the socket until receive()', (c, s) => c.recv! - s],
    ["child's environment", (c) => c.envOut! - c.envIn!],
    ['resolve program, launch prepared', (c) => c.startIn! - c.envOut!],
    ['  of which: Launcher.prepare', (c) => c.prepOut! - c.prepIn!],
    ['cgroup acquired (pool or new)', (c) => c.cgOut! - c.cgIn!],
    ['spawn (clone, enter cgroup, exec)', (c) => c.spawnOut! - c.spawnIn!],
    ['spawned → start response on the wire', (c) => c.released! - c.startOut!],
    ['child runs, exit seen (pidfd, drain rounds)', (c) => c.exited! - c.spawnOut!],
    ['exit → closed (pipes closed)', (c) => c.closedIn! - c.exited!],
    ['closed: session, observers (audit, monitor)', (c) => c.closedOut! - c.closedIn!],
    ['closed → client has it', (c, _s, d) => d - c.closedOut!],
    ['audit record() calls, all of one start', (c) => c.audit ?? 0],
    ['total: client send → client has process/closed', (_c, s, d) => d - s],
  ];
  const kinds = ['plain', 'landlock', 'bwrap'] as const;
  const samples = kinds.map(() => phases.map(() => [] as number[]));
  const { ws, entries } = benchWorkspace(dir);
  const params = [
    {},
    { sandbox: seedParam({ cwd: ws, entries, useLegacyLandlock: true }) },
    { sandbox: seedParam({ cwd: ws, entries }) },
  ];
  try {
    const token = t.tokens!.agent;
    const c = await BenchClient.open(`${t.url}/?token=${token}`);
    for (let i = 0; i < 750; i++) {
      const k = i % 3;
      cur = {};
      const sent = now();
      await c.run(`ph-${i}`, ['/bin/true'], { cwd: ws, ...params[k] });
      const done = now();
      if (i < 150) continue;
      for (const [j, [, f]] of phases.entries()) samples[k]![j]!.push(f(cur, sent, done) * 1000);
    }
    c.close();
  } finally {
    for (const u of undo) u();
    await t.close();
    await audit.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  const median = (v: number[]) =>
    pct(
      v.sort((a, b) => a - b),
      50,
    );
  // Where the tail goes: the unsandboxed starts whose total was among the slowest 2%, each phase's median over them.
  const plain = samples[0]!;
  const totals = plain[plain.length - 1]!;
  const slowest = totals
    .map((t, i) => [t, i] as const)
    .sort((a, b) => b[0] - a[0])
    .slice(0, Math.max(1, Math.ceil(totals.length / 50)))
    .map(([, i]) => i);
  const tail = plain.map((v) => median(slowest.map((i) => v[i]!)));
  return phases.map(([phase], j) => ({
    phase,
    plain: median([...plain[j]!]),
    plainTail: tail[j]!,
    landlock: median(samples[1]![j]!),
    bwrap: median(samples[2]![j]!),
  }));
}
