/**
 * The `--chatgpt-token-stdin` contract rig (remote-chatgpt-contract.test.ts), run in a loopback-only network namespace
 * (netns.ts): one HTTPS stand-in answers both OpenAI services the flag talks to (the account policy under
 * /backend-api/, the registry under /reg/), one executor (the real codex 0.171 or Corral) is started with the token on
 * its stdin, and what the stand-in received and how the executor ended are written out. The registry refuses the
 * registration (401), so an executor ends after asking it (or is stopped 2 s after its first registration).
 *
 * Usage: node --import tsx chatgpt-rig.ts job.json out.json
 */
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';

export interface ChatgptRigJob {
  /** The executor's argv; `{base}` is the stand-in's origin. */
  argv: string[];
  env: Record<string, string>;
  token: string;
  policy: { status: number; body: string };
  keyPath: string;
  certPath: string;
}

export interface ChatgptRigRequest {
  method: string;
  path: string;
  authorization: string | null;
  account: string | null;
}

export interface ChatgptRigResult {
  code: number | null;
  /** The executor's `Error: …` line, if any. */
  error: string | null;
  requests: ChatgptRigRequest[];
  stderrTail: string;
}

async function main(): Promise<void> {
  const [jobFile, outFile] = process.argv.slice(2) as [string, string];
  const job = JSON.parse(readFileSync(jobFile, 'utf8')) as ChatgptRigJob;
  const requests: ChatgptRigRequest[] = [];
  let onRegister: () => void = () => {};
  const server = https.createServer(
    { key: readFileSync(job.keyPath), cert: readFileSync(job.certPath) },
    (req, res) => {
      const header = (n: string) => {
        const v = req.headers[n];
        return typeof v === 'string' ? v : null;
      };
      requests.push({
        method: req.method ?? '',
        path: req.url ?? '',
        authorization: header('authorization'),
        account: header('chatgpt-account-id'),
      });
      req.resume();
      if (req.url?.startsWith('/backend-api/')) {
        res.writeHead(job.policy.status, { 'content-type': 'application/json' });
        res.end(job.policy.body);
        return;
      }
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end('{"error":{"code":"unauthorized","message":"stand-in refuses"}}');
      onRegister();
    },
  );
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const base = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const argv = job.argv.map((a) => a.replaceAll('{base}', base));
  const child = spawn(argv[0]!, argv.slice(1), { env: job.env, stdio: ['pipe', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => {
    stderr = (stderr + d).slice(-20_000);
  });
  child.stdin.on('error', () => {});
  child.stdin.write(`${job.token}\n`);
  const stop = setTimeout(() => child.kill('SIGKILL'), 60_000);
  onRegister = () => setTimeout(() => child.kill('SIGTERM'), 2000).unref();
  const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
  clearTimeout(stop);
  server.closeAllConnections();
  server.close();
  const error = stderr.split('\n').find((l) => l.startsWith('Error: ')) ?? null;
  const result: ChatgptRigResult = { code, error, requests, stderrTail: stderr.slice(-2000) };
  writeFileSync(outFile, JSON.stringify(result));
}

await main();
