/**
 * The breakdown of one start for hotpath.bench.ts: an in-process exec server with every default on (agent and panel
 * tokens, the audit trail in a scratch database, a cgroup per command, the monitor feed, the process in its commands'
 * CPU group as the CLI's), with timers hooked onto the prototypes of the classes a start goes through. The hooks are
 * the bench's: the server has no timers of its own. Each phase is the median over 200 `true` starts (after 50 of warm-up).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
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

export async function breakdown(): Promise<{ phase: string; us: number }[]> {
  // As the headless CLI does (src/cli.ts): this process joins its commands' CPU group (left at exit).
  cgroupHost().joinCpuGroup();
  const dir = mkdtempSync(join(tmpdir(), 'corral-hotpath-'));
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
  const samples = phases.map(() => [] as number[]);
  try {
    const token = t.tokens!.agent;
    const c = await BenchClient.open(`${t.url}/?token=${token}`);
    for (let i = 0; i < 250; i++) {
      cur = {};
      const sent = now();
      await c.run(`ph-${i}`, ['/bin/true']);
      const done = now();
      if (i < 50) continue;
      for (const [k, [, f]] of phases.entries()) samples[k]!.push(f(cur, sent, done) * 1000);
    }
    c.close();
  } finally {
    for (const u of undo) u();
    await t.close();
    await audit.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  return phases.map(([phase], k) => ({
    phase,
    us: pct(
      samples[k]!.sort((a, b) => a - b),
      50,
    ),
  }));
}
