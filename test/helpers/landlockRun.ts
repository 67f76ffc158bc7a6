/** A Landlock-sandboxed `sh -c` started the way a server starts one: prepareLaunch, then the native spawner. */
import type { LaunchSpec } from '../../src/process/launch.js';
import { spawnPiped } from '../../src/process/spawner.js';
import { prepareLaunch, startSandbox } from '../../src/sandbox/index.js';
import { keptSeed, special } from '../integration/sandbox-util.js';
import { outputAndExit } from './spawned.js';

/**
 * Runs `script` under the seed policy of `entries` with the policy's cwd `cwd` and the Landlock backend: its output
 * (stdout and stderr, then `exit N`) and the launch's summary. `backend` bwrap: the bubblewrap backend instead. The
 * policy is parsed as a server parses it (keptSeed): the same policy again is the same kept parse, so every plan a
 * server keeps between its starts is kept between these runs too.
 */
export async function runLandlocked(
  cwd: string,
  entries: unknown[],
  script: string,
  /** bwrap: the same policy under the bubblewrap backend. */
  backend: 'landlock' | 'bwrap' = 'landlock',
): Promise<{ out: string; summary: Record<string, unknown> | undefined }> {
  const spec: LaunchSpec = {
    file: '/bin/sh',
    argv: ['sh', '-c', script],
    env: { PATH: '/usr/bin:/bin' },
    cwd,
  };
  const sandbox = startSandbox(
    keptSeed({ cwd, entries, useLegacyLandlock: backend === 'landlock' }),
    false,
    cwd,
  );
  const p = await prepareLaunch(sandbox, { spec, tty: false });
  try {
    const c = spawnPiped(p.spec, { stdin: 'null' });
    void p.afterSpawn?.(c.pid);
    return { out: await outputAndExit(c), summary: p.summary };
  } finally {
    p.cleanup();
  }
}

/** The seed entries of the kept-plan tests: read everything, write the workspace (the policy's cwd). */
export const WORKSPACE_WRITE = [special('root', 'read'), special('current_working_directory', 'write')];

/** A shell line that writes `file` and says WROTE <file> when it could. */
export const writeLine = (file: string) => `(echo x > '${file}') 2>/dev/null && echo 'WROTE ${file}'; `;
