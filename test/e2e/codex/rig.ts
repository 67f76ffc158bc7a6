/**
 * The offline rig that drives a released Codex CLI against an exec-server (spec codex-clients.md §2):
 *
 *   fake model (127.0.0.1, SSE) <─HTTP─ codex exec ─WS─> passive relay (logs frames) ─WS─> exec-server
 *
 * The exec-server is ours (`node bin/corral.js exec-server --listen ws://127.0.0.1:0`, needs `npm run build`) or the
 * real `codex exec-server` of a cached version (to validate the rig itself). One server serves every run of a suite.
 * `runSuiteIsolated` runs a whole suite in a fresh network namespace that has only `lo` (`unshare -n`), so nothing can
 * leave the machine: the fake model, the relay, the exec-server and every codex run share that namespace.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import {
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { homedir, tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type FakeRegistry, startFakeRegistry } from '../../helpers/registry.js';
import { FAKE_AWS } from '../../helpers/registry-contract.js';
import { type DnsSink, startDnsSink } from './dns.js';
import { type ScenarioName, scenarioSteps, startFakeModel } from './fake-model.js';
import { type Frame, MINIMAL_METHODS, startRelay } from './relay.js';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
export const CODEX_VERSIONS = ['0.120.0', '0.125.0', '0.130.0', '0.169.0', '0.171.0'] as const;
const BASE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * Scratch space for runs. It must be outside the system temp directory (Codex refuses to create its arg0 links there,
 * spec §9) and outside any git repository (Codex walks up looking for `.git`), so not under this repo either.
 */
export function defaultBaseDir(): string {
  const dir = process.env.CORRAL_E2E_DIR ?? join(homedir(), '.cache', 'corral-e2e', 'codex');
  const tmp = resolve(tmpdir());
  if (resolve(dir) === tmp || resolve(dir).startsWith(`${tmp}/`)) {
    throw new Error(`CORRAL_E2E_DIR must not be under the temp directory ${tmp} (codex-clients.md §9)`);
  }
  return dir;
}

/** The native binary of a cached version (scripts/install-codex.mjs), or null. */
export function codexBinary(version: string): string | null {
  const vendor = join(
    ROOT,
    '.cache',
    'codex',
    version,
    'node_modules',
    '@openai',
    'codex-linux-x64',
    'vendor',
    'x86_64-unknown-linux-musl',
  );
  for (const p of [join(vendor, 'bin', 'codex'), join(vendor, 'codex', 'codex')]) if (existsSync(p)) return p;
  return null;
}

/** 0.120 only knows gpt-5.4 as a catalogue slug; a catalogue slug is what makes `apply_patch` available (spec §2). */
export function modelFor(version: string): string {
  return version === '0.120.0' ? 'gpt-5.4' : 'gpt-5.5';
}

/** `cli`: the built Corral CLI to run (default dist/cli.js through bin/corral.js); see `snapshotCorralCli`. */
export type ServerSpec =
  | { kind: 'corral'; cli?: string }
  | { kind: 'codex'; version: string; binary: string };

/**
 * The working tree is shared and `npm run build` empties dist/ before it writes it again, so a long suite that ran
 * dist/cli.js directly could find it gone. This copies the built CLI once (waiting up to `waitMs` for a build in
 * progress to produce it) to .cache/corral-e2e/, inside the package so it still finds node_modules and the native
 * spawner. CORRAL_E2E_CORRAL_CLI names another built CLI to use instead.
 */
export async function snapshotCorralCli(waitMs = 60_000): Promise<string> {
  if (process.env.CORRAL_E2E_CORRAL_CLI) return resolve(process.env.CORRAL_E2E_CORRAL_CLI);
  const built = join(ROOT, 'dist', 'cli.js');
  const deadline = Date.now() + waitMs;
  while (!existsSync(built)) {
    if (Date.now() > deadline) throw new Error(`${built} is missing: run \`npm run build\` first`);
    await new Promise((r) => setTimeout(r, 500));
  }
  const dir = join(ROOT, '.cache', 'corral-e2e');
  mkdirSync(dir, { recursive: true });
  const copy = join(dir, `cli-${process.pid}.js`);
  copyFileSync(built, copy);
  // The audit trail's worker thread is a script of its own, found next to the bundle.
  cpSync(join(ROOT, 'dist', 'audit'), join(dir, 'audit'), { recursive: true });
  return copy;
}
export type SandboxMode = 'danger-full-access' | 'workspace-write' | 'read-only';

export interface ExecServer {
  kind: ServerSpec['kind'];
  url: string;
  pid: number;
  stderr(): string;
  stop(): Promise<void>;
}

/** Starts an exec-server with a clean environment; resolves once it printed its ws:// URL. */
export async function startExecServer(spec: ServerSpec, dir: string, path: string): Promise<ExecServer> {
  mkdirSync(dir, { recursive: true });
  const env: Record<string, string> = { PATH: path, HOME: join(dir, 'home'), LANG: 'C.UTF-8' };
  mkdirSync(env.HOME!, { recursive: true });
  let cmd: string;
  let args: string[];
  if (spec.kind === 'corral') {
    const cli = spec.cli ?? join(ROOT, 'dist', 'cli.js');
    if (!existsSync(cli)) throw new Error(`${cli} is missing: run \`npm run build\` first`);
    cmd = process.execPath;
    args = [spec.cli ?? join(ROOT, 'bin', 'corral.js'), 'exec-server', '--listen', 'ws://127.0.0.1:0'];
  } else {
    env.CODEX_HOME = join(dir, 'codex-home');
    mkdirSync(env.CODEX_HOME, { recursive: true });
    cmd = spec.binary;
    args = ['exec-server', '--listen', 'ws://127.0.0.1:0'];
  }
  const child = spawn(cmd, args, { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const url = await new Promise<string>((resolveUrl, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`exec-server printed no ws:// URL within 20s; stdout=${stdout} stderr=${stderr}`));
    }, 20_000);
    child.stdout!.on('data', (d: Buffer) => {
      stdout += d.toString();
      const m = /ws:\/\/[^\s]+/.exec(stdout);
      if (m) {
        clearTimeout(timer);
        resolveUrl(m[0]);
      }
    });
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(
        new Error(
          `exec-server exited (${code ?? signal}) before printing its URL; stderr=${stderr.slice(-2000)}`,
        ),
      );
    });
  });
  child.stdout!.resume();
  return {
    kind: spec.kind,
    url,
    pid: child.pid!,
    stderr: () => stderr,
    stop: () => stopChild(child),
  };
}

/** The environment id executors register as in the registry runs. */
export const REGISTRY_ENVIRONMENT = 'corral-e2e';

/**
 * Starts an exec-server as a REMOTE executor of the fake registry (`--remote … --remote-transport direct
 * --aws-sigv4`, fake AWS credentials the registry verifies); resolves once its link is up. Its `url` is the
 * registry's harness URL for the environment: clients reach it only through the relay.
 */
export async function startRemoteExecutor(
  spec: ServerSpec,
  dir: string,
  path: string,
  registry: FakeRegistry,
): Promise<ExecServer> {
  mkdirSync(join(dir, 'home'), { recursive: true });
  const env: Record<string, string> = {
    PATH: path,
    HOME: join(dir, 'home'),
    LANG: 'C.UTF-8',
    AWS_ACCESS_KEY_ID: FAKE_AWS.accessKeyId,
    AWS_SECRET_ACCESS_KEY: FAKE_AWS.secretAccessKey,
    AWS_EC2_METADATA_DISABLED: 'true',
  };
  const remote = [
    'exec-server',
    '--remote',
    registry.url,
    '--environment-id',
    REGISTRY_ENVIRONMENT,
    '--remote-transport',
    'direct',
    '--aws-sigv4',
    '--aws-region',
    FAKE_AWS.region,
  ];
  let cmd: string;
  let args: string[];
  if (spec.kind === 'corral') {
    cmd = process.execPath;
    args = [spec.cli ?? join(ROOT, 'bin', 'corral.js'), ...remote];
  } else {
    env.CODEX_HOME = join(dir, 'codex-home');
    mkdirSync(env.CODEX_HOME, { recursive: true });
    cmd = spec.binary;
    args = remote;
  }
  const child = spawn(cmd, args, { cwd: dir, env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const exited = once(child, 'exit').then(([code, signal]) => {
    throw new Error(`the remote executor exited (${code ?? signal}); stderr=${stderr.slice(-2000)}`);
  });
  exited.catch(() => {});
  await Promise.race([registry.waitForExecutor(REGISTRY_ENVIRONMENT, 20_000), exited]);
  return {
    kind: spec.kind,
    url: registry.harnessUrl(REGISTRY_ENVIRONMENT),
    pid: child.pid!,
    stderr: () => stderr,
    stop: () => stopChild(child),
  };
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
  await exited;
  clearTimeout(timer);
}

/** A `git` first on the server's PATH that logs every invocation, so a test can prove the server started none. */
function writeGitShim(dir: string): { dir: string; log: string } {
  const shimDir = join(dir, 'shim');
  const log = join(dir, 'git-invocations.log');
  mkdirSync(shimDir, { recursive: true });
  writeFileSync(log, '');
  let realGit = '/usr/bin/git';
  try {
    realGit = execFileSync('sh', ['-c', 'command -v git'], { encoding: 'utf8' }).trim() || realGit;
  } catch {}
  writeFileSync(
    join(shimDir, 'git'),
    `#!/bin/sh\necho "ppid=$PPID args=$*" >> '${log}'\nexec '${realGit}' "$@"\n`,
    { mode: 0o755 },
  );
  return { dir: shimDir, log };
}

export interface RunSpec {
  name: string;
  scenario: ScenarioName;
  sandbox: SandboxMode;
  /** `git init` the workspace first. */
  gitRepo?: boolean;
  /** Point the client at the server through `$CODEX_HOME/environments.toml` instead of CODEX_EXEC_SERVER_URL (0.169). */
  environmentsToml?: boolean;
  /** Point the client at a loopback port where nothing listens (the failure-mode check of spec §10). */
  noServer?: boolean;
  /** Let only the §8 method set reach the server; the relay answers every other request with -32601. */
  minimal?: boolean;
  /** Registry suites: crash the registry and relay (every socket, all state) before the model answers this step. */
  crashRegistryBeforeStep?: number;
}

/** A ws:// URL on 127.0.0.1 where nothing listens: a port the kernel handed out and that was closed again. */
async function closedPortUrl(): Promise<string> {
  const srv = createServer();
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const { port } = srv.address() as AddressInfo;
  await new Promise((r) => srv.close(r));
  return `ws://127.0.0.1:${port}`;
}

export interface RunResult {
  name: string;
  version: string;
  spec: RunSpec;
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  durationMs: number;
  stdout: string;
  stderr: string;
  /** Tool outputs the CLI sent back to the model, by call id. */
  outputs: Record<string, string>;
  modelRequests: { path: string; step: number; tools: string[]; model?: string }[];
  modelErrors: string[];
  frames: Frame[];
  handshakes: string[];
  /** The URL the client was given (CODEX_EXEC_SERVER_URL or environments.toml). */
  clientUrl: string;
  /** Top-level regular files of the workspace (except .git), with their contents. */
  files: Record<string, string>;
  workspace: string;
  /** Whether `<workspace>/../outside.txt` exists after the run. */
  outsideExists: boolean;
  /** Lines the git shim logged during this run (git started by the server or its children). */
  gitInvocations: string[];
  /** Names looked up through the injected resolver during this run (none is ever resolved). */
  dnsQueries: string[];
  /** Registry suites: what the registry saw during this run (`kind status url`), in order. */
  registryRequests?: string[];
}

export interface RunOptions extends RunSpec {
  version: string;
  binary: string;
  serverUrl: string;
  /** The run's own directory: CODEX_HOME, workspace and its parent live here. */
  dir: string;
  timeoutMs?: number;
  gitLog?: string;
  dns?: DnsSink;
  registry?: FakeRegistry;
}

function readFiles(dir: string): Record<string, string> {
  const files: Record<string, string> = {};
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    // A placeholder of a missing protected name (.aws, .codex: an empty 0500 directory held while a sandboxed command
    // runs) may go between the listing and the stat: Codex can finish on process/exited, before the server's cleanup.
    if (name === '.git' || !statSync(p, { throwIfNoEntry: false })?.isFile()) continue;
    files[name] = readFileSync(p, 'utf8').slice(0, 65536);
  }
  return files;
}

function clientConfig(modelUrl: string, sandbox: SandboxMode): string {
  return `model = "fake-model"
model_provider = "fake"
approval_policy = "never"
sandbox_mode = "${sandbox}"
check_for_update_on_startup = false

[model_providers.fake]
name = "fake"
base_url = "${modelUrl}"
wire_api = "responses"
env_key = "FAKE_MODEL_API_KEY"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false
`;
}

/** Runs one `codex exec` through a fresh fake model and relay against `serverUrl`. */
export async function runCodex(o: RunOptions): Promise<RunResult> {
  rmSync(o.dir, { recursive: true, force: true });
  const home = join(o.dir, 'codex-home');
  const workspace = join(o.dir, 'work');
  const userHome = join(o.dir, 'user');
  for (const d of [home, workspace, userHome]) mkdirSync(d, { recursive: true });
  if (o.gitRepo) {
    execFileSync('git', ['init', '-q', workspace], {
      env: { PATH: BASE_PATH, HOME: userHome, GIT_CONFIG_NOSYSTEM: '1' },
    });
  }
  const crashAt = o.crashRegistryBeforeStep;
  const registry = o.registry;
  const model = await startFakeModel(
    scenarioSteps(o.scenario),
    'done',
    crashAt && registry
      ? async (n) => {
          if (n !== crashAt) return;
          await registry.crash();
          await registry.restart();
        }
      : undefined,
  );
  const registryMark = registry?.requests.length ?? 0;
  const relay = await startRelay(
    o.noServer ? await closedPortUrl() : o.serverUrl,
    o.minimal ? MINIMAL_METHODS : undefined,
  );
  const dnsBefore = o.dns?.queries.length ?? 0;
  const gitLogBefore = o.gitLog ? readFileSync(o.gitLog, 'utf8').split('\n').filter(Boolean).length : 0;
  writeFileSync(join(home, 'config.toml'), clientConfig(model.url, o.sandbox));
  // With noServer the client gets the dead port itself, not the relay (which would accept and then drop). The
  // server's query (Corral's `?token=`) goes into the client's URL: the relay passes the upgrade on unchanged, so the
  // server only lets the client in if the unmodified CLI kept the query when it connected.
  // The server URL's path is kept too (a registry's harness endpoint is /harness/<environment>).
  const server = new URL(o.serverUrl);
  const query = server.search;
  const path = server.pathname === '/' ? (query ? '/' : '') : server.pathname;
  const clientUrl = o.noServer ? await closedPortUrl() : `${relay.url}${path}${query}`;
  const env: Record<string, string> = {
    PATH: BASE_PATH,
    HOME: userHome,
    LANG: 'C.UTF-8',
    CODEX_HOME: home,
    FAKE_MODEL_API_KEY: 'dummy',
  };
  if (o.environmentsToml) {
    writeFileSync(
      join(home, 'environments.toml'),
      `default = "remote-es"\ninclude_local = false\n\n[[environments]]\nid = "remote-es"\nurl = "${clientUrl}"\n`,
    );
  } else {
    env.CODEX_EXEC_SERVER_URL = clientUrl;
  }
  const args = [
    'exec',
    '--skip-git-repo-check',
    '-m',
    modelFor(o.version),
    '-s',
    o.sandbox,
    `Run the ${o.scenario} scenario.`,
  ];
  const started = Date.now();
  const child = spawn(o.binary, args, { cwd: workspace, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => {
    stdout += d.toString();
  });
  child.stderr!.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill('SIGKILL');
  }, o.timeoutMs ?? 90_000);
  const [exitCode, signal] = (await once(child, 'exit')) as [number | null, string | null];
  clearTimeout(timer);
  const durationMs = Date.now() - started;
  // Let the last frames the server sent after the client dropped reach the relay's log.
  await new Promise((r) => setImmediate(r));
  await relay.close();
  await model.close();
  const gitInvocations = o.gitLog
    ? readFileSync(o.gitLog, 'utf8').split('\n').filter(Boolean).slice(gitLogBefore)
    : [];
  return {
    name: o.name,
    version: o.version,
    spec: {
      name: o.name,
      scenario: o.scenario,
      sandbox: o.sandbox,
      gitRepo: o.gitRepo,
      environmentsToml: o.environmentsToml,
      noServer: o.noServer,
      minimal: o.minimal,
      crashRegistryBeforeStep: o.crashRegistryBeforeStep,
    },
    exitCode,
    signal,
    timedOut,
    durationMs,
    stdout,
    stderr,
    outputs: { ...model.outputs },
    modelRequests: model.requests,
    modelErrors: model.errors,
    frames: relay.frames,
    handshakes: relay.handshakes,
    clientUrl,
    files: readFiles(workspace),
    workspace,
    outsideExists: existsSync(join(o.dir, 'outside.txt')),
    gitInvocations,
    dnsQueries: (o.dns?.queries.slice(dnsBefore) ?? []).map((q) => q.name),
    ...(registry
      ? {
          registryRequests: registry.requests
            .slice(registryMark)
            .map((r) => `${r.kind} ${r.status} ${r.url}`),
        }
      : {}),
  };
}

export interface SuiteJob {
  version: string;
  binary: string;
  server: ServerSpec;
  baseDir: string;
  runs: RunSpec[];
  timeoutMs?: number;
  /** Answer DNS on 127.0.0.1:53 with NXDOMAIN (set when the suite runs in its own network namespace). */
  dnsSink?: boolean;
  /** Run the server as a remote executor of a fake environment registry; the CLI reaches it through the relay. */
  viaRegistry?: boolean;
}

export interface SuiteResult {
  version: string;
  server: { kind: string; url: string; pid: number; stderr: string } | null;
  /** Set when the server could not be started: every run then fails with it. */
  serverError?: string;
  runs: RunResult[];
  /** How the suite was isolated from the network. */
  isolation: string;
  durationMs: number;
}

/** Starts one exec-server and runs every codex run of the job against it, one after the other. */
export async function runSuite(job: SuiteJob, isolation = 'none'): Promise<SuiteResult> {
  const started = Date.now();
  rmSync(job.baseDir, { recursive: true, force: true });
  mkdirSync(job.baseDir, { recursive: true });
  const shim = writeGitShim(job.baseDir);
  let server: ExecServer;
  const registry = job.viaRegistry
    ? await startFakeRegistry({ executorAuth: { kind: 'sigv4', ...FAKE_AWS } })
    : undefined;
  try {
    const dir = join(job.baseDir, 'server');
    const path = `${shim.dir}:${BASE_PATH}`;
    server = registry
      ? await startRemoteExecutor(job.server, dir, path, registry)
      : await startExecServer(job.server, dir, path);
  } catch (e) {
    await registry?.close();
    return {
      version: job.version,
      server: null,
      serverError: e instanceof Error ? e.message : String(e),
      runs: [],
      isolation,
      durationMs: Date.now() - started,
    };
  }
  const dns = job.dnsSink ? await startDnsSink() : undefined;
  const runs: RunResult[] = [];
  const stop = () => {
    void server.stop().then(() => process.exit(143));
  };
  process.once('SIGTERM', stop);
  try {
    for (const spec of job.runs) {
      runs.push(
        await runCodex({
          ...spec,
          version: job.version,
          binary: job.binary,
          serverUrl: server.url,
          dir: join(job.baseDir, spec.name),
          timeoutMs: job.timeoutMs,
          gitLog: shim.log,
          dns,
          registry,
        }),
      );
    }
  } finally {
    process.off('SIGTERM', stop);
    await server.stop();
    await dns?.close();
    await registry?.close();
  }
  return {
    version: job.version,
    server: { kind: server.kind, url: server.url, pid: server.pid, stderr: server.stderr() },
    runs,
    isolation,
    durationMs: Date.now() - started,
  };
}

/**
 * The namespace wrapper: a new network namespace with only `lo` up, and a private mount namespace in which
 * /etc/resolv.conf names 127.0.0.1 (the rig's DNS sink), so that no lookup waits for a resolver that cannot answer.
 */
const NETNS_SCRIPT = 'ip link set lo up && mount --bind "$0" /etc/resolv.conf && exec "$@"';

function netnsPrefix(resolvConf: string): string[] {
  return ['unshare', '-n', '-m', '--propagation', 'private', '--', 'sh', '-c', NETNS_SCRIPT, resolvConf];
}

/** Whether the namespace wrapper works here (it needs root). */
export function netnsAvailable(resolvConf: string): { ok: boolean; reason: string } {
  const [cmd, ...args] = netnsPrefix(resolvConf);
  try {
    execFileSync(cmd!, [...args, 'true'], { stdio: 'pipe', timeout: 10_000 });
    return { ok: true, reason: 'unshare -n -m (only lo; resolv.conf -> the rig DNS sink)' };
  } catch (e) {
    const err = e as { stderr?: Buffer; message: string };
    return { ok: false, reason: `unshare -n -m failed: ${(err.stderr?.toString() || err.message).trim()}` };
  }
}

/**
 * Runs `runSuite` in a child process inside a fresh network namespace with only `lo` up, when that works (root here);
 * otherwise directly, relying on the fake provider config and a clean environment to keep codex offline.
 */
export async function runSuiteIsolated(job: SuiteJob, timeoutMs = 280_000): Promise<SuiteResult> {
  mkdirSync(job.baseDir, { recursive: true });
  const stem = join(
    dirname(job.baseDir),
    `${job.version}-${job.server.kind}${job.viaRegistry ? '-registry' : ''}`,
  );
  const jobFile = `${stem}.job.json`;
  const resultFile = `${stem}.result.json`;
  const resolvConf = `${stem}.resolv.conf`;
  writeFileSync(resolvConf, 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n');
  rmSync(resultFile, { force: true });
  const ns = netnsAvailable(resolvConf);
  writeFileSync(jobFile, JSON.stringify({ ...job, dnsSink: ns.ok }));
  const runner = [process.execPath, '--import', 'tsx', join(ROOT, 'test', 'e2e', 'codex', 'run-rig.ts')];
  const isolation = ns.ok
    ? ns.reason
    : `none (${ns.reason}); offline through the fake provider and env -i only`;
  const argv = [...(ns.ok ? netnsPrefix(resolvConf) : []), ...runner, jobFile, resultFile, isolation];
  const child = spawn(argv[0]!, argv.slice(1), { cwd: ROOT, stdio: ['ignore', 'inherit', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => {
    stderr += d.toString();
    if (process.env.CORRAL_E2E_VERBOSE) process.stderr.write(d);
  });
  const timer = setTimeout(() => child.kill('SIGTERM'), timeoutMs);
  const [code] = (await once(child, 'exit')) as [number | null];
  clearTimeout(timer);
  if (!existsSync(resultFile)) {
    throw new Error(`the rig runner exited ${code} without a result; stderr:\n${stderr.slice(-4000)}`);
  }
  return JSON.parse(readFileSync(resultFile, 'utf8')) as SuiteResult;
}

/** A path relative to the repo, for messages. */
export function rel(p: string): string {
  return relative(ROOT, p);
}
