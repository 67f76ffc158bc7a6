/**
 * `corral selftest` (issue 37, item 5): a bounded battery of known escape and bypass attempts against this machine's
 * real sandbox, with the server's configured backends (bwrap or Landlock, cgroups). Each case starts a real command
 * through an in-process exec server (the same dispatch, launcher and sandbox as process/start, over an in-memory
 * connection), in a scratch directory it removes, and watches loopback only: listeners and sockets of its own that a
 * held sandbox never reaches. Prints held / broken / not applicable (with the reason) per case; exit 1 if anything is
 * broken.
 *
 * `hole` (tests only, `--hole NAME`): runs that case with the protection it probes taken away (what a regression of
 * that protection would look like: the network namespace, the read-only root, the cgroup's own files), so a test can
 * see the case report broken.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import dgram from 'node:dgram';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { cgroupHost } from '../process/cgroup.js';
import { seedLinuxConfig, specialEntry } from '../protocol/sandbox.js';
import { escapeTerminalLines, terminalJson } from '../protocol/terminalText.js';
import type { PrepareOptions } from '../sandbox/index.js';
import { ExecServer } from '../server/execServer.js';
import { type CaseResult, type CaseStatus, type SelftestReport, selftestResultPath } from './lastResult.js';
import { LocalClient } from './localClient.js';

export type { CaseResult, CaseStatus, SelftestReport };

export const CASE_NAMES = [
  'write-outside-workspace',
  'symlink-out-of-workspace',
  'loopback-spellings',
  'dns-to-host',
  'unix-datagram-to-host',
  'inherited-fds',
  'leave-cgroup',
  'protected-name-symlink',
] as const;
export type CaseName = (typeof CASE_NAMES)[number];

/** A seed sandbox: the workspace writable, the rest read-only, the network off (or on: `network`). */
function sandboxFor(ws: string, o: { network?: boolean; rootWritable?: boolean } = {}) {
  return seedLinuxConfig({
    policy: {
      type: 'workspace-write',
      network_access: !!o.network,
      exclude_tmpdir_env_var: true,
      exclude_slash_tmp: true,
    },
    entries: [
      specialEntry('root', o.rootWritable ? 'write' : 'read'),
      specialEntry('current_working_directory', 'write'),
    ],
    network: o.network ? 'enabled' : 'restricted',
    cwd: ws,
  });
}

interface Ctx {
  client: LocalClient;
  scratch: string;
  ws: string;
  outside: string;
  hole: string | null;
  python: string | null;
}

/** Runs a command in the sandbox; resolves with its output and exit code (or rejects with the start's error). */
async function run(
  ctx: Ctx,
  argv: string[],
  sandbox: unknown,
): Promise<{ exitCode: number; output: string }> {
  const processId = `selftest-${randomUUID()}`;
  await ctx.client.request('process/start', {
    processId,
    argv,
    cwd: ctx.ws,
    env: { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: ctx.ws },
    tty: false,
    sandbox,
  });
  return ctx.client.outputAndExit(processId, 20_000);
}

const py = (ctx: Ctx) => ctx.python!;

type CaseFn = (ctx: Ctx) => Promise<Omit<CaseResult, 'name'>>;

const na = (detail: string) => ({ status: 'not-applicable' as const, detail });
const verdict = (escaped: boolean, held: string, broken: string) =>
  escaped ? { status: 'broken' as const, detail: broken } : { status: 'held' as const, detail: held };

const CASES: Record<CaseName, CaseFn> = {
  'write-outside-workspace': async (ctx) => {
    const target = join(ctx.outside, 'written');
    const sb = sandboxFor(ctx.ws, { rootWritable: ctx.hole === 'write-outside-workspace' });
    const r = await run(ctx, ['/bin/sh', '-c', `echo x > '${target}'`], sb);
    return verdict(
      existsSync(target),
      `writing ${target} failed (exit ${r.exitCode})`,
      `the command wrote ${target}`,
    );
  },
  'symlink-out-of-workspace': async (ctx) => {
    const link = join(ctx.ws, 'out');
    symlinkSync(ctx.outside, link);
    const sb = sandboxFor(ctx.ws, { rootWritable: ctx.hole === 'symlink-out-of-workspace' });
    const r = await run(ctx, ['/bin/sh', '-c', 'echo x > out/through-link'], sb);
    const escaped = existsSync(join(ctx.outside, 'through-link'));
    return verdict(
      escaped,
      `a write through a symlink to outside failed (exit ${r.exitCode})`,
      'wrote outside through a symlink in the workspace',
    );
  },
  'protected-name-symlink': async (ctx) => {
    // `.git` is read-only inside a writable root; a symlink named `.git` to a writable place must not be a way round.
    mkdirSync(join(ctx.ws, '.git'), { recursive: true });
    const sb = sandboxFor(ctx.ws, { rootWritable: ctx.hole === 'protected-name-symlink' });
    const r = await run(ctx, ['/bin/sh', '-c', 'echo x > .git/config; rm -rf .git 2>/dev/null; ls -a'], sb);
    const cfg = join(ctx.ws, '.git', 'config');
    const touched = existsSync(cfg) || !existsSync(join(ctx.ws, '.git'));
    return verdict(
      touched,
      `.git stayed read-only (exit ${r.exitCode})`,
      'the command wrote or removed the workspace .git',
    );
  },
  'loopback-spellings': async (ctx) => {
    if (!ctx.python) return na('python3 is not installed: the connecting client is a python one-liner');
    let reached = 0;
    const server = net.createServer((s) => {
      reached++;
      s.destroy();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as net.AddressInfo).port;
    const spellings = [
      '127.0.0.1',
      '127.1',
      '0x7f000001',
      '2130706433',
      '0177.0.0.1',
      'localhost',
      '0.0.0.0',
    ];
    const code = `import socket\nfor h in ${JSON.stringify(spellings)}:\n  try:\n    s=socket.create_connection((h,${port}),1); print('connected',h)\n  except Exception as e: print('refused',h,type(e).__name__)`;
    try {
      const sb = sandboxFor(ctx.ws, { network: ctx.hole === 'loopback-spellings' });
      const r = await run(ctx, [py(ctx), '-c', code], sb);
      return verdict(
        reached > 0,
        `${spellings.length} spellings of the host's loopback refused (${r.output.split('\n').filter((l) => l.startsWith('refused')).length} reported)`,
        `reached the host's loopback listener ${reached} time(s): ${r.output
          .trim()
          .split('\n')
          .filter((l) => l.startsWith('connected'))
          .join(', ')}`,
      );
    } finally {
      server.close();
    }
  },
  'dns-to-host': async (ctx) => {
    if (!ctx.python) return na('python3 is not installed');
    let queries = 0;
    const sock = dgram.createSocket('udp4');
    sock.on('message', () => queries++);
    await new Promise<void>((r) => sock.bind(0, '127.0.0.1', r));
    const port = sock.address().port;
    // A DNS query for a name, sent to a resolver on the host's loopback (ours: it only counts).
    const code = `import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ntry:\n  s.sendto(bytes.fromhex('abcd01000001000000000000076578616d706c65036e65740000010001'),('127.0.0.1',${port})); print('sent')\nexcept Exception as e: print('refused',type(e).__name__)`;
    try {
      const sb = sandboxFor(ctx.ws, { network: ctx.hole === 'dns-to-host' });
      await run(ctx, [py(ctx), '-c', code], sb);
      // A datagram the kernel accepted arrives before the sender's exit is reported.
      await new Promise((r) => setImmediate(r));
      return verdict(
        queries > 0,
        'a DNS query to a resolver on the host loopback never arrived',
        `the host's loopback resolver got ${queries} query`,
      );
    } finally {
      sock.close();
    }
  },
  'unix-datagram-to-host': async (ctx) => {
    if (!ctx.python) return na('python3 is not installed');
    // A host socket the command can name: in the workspace (so the file system lets it reach the path).
    const path = join(ctx.ws, 'host.sock');
    // Node has no unix datagram sockets: the host side is a python listener started outside any sandbox.
    const listener = spawn(
      py(ctx),
      [
        '-c',
        `import socket,sys\ns=socket.socket(socket.AF_UNIX,socket.SOCK_DGRAM)\ns.bind(${JSON.stringify(path)})\nprint('ready',flush=True)\ns.settimeout(3)\ntry:\n  s.recv(100); print('got',flush=True)\nexcept Exception: print('none',flush=True)`,
      ],
      { stdio: ['ignore', 'pipe', 'ignore'] },
    );
    const exited = new Promise<void>((resolve) => listener.once('exit', () => resolve()));
    let out = '';
    listener.stdout.on('data', (d) => {
      out += d;
    });
    await new Promise<void>((resolve, reject) => {
      const check = () => (out.includes('ready') ? resolve() : listener.stdout.once('data', check));
      void exited.then(() => reject(new Error(`the host's unix socket listener ended: ${out.trim()}`)));
      check();
    });
    const code = `import socket\ns=socket.socket(socket.AF_UNIX,socket.SOCK_DGRAM)\ntry:\n  s.sendto(b'hi',${JSON.stringify(path)}); print('sent')\nexcept Exception as e: print('refused',type(e).__name__)`;
    const sb = sandboxFor(ctx.ws, { network: ctx.hole === 'unix-datagram-to-host' });
    const r = await run(ctx, [py(ctx), '-c', code], sb);
    await exited;
    return verdict(
      out.includes('got'),
      `a datagram to a host unix socket never arrived (${r.output.trim()})`,
      'a datagram reached a unix socket of the host',
    );
  },
  'inherited-fds': async (ctx) => {
    // A descriptor the server holds (a file in the scratch directory): the command must not get it.
    const secret = join(ctx.outside, 'secret');
    writeFileSync(secret, 'secret');
    const r = await run(
      ctx,
      ['/bin/sh', '-c', 'for f in /proc/self/fd/*; do readlink "$f"; done'],
      sandboxFor(ctx.ws),
    );
    const leaked = r.output.split('\n').filter((l) => l.includes(ctx.scratch) && !l.startsWith(ctx.ws));
    return verdict(
      leaked.length > 0,
      'no descriptor of the server reached the command',
      `inherited: ${leaked.join(', ')}`,
    );
  },
  'leave-cgroup': async (ctx) => {
    const host = cgroupHost();
    if (host.status.version === 'none')
      return na(`no per-command cgroups here: ${host.status.problem ?? 'off'}`);
    const parent = host.status.dirs[0]!;
    // Writing its own pid into the server's cgroup (out of its own, out of its limits).
    const target = `${parent}/${host.status.version === 'v2' ? 'cgroup.procs' : 'tasks'}`;
    const sb = ctx.hole === 'leave-cgroup' ? null : sandboxFor(ctx.ws);
    const r = await run(
      ctx,
      [
        '/bin/sh',
        '-c',
        `echo $$ > '${target}' 2>/dev/null && echo moved || echo refused; cat /proc/self/cgroup`,
      ],
      sb,
    );
    return verdict(
      r.output.includes('moved'),
      `writing its pid into ${target} was refused`,
      `the command moved itself into ${target}`,
    );
  },
};

function findPython(): string | null {
  for (const p of ['/usr/bin/python3', '/usr/local/bin/python3', '/bin/python3']) if (existsSync(p)) return p;
  return null;
}

/** Runs the battery (or the cases named). Never throws for a case: a case that fails to run is reported broken. */
export async function runSelftest(
  opts: { sandbox?: PrepareOptions; hole?: string | null; only?: readonly string[] } = {},
): Promise<SelftestReport> {
  const scratch = mkdtempSync(join(tmpdir(), 'corral-selftest-'));
  const server = new ExecServer({ resumeGraceMs: 0, launcher: { sandbox: opts.sandbox ?? {} } });
  const client = new LocalClient(server);
  const cases: CaseResult[] = [];
  try {
    await client.request('initialize', { clientName: 'corral-selftest' });
    client.notify('initialized', {});
    for (const name of CASE_NAMES) {
      if (opts.only && !opts.only.includes(name)) continue;
      const dir = join(scratch, name);
      const ws = join(dir, 'ws');
      const outside = join(dir, 'outside');
      mkdirSync(ws, { recursive: true });
      mkdirSync(outside, { recursive: true });
      const ctx: Ctx = { client, scratch, ws, outside, hole: opts.hole ?? null, python: findPython() };
      try {
        cases.push({ name, ...(await CASES[name](ctx)) });
      } catch (e) {
        const msg = (e as Error).message;
        // A sandbox this machine cannot start is not a hole: the command never ran.
        if (/sandbox|bwrap|landlock|not available|unsupported/i.test(msg))
          cases.push({ name, status: 'not-applicable', detail: `the sandbox did not start: ${msg}` });
        else cases.push({ name, status: 'broken', detail: `the case could not run: ${msg}` });
      }
    }
  } finally {
    client.close();
    await server.shutdown().catch(() => {});
    rmSync(scratch, { recursive: true, force: true });
  }
  return { time: new Date().toISOString(), ok: !cases.some((c) => c.status === 'broken'), cases };
}

export function formatSelftest(r: SelftestReport): string {
  const width = Math.max(...r.cases.map((c) => c.name.length), 4);
  const lines = r.cases.map(
    (c) => `${c.status.padEnd(14)} ${c.name.padEnd(width)}  ${escapeTerminalLines(c.detail)}`,
  );
  lines.push(r.ok ? 'selftest: every case held or does not apply here' : 'selftest: BROKEN (see above)');
  return `${lines.join('\n')}\n`;
}

/**
 * `corral selftest [--json]`: 0 when nothing is broken, else 1. The report is also kept at `savePath` (default
 * selftestResultPath(); null: not kept), 0600.
 */
export async function selftestCommand(o: {
  json: boolean;
  sandbox: PrepareOptions;
  hole?: string | null;
  out?: NodeJS.WritableStream;
  savePath?: string | null;
}): Promise<number> {
  const r = await runSelftest({ sandbox: o.sandbox, hole: o.hole ?? null });
  (o.out ?? process.stdout).write(o.json ? `${terminalJson(r)}\n` : formatSelftest(r));
  const save = o.savePath === undefined ? selftestResultPath() : o.savePath;
  if (save) {
    try {
      mkdirSync(dirname(save), { recursive: true, mode: 0o700 });
      writeFileSync(save, `${JSON.stringify(r)}\n`, { mode: 0o600 });
    } catch (e) {
      process.stderr.write(`corral selftest: cannot keep the result at ${save}: ${(e as Error).message}\n`);
    }
  }
  return r.ok ? 0 : 1;
}
