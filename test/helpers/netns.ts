/**
 * Runs a TypeScript rig script in a network namespace with only loopback (`unshare -n`), so a real Codex binary it
 * starts cannot reach any other host: the job goes to the rig as a JSON file, the rig writes its result to another.
 * Used by the recorded-contract rig (registry-contract.ts) and the Noise interop rig (noise-rig.ts).
 */
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './cli.js';

/** The argv prefix that runs a command in a fresh network namespace with `lo` up; null when unshare is refused. */
export function netnsPrefix(): string[] | null {
  try {
    execFileSync('unshare', ['-n', 'true'], { stdio: 'ignore' });
    return ['unshare', '-n', 'sh', '-c', 'ip link set lo up && exec "$@"', 'sh'];
  } catch {
    return null;
  }
}

/** Runs `node --import tsx <script> job.json out.json` (in the namespace when there is one) and parses out.json. */
export async function runRigInNamespace<T>(
  script: string,
  job: unknown,
  dir: string,
  name: string,
): Promise<T> {
  mkdirSync(dir, { recursive: true });
  const jobFile = join(dir, `${name}.job.json`);
  const outFile = join(dir, `${name}.out.json`);
  rmSync(outFile, { force: true });
  writeFileSync(jobFile, JSON.stringify(job));
  const argv = [...(netnsPrefix() ?? []), process.execPath, '--import', 'tsx', script, jobFile, outFile];
  const child = spawn(argv[0]!, argv.slice(1), { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (d) => {
    err += d;
  });
  await once(child, 'exit');
  try {
    return JSON.parse(readFileSync(outFile, 'utf8')) as T;
  } catch {
    throw new Error(`the rig ${name} wrote no result:\n${err.slice(-4000)}`);
  }
}
