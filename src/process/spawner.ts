import { type ChildProcess, spawn } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { constants } from 'node:os';
import type { LaunchSpec } from './launch.js';

// Minimal child_process spawner (placeholder until the fast native spawner lands).

export interface SpawnedChild {
  pid: number;
  stdin: Writable | null;
  stdout: Readable;
  stderr: Readable;
  onExit(cb: (exitCode: number, signal: NodeJS.Signals | null) => void): void;
}

export class SpawnError extends Error {
  constructor(
    readonly errno: string,
    readonly osMessage: string,
  ) {
    super(osMessage);
    this.name = 'SpawnError';
  }
}

export const spawnerKind: 'native' | 'node' = 'node';

const OS_TEXT: Record<string, [string, number]> = {
  ENOENT: ['No such file or directory', 2],
  ENOTDIR: ['Not a directory', 20],
  EACCES: ['Permission denied', 13],
};

export function osErrorText(code: string): string {
  const t = OS_TEXT[code];
  return t ? `${t[0]} (os error ${t[1]})` : code;
}

export function spawnPiped(spec: LaunchSpec, opts: { stdin: 'null' | 'pipe' }): SpawnedChild {
  let child: ChildProcess;
  const extra = (spec.extraFds ?? []).map((fd) => (fd === null ? 'ignore' : fd));
  child = spawn(spec.file, spec.argv.slice(1), {
    argv0: spec.argv[0],
    cwd: spec.cwd,
    env: spec.env,
    detached: true,
    stdio: [opts.stdin === 'pipe' ? 'pipe' : 'ignore', 'pipe', 'pipe', ...extra],
  });
  if (child.pid === undefined) {
    let code = 'ENOENT';
    child.once('error', (e: NodeJS.ErrnoException) => {
      code = e.code ?? code;
    });
    throw new SpawnError(code, osErrorText(code));
  }
  const pid = child.pid;
  return {
    pid,
    stdin: child.stdin,
    stdout: child.stdout!,
    stderr: child.stderr!,
    onExit(cb) {
      child.once('exit', (code, signal) => {
        const signo = signal ? (constants.signals[signal] ?? 0) : 0;
        cb(signal ? 128 + signo : (code ?? 0), signal);
      });
    },
  };
}
