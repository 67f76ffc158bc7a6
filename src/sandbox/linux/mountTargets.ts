import { rmdirSync } from 'node:fs';

/**
 * Synthetic mount targets (sandbox.md §8.4.1): bwrap creates a missing protected path on the host (an empty
 * directory) when its parent is a writable bind. Several sandboxes may share one; the last user removes it, and only
 * while it is still an empty directory.
 */
const refs = new Map<string, number>();

/** Targets currently in use by a running sandbox. */
export function activeSyntheticTargets(): ReadonlySet<string> {
  return new Set(refs.keys());
}

/** Takes a reference on each target; the returned function releases them (idempotent). */
export function acquireSyntheticTargets(targets: string[]): () => void {
  for (const t of targets) refs.set(t, (refs.get(t) ?? 0) + 1);
  let released = false;
  return () => {
    if (released) return;
    released = true;
    for (const t of targets) {
      const n = (refs.get(t) ?? 1) - 1;
      if (n > 0) {
        refs.set(t, n);
        continue;
      }
      refs.delete(t);
      removeIfEmptyDir(t);
    }
  };
}

/** rmdir(2) itself removes only an empty directory (ENOTEMPTY, ENOTDIR, ENOENT otherwise): no check before it. */
function removeIfEmptyDir(p: string): void {
  try {
    rmdirSync(p);
  } catch {
    // Already gone, not empty, or not a directory: not ours to remove.
  }
}
