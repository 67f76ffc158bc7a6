import { accessSync, constants, statSync } from 'node:fs';
import { isAbsolute, join, resolve } from 'node:path';
import { nativeCheckPath, osErrorText } from './spawner.js';

/** glibc's execvp fallback when the child has no PATH. */
const DEFAULT_PATH = '/bin:/usr/bin';

export class LaunchCheckError extends Error {
  constructor(readonly errno: 'ENOENT' | 'ENOTDIR' | 'EACCES') {
    super(osErrorText(errno));
  }
}

/** Checks the working directory the way the kernel's chdir would: missing → ENOENT, not a directory → ENOTDIR. */
export function checkCwd(cwd: string): void {
  const native = nativeCheckPath(cwd, 'cwd');
  if (native !== undefined) {
    // chdir's errors; a directory without search permission (EACCES) fails here, not in the child
    if (native !== null)
      throw new LaunchCheckError(native === 'ENOTDIR' || native === 'EACCES' ? native : 'ENOENT');
    return;
  }
  let st: import('node:fs').Stats;
  try {
    st = statSync(cwd);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new LaunchCheckError(code === 'ENOTDIR' ? 'ENOTDIR' : code === 'EACCES' ? 'EACCES' : 'ENOENT');
  }
  if (!st.isDirectory()) throw new LaunchCheckError('ENOTDIR');
}

function executable(path: string): 'ok' | 'ENOENT' | 'EACCES' {
  const native = nativeCheckPath(path, 'program');
  if (native !== undefined) {
    if (native === null) return 'ok';
    return native === 'ENOENT' || native === 'ENOTDIR' || native === 'ELOOP' || native === 'ENAMETOOLONG'
      ? 'ENOENT'
      : 'EACCES';
  }
  let st: import('node:fs').Stats;
  try {
    st = statSync(path);
  } catch {
    return 'ENOENT';
  }
  if (st.isDirectory()) return 'EACCES';
  try {
    accessSync(path, constants.X_OK);
  } catch {
    return 'EACCES';
  }
  return 'ok';
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
