import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { z } from 'zod';
import type { LaunchSpec, PreparedLaunch } from '../../src/process/launch.js';
import { spawnPty } from '../../src/process/pty.js';
import { throughLauncher } from '../../src/process/spawner.js';
import { parseSandboxParam, toSandboxParam } from '../../src/protocol/sandbox.js';
import type { ParsedSandbox } from '../../src/sandbox/index.js';
import { type PrepareOptions, prepareLaunch, startSandbox } from '../../src/sandbox/index.js';
import { LINGER_MS } from '../../src/sandbox/linux/mountTargets.js';
import type { RpcClient } from '../helpers/client.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/** Shared helpers for the sandbox integration tests (sandbox.md §12 common setup). */

export const PY = (() => {
  try {
    return execFileSync('python3', ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8' }).trim();
  } catch {
    return '/usr/bin/python3';
  }
})();
export const PATH = process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin';

export const special = (kind: string, access: string, extra: Record<string, unknown> = {}) => ({
  path: { type: 'special', value: { kind, ...extra } },
  access,
});
/** A workspace's entries: read everything, write the cwd and $TMPDIR. */
export const workspaceEntries = () => [
  special('root', 'read'),
  special('current_working_directory', 'write'),
  special('tmpdir', 'write'),
];
/**
 * Codex's default permission profile entries: read everything, write the project roots, /tmp and $TMPDIR, the
 * project roots' .git, .agents and .codex read-only (each with `protected` on top, e.g. a missing_path_behavior).
 */
export const codexProfileEntries = (protectedExtra: Record<string, unknown> = {}) => [
  special('root', 'read'),
  special('project_roots', 'write'),
  special('slash_tmp', 'write'),
  special('tmpdir', 'write'),
  ...['.git', '.agents', '.codex'].map((subpath) => ({
    ...special('project_roots', 'read', { subpath }),
    ...protectedExtra,
  })),
];
export const pathEntry = (path: string, access: string) => ({ path: { type: 'path', path }, access });

/** The legacy workspace-write policy: no network, $TMPDIR and /tmp writable, unless `over` says otherwise. */
export const workspaceWrite = (over: Record<string, unknown> = {}) => ({
  type: 'workspace-write',
  network_access: false,
  exclude_tmpdir_env_var: false,
  exclude_slash_tmp: false,
  ...over,
});

/** The options of a seed SandboxLaunchConfig (seedParam, seed). */
export interface SeedOptions {
  cwd: string;
  sandbox?: string;
  policy?: Record<string, unknown>;
  entries?: unknown[];
  kind?: string;
  network?: 'restricted' | 'enabled';
  additionalPermissions?: unknown;
  enforceManagedNetwork?: boolean;
  useLegacyLandlock?: boolean;
}

/**
 * A seed SandboxLaunchConfig (§2.5 shape) as it goes on the wire; without `policy`, workspace-write with the network
 * access `network` says.
 */
export function seedParam(o: SeedOptions) {
  return {
    sandbox: o.sandbox ?? 'linux-seccomp',
    policy: o.policy ?? workspaceWrite({ network_access: o.network === 'enabled' }),
    fileSystemPolicy: {
      kind: o.kind ?? 'restricted',
      entries: o.entries ?? [
        special('root', 'read'),
        special('current_working_directory', 'write'),
        special('slash_tmp', 'write'),
        special('tmpdir', 'write'),
      ],
    },
    networkPolicy: o.network ?? 'restricted',
    sandboxPolicyCwd: o.cwd,
    additionalPermissions: o.additionalPermissions ?? null,
    enforceManagedNetwork: o.enforceManagedNetwork ?? false,
    windowsSandboxLevel: 'disabled',
    windowsSandboxPrivateDesktop: false,
    useLegacyLandlock: o.useLegacyLandlock ?? false,
  };
}

/** The same, parsed through the real schema. */
export function seed(o: SeedOptions): ParsedSandbox {
  const raw = seedParam(o);
  const r = parseSandboxParam(raw);
  if (!r.success) throw r.error;
  return r.data!;
}

/**
 * The seed policy of `o` parsed as a server parses a start's `sandbox` (protocol/sandbox.ts toSandboxParam, the
 * method table's transform): the same text gives the same kept parse, deeply frozen, so what a server keeps by it
 * (the effective sandbox, the Landlock launch plan) is kept here too.
 */
export function keptSeed(o: SeedOptions): ParsedSandbox {
  const parsed = z
    .unknown()
    .transform(toSandboxParam)
    .parse(JSON.parse(JSON.stringify(seedParam(o))));
  if (!parsed) throw new Error('no sandbox');
  return parsed;
}

export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  pid: number;
  prepared: PreparedLaunch;
}

/** Prepares and runs one command with pipes (stdio ['ignore','pipe','pipe', ...extraFds]), as the server will. */
export async function run(
  sandbox: ParsedSandbox | null,
  argv: string[],
  o: {
    cwd: string;
    env?: Record<string, string>;
    enforceManagedNetwork?: boolean;
    opts?: PrepareOptions;
    /** After the launch is prepared (its placeholders held), before it is spawned. */
    beforeSpawn?: (prepared: PreparedLaunch) => Promise<void>;
    onSpawn?: (pid: number) => void;
  },
): Promise<RunResult> {
  const file = argv[0]!.startsWith('/')
    ? argv[0]!
    : execFileSync('sh', ['-c', `command -v ${argv[0]}`])
        .toString()
        .trim();
  const spec: LaunchSpec = { file, argv, env: { PATH, ...(o.env ?? {}) }, cwd: o.cwd };
  const prepared = await prepareLaunch(
    startSandbox(sandbox, o.enforceManagedNetwork === true, o.cwd),
    { spec, tty: false },
    o.opts,
  );
  try {
    await o.beforeSpawn?.(prepared);
  } catch (e) {
    prepared.cleanup();
    throw e;
  }
  let s = prepared.spec;
  let fds = s.extraFds ?? [];
  if (s.confine) {
    // The Landlock backend: as the child_process spawner does it, through the launcher holding the ruleset.
    fds = [...fds, s.confine.rulesetFd];
    s = throughLauncher(
      s,
      fds.map((_, i) => 3 + i),
    );
  }
  const child = spawn(s.file, s.argv.slice(1), {
    argv0: s.argv[0],
    cwd: s.cwd,
    env: s.env,
    stdio: ['ignore', 'pipe', 'pipe', ...fds.map((fd) => (fd === null ? 'ignore' : fd))],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => {
    stdout += d;
  });
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    stderr += d;
  });
  const closed = new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
    child.on('close', (code, sig) => resolve([code, sig])),
  );
  const spawned = new Promise<void>((resolve, reject) => {
    child.once('spawn', () => resolve());
    child.once('error', reject);
  });
  try {
    await spawned;
    o.onSpawn?.(child.pid!);
    await prepared.afterSpawn?.(child.pid!);
  } catch (e) {
    child.kill('SIGKILL');
    await closed;
    prepared.cleanup();
    throw e;
  }
  const [code, signal] = await closed;
  prepared.cleanup();
  return { code, signal, stdout, stderr, pid: child.pid!, prepared };
}

/** The same through node-pty (no extra fds possible): returns the combined pty output. */
export async function runPty(
  sandbox: ParsedSandbox | null,
  argv: string[],
  o: { cwd: string; env?: Record<string, string>; enforceManagedNetwork?: boolean; opts?: PrepareOptions },
): Promise<{ code: number; output: string; prepared: PreparedLaunch }> {
  const spec: LaunchSpec = {
    file: argv[0]!,
    argv,
    env: { PATH, TERM: 'dumb', ...(o.env ?? {}) },
    cwd: o.cwd,
  };
  const prepared = await prepareLaunch(
    startSandbox(sandbox, o.enforceManagedNetwork === true, o.cwd),
    { spec, tty: true },
    o.opts,
  );
  const s = prepared.spec;
  // As the server does it: the setup fds and the fresh keyring go through the sandbox launcher.
  const term = spawnPty(s.file, s.argv.slice(1), {
    cwd: s.cwd,
    env: s.env,
    cols: 200,
    rows: 50,
    extraFds: s.extraFds,
    freshSessionKeyring: s.freshSessionKeyring,
    ...(s.confine ? { confine: s.confine } : {}),
  });
  let output = '';
  term.onData((d) => {
    output += d.toString('utf8');
  });
  const exited = new Promise<number>((resolve) => term.onExit((code) => resolve(code)));
  try {
    await prepared.afterSpawn?.(term.pid);
  } catch (e) {
    process.kill(term.pid, 'SIGKILL');
    await exited;
    prepared.cleanup();
    throw e;
  }
  const code = await exited;
  prepared.cleanup();
  return { code, output, prepared };
}

export interface Fixture {
  root: string;
  W: string;
  OUT: string;
  T: string;
  SOCK: string;
  port: number;
  port6: number;
  udpPort: number;
  /** Connections the loopback listeners saw (TCP v4, TCP v6, UDS, UDP datagrams). */
  hits: { tcp: number; tcp6: number; uds: number; udp: number };
  close(): Promise<void>;
}

/** §12 common setup: $W with .git/HEAD and .git/hooks, a sibling $OUT, loopback HTTP/UDP listeners and a UDS. */
export async function fixture(): Promise<Fixture> {
  // Outside /tmp, so that policies with `slash_tmp:write` still leave $OUT read-only.
  const base = existsSync('/var/tmp') ? '/var/tmp' : os.tmpdir();
  const root = mkdtempSync(join(base, 'corral-sbx-it-'));
  const W = join(root, 'ws');
  const OUT = join(root, 'out');
  const T = join(root, 'tmpdir');
  mkdirSync(join(W, '.git', 'hooks'), { recursive: true });
  writeFileSync(join(W, '.git', 'HEAD'), 'ref: refs/heads/main\n');
  mkdirSync(OUT);
  mkdirSync(T);
  const hits = { tcp: 0, tcp6: 0, uds: 0, udp: 0 };
  const server = http.createServer((_req, res) => {
    hits.tcp++;
    res.end('host-listener-body\n');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const server6 = net.createServer((c) => {
    hits.tcp6++;
    c.end();
  });
  await new Promise<void>((r) => server6.listen(0, '::1', () => r()));
  const SOCK = join(root, 'host.sock');
  const uds = net.createServer((c) => {
    hits.uds++;
    c.end();
  });
  await new Promise<void>((r) => uds.listen(SOCK, () => r()));
  const dgram = await import('node:dgram');
  const udp = dgram.createSocket('udp4');
  udp.on('message', () => {
    hits.udp++;
  });
  await new Promise<void>((r) => udp.bind(0, '127.0.0.1', () => r()));
  return {
    root,
    W,
    OUT,
    T,
    SOCK,
    port: (server.address() as net.AddressInfo).port,
    port6: (server6.address() as net.AddressInfo).port,
    udpPort: udp.address().port,
    hits,
    async close() {
      server.closeAllConnections();
      await Promise.all([
        new Promise((r) => server.close(r)),
        new Promise((r) => server6.close(r)),
        new Promise((r) => uds.close(r)),
        new Promise<void>((r) => udp.close(() => r())),
      ]);
      rmSync(root, { recursive: true, force: true });
    },
  };
}

/** A tiny logging HTTP proxy on 127.0.0.1 (a stand-in for the managed proxy). */
export async function loggingProxy(): Promise<{ port: number; log: string[]; close(): Promise<void> }> {
  const log: string[] = [];
  const server = http.createServer((req, res) => {
    log.push(`${req.method} ${req.url}`);
    res.end(`proxied: ${req.method} ${req.url}\n`);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as net.AddressInfo).port,
    log,
    async close() {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

/** PIDs of host processes whose cmdline contains `needle` (NUL-separated args joined by spaces). */
export function pidsMatching(needle: string): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const cmd = readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0').join(' ');
      if (cmd.includes(needle)) out.push(Number(d));
    } catch {
      // gone
    }
  }
  return out;
}

/** Polls `cond` every few ms until true or the deadline; returns whether it became true. */
export async function waitFor(cond: () => boolean, timeoutMs: number): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (cond()) return true;
    await new Promise((r) => setTimeout(r, 10));
  }
  return cond();
}

/** The exec server started as a child (test/fixtures/sandbox/server-child.ts) prints its URL first: resolves with it. */
export function serverUrl(child: ChildProcess, stderr: () => string = () => ''): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const m = /^(ws:\S+)$/m.exec(out);
      if (m) resolve(m[1]!);
    });
    child.once('exit', (code) => reject(new Error(`server child exited (${code}) ${stderr()}`)));
  });
}

/**
 * Waits until `path` no longer exists on the host: a synthetic mount point goes LINGER_MS after its last sandbox
 * (linux/mountTargets.ts). Something a sandbox created there would stay (only an empty placeholder is removed).
 */
export function gone(path: string): Promise<boolean> {
  const absent = () => {
    try {
      lstatSync(path); // not existsSync: a dangling symlink counts as there
      return false;
    } catch {
      return true;
    }
  };
  return waitFor(absent, LINGER_MS + 3000);
}

/** A fixture, a test server whose sandboxes use its tmpdir, and one client of it: the suite's shared setup. */
export interface SandboxServer {
  readonly f: Fixture;
  readonly ts: TestServer;
  readonly c: RpcClient & { sessionId: string };
}

/**
 * Registers the file's before/after hooks that open and close a `SandboxServer` (client `name`); its members are set
 * once `before` has run.
 */
export function sandboxServer(name: string): SandboxServer {
  const s = {} as { f: Fixture; ts: TestServer; c: RpcClient & { sessionId: string } };
  before(async () => {
    s.f = await fixture();
    s.ts = await startTestServer({ launcher: { sandbox: { tmpdir: s.f.T } } });
    s.c = await s.ts.client(name);
  });
  after(async () => {
    await s.ts.close();
    await s.f.close();
  });
  return s;
}

export interface ServerRun {
  started: Record<string, unknown>;
  exitCode: number;
  sandboxDenied: boolean;
  stdout: string;
  stderr: string;
  pty: string;
}

/** process/start (pipes and no arg0 unless `params` says otherwise) through `client`, then its output and exit. */
export async function runThrough(
  client: RpcClient,
  params: { processId: string; argv: string[]; cwd: string; env: Record<string, string> } & Record<
    string,
    unknown
  >,
): Promise<ServerRun> {
  const started = await client.request<Record<string, unknown>>('process/start', {
    tty: false,
    arg0: null,
    ...params,
  });
  const events = await client.collect(params.processId, 20_000);
  const exited = events.find((e) => e.method === 'process/exited')!;
  return {
    started,
    exitCode: exited.params.exitCode as number,
    sandboxDenied: exited.params.sandboxDenied as boolean,
    stdout: client.output(params.processId, 'stdout'),
    stderr: client.output(params.processId, 'stderr'),
    pty: client.output(params.processId, 'pty'),
  };
}

/**
 * process/start of `argv` in /tmp with PATH (/usr/local/bin:/usr/bin:/bin) plus `extra.env`, and `extra`'s other
 * members as given; then its output (the PTY's with `tty`) and its exit code.
 */
export async function startAndRead(
  c: RpcClient,
  processId: string,
  argv: string[],
  extra: Record<string, unknown> = {},
): Promise<{ out: string; exitCode: number }> {
  const { env, ...rest } = extra as { env?: Record<string, string> };
  await c.request('process/start', {
    processId,
    argv,
    cwd: '/tmp',
    env: { PATH: '/usr/local/bin:/usr/bin:/bin', ...env },
    tty: false,
    ...rest,
  });
  const events = await c.collect(processId, 20_000);
  const exited = events.find((e) => e.method === 'process/exited')!;
  return {
    out: c.output(processId, extra.tty ? 'pty' : undefined),
    exitCode: exited.params.exitCode as number,
  };
}

/** A seed sandbox that reads everything, writes the workspace and tmpdir, and enforces the managed network. */
export function enforcedWorkspaceSandbox(cwd: string, useLegacyLandlock: boolean) {
  return seedParam({
    cwd,
    entries: [
      special('root', 'read'),
      special('current_working_directory', 'write'),
      special('tmpdir', 'write'),
    ],
    enforceManagedNetwork: true,
    useLegacyLandlock,
  });
}

/**
 * The seed's central combination (issue 33, items 2 and 3): a process/start of `sh -c <three curls>` under the
 * server's own managedNetwork (localhost allowed) with enforceManagedNetwork, on the workspace `cwd`; the curls print
 * allowed=<code> (through the proxy), local=<code> (a loopback literal: 403 not_allowed_local) and direct=<curl exit>.
 */
export function centralStart(
  processId: string,
  o: { port: number; cwd: string; tty: boolean; useLegacyLandlock?: boolean; conversationId?: string },
) {
  const script = [
    // NO_PROXY names loopback: --noproxy '' sends these through the managed proxy all the same.
    `curl -sS -m10 --noproxy '' -o /dev/null -w 'allowed=%{http_code}\\n' http://localhost:${o.port}/ok`,
    `curl -sS -m10 --noproxy '' -w '\\nlocal=%{http_code}\\n' http://127.0.0.1:${o.port}/local`,
    `curl -sS -m5 --noproxy '*' http://127.0.0.1:${o.port}/direct 2>/dev/null; echo "direct=$?"`,
  ].join('; ');
  return {
    processId,
    argv: ['/bin/sh', '-c', script],
    cwd: o.cwd,
    env: { PATH, TERM: 'dumb' },
    tty: o.tty,
    arg0: null,
    sandbox: enforcedWorkspaceSandbox(o.cwd, o.useLegacyLandlock ?? false),
    managedNetwork: {
      config: { network: { enabled: true, enable_socks5: true, domains: { localhost: 'allow' } } },
      ...(o.conversationId ? { auditMetadata: { conversationId: o.conversationId } } : {}),
    },
  };
}

/** A fixture and a process outside any sandbox (`sleep 600`) whose pid commands try to reach. */
export interface FixtureWithVictim {
  readonly f: Fixture;
  readonly victim: ChildProcess;
}

/** Registers the file's before/after hooks that open and close a `FixtureWithVictim` (set once `before` ran). */
export function fixtureWithVictim(): FixtureWithVictim {
  const s = {} as { f: Fixture; victim: ChildProcess };
  before(async () => {
    s.f = await fixture();
    s.victim = spawn('sleep', ['600'], { stdio: 'ignore' });
  });
  after(async () => {
    s.victim.kill('SIGKILL');
    await s.f.close();
  });
  return s;
}
