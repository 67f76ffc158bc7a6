/** errno values as names, and errors shaped like Node's. */
import { constants } from 'node:os';

const ERRNO_NAMES = new Map(Object.entries(constants.errno).map(([k, v]) => [v, k]));

/** The name of an errno value ("ENOENT"), as Node's errors carry it in `code`. */
export function errnoName(errno: number): string {
  return ERRNO_NAMES.get(Math.abs(errno)) ?? `E${Math.abs(errno)}`;
}

/** An Error shaped like Node's fs errors (`code`, `errno`, `syscall`), so that one mapping serves both backends. */
export function errnoError(errno: number, syscall: string): NodeJS.ErrnoException {
  const code = errnoName(errno);
  const e = new Error(`${code}: ${syscall}`) as NodeJS.ErrnoException;
  e.code = code;
  e.errno = -Math.abs(errno);
  e.syscall = syscall;
  return e;
}
