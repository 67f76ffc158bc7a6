/**
 * `corral selftest` (issue 37, item 5): a bounded battery of known escape and bypass attempts against this machine's
 * real sandbox, with the server's configured backends (bwrap or Landlock, cgroups). Each case starts a real command
 * through an in-process exec server (the same dispatch, launcher and sandbox as process/start, over an in-memory
 * connection), in a scratch directory it removes, and watches loopback only: listeners and sockets of its own that a
 * held sandbox never reaches. Prints held / broken / not applicable (with the reason) per case; exit 1 if anything is
 * broken.
 *
 * `hole` (tests only, `--hole NAME`): runs that case with the protection it probes taken away (what a regression of
 * that protection would look like: the network namespace, the read-only root, the cgroup's own files, the managed
 * proxy's local guard, fs/*'s sandbox context), so a test can see the case report broken.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import dgram from 'node:dgram';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { cgroupHost } from '../process/cgroup.js';
import { seedLinuxConfig, specialEntry } from '../protocol/sandbox.js';
import { escapeTerminalLines, terminalJson } from '../protocol/terminalText.js';
import type { PrepareOptions } from '../sandbox/index.js';
import { ExecServer } from '../server/execServer.js';
import { type CaseResult, type CaseStatus, type SelftestReport, selftestResultPath } from './lastResult.js';
import { LocalClient } from './localClient.js';

export type { CaseResult, CaseStatus, SelftestReport };

/** Spellings of the host's loopback that resolvers and connect(2) callers accept (tests add their own). */
export const LOOPBACK_SPELLINGS = [
  '127.0.0.1',
  '127.1',
  '0x7f000001',
  '2130706433',
  '0177.0.0.1',
  'localhost',
  '0.0.0.0',
] as const;

export const CASE_NAMES = [
  'write-outside-workspace',
  'symlink-out-of-workspace',
  'loopback-spellings',
  'dns-to-host',
  'unix-datagram-to-host',
  'inherited-fds',
  'leave-cgroup',
  'protected-name-symlink',
  'socks-nul-oversize-names',
  'relay-in-sandbox',
  'fs-races',
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
  extra: Record<string, unknown> = {},
): Promise<{ exitCode: number; output: string }> {
  const processId = `selftest-${randomUUID()}`;
  await start(ctx, processId, argv, sandbox, extra);
  return ctx.client.outputAndExit(processId, 20_000);
}

function start(
  ctx: Ctx,
  processId: string,
  argv: string[],
  sandbox: unknown,
  extra: Record<string, unknown> = {},
): Promise<unknown> {
  return ctx.client.request('process/start', {
    processId,
    argv,
    cwd: ctx.ws,
    env: { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: ctx.ws },
    tty: false,
    sandbox,
    ...extra,
  });
}

/** A listener on the host's loopback that counts the connections it gets (and closes them). */
async function countingListener(): Promise<{ port: number; reached: () => number; close: () => void }> {
  let reached = 0;
  const server = net.createServer((s) => {
    reached++;
    s.destroy();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as net.AddressInfo).port,
    reached: () => reached,
    close: () => server.close(),
  };
}

/**
 * A managed network (Corral's own per-command proxy, SOCKS5 on) enforced by the sandbox: the command reaches its
 * proxy and nothing else. `hole`: the policy lets everything through, loopback included.
 */
function managedNetwork(domains: Record<string, 'allow' | 'deny'>, hole: boolean): Record<string, unknown> {
  return {
    enforceManagedNetwork: true,
    managedNetwork: {
      config: {
        network: {
          enabled: true,
          enable_socks5: true,
          ...(hole
            ? { allow_local_binding: true, domains: { '*': 'allow', '127.0.0.1': 'allow' } }
            : { domains }),
        },
      },
    },
  };
}

const py = (ctx: Ctx) => ctx.python!;

type CaseFn = (ctx: Ctx) => Promise<Omit<CaseResult, 'name'>>;

const na = (detail: string) => ({ status: 'not-applicable' as const, detail });
const verdict = (escaped: boolean, held: string, broken: string) =>
  escaped ? { status: 'broken' as const, detail: broken } : { status: 'held' as const, detail: held };

/**
 * SOCKS5 CONNECTs to names that a C resolver would cut at their first NUL (an allowed-looking name that is the host's
 * loopback up to the NUL), a 255-byte one, and one whose length byte promises more than is sent, each on a fresh
 * connection to the command's managed proxy; the last is the host's loopback by its plain name (a control: refused by
 * the proxy's local guard). The proxy allows `*.allowed.test` only, which no name here resolves to without a cut.
 */
const SOCKS_NAMES_CODE = (port: number) => `import os, socket
from urllib.parse import urlparse
p = urlparse(os.environ.get('ALL_PROXY') or os.environ.get('all_proxy') or '')
if not p.port:
  print('no-proxy'); raise SystemExit(0)
pad = lambda head: head + b'a' * (255 - len(head) - 13) + b'.allowed.test'
names = [('nul-ip', b'127.0.0.1\\x00.allowed.test', 0), ('nul-hex', b'0x7f000001\\x00.allowed.test', 0),
  ('nul-decimal', b'2130706433\\x00.allowed.test', 0), ('oversize-nul', pad(b'127.0.0.1\\x00'), 0),
  ('oversize-length', b'127.0.0.1', 255), ('plain-loopback', b'127.0.0.1', 0)]
for tag, name, claimed in names:
  try:
    s = socket.create_connection((p.hostname, p.port), 5); s.settimeout(5)
    s.sendall(b'\\x05\\x01\\x00'); g = s.recv(2)
    s.sendall(b'\\x05\\x01\\x00\\x03' + bytes([claimed or len(name)]) + name + (${port}).to_bytes(2, 'big'))
    if claimed: s.shutdown(socket.SHUT_WR)
    try: r = s.recv(10)
    except Exception: r = b''
    print(tag, g.hex(), r[:2].hex() or 'closed', flush=True); s.close()
  except Exception as e: print(tag, 'error', type(e).__name__, flush=True)
`;

/**
 * A relay inside the sandbox: a listener on the sandbox's loopback that forwards what it accepts to the host's
 * loopback listener, directly and through the command's proxy (HTTP CONNECT); a client in the sandbox sends through it.
 */
const RELAY_CODE = (port: number) => `import os, socket, threading
from urllib.parse import urlparse
ls = socket.socket(); ls.bind(('127.0.0.1', 0)); ls.listen(8); rp = ls.getsockname()[1]
proxy = urlparse(os.environ.get('HTTP_PROXY') or os.environ.get('http_proxy') or '')
def forward(conn, how):
  data = conn.recv(100)
  try:
    if how == 'direct': u = socket.create_connection(('127.0.0.1', ${port}), 3)
    else:
      u = socket.create_connection((proxy.hostname, proxy.port), 3)
      u.sendall(b'CONNECT 127.0.0.1:${port} HTTP/1.1\\r\\nHost: 127.0.0.1:${port}\\r\\n\\r\\n')
      head = u.recv(100)
      if not head.startswith(b'HTTP/1.1 200') and not head.startswith(b'HTTP/1.0 200'): raise OSError(head[:12].decode('latin1'))
    u.sendall(data); print('relayed', how, flush=True); u.close()
  except Exception as e: print('refused', how, type(e).__name__, str(e)[:40], flush=True)
  conn.close()
def serve():
  for how in ('direct', 'proxy'):
    c, _ = ls.accept(); forward(c, how)
t = threading.Thread(target=serve); t.start()
for how in ('direct', 'proxy') if proxy.port else ('direct',):
  c = socket.create_connection(('127.0.0.1', rp), 3); c.sendall(b'through the relay'); c.close()
  if not proxy.port: socket.create_connection(('127.0.0.1', rp), 3).close()
print('relay listening', rp, flush=True)
t.join(10)
`;

/**
 * The fs/* race (issue 12): a command in the sandbox swaps a directory of the workspace and a symlink to a folder the
 * fs/* requests' sandbox context makes unreadable (renameat2 RENAME_EXCHANGE, in a loop), while fs/readFile and
 * fs/writeFile go through the directory's path. Bounded: RACE_ATTEMPTS of each per round, at most RACE_ROUNDS rounds,
 * until a request met the swapped path (refused, or outside). The racer swaps an odd number of times between its
 * looks for `stop`, so the path is swapped about half the time also while the racer waits for a CPU (a loaded machine:
 * with even batches every request fell between two batches, met the path as it was, and a re-introduced hole went
 * unseen). Rounds where no request met the swap prove nothing and are not counted as held.
 */
const RACE_ATTEMPTS = 150;
const RACE_ROUNDS = 8;
const RACER_CODE = `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
n = 0
print('ready', flush=True)
while not os.path.exists('stop') and n < 5000000:
  for _ in range(255):
    if libc.renameat2(-100, b'd', -100, b'l', 2) != 0: raise SystemExit('renameat2: ' + os.strerror(ctypes.get_errno()))
    n += 1
print('swaps', n, flush=True)
`;

/** The 0.169 sandbox context of fs/*: everything readable but `outside` (nothing), the workspace writable. */
function fsContext(ws: string, outside: string): Record<string, unknown> {
  const uri = (p: string) => pathToFileURL(p).href;
  const at = (path: string, access: string) => ({ path: { type: 'path', path: uri(path) }, access });
  return {
    permissions: {
      type: 'managed',
      file_system: {
        type: 'restricted',
        entries: [
          { path: { type: 'special', value: { kind: 'root' } }, access: 'read' },
          at(ws, 'write'),
          at(outside, 'none'),
        ],
      },
      network: 'restricted',
    },
    cwd: uri(ws),
    workspaceRoots: [uri(ws)],
    windowsSandboxLevel: 'disabled',
    windowsSandboxProxySettingsMode: 'reconcile',
    useLegacyLandlock: false,
  };
}

const EXTRA_CASES = {
  'socks-nul-oversize-names': async (ctx: Ctx) => {
    if (!ctx.python) return na('python3 is not installed: the SOCKS client is a python script');
    const target = await countingListener();
    try {
      const hole = ctx.hole === 'socks-nul-oversize-names';
      const r = await run(
        ctx,
        [py(ctx), '-c', SOCKS_NAMES_CODE(target.port)],
        sandboxFor(ctx.ws),
        managedNetwork({ '*.allowed.test': 'allow' }, hole),
      );
      if (r.output.includes('no-proxy')) return na('the managed proxy gave the command no ALL_PROXY');
      const lines = r.output.trim().split('\n');
      // A reply of 05 00 to the CONNECT: the proxy says it connected somewhere.
      const granted = lines.filter((l) => l.split(' ').pop() === '0500');
      const control = lines.find((l) => l.startsWith('plain-loopback'));
      if (!control || control.includes('error'))
        return na(`the command could not speak to its SOCKS proxy: ${escapeTerminalLines(r.output.trim())}`);
      return verdict(
        target.reached() > 0 || granted.length > 0,
        `${lines.length} CONNECTs (NUL-cut, 255-byte, over-long length byte, plain loopback) refused: ${lines.join('; ')}`,
        `the host's loopback listener was reached ${target.reached()} time(s); granted: ${granted.join('; ') || 'none'}`,
      );
    } finally {
      target.close();
    }
  },
  'relay-in-sandbox': async (ctx: Ctx) => {
    if (!ctx.python) return na('python3 is not installed: the relay is a python script');
    const target = await countingListener();
    try {
      const hole = ctx.hole === 'relay-in-sandbox';
      // The hole: the sandbox keeps the host's network (its loopback is the host's).
      const sb = sandboxFor(ctx.ws, { network: hole });
      const r = await run(
        ctx,
        [py(ctx), '-c', RELAY_CODE(target.port)],
        sb,
        hole ? {} : managedNetwork({}, false),
      );
      if (!r.output.includes('relay listening'))
        return na(
          `the relay did not start in the sandbox: ${escapeTerminalLines(r.output.trim().slice(0, 200))}`,
        );
      const relayed = r.output.split('\n').filter((l) => l.startsWith('relayed'));
      return verdict(
        target.reached() > 0,
        `a relay listening in the sandbox never reached the host's loopback listener (${r.output
          .split('\n')
          .filter((l) => l.startsWith('refused'))
          .join('; ')})`,
        `the relay reached the host's loopback listener ${target.reached()} time(s) (${relayed.join('; ')})`,
      );
    } finally {
      target.close();
    }
  },
  'fs-races': async (ctx: Ctx) => {
    if (!ctx.python) return na('python3 is not installed: the racer is a python script');
    const INSIDE = 'inside';
    mkdirSync(join(ctx.ws, 'd'));
    writeFileSync(join(ctx.ws, 'd', 'secret'), INSIDE);
    writeFileSync(join(ctx.outside, 'secret'), 'outside the sandbox');
    symlinkSync(ctx.outside, join(ctx.ws, 'l'));
    const racer = `selftest-racer-${randomUUID()}`;
    await start(ctx, racer, [py(ctx), '-c', RACER_CODE], sandboxFor(ctx.ws));
    try {
      await ctx.client.outputSeen(racer, 'ready', 20_000);
    } catch (e) {
      await ctx.client.outputAndExit(racer, 20_000).catch(() => {});
      return na(`the racer did not start in the sandbox: ${(e as Error).message}`);
    }
    let escaped = 0;
    let refused = 0;
    let rounds = 0;
    let swaps = '';
    try {
      // The hole: fs/* without the sandbox context (the host's view).
      const sandbox = ctx.hole === 'fs-races' ? undefined : fsContext(ctx.ws, ctx.outside);
      const d = join(ctx.ws, 'd');
      while (rounds < RACE_ROUNDS && escaped + refused === 0) {
        const round = rounds++;
        const attempts: Promise<void>[] = [];
        for (let i = 0; i < RACE_ATTEMPTS; i++) {
          attempts.push(
            ctx.client.request('fs/readFile', { path: join(d, 'secret'), sandbox }).then(
              (res) => {
                const got = Buffer.from((res as { dataBase64: string }).dataBase64, 'base64').toString();
                if (got !== INSIDE) escaped++;
              },
              () => {
                refused++;
              },
            ),
            ctx.client
              .request('fs/writeFile', {
                path: join(d, `w${round}-${i}`),
                dataBase64: Buffer.from('written').toString('base64'),
                sandbox,
              })
              .then(
                () => {},
                () => {
                  refused++;
                },
              ),
          );
        }
        await Promise.all(attempts);
        for (let i = 0; i < RACE_ATTEMPTS; i++)
          if (existsSync(join(ctx.outside, `w${round}-${i}`))) escaped++;
      }
    } finally {
      writeFileSync(join(ctx.ws, 'stop'), '');
      swaps = (await ctx.client.outputAndExit(racer, 20_000)).output.trim();
    }
    if (!/swaps [1-9]\d*/.test(swaps))
      return na(`the racer did not swap in the sandbox: ${escapeTerminalLines(swaps)}`);
    const racerSaid = escapeTerminalLines(swaps.split('\n').pop() ?? '');
    if (escaped + refused === 0)
      return na(
        `no fs/* request met the swapped path in ${rounds} rounds of ${2 * RACE_ATTEMPTS} (racer: ${racerSaid}): the race never overlapped, nothing is proved`,
      );
    return verdict(
      escaped > 0,
      `${rounds * RACE_ATTEMPTS} reads and ${rounds * RACE_ATTEMPTS} writes through a raced path stayed inside (${refused} met the swapped path and were refused; racer: ${racerSaid})`,
      `${escaped} of ${2 * rounds * RACE_ATTEMPTS} fs/* requests read or wrote outside through the raced path`,
    );
  },
} satisfies Record<string, CaseFn>;

const CASES: Record<CaseName, CaseFn> = {
  ...EXTRA_CASES,
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
    const target = await countingListener();
    const port = target.port;
    const spellings = LOOPBACK_SPELLINGS;
    const code = `import socket\nfor h in ${JSON.stringify(spellings)}:\n  try:\n    s=socket.create_connection((h,${port}),1); print('connected',h)\n  except Exception as e: print('refused',h,type(e).__name__)`;
    try {
      const sb = sandboxFor(ctx.ws, { network: ctx.hole === 'loopback-spellings' });
      const r = await run(ctx, [py(ctx), '-c', code], sb);
      return verdict(
        target.reached() > 0,
        `${spellings.length} spellings of the host's loopback refused (${r.output.split('\n').filter((l) => l.startsWith('refused')).length} reported)`,
        `reached the host's loopback listener ${target.reached()} time(s): ${r.output
          .trim()
          .split('\n')
          .filter((l) => l.startsWith('connected'))
          .join(', ')}`,
      );
    } finally {
      target.close();
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

/** A case's detail as kept: within what the protocol's report takes (src/protocol/selftest.ts). */
const DETAIL_CHARS = 4096;
const capDetail = (d: string) => (d.length > DETAIL_CHARS ? `${d.slice(0, DETAIL_CHARS)}… (cut)` : d);

/** Runs the battery (or the cases named). Never throws for a case: a case that fails to run is reported broken. */
export async function runSelftest(
  opts: { sandbox?: PrepareOptions; hole?: string | null; only?: readonly string[] } = {},
): Promise<SelftestReport> {
  const scratch = mkdtempSync(join(tmpdir(), 'corral-selftest-'));
  // Interrupted (`corral selftest` exits on SIGINT/SIGTERM), the process leaves before the finally below: the scratch
  // goes at the exit then.
  const remove = () => rmSync(scratch, { recursive: true, force: true });
  process.once('exit', remove);
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
        const r = await CASES[name](ctx);
        cases.push({ name, status: r.status, detail: capDetail(r.detail) });
      } catch (e) {
        const msg = (e as Error).message;
        // A sandbox this machine cannot start is not a hole: the command never ran.
        if (/sandbox|bwrap|landlock|not available|unsupported/i.test(msg))
          cases.push({
            name,
            status: 'not-applicable',
            detail: capDetail(`the sandbox did not start: ${msg}`),
          });
        else cases.push({ name, status: 'broken', detail: capDetail(`the case could not run: ${msg}`) });
      }
    }
  } finally {
    client.close();
    await server.shutdown().catch(() => {});
    process.off('exit', remove);
    remove();
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
