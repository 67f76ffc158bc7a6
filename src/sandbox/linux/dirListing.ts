/**
 * Directory listings for the Landlock decomposition (landlock.ts), kept between starts while the directory is
 * unchanged. An agent's commands come one after another under one policy, and a decomposed temp root (/tmp holding
 * the workspace) has hundreds of entries: listing it and checking each entry's inode on every start cost ~2 ms.
 *
 * Unchanged means the same (dev, ino, ctime, mtime): creating, removing or renaming an entry updates its directory's
 * ctime and mtime, so while they hold, every entry name still names the inode it named when listed. File times come
 * from a coarse clock (one tick: up to 10 ms), so a change in the tick of the listing itself may leave them equal: a
 * listing counts as stable (reusable, and proof of its entries' inodes) only when the directory's times were older
 * than RACY_MS when it was read; a younger one is read again at the next start ("racy git" has the same rule). A
 * sandbox cannot change a decomposed directory's entries (it lacks the rights to create, remove or rename there);
 * a host process that does so between the check and the child's exec is the same race as any path-based rule.
 */
import { readdirSync, type Stats } from 'node:fs';
import { lstatInPass, lstatTime } from '../fsProbe.js';
import { freshLstat, quietFs } from '../fsQuiet.js';
import type { ListedEntry } from './landlock.js';

export interface Listing {
  /** null: the directory cannot be listed (missing, not a directory, no permission). */
  entries: ListedEntry[] | null;
  /** `dev:ino:ctime:mtime` (ms, see tokenOf) when it was read; '-' when missing. */
  token: string;
  /** Whether the directory's times were older than RACY_MS at the read: later changes show in the token. */
  stable: boolean;
}

const RACY_MS = 50;
const MAX_DIRS = 256;
const listings = new Map<string, Listing>();

/**
 * The directory's identity and times (ms with their sub-ms fraction, as lstat gives them without bigint: building a
 * bigint Stats makes four Date objects, most of this check's cost). Two times a fraction of a microsecond apart may
 * look equal; the racy window covers that as it covers the clock's tick.
 */
function tokenOf(dir: string, fresh: boolean): { token: string; settledBefore: number } {
  let st: Stats | undefined;
  if (fresh) {
    try {
      st = freshLstat(dir);
    } catch {
      st = undefined;
    }
  } else {
    st = lstatInPass(dir);
  }
  if (!st) return { token: '-', settledBefore: 0 };
  return {
    token: `${st.dev}:${st.ino}:${st.ctimeMs}:${st.mtimeMs}`,
    settledBefore: Math.max(st.ctimeMs, st.mtimeMs),
  };
}

/** The directory's entries: the kept listing when the directory is unchanged since a stable read, else a new read. */
export function listDirectory(dir: string): Listing {
  // The real wall clock, not the server's: it is compared with the filesystem's own ctime/mtime. Within a pass
  // (fsProbe.ts) the lstat may be one the pass made earlier: its start bounds it.
  const statAt = lstatTime();
  // Its entries and times are what counts: watched first (fsQuiet.ts), so that a change from here on is an event.
  const watchedBefore = quietFs.watchEntries(dir);
  const { token, settledBefore } = tokenOf(dir, !watchedBefore);
  const kept = listings.get(dir);
  if (kept?.stable && kept.token === token) return kept;
  let entries: ListedEntry[] | null;
  try {
    entries = readdirSync(dir, { withFileTypes: true }).map((d) => ({
      name: d.name,
      symlink: d.isSymbolicLink(),
    }));
  } catch {
    entries = null;
  }
  const listing: Listing = {
    entries,
    token,
    stable: token !== '-' && settledBefore < statAt - RACY_MS,
  };
  listings.delete(dir);
  listings.set(dir, listing);
  if (listings.size > MAX_DIRS) listings.delete(listings.keys().next().value!);
  return listing;
}
