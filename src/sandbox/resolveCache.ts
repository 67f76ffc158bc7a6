/**
 * The policy resolution (resolve.ts) kept between starts (issue 32: an agent's commands come one after another under
 * one policy and cwd, and resolving it again — tracing every component of every path, the protected names of every
 * writable root, sorting — cost ~150–300 µs of each Landlock start).
 *
 * resolvePolicy is a pure function of the policy (`fs`, `cwd`, `projectRoots`), the server's TMPDIR and the answers
 * its FsProbe gives. A kept resolution records every question it asked (which call, which path) with the answer it
 * got; it is reused only when asking every one of them again now gets the same answer. So a reused resolution is the
 * one a fresh resolution would produce at that moment: a symlink swapped for another (its target is a readlink
 * answer), a path component renamed or replaced (a kind or realpath answer), a `.git` file rewritten (a readText
 * answer) or a mount over a path it looked at (lstat sees the mount's root) all make it resolve anew. What the
 * resolution never asked about cannot change its result. The questions are asked again with the same probe, one
 * syscall each, without the tracing and sorting around them.
 *
 * A kept resolution is deeply frozen: callers share it and must not change it.
 */
import { deepFreeze } from '../protocol/deepFreeze.js';
import { type FsProbe, realFsProbe } from './fsProbe.js';
import { quietFs } from './fsQuiet.js';
import { type ResolvedPolicy, type ResolveOptions, resolvePolicy } from './resolve.js';

type Method = 'kind' | 'realpath' | 'readText' | 'readlink';
/** One question asked of the filesystem, and its answer. */
type Asked = { method: Method; path: string; answer: string | null };

interface Kept {
  key: string;
  r: ResolvedPolicy;
  asked: Asked[];
  /**
   * The watch's generation at which every question was last asked with an answer the watch vouches for
   * (fsQuiet.ts): while it stays, asking them again would get the same answers.
   */
  quiet?: number | undefined;
}

const kept: Kept[] = [];
const MAX_KEPT = 8;

/** `probe`, recording every question asked of it (each once: resolvePolicy asks through a memo). */
function recording(probe: FsProbe, asked: Asked[]): FsProbe {
  const ask =
    (method: Method, fn: (p: string) => string | null) =>
    (path: string): string | null => {
      const answer = fn(path);
      asked.push({ method, path, answer });
      return answer;
    };
  const r: FsProbe = {
    kind: ask('kind', (p) => probe.kind(p)) as FsProbe['kind'],
    realpath: ask('realpath', (p) => probe.realpath(p)),
    readText: ask('readText', (p) => probe.readText(p)),
  };
  if (probe.readlink) r.readlink = ask('readlink', (p) => probe.readlink!(p));
  return r;
}

/** Whether every question gets the answer it got when the resolution was made. */
function stillAnswers(asked: readonly Asked[], probe: FsProbe): boolean {
  for (const q of asked) {
    const fn = probe[q.method];
    if (!fn || fn.call(probe, q.path) !== q.answer) return false;
  }
  return true;
}

/**
 * resolvePolicy(eff, opts), reusing the kept resolution of the same inputs while every question it asked of the
 * filesystem gets the same answer (see above). `reused` says which. Throws what resolvePolicy throws (nothing is kept
 * then).
 */
export function resolvePolicyKept(
  eff: Parameters<typeof resolvePolicy>[0],
  opts: Pick<ResolveOptions, 'tmpdir'> & { probe?: FsProbe } = {},
): { r: ResolvedPolicy; reused: boolean } {
  const probe = opts.probe ?? realFsProbe;
  if (eff.fs.kind !== 'restricted') return { r: resolvePolicy(eff, { ...opts, probe }), reused: false };
  const key = JSON.stringify([eff.fs, eff.cwd ?? null, eff.projectRoots, opts.tmpdir ?? null]);
  const i = kept.findIndex((k) => k.key === key);
  const hit = i >= 0 ? kept[i]! : undefined;
  // Only the real filesystem's answers are watched (a probe given by a test answers as it likes).
  const watched = probe === realFsProbe;
  if (hit) {
    kept.splice(i, 1);
    if (watched && quietFs.stillQuiet(hit.quiet)) {
      kept.unshift(hit);
      return { r: hit.r, reused: true };
    }
    const scope = quietFs.scope();
    if (stillAnswers(hit.asked, probe)) {
      hit.quiet = watched ? scope.end() : undefined;
      kept.unshift(hit);
      return { r: hit.r, reused: true };
    }
  }
  const asked: Asked[] = [];
  const scope = quietFs.scope();
  const r = deepFreeze(resolvePolicy(eff, { ...opts, probe: recording(probe, asked) }));
  kept.unshift({ key, r, asked, quiet: watched ? scope.end() : undefined });
  if (kept.length > MAX_KEPT) kept.pop();
  return { r, reused: false };
}
