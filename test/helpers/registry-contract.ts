/**
 * The remote-executor contract rig: one fake registry (test/helpers/registry.ts), one executor registered with it
 * (`codex exec-server --remote …` of a cached release, or Corral), and a harness (a plain WebSocket client) that
 * reaches the executor only through the relay. It walks the executor through registration, a session, the redial
 * after a session, a 409 at the handshake, handshake failures (backoff), a dropped link with a session resumed across
 * it, and records everything the executor sent. The same walk runs against both executors, so the recorded Codex
 * transcript (test/fixtures/remote/) is what Corral is checked against.
 *
 * Run in a network namespace with only `lo` (test/integration/remote-contract.test.ts does, as root), so neither
 * executor can reach anything but the registry: `node --import tsx test/helpers/registry-contract.ts <job.json> <out.json>`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { RpcClient } from './client.js';
import { type ExecutorAuth, type RecordedRequest, startFakeRegistry } from './registry.js';

/** Fake AWS credentials (the AWS documentation's example pair): the registry verifies the signature with them. */
export const FAKE_AWS = {
  accessKeyId: 'AKIDEXAMPLE',
  secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
  region: 'us-east-1',
  service: 'execute-api',
} as const;

export interface ContractJob {
  /** argv of the executor, with `{base}` and `{id}` substituted. */
  argv: string[];
  env: Record<string, string>;
  /** Scratch directory (cwd of the executor and of the harness's processes). */
  dir: string;
  environmentId: string;
  /** Executor auth the registry demands. */
  auth: ExecutorAuth;
  /** Written to the executor's stdin (then kept open), e.g. a registration bearer. */
  stdin?: string;
}

export interface Handshake {
  t: number;
  status: number;
  url: string;
}

export interface ContractTranscript {
  register: { method: string; path: string; body: string; headers: Record<string, string>; status: number }[];
  /** Whether each registration and handshake carried a valid signature / bearer (all must). */
  authValid: boolean[];
  handshakes: (Handshake & { headers: Record<string, string> })[];
  /** The `initialize` result the harness got through the relay. */
  initialize: unknown;
  /** Output of the echo process, and its exit code. */
  echo: { output: string; exitCode: number | null };
  /** ms from the harness closing to the executor's next handshake. */
  redialAfterSessionMs: number;
  /** After registrations were forgotten and the link dropped: what the executor did, in order. */
  conflict: { sequence: string[]; reRegistered: boolean; msToNewLink: number };
  /** Gaps between handshake attempts while the registry refused them with 503 (ms), the first from the drop. */
  backoffMs: number[];
  /** A session whose link dropped mid-process, resumed through a new link. */
  resume: { resumed: boolean; error: string | null; late: boolean; closed: boolean };
  stderrTail: string;
}

function substitute(argv: string[], base: string, id: string): string[] {
  return argv.map((a) => a.replaceAll('{base}', base).replaceAll('{id}', id));
}

const pick = (h: RecordedRequest['headers']): Record<string, string> => {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined) out[k] = Array.isArray(v) ? v.join(', ') : v;
  return out;
};

async function harnessSession(url: string) {
  const c = await RpcClient.connect(url);
  const init = await c.request('initialize', { clientName: 'contract-harness', resumeSessionId: null });
  c.notify('initialized', {});
  return { c, init: init as { sessionId: string } };
}

/** process/start params of `/bin/sh -c script` (cwd as a file:// URI, as 0.169 wants it). */
export function shellStart(processId: string, script: string, cwd: string) {
  return {
    processId,
    argv: ['/bin/sh', '-c', script],
    cwd,
    env: { PATH: '/usr/bin:/bin' },
    tty: false,
    arg0: null,
  };
}

function decodeOutput(c: RpcClient, processId: string): string {
  return c.notifications
    .filter((n) => n.method === 'process/output' && n.params.processId === processId)
    .map((n) => Buffer.from(String(n.params.chunk), 'base64').toString())
    .join('');
}

export async function runContract(job: ContractJob): Promise<ContractTranscript> {
  mkdirSync(job.dir, { recursive: true });
  const registry = await startFakeRegistry({ executorAuth: job.auth });
  const id = job.environmentId;
  const argv = substitute(job.argv, registry.url, id);
  const child: ChildProcess = spawn(argv[0]!, argv.slice(1), {
    cwd: job.dir,
    env: job.env,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (d) => {
    stderr += d;
  });
  child.stdout!.resume();
  if (job.stdin !== undefined) child.stdin!.write(job.stdin);
  const handshakes = () => registry.requests.filter((r) => r.kind === 'executor-handshake');
  const cwd = `file://${job.dir}`;
  try {
    await registry.waitForExecutor(id, 20_000);
    // 1. A session through the relay.
    const { c, init } = await harnessSession(registry.harnessUrl(id));
    await c.request('process/start', shellStart('echo', 'echo hi-through-the-relay', cwd));
    await c.waitFor((n) => n.method === 'process/closed' && n.params.processId === 'echo');
    const exited = c.notifications.find(
      (n) => n.method === 'process/exited' && n.params.processId === 'echo',
    );
    const echo = { output: decodeOutput(c, 'echo'), exitCode: (exited?.params.exitCode as number) ?? null };
    const before = handshakes().length;
    const closedAt = Date.now();
    c.ws.close();
    // 2. The redial after a session.
    await registry.waitForRequests('executor-handshake', before + 1, 10_000);
    const redialAfterSessionMs = Date.now() - closedAt;
    await registry.waitForExecutor(id);
    // 3. 409: the registry forgot the registration; the link drops.
    const mark = registry.requests.length;
    registry.expireRegistrations();
    const droppedAt = Date.now();
    registry.dropLinks();
    await registry.waitForExecutor(id, 20_000);
    const msToNewLink = Date.now() - droppedAt;
    const sequence = registry.requests.slice(mark).map((r) => `${r.kind} ${r.status}`);
    const conflict = {
      sequence,
      reRegistered: sequence.includes('executor-handshake 409') && sequence.includes('register 200'),
      msToNewLink,
    };
    // 4. Backoff while the registry refuses handshakes.
    const mark2 = handshakes().length;
    registry.refuseHandshakes(503, 3);
    const dropT = registry.elapsed();
    registry.dropLinks();
    await registry.waitForExecutor(id, 30_000);
    const times = [
      dropT,
      ...handshakes()
        .slice(mark2)
        .map((h) => h.t),
    ];
    const backoffMs = times.slice(1).map((t, i) => t - times[i]!);
    // 5. A dropped link mid-process, and the session resumed through the next link.
    const s = await harnessSession(registry.harnessUrl(id));
    await s.c.request('process/start', shellStart('late', 'sleep 1.5; echo late', cwd));
    registry.dropLinks();
    await once(s.c.ws, 'close');
    await registry.waitForExecutor(id, 20_000);
    const resume = { resumed: false, error: null as string | null, late: false, closed: false };
    const r = await RpcClient.connect(registry.harnessUrl(id));
    try {
      await r.request('initialize', { clientName: 'contract-harness', resumeSessionId: s.init.sessionId });
      r.notify('initialized', {});
      resume.resumed = true;
      let after = 0;
      const deadline = Date.now() + 8000;
      let text = '';
      while (Date.now() < deadline && !resume.closed) {
        const read = (await r.request('process/read', {
          processId: 'late',
          afterSeq: after,
          maxBytes: null,
          waitMs: 2000,
        })) as {
          chunks: { seq: number; chunk: string }[];
          nextSeq: number;
          closed: boolean;
        };
        for (const ch of read.chunks) text += Buffer.from(ch.chunk, 'base64').toString();
        after = read.nextSeq - 1;
        resume.closed = read.closed;
      }
      // Corral also replays what was produced while detached as notifications.
      text += decodeOutput(r, 'late');
      resume.late = text.includes('late');
    } catch (e) {
      resume.error = (e as Error).message;
    }
    r.ws.close();
    const regs = registry.requests.filter((x) => x.kind === 'register');
    const authed = registry.requests.filter((x) => x.kind === 'register' || x.kind === 'executor-handshake');
    return {
      register: regs.map((x) => ({
        method: x.method,
        path: x.url,
        body: x.body,
        headers: pick(x.headers),
        status: x.status,
      })),
      authValid: authed.map((x) => x.status !== 401),
      handshakes: handshakes().map((h) => ({
        t: h.t,
        status: h.status,
        url: h.url,
        headers: pick(h.headers),
      })),
      initialize: init,
      echo,
      redialAfterSessionMs,
      conflict,
      backoffMs,
      resume,
      stderrTail: stderr.slice(-3000),
    };
  } catch (e) {
    throw new Error(`${(e as Error).message}\nexecutor stderr:\n${stderr.slice(-4000)}`);
  } finally {
    child.kill('SIGTERM');
    if (child.exitCode === null && child.signalCode === null) await once(child, 'exit');
    await registry.close();
  }
}

/** An executor pointed at a registry it must refuse to use: the exit code and what it said. */
export async function runRefusal(
  job: Omit<ContractJob, 'environmentId' | 'auth'> & { executorUrl?: string; base?: string },
): Promise<{ code: number | null; stderr: string; requests: string[] }> {
  const registry = await startFakeRegistry({
    executorUrl: job.executorUrl ? () => job.executorUrl! : undefined,
  });
  const argv = substitute(job.argv, job.base ?? registry.url, 'env-refuse');
  const child = spawn(argv[0]!, argv.slice(1), {
    cwd: job.dir,
    env: job.env,
    stdio: ['pipe', 'ignore', 'pipe'],
  });
  if (job.stdin !== undefined) child.stdin!.write(job.stdin);
  let stderr = '';
  child.stderr!.on('data', (d) => {
    stderr += d;
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
  const [code] = (await once(child, 'exit')) as [number | null];
  clearTimeout(timer);
  await registry.close();
  return {
    code,
    stderr: stderr.slice(-3000),
    requests: registry.requests.map((r) => `${r.kind} ${r.method} ${r.url} ${r.status}`),
  };
}

if (process.argv[1]?.endsWith('registry-contract.ts')) {
  const [jobFile, outFile] = process.argv.slice(2);
  const job = JSON.parse(readFileSync(jobFile!, 'utf8')) as
    | { kind: 'contract'; job: ContractJob }
    | { kind: 'refusal'; job: Parameters<typeof runRefusal>[0] }[];
  const out = Array.isArray(job)
    ? await Promise.all(job.map((j) => runRefusal(j.job)))
    : await runContract(job.job);
  writeFileSync(outFile!, JSON.stringify(out, null, 1));
  process.exit(0);
}

export const CONTRACT_SCRIPT = join(import.meta.dirname ?? '', 'registry-contract.ts');
