import { isAbsolute, join, resolve } from 'node:path';
import { checkPath } from '../platform/spawn.js';
import { osErrorText } from './spawner.js';

/** glibc's execvp fallback when the child has no PATH. */
const DEFAULT_PATH = '/bin:/usr/bin';

export class LaunchCheckError extends Error {
  constructor(readonly errno: 'ENOENT' | 'ENOTDIR' | 'EACCES') {
    super(osErrorText(errno));
  }
}

/** Checks the working directory the way the kernel's chdir would: missing → ENOENT, not a directory → ENOTDIR. */
export function checkCwd(cwd: string): void {
  const err = checkPath(cwd, 'cwd');
  // chdir's errors; a directory without search permission (EACCES) fails here, not in the child
  if (err !== null) throw new LaunchCheckError(err === 'ENOTDIR' || err === 'EACCES' ? err : 'ENOENT');
}

function executable(path: string): 'ok' | 'ENOENT' | 'EACCES' {
  const err = checkPath(path, 'program');
  if (err === null) return 'ok';
  return err === 'ENOENT' || err === 'ENOTDIR' || err === 'ELOOP' || err === 'ENAMETOOLONG'
    ? 'ENOENT'
    : 'EACCES';
}

/**
 * Resolves a program like execvp in the child would: a name with a slash is taken relative to the child's cwd;
 * a bare name is looked up in the child's PATH. Missing → ENOENT; a directory or non-executable → EACCES.
 */
export function resolveProgram(program: string, cwd: string, childEnv: Record<string, string>): string {
  if (program.includes('/')) {
    const path = isAbsolute(program) ? program : resolve(cwd, program);
    const r = executable(path);
    if (r !== 'ok') throw new LaunchCheckError(r);
    return path;
  }
  let sawEacces = false;
  const searchPath = childEnv.PATH ?? DEFAULT_PATH;
  for (const dir of searchPath.split(':')) {
    const candidate = join(dir === '' ? cwd : isAbsolute(dir) ? dir : resolve(cwd, dir), program);
    const r = executable(candidate);
    if (r === 'ok') return candidate;
    if (r === 'EACCES') sawEacces = true;
  }
  throw new LaunchCheckError(sawEacces ? 'EACCES' : 'ENOENT');
}
