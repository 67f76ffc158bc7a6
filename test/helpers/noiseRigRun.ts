/**
 * Runs test/helpers/noise-rig.ts (the Noise stand-in and one executor) in a loopback-only network namespace and
 * returns what it saw (remote-noise.test.ts, and the 0.171 pause probe in remote-contract.test.ts).
 */
import { mkdirSync, rmSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from './cli.js';
import { runRigInNamespace } from './netns.js';

const SCRATCH = join(homedir(), '.cache', 'corral-remote-noise');

/** What noise-rig.ts writes. */
export interface RigResult {
  error?: string;
  stderrTail: string;
  registerPath: string;
  registerKeys: string[];
  securityProfile: string;
  keySuite: string;
  rendezvousAuthorization: string | null;
  output: string;
  bigArgBytes: string;
  bigFileBytes: number;
  unvouched: { reset: string | null; transport: boolean };
  validations: { status: number; authorization: string | null; keys: string[] }[];
  framesFromExecutor: number;
  undecodable: number;
  pause?: {
    rightAfter: string | null;
    acceptedAfterMs: number | null;
    afterOneMoreFailure: string | null;
    links: number;
  };
}

/** The real Codex executor (its default transport is Noise), as the rig's argv. */
export function codexNoiseExecutor(codex: string): string[] {
  return [
    codex,
    'exec-server',
    '--remote',
    '{base}',
    '--environment-id',
    '{id}',
    '--registration-bearer-stdin',
  ];
}

/** Corral's executor with the Noise transport, as the rig's argv ({base}, {id} replaced there). */
export function corralNoiseExecutor(): string[] {
  return [
    process.execPath,
    '--import',
    import.meta.resolve('tsx'),
    join(ROOT, 'src', 'cli.ts'),
    'exec-server',
    '--remote',
    '{base}',
    '--environment-id',
    '{id}',
    '--remote-transport',
    'noise',
    '--registration-bearer-stdin',
  ];
}

export function runNoiseRig(
  name: string,
  executorArgv: string[],
  processCwd: string,
  destination?: string[],
  pauseProbe = false,
): Promise<RigResult> {
  const dir = join(SCRATCH, name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(join(dir, 'home'), { recursive: true });
  const env = { PATH: '/usr/bin:/bin', HOME: join(dir, 'home'), CODEX_HOME: join(dir, 'home') };
  const job = { argv: executorArgv, env, cwd: dir, processCwd, destination, pauseProbe };
  return runRigInNamespace<RigResult>(join(ROOT, 'test', 'helpers', 'noise-rig.ts'), job, dir, 'noise');
}
