/**
 * Managed network proxy benchmark (network-proxy.md §7): plain HTTP requests/s and latency through the proxy versus
 * direct to the origin, with 32 keep-alive Node clients, and CONNECT tunnel throughput (with and without the proxy). The origin and the proxy
 * each run in their own process (as Codex's proxy did in the reference measurement); this process is the client.
 * Loopback only. Reference: Codex 0.169 on 2 cores, ~3.6k req/s, p50 7 ms, p99 25 ms; ~13k req/s direct; ~1 GB/s
 * through a CONNECT tunnel.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { outputAndExit } from '../helpers/spawned.js';
import type { BenchRow } from './types.js';

const CLIENTS = 32;
const WARMUP_MS = 500;
const MEASURE_MS = 3000;
const TUNNEL_BYTES = 512 * 1024 * 1024;

// ---- child process roles ---------------------------------------------------------------------------------------

async function serveOrigin(): Promise<void> {
  const body = Buffer.from('hello from the origin\n');
  const web = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': body.length });
    res.end(body);
  });
  web.keepAliveTimeout = 60_000;
  const chunk = Buffer.alloc(1024 * 1024, 0x61);
  // Sends TUNNEL_BYTES to whoever connects, then closes.
  const source = net.createServer((s) => {
    let left = TUNNEL_BYTES;
    s.on('error', () => {});
    const pump = () => {
      while (left > 0) {
        left -= chunk.length;
        if (!s.write(chunk)) {
          s.once('drain', pump);
          return;
        }
      }
      s.end();
    };
    pump();
  });
  await new Promise<void>((r) => web.listen(0, '127.0.0.1', () => r()));
  await new Promise<void>((r) => source.listen(0, '127.0.0.1', () => r()));
  const port = (s: net.Server) => (s.address() as net.AddressInfo).port;
  process.stdout.write(`${JSON.stringify({ web: port(web), source: port(source) })}\n`);
  createInterface({ input: process.stdin }).on('line', () => {
    const u = process.cpuUsage();
    process.stdout.write(`${JSON.stringify({ cpu: u.user + u.system })}\n`);
  });
}

async function serveProxy(): Promise<void> {
  const { parseManagedNetwork, startManagedProxy } = await import('../../src/network/index.js');
  const spec = parseManagedNetwork({
    config: { network: { enabled: true, allow_local_binding: true, domains: { '127.0.0.1': 'allow' } } },
  });
  if (!spec) throw new Error('no proxy spec');
  const proxy = await startManagedProxy(spec, { processId: 'bench', log: () => {} });
  process.stdout.write(`${JSON.stringify({ http: proxy.httpPort })}\n`);
  // Each stdin line asks for this process's CPU time so far (µs, user + system).
  createInterface({ input: process.stdin }).on('line', () => {
    const u = process.cpuUsage();
    process.stdout.write(`${JSON.stringify({ cpu: u.user + u.system })}\n`);
  });
}

// ---- client side -----------------------------------------------------------------------------------------------

interface Role {
  proc: ChildProcess;
  info: Record<string, number>;
  /** CPU time the child has used so far, in µs. */
  cpu(): Promise<number>;
}

async function startRole(
  role: string,
  env: NodeJS.ProcessEnv = process.env,
  args: string[] = [],
): Promise<Role> {
  const self = fileURLToPath(import.meta.url);
  const proc = spawn(process.execPath, ['--import', 'tsx', self, role, ...args], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env,
  });
  const rl = createInterface({ input: proc.stdout! });
  const info = await new Promise<Record<string, number>>((resolve, reject) => {
    rl.once('line', (l) => resolve(JSON.parse(l) as Record<string, number>));
    proc.once('exit', (c) => reject(new Error(`${role} exited ${c}`)));
  });
  const cpu = () =>
    new Promise<number>((resolve) => {
      rl.once('line', (l) => resolve((JSON.parse(l) as { cpu: number }).cpu));
      proc.stdin!.write('cpu\n');
    });
  return { proc, info, cpu };
}

/**
 * The splice handover's own cost (src/network/tunnel.ts → relay.c find_sockets): how long relayOpen takes to find a
 * tunnel's two sockets among this process's fds, at 50, 1000 and 5000 open fds (the proxy's process at rest, busy,
 * and holding thousands of children's pipes). Prints one JSON line of p50s (ms), or {} without the addon.
 */
async function measureHandover(): Promise<void> {
  const { openSync, readdirSync } = await import('node:fs');
  const { spliceRelay } = await import('../../src/platform/relay.js');
  if (!spliceRelay) {
    process.stdout.write('{}\n');
    return;
  }
  const server = net.createServer((s) => s.on('error', () => {}));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as net.AddressInfo).port;
  const out: Record<string, number> = {};
  let mark = 20000;
  for (const fds of [50, 1000, 5000]) {
    while (readdirSync('/proc/self/fd').length < fds) openSync('/dev/null', 'r');
    const times: number[] = [];
    for (let i = 0; i < 100; i++) {
      const pair = [net.connect(port, '127.0.0.1'), net.connect(port, '127.0.0.1')];
      await Promise.all(pair.map((s) => new Promise((r) => s.once('connect', r))));
      const m = mark++;
      const [a, b] = pair.map((s) => {
        s.setKeepAlive(true, m * 1000);
        return [m, s.localAddress!, s.localPort!, s.remoteAddress!, s.remotePort!] as [
          number,
          string,
          number,
          string,
          number,
        ];
      });
      const t = performance.now();
      const h = spliceRelay.open(a!, b!, null, null, () => {});
      times.push(performance.now() - t);
      spliceRelay.close(h);
      for (const s of pair) s.destroy();
    }
    times.sort((x, y) => x - y);
    out[String(fds)] = times[50]!;
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
  process.exit(0);
}

/**
 * A proxied request from inside a bwrap sandbox with enforceManagedNetwork (issue 31, item 2): a child in the sandbox
 * makes sequential requests, each on a new connection, through its in-namespace proxy endpoint to the origin. With
 * the server's own proxy handed to the sandbox (`ProxyRoute`), each in-namespace connection goes straight to the
 * proxy's `accept`; without it (a proxy found only in the variables, as a client-run one is) each is dialled back to
 * the proxy's port. Prints one JSON line: p50/p90 latency (ms) and this process's CPU per connection (µs) for each,
 * the medians of 5 alternating rounds (CPU: a 550-request run less a 50-request run, over 500); {} without bwrap.
 */
type SandboxVariant = 'handed' | 'dialled' | 'landlock';

async function measureNetns(originPort: number, variants: SandboxVariant[]): Promise<void> {
  const { mkdtempSync, rmSync } = await import('node:fs');
  const os = await import('node:os');
  const { join } = await import('node:path');
  const { applyProxyEnv, parseManagedNetwork, startManagedProxy } = await import(
    '../../src/network/index.js'
  );
  const { spawnPipedWith, spawnerKind } = await import('../../src/process/spawner.js');
  const { prepareLaunch, startSandbox } = await import('../../src/sandbox/index.js');
  const spec = parseManagedNetwork({
    config: { network: { enabled: true, allow_local_binding: true, domains: { '127.0.0.1': 'allow' } } },
  });
  if (!spec) throw new Error('no proxy spec');
  const proxy = await startManagedProxy(spec, { processId: 'bench-netns', log: () => {} });
  const cwd = mkdtempSync(join(os.tmpdir(), 'corral-bench-netns-'));
  const sandbox = startSandbox(null, true, cwd);
  // The Landlock backend (useLegacyLandlock) with the same enforcement: every connect goes to the server's connect
  // supervisor (src/platform/native/netnotify.c), which installs a socket of its own connected to the proxy.
  const landlock = sandbox ? { ...sandbox, useLegacyLandlock: true } : null;
  const env = applyProxyEnv({ PATH: '/usr/bin:/bin' }, proxy);
  // The client: N sequential GETs, each on a new connection (agent: false), through $HTTP_PROXY; prints p50/p90.
  const client = `const http=require('http');const u=new URL(process.env.HTTP_PROXY);const n=+process.argv[1];
const target=process.argv[2];const t=[];let i=0;
const one=()=>{if(i++>=n){t.sort((a,b)=>a-b);console.log(JSON.stringify({p50:t[t.length>>1],p90:t[Math.floor(t.length*0.9)]}));return}
const s=process.hrtime.bigint();
http.get({host:u.hostname,port:+u.port,path:target,agent:false,headers:{host:new URL(target).host}},(r)=>{
if(r.statusCode!==200)process.exit(3);r.resume();r.on('end',()=>{t.push(Number(process.hrtime.bigint()-s)/1e6);one()})})
.on('error',()=>process.exit(2))};one();`;
  const runOnce = async (n: number, variant: SandboxVariant) => {
    const handed = variant !== 'dialled';
    const launch = await prepareLaunch(variant === 'landlock' ? landlock : sandbox, {
      spec: {
        file: process.execPath,
        argv: [process.execPath, '-e', client, String(n), `http://127.0.0.1:${originPort}/`],
        env,
        cwd,
      },
      tty: false,
      ...(handed ? { proxy: proxy.route } : {}),
    });
    const cpu0 = process.cpuUsage();
    try {
      const c = spawnPipedWith(spawnerKind, launch.spec, { stdin: 'null' });
      const [all] = await Promise.all([outputAndExit(c), launch.afterSpawn?.(c.pid)]);
      const m = /^(\{.*\})\nexit 0$/s.exec(all);
      if (!m) throw new Error(`the sandboxed client failed: ${all.slice(-200)}`);
      const out = m[1]!;
      const cpu = process.cpuUsage(cpu0);
      return { ...(JSON.parse(out) as { p50: number; p90: number }), cpuUs: cpu.user + cpu.system };
    } finally {
      launch.cleanup();
    }
  };
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
  const out: Record<string, { p50: number; p90: number; cpuPerConnection: number }> = {};
  try {
    for (const v of variants) await runOnce(20, v);
    const rounds = Object.fromEntries(
      variants.map((v) => [v, [] as { p50: number; p90: number; cpu: number }[]]),
    );
    for (let i = 0; i < 5; i++) {
      for (const v of variants) {
        const small = await runOnce(50, v);
        const big = await runOnce(550, v);
        rounds[v]!.push({
          p50: big.p50,
          p90: big.p90,
          cpu: (big.cpuUs - small.cpuUs) / 500,
        });
      }
    }
    for (const [k, rs] of Object.entries(rounds)) {
      out[k] = {
        p50: median(rs.map((r) => r.p50)),
        p90: median(rs.map((r) => r.p90)),
        cpuPerConnection: median(rs.map((r) => r.cpu)),
      };
    }
  } catch (e) {
    process.stderr.write(`managed network in a sandbox not measured: ${(e as Error).message}\n`);
  } finally {
    await proxy.close();
    rmSync(cwd, { recursive: true, force: true });
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
  process.exit(0);
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** 32 keep-alive clients hammer `port` with GET `path` for a bounded time. */
async function load(
  port: number,
  path: string,
  hostHeader: string,
  cpuOf?: () => Promise<number>,
): Promise<{ rps: number; p50: number; p99: number; cpuPerRequest: number }> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: CLIENTS });
  const latencies: number[] = [];
  let measuring = false;
  let stop = false;
  let count = 0;
  const one = () =>
    new Promise<void>((resolve, reject) => {
      const t0 = performance.now();
      const req = http.request(
        { host: '127.0.0.1', port, path, agent, headers: { host: hostHeader } },
        (res) => {
          res.resume();
          res.on('end', () => {
            if (res.statusCode !== 200) reject(new Error(`status ${res.statusCode}`));
            if (measuring) {
              latencies.push(performance.now() - t0);
              count++;
            }
            resolve();
          });
        },
      );
      req.on('error', reject);
      req.end();
    });
  const worker = async () => {
    while (!stop) await one();
  };
  const workers = Array.from({ length: CLIENTS }, worker);
  await new Promise((r) => setTimeout(r, WARMUP_MS));
  const cpu0 = cpuOf ? await cpuOf() : 0;
  measuring = true;
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, MEASURE_MS));
  measuring = false;
  const elapsed = performance.now() - t0;
  const cpu1 = cpuOf ? await cpuOf() : 0;
  stop = true;
  await Promise.all(workers);
  agent.destroy();
  latencies.sort((a, b) => a - b);
  return {
    rps: (count * 1000) / elapsed,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    cpuPerRequest: count > 0 ? (cpu1 - cpu0) / count : Number.NaN,
  };
}

/**
 * Reads TUNNEL_BYTES from the origin's byte source, through a CONNECT tunnel of the proxy (viaProxy) or straight
 * (the baseline), and returns MiB/s. The client reads into one reused 256 KiB buffer (net's `onread`): a client that
 * allocates a Buffer per read used ~0.5 s of CPU per 512 MiB here, more than the proxy, and would be what is measured.
 */
function tunnel(sourcePort: number, viaProxy?: number): Promise<number> {
  return new Promise((resolve, reject) => {
    let head = viaProxy !== undefined;
    let received = 0;
    let t0 = 0;
    const s = net.connect({
      port: viaProxy ?? sourcePort,
      host: '127.0.0.1',
      onread: {
        buffer: Buffer.allocUnsafe(256 * 1024),
        callback: (n: number, buf: Buffer) => {
          if (!head) {
            received += n;
            return true;
          }
          const d = buf.subarray(0, n);
          const end = d.indexOf('\r\n\r\n');
          if (end < 0) return true; // the answer's head is a few dozen bytes: it comes in one read
          if (!d.subarray(0, 12).toString().startsWith('HTTP/1.1 200')) reject(new Error('CONNECT refused'));
          head = false;
          received += n - end - 4;
          return true;
        },
      },
    });
    s.on('connect', () => {
      t0 = performance.now();
      if (viaProxy !== undefined)
        s.write(`CONNECT 127.0.0.1:${sourcePort} HTTP/1.1\r\nHost: 127.0.0.1:${sourcePort}\r\n\r\n`);
    });
    s.on('error', reject);
    s.on('close', () => {
      const secs = (performance.now() - t0) / 1000;
      if (received < TUNNEL_BYTES) reject(new Error(`tunnel closed after ${received} bytes`));
      else resolve(received / 1024 / 1024 / secs);
    });
  });
}

/** The median MiB/s of three tunnels, and the proxy's CPU per MiB over them (when proxyCpu is given). */
async function tunnels(
  sourcePort: number,
  viaProxy?: number,
  proxyCpu?: () => Promise<number>,
): Promise<{ mibs: number; cpuPerMib: number }> {
  const runs: number[] = [];
  const cpu0 = proxyCpu ? await proxyCpu() : 0;
  for (let i = 0; i < 3; i++) runs.push(await tunnel(sourcePort, viaProxy));
  const cpu1 = proxyCpu ? await proxyCpu() : 0;
  runs.sort((a, b) => a - b);
  return { mibs: runs[1]!, cpuPerMib: (cpu1 - cpu0) / 1000 / ((3 * TUNNEL_BYTES) / 1024 / 1024) };
}

/**
 * The rows of a proxied connection from inside a sandbox with enforceManagedNetwork (measureNetns), for the variants
 * asked: bwrap's in-namespace bridge (the server's proxy handed over, or dialled back) and the Landlock backend's
 * connect supervisor (issue 33, item 3). `npm run bench -- sandbox-net` runs only these (sandbox-net.bench.ts).
 */
export async function sandboxConnectionRows(
  originPort: number,
  variants: SandboxVariant[],
): Promise<BenchRow[]> {
  const netns = (await startRole('--bench-netns', process.env, [String(originPort), variants.join(',')]))
    .info as unknown as Record<string, { p50: number; p90: number; cpuPerConnection: number }>;
  const section = 'managed network in a sandbox (a new connection per request)';
  const rows: BenchRow[] = [];
  const labels: Record<SandboxVariant, string> = {
    handed: "bwrap, the server's proxy handed over",
    dialled: 'bwrap, dialled back to the proxy port',
    landlock: 'Landlock, through the connect supervisor',
  };
  for (const k of variants) {
    const m = netns[k];
    if (!m) continue;
    const label = labels[k];
    rows.push(
      { section, metric: `p50 latency, ${label}`, corral: m.p50, unit: 'ms' },
      { section, metric: `p90 latency, ${label}`, corral: m.p90, unit: 'ms' },
      { section, metric: `server CPU per connection, ${label}`, corral: m.cpuPerConnection, unit: 'µs' },
    );
  }
  return rows;
}

/** The origin alone (its web port), for a bench that needs only it; kill() when done. */
export async function startOrigin(): Promise<{ web: number; kill(): void }> {
  const origin = await startRole('--bench-origin');
  return { web: origin.info.web!, kill: () => origin.proc.kill() };
}

export async function run(): Promise<BenchRow[]> {
  const origin = await startRole('--bench-origin');
  const proxy = await startRole('--bench-proxy');
  try {
    const web = origin.info.web!;
    const target = `127.0.0.1:${web}`;
    const direct = await load(web, '/', target, origin.cpu);
    const through = await load(proxy.info.http!, `http://${target}/`, target, proxy.cpu);
    const directTunnel = await tunnels(origin.info.source!);
    const viaProxy = await tunnels(origin.info.source!, proxy.info.http!, proxy.cpu);
    // The same proxy with its Node-streams tunnel (what runs without the addon: macOS, TLS to an upstream proxy).
    const streamsProxy = await startRole('--bench-proxy', { ...process.env, CORRAL_PROXY_SPLICE: '0' });
    let viaStreams: Awaited<ReturnType<typeof tunnels>>;
    try {
      viaStreams = await tunnels(origin.info.source!, streamsProxy.info.http!, streamsProxy.cpu);
    } finally {
      streamsProxy.proc.kill();
    }
    const handover = (await startRole('--bench-handover')).info;
    const netnsRows = await sandboxConnectionRows(web, ['handed', 'dialled', 'landlock']);
    const section = 'network proxy (32 keep-alive clients)';
    return [
      {
        section,
        metric: 'plain HTTP via proxy',
        corral: through.rps,
        reference: 3600,
        unit: 'req/s',
        target: '≥ 5400 /s',
      },
      {
        section,
        metric: 'p50 latency via proxy',
        corral: through.p50,
        reference: 7,
        unit: 'ms',
        target: '≤ 7 ms',
      },
      {
        section,
        metric: 'p99 latency via proxy',
        corral: through.p99,
        reference: 25,
        unit: 'ms',
        target: '≤ 25 ms',
      },
      {
        section,
        metric: 'proxy process CPU per request',
        corral: through.cpuPerRequest,
        unit: 'µs',
        target: '≤ 185 µs (5.4k/s per core)',
      },
      {
        section,
        metric: 'origin (plain Node http server) CPU per request',
        corral: direct.cpuPerRequest,
        unit: 'µs',
      },
      {
        section,
        metric: 'plain HTTP direct (baseline)',
        corral: direct.rps,
        reference: 13000,
        unit: 'req/s',
      },
      { section, metric: 'p50 latency direct (baseline)', corral: direct.p50, unit: 'ms' },
      {
        section,
        metric: 'CONNECT tunnel, 512 MiB (median of 3)',
        corral: viaProxy.mibs,
        reference: 954,
        unit: 'MiB/s',
        target: '≥ 954 MiB/s',
      },
      {
        section,
        metric: 'proxy process CPU per MiB tunnelled',
        corral: viaProxy.cpuPerMib,
        unit: 'ms',
      },
      {
        section,
        metric: 'same tunnel, Node streams instead of splice',
        corral: viaStreams.mibs,
        unit: 'MiB/s',
      },
      {
        section,
        metric: '  proxy CPU per MiB with Node streams',
        corral: viaStreams.cpuPerMib,
        unit: 'ms',
      },
      {
        section,
        metric: 'same 512 MiB without the proxy (baseline)',
        corral: directTunnel.mibs,
        unit: 'MiB/s',
      },
      ...Object.entries(handover).map(([fds, ms]) => ({
        section,
        metric: `splice handover (find both sockets) p50, ${fds} open fds`,
        corral: Math.round(ms * 1000) / 1000,
        unit: 'ms',
      })),
      ...netnsRows,
    ];
  } finally {
    origin.proc.kill();
    proxy.proc.kill();
  }
}

const role = process.argv[2];
if (role === '--bench-origin') await serveOrigin();
else if (role === '--bench-proxy') await serveProxy();
else if (role === '--bench-handover') await measureHandover();
else if (role === '--bench-netns')
  await measureNetns(
    Number(process.argv[3]),
    (process.argv[4] ?? 'handed,dialled').split(',') as SandboxVariant[],
  );
