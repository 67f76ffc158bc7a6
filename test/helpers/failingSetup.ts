/**
 * A launch preparer whose afterSpawn fails once the process has run `stderrScript` (a shell line writing to its
 * stderr, as bwrap does before it exits in setup): for the error a failed sandbox setup gets (processMethods.ts).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { LaunchSpec, PreparedLaunch } from '../../src/process/launch.js';
import { SandboxSetupError } from '../../src/sandbox/errors.js';
import type { LaunchPreparer } from '../../src/server/process/launcher.js';
import { until } from './server.js';

export function failingSetup(
  dir: string,
  stderrScript: string,
  env: Record<string, string> = {},
): { pidFile: string; preparer: LaunchPreparer } {
  const written = join(dir, 'written');
  const pidFile = join(dir, 'pid');
  return {
    pidFile,
    preparer: {
      prepare(_params, spec: LaunchSpec): PreparedLaunch {
        return {
          spec: {
            ...spec,
            file: '/bin/sh',
            argv: ['sh', '-c', `echo $$ > ${pidFile}; ${stderrScript}; : > ${written}; exec sleep 300`],
            env: { ...spec.env, ...env },
          },
          sandboxType: 'linuxSeccomp',
          cleanup() {},
          async afterSpawn() {
            await until(() => existsSync(written), 10_000, 'the setup to write');
            throw new SandboxSetupError('sandbox setup: the process exited during setup');
          },
        };
      },
      classify: () => false,
    },
  };
}
