/** Looking at processes from a test: a pid written to a file, whether a pid still runs. */
import { readFileSync } from 'node:fs';

/** The pid written in `file`, or 0 while there is none. */
export function readPid(file: string): number {
  try {
    return Number(readFileSync(file, 'utf8')) || 0;
  } catch {
    return 0;
  }
}

/** Whether `pid` runs: neither gone nor a zombie. */
export function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !/^[ZX]$/.test(stat[stat.lastIndexOf(')') + 2] ?? '');
  } catch {
    return false;
  }
}
