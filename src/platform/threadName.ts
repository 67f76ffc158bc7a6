/**
 * The name the kernel shows for the calling thread (`comm`: `top -H`, `ps -T`, /proc/<pid>/task/<tid>/comm), so that
 * a long-lived thread of ours can be told from Node's own (V8's compiler and GC helpers and libuv's pool are all
 * "node"). Linux only: elsewhere, or where /proc is not mounted, nothing changes.
 */
import { writeFileSync } from 'node:fs';

/** The most a thread name holds (TASK_COMM_LEN 16, with its NUL). */
export const THREAD_NAME_MAX = 15;

/** Names the calling thread (cut to 15 bytes of ASCII); false when the system would not. */
export function nameThisThread(name: string): boolean {
  if (process.platform !== 'linux') return false;
  const ascii = name.replace(/[^\x20-\x7e]/g, '?').slice(0, THREAD_NAME_MAX);
  try {
    writeFileSync('/proc/thread-self/comm', ascii);
    return true;
  } catch {
    return false;
  }
}
