/**
 * The Noise interop rig (test/integration/remote-noise.test.ts runs it in a network namespace with only loopback, so
 * the real Codex binary cannot reach any other host): the stand-in registry/relay/harness of noiseRegistry.ts, one
 * executor (the real `codex exec-server` or Corral's) registered with `--remote-transport noise`, then
 *   1. a harness runs `initialize` + `process/start` of echo through the encrypted stream and reads its output;
 *   2. a harness whose key the registry did not vouch for is reset before any stream opens.
 * With a `destination`, the executor is a forwarder (`exec-server forward … --connect {connect}`) relaying to it.
 * Writes what it saw as JSON to the file named by its second argument.
 *
 *   node --import tsx test/helpers/noise-rig.ts JOB.json OUT.json    (JOB: {argv, env, cwd, processCwd})
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { RpcClient } from './client.js';
import { startNoiseRegistry } from './noiseRegistry.js';
import { shellStart } from './registry-contract.js';

interface Job {
  /** `{base}`, `{id}` and `{connect}` are replaced. */
  argv: string[];
  /** A destination exec server started first (forward): it prints its ws:// URL as the first line of stdout. */
  destination?: string[];
  env: Record<string, string>;
  cwd: string;
  /** The cwd the harness gives process/start (Codex 0.171 takes a file: URI). */
  processCwd: string;
  /** Also probe the pause after 8 failed handshakes (~10 s of waiting). */
  pauseProbe?: boolean;
}

const [jobFile, outFile] = process.argv.slice(2);
const job = JSON.parse(await import('node:fs').then((fs) => fs.readFileSync(jobFile!, 'utf8'))) as Job;
const BEARER = 'noise-rig-bearer';
const ENV = 'env-noise';
const reg = await startNoiseRegistry({ bearer: BEARER });
let connect = '';
let destination: ReturnType<typeof spawn> | null = null;
if (job.destination) {
  destination = spawn(job.destination[0]!, job.destination.slice(1), {
    cwd: job.cwd,
    env: job.env,
    stdio: ['pipe', 'pipe', 'ignore'],
  });
  const [line] = (await once(destination.stdout!, 'data')) as [Buffer];
  connect = line.toString().trim().split('\n')[0]!;
}
const argv = job.argv.map((a) =>
  a.replace('{base}', reg.url).replace('{id}', ENV).replace('{connect}', connect),
);
const child = spawn(argv[0]!, argv.slice(1), {
  cwd: job.cwd,
  env: job.env,
  stdio: ['pipe', 'ignore', 'pipe'],
});
let stderr = '';
child.stderr!.on('data', (d) => {
  stderr += d;
});
child.stdin!.end(`${BEARER}\n`);
const out: Record<string, unknown> = {};
try {
  await reg.waitForExecutor(ENV, 30_000);
  const register = reg.requests.find((r) => r.kind === 'register')!;
  const body = JSON.parse(register.body) as Record<string, Record<string, unknown>>;
  out.registerPath = register.url;
  out.registerKeys = Object.keys(body).sort();
  out.securityProfile = body.security_profile;
  out.keySuite = body.executor_public_key!.suite;
  out.rendezvousAuthorization =
    reg.requests.find((r) => r.kind === 'rendezvous')!.headers.authorization ?? null;
  const c = await RpcClient.open(reg.harnessUrl(ENV), 'noise-rig');
  await c.request('process/start', shellStart('p1', 'echo through-noise', job.processCwd));
  await c.collect('p1', 20_000);
  out.output = c.output('p1');
  // Messages larger than one 60 KiB record, both ways: a 100 000-byte argument in, a 150 000-byte file out.
  const big = 'x'.repeat(100_000);
  await c.request('process/start', {
    ...shellStart('p2', 'printf %s "$1" | wc -c', job.processCwd),
    argv: ['/bin/sh', '-c', 'printf %s "$1" | wc -c', 'sh', big],
  });
  await c.collect('p2', 20_000);
  out.bigArgBytes = c.output('p2').trim();
  const file = join(job.cwd, 'big.bin');
  writeFileSync(file, Buffer.alloc(150_000, 7));
  // Codex 0.171 takes paths as file: URIs (as it takes the cwd).
  const path = job.processCwd.startsWith('file:') ? pathToFileURL(file).href : file;
  const read = (await c.request('fs/readFile', { path })) as { dataBase64: string };
  out.bigFileBytes = Buffer.from(read.dataBase64, 'base64').length;
  c.close();
  const h = await reg.handshake({ unissued: true });
  out.unvouched = { reset: h.reset, transport: h.transport !== null };
  out.validations = reg.requests
    .filter((r) => r.kind === 'validate')
    .map((r) => ({
      status: r.status,
      authorization: r.headers.authorization ?? null,
      keys: Object.keys(JSON.parse(r.body)).sort(),
    }));
  if (job.pauseProbe) {
    const flip = (r: Uint8Array) => {
      const b = Uint8Array.from(r);
      b[2000]! ^= 1;
      return b;
    };
    const links = () => reg.requests.filter((r) => r.kind === 'rendezvous').length;
    for (let i = 0; i < 8; i++) await reg.handshake({ tamper: flip });
    const failedAt = Date.now();
    const right = await reg.handshake({});
    let acceptedAfterMs: number | null = null;
    while (Date.now() - failedAt < 20_000) {
      await new Promise((r) => setTimeout(r, 250));
      if ((await reg.handshake({})).transport) {
        acceptedAfterMs = Date.now() - failedAt;
        break;
      }
    }
    await reg.handshake({ tamper: flip });
    const oneMore = await reg.handshake({});
    out.pause = {
      rightAfter: right.transport ? 'accepted' : right.reset,
      acceptedAfterMs,
      afterOneMoreFailure: oneMore.transport ? 'accepted' : oneMore.reset,
      links: links(),
    };
  }
  // Every frame the executor sent was protobuf; no plaintext JSON-RPC crossed the relay.
  out.framesFromExecutor = reg.fromExecutor.length;
  out.undecodable = reg.fromExecutor.filter((f) => f.frame === null).length;
} catch (e) {
  out.error = (e as Error).message;
}
child.kill('SIGKILL');
destination?.kill('SIGKILL');
await reg.close();
out.stderrTail = stderr.slice(-2000);
writeFileSync(outFile!, JSON.stringify(out, null, 2));
process.exit(0);
