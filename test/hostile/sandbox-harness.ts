/**
 * The harness of the hostile-repository suite: a real exec server in its own process (as root, or as uid 65534
 * through setpriv), started the way a user would start it (optionally holding inherited fds and a session keyring
 * with a secret), and an agent talking to it over the WebSocket protocol with the sandbox objects released clients
 * send (Codex 0.169's FileSystemSandboxContext, and the seed SandboxLaunchConfig).
 */
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { tsEntry } from '../helpers/cli.js';
import { RpcClient } from '../helpers/client.js';
import { serverUrl } from '../integration/sandbox-util.js';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SERVER = fileURLToPath(new URL('../fixtures/sandbox/server-child.ts', import.meta.url));
/** The system python: root's pyenv shims are not readable by uid 65534. */
export const PY = '/usr/bin/python3';
export const PATH = '/usr/local/bin:/usr/bin:/bin';
export const NOBODY = 65534;

export type Who = 'root' | 'nobody';

/** Why a run as `who` cannot happen here (false when it can). */
export function whySkip(who: Who): string | false {
  if (!existsSync('/usr/bin/bwrap')) return 'bubblewrap is not installed';
  if (!existsSync(PY)) return `${PY} is missing`;
  if (process.getuid?.() !== 0) return 'the suite starts servers as root and as uid 65534: run it as root';
  if (who === 'nobody') {
    try {
      execFileSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', 'test', '-r', SERVER]);
    } catch {
      return `setpriv is missing, or uid 65534 cannot read ${SERVER}`;
    }
  }
  return false;
}

/** A scratch tree outside /tmp (so `slash_tmp:write` never covers it), owned by the server's user. */
export function scratch(who: Who): { root: string; mk(name: string): string; cleanup(): void } {
  const root = mkdtempSync(join('/var/tmp', `corral-hostile-${who}-`));
  chmodSync(root, 0o755);
  const own = (p: string) => {
    if (who === 'nobody') chownSync(p, NOBODY, NOBODY);
  };
  own(root);
  return {
    root,
    mk(name) {
      const p = join(root, name);
      mkdirSync(p, { recursive: true });
      own(p);
      return p;
    },
    cleanup: () => rmSync(root, { recursive: true, force: true }),
  };
}

/** Recursively hands a tree to the server's user (the sandbox writes as that user). */
export function chownTree(who: Who, p: string): void {
  if (who === 'nobody') execFileSync('chown', ['-hR', `${NOBODY}:${NOBODY}`, p]);
}

/** Joins a fresh named session keyring, adds a user key to it, then execs the rest of argv (the server). */
const KEYRING_PY = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
keyctl, add_key = (250, 248) if os.uname().machine == 'x86_64' else (219, 217)
if libc.syscall(keyctl, 1, b'corral-hostile-session') < 0: sys.exit('join session keyring: %d' % ctypes.get_errno())
desc, secret = sys.argv[1].encode(), sys.argv[2].encode()
if libc.syscall(add_key, b'user', desc, secret, len(secret), -3) < 0: sys.exit('add_key: %d' % ctypes.get_errno())
os.execv(sys.argv[3], sys.argv[3:])
`;

export interface ServerOptions {
  who: Who;
  /** The server's TMPDIR for the sandbox (`tmpdir` specials). */
  tmpdir: string;
  /** Extra fds the server inherits, by number (e.g. {200: fd}). */
  inherit?: Record<number, number>;
  /** A user key the server's session keyring holds. */
  keyring?: { description: string; secret: string };
  /** An argv prefix the server runs under (test/helpers/namespaceless.ts: where namespaces fail). */
  wrap?: string[];
  /** The server's sandbox options (PrepareOptions: fallback, acceptWeaker). */
  sandbox?: Record<string, unknown>;
  /** More environment for the server. */
  env?: Record<string, string>;
}

export interface HostileServer {
  url: string;
  pid: number;
  client(): Promise<RpcClient & { sessionId: string }>;
  close(): Promise<void>;
}

/** Starts `node server-child.ts` (the exec server on an ephemeral loopback port) as the given user. */
export async function startServer(o: ServerOptions): Promise<HostileServer> {
  const argv: string[] = [...(o.wrap ?? [])];
  if (o.who === 'nobody')
    argv.push('/usr/bin/setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', '--');
  if (o.keyring) argv.push(PY, '-c', KEYRING_PY, o.keyring.description, o.keyring.secret);
  argv.push(
    process.execPath,
    ...tsEntry(SERVER),
    o.tmpdir,
    ...(o.sandbox ? [JSON.stringify(o.sandbox)] : []),
  );
  const stdio: (string | number)[] = ['ignore', 'pipe', 'pipe'];
  for (const [n, fd] of Object.entries(o.inherit ?? {})) {
    while (stdio.length < Number(n)) stdio.push('ignore');
    stdio[Number(n)] = fd;
  }
  // No XDG_RUNTIME_DIR, no TMPDIR: the server's private files go to /tmp, as in the review.
  const env: Record<string, string> = { PATH, HOME: o.who === 'nobody' ? '/tmp' : '/root', ...o.env };
  const child = spawn(argv[0]!, argv.slice(1), { cwd: ROOT, env, stdio: stdio as never });
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    err += d;
  });
  const url = await serverUrl(child, () => err);
  const clients: RpcClient[] = [];
  return {
    url,
    pid: child.pid!,
    async client() {
      const c = await RpcClient.open(url, 'hostile-agent');
      clients.push(c);
      return c;
    },
    async close() {
      for (const c of clients) c.close();
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    },
  };
}

const special = (kind: string, access: string, extra: Record<string, unknown> = {}) => ({
  path: { type: 'special', value: { kind, ...extra } },
  access,
});
const pathEntry = (path: string, access: string) => ({ path: { type: 'path', path }, access });
const uri = (p: string) => `file://${p}`;

export type Shape = '0.169' | 'seed';

export interface PolicyOptions {
  cwd: string;
  /** Writable roots besides the cwd (and the server's TMPDIR). */
  writable?: string[];
  readOnly?: boolean;
  network?: 'restricted' | 'enabled';
  enforceManagedNetwork?: boolean;
  /** Ask for the Landlock backend (the seed's and 0.169's `useLegacyLandlock`). */
  useLegacyLandlock?: boolean;
}

/** The `sandbox` param of process/start as Codex 0.169 sends it (§3.2), or as the seed's SandboxLaunchConfig (§2.5). */
export function sandboxParam(shape: Shape, o: PolicyOptions): Record<string, unknown> {
  const writable = o.writable ?? [];
  const network = o.network ?? 'restricted';
  if (shape === '0.169') {
    const entries = o.readOnly
      ? [special('root', 'read')]
      : [
          special('root', 'read'),
          special('project_roots', 'write'),
          special('tmpdir', 'write'),
          ...writable.map((w) => pathEntry(uri(w), 'write')),
          ...['.git', '.agents', '.codex', '.aws'].map((subpath) => ({
            ...special('project_roots', 'read', { subpath }),
            missing_path_behavior: 'skip',
          })),
        ];
    return {
      permissions: { type: 'managed', file_system: { type: 'restricted', entries }, network },
      cwd: uri(o.cwd),
      workspaceRoots: [uri(o.cwd)],
      windowsSandboxLevel: 'disabled',
      windowsSandboxProxySettingsMode: 'reconcile',
      useLegacyLandlock: o.useLegacyLandlock ?? false,
    };
  }
  const entries = o.readOnly
    ? [special('root', 'read')]
    : [
        special('root', 'read'),
        special('current_working_directory', 'write'),
        special('tmpdir', 'write'),
        ...writable.map((w) => pathEntry(w, 'write')),
        pathEntry(join(o.cwd, '.git'), 'read'),
        pathEntry(join(o.cwd, '.codex'), 'read'),
      ];
  return {
    sandbox: 'linux-seccomp',
    policy: o.readOnly
      ? { type: 'read-only', ...(network === 'enabled' ? { network_access: true } : {}) }
      : {
          type: 'workspace-write',
          writable_roots: writable,
          network_access: network === 'enabled',
          exclude_tmpdir_env_var: false,
          exclude_slash_tmp: true,
        },
    fileSystemPolicy: { kind: 'restricted', entries },
    networkPolicy: network,
    sandboxPolicyCwd: o.cwd,
    additionalPermissions: null,
    enforceManagedNetwork: o.enforceManagedNetwork ?? false,
    windowsSandboxLevel: 'disabled',
    windowsSandboxPrivateDesktop: false,
    useLegacyLandlock: o.useLegacyLandlock ?? false,
  };
}

export interface AgentRun {
  exitCode: number;
  sandboxType: string;
  /** process/start's sandboxGuarantees (the Landlock backend). */
  guarantees?: { backend: string; reason?: string; landlockAbi?: number; weaker: string[] };
  /** stdout + stderr (pipes) or the terminal's output (tty). */
  output: string;
}

let seq = 0;

/** Plants `lines` as the workspace's attack.sh (as a hostile repository ships a script) and runs it as the agent would. */
export async function runPlanted(
  c: RpcClient,
  who: Who,
  W: string,
  lines: string[],
  o: { tty: boolean; sandbox: Record<string, unknown>; env?: Record<string, string> },
): Promise<AgentRun> {
  writeFileSync(join(W, 'attack.sh'), `${lines.join('\n')}\necho DONE\n`);
  chownTree(who, W);
  return runAgent(c, { argv: ['/bin/sh', 'attack.sh'], cwd: W, ...o });
}

/** One process/start → process/closed, as an agent's exec_command does it. */
export async function runAgent(
  c: RpcClient,
  o: {
    argv: string[];
    cwd: string;
    tty: boolean;
    sandbox: Record<string, unknown> | null;
    env?: Record<string, string>;
    enforceManagedNetwork?: boolean;
    timeoutMs?: number;
  },
): Promise<AgentRun> {
  const processId = `hostile-${process.pid}-${++seq}`;
  const started = await c.request<{ sandboxType: string; sandboxGuarantees?: AgentRun['guarantees'] }>(
    'process/start',
    {
      processId,
      argv: o.argv,
      cwd: o.cwd,
      env: { PATH, TERM: 'dumb', ...(o.env ?? {}) },
      tty: o.tty,
      arg0: null,
      sandbox: o.sandbox,
      ...(o.enforceManagedNetwork ? { enforceManagedNetwork: true } : {}),
    },
  );
  const events = await c.collect(processId, o.timeoutMs ?? 30_000);
  const exited = events.find((e) => e.method === 'process/exited');
  const output = o.tty
    ? c.output(processId, 'pty')
    : c.output(processId, 'stdout') + c.output(processId, 'stderr');
  return {
    exitCode: (exited?.params.exitCode as number) ?? -1,
    sandboxType: started.sandboxType,
    ...(started.sandboxGuarantees ? { guarantees: started.sandboxGuarantees } : {}),
    output,
  };
}
