/**
 * A repository's own network policy (issue 36, item 6): `.corral/network.json` in a workspace lists the endpoints the
 * project needs. It is data, read (never executed) when a process that asks for approvals starts there, and it can
 * only narrow: a request of that workspace to an endpoint it does not declare is blocked at once — no prompt, no
 * project rule, no learning — while a declared one still needs the user's config or rules to be allowed. An entry
 * that would widen (a wildcard or empty host, port 0, any key that grants: `allow`, `domains`,
 * `hard_deny_allowlist_misses`, …) is ignored and reported, as is a file that is not a plain small JSON file of ours.
 */
import { createHash } from 'node:crypto';
import { closeSync, constants, fstatSync, openSync, readSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { ApprovalProtocol, type RepoPolicyState } from '../../protocol/approvals.js';
import { normalizePathPrefix, pathWithin } from './endpointPath.js';
import { pathVisible, type RuleTarget, ruleMethod } from './projectRules.js';

export const REPO_POLICY_FILE = join('.corral', 'network.json');
const MAX_BYTES = 64 * 1024;
/** Reasons an answer lists (the rest counted in the last one). */
const MAX_IGNORED_SHOWN = 1024;
const MAX_ENTRIES = 256;

const Entry = z
  .object({
    host: z.string().min(1).max(255),
    port: z.number().int().min(1).max(65535).optional(),
    protocol: ApprovalProtocol.optional(),
    methods: z.array(z.string().min(1).max(32)).max(16).optional(),
    pathPrefix: z.string().max(1024).optional(),
  })
  .strict();

const WIDENING = /[*?]/;

/** A declared endpoint: a request matches when every member given matches. */
interface Declared {
  host: string;
  port: number | null;
  protocol: ApprovalProtocol | null;
  methods: string[] | null;
  /** Normalised (endpointPath.ts): a plain-HTTP request must be at or below it; null: any path. */
  pathPrefix: string | null;
}

export interface RepoPolicy {
  state: RepoPolicyState;
  declared: Declared[];
}

const ABSENT: RepoPolicy = {
  state: { file: null, status: 'absent', sha256: null, endpoints: 0, ignored: [], problem: null },
  declared: [],
};

function readSmall(path: string): Buffer {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new Error('not a regular file');
    if (st.size > MAX_BYTES) throw new Error(`${st.size} bytes (at most ${MAX_BYTES})`);
    const buf = Buffer.alloc(Math.min(st.size + 1, MAX_BYTES + 1));
    const n = readSync(fd, buf, 0, buf.length, 0);
    if (n > MAX_BYTES) throw new Error(`more than ${MAX_BYTES} bytes`);
    return buf.subarray(0, n);
  } finally {
    closeSync(fd);
  }
}

/** The policy of `workspace` (absent when there is no file; `invalid`, narrowing nothing, when it cannot be read). */
export function readRepoPolicy(workspace: string): RepoPolicy {
  const file = join(workspace, REPO_POLICY_FILE);
  let bytes: Buffer;
  try {
    bytes = readSmall(file);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (err.code === 'ENOENT' || err.code === 'ENOTDIR') return ABSENT;
    const problem = err.code === 'ELOOP' ? 'a symbolic link: ignored' : err.message;
    return { state: { ...ABSENT.state, file, status: 'invalid', problem }, declared: [] };
  }
  const sha256 = createHash('sha256').update(bytes).digest('hex');
  const invalid = (problem: string): RepoPolicy => ({
    state: { file, status: 'invalid', sha256, endpoints: 0, ignored: [], problem },
    declared: [],
  });
  let json: unknown;
  try {
    json = JSON.parse(bytes.toString('utf8'));
  } catch {
    return invalid('not JSON');
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) return invalid('not a JSON object');
  const ignored: string[] = [];
  const top = json as Record<string, unknown>;
  for (const k of Object.keys(top))
    if (k !== 'endpoints' && k !== 'version')
      ignored.push(
        `${JSON.stringify(k).slice(0, 80)}: a repository file can only list endpoints, never grant`,
      );
  const list = top.endpoints;
  if (!Array.isArray(list)) return invalid('`endpoints` must be an array');
  const declared: Declared[] = [];
  for (const [i, raw] of list.slice(0, MAX_ENTRIES).entries()) {
    const r = Entry.safeParse(raw);
    if (!r.success) {
      const issue = r.error.issues[0]!;
      ignored.push(`endpoints[${i}]: ${issue.path.join('.') || 'entry'}: ${issue.message.slice(0, 200)}`);
      continue;
    }
    const e = r.data;
    if (WIDENING.test(e.host) || e.host === 'any') {
      ignored.push(
        `endpoints[${i}]: host ${JSON.stringify(e.host.slice(0, 80))} would widen access: only exact hosts`,
      );
      continue;
    }
    const pathPrefix = e.pathPrefix === undefined ? null : normalizePathPrefix(e.pathPrefix);
    if (e.pathPrefix !== undefined && pathPrefix === null) {
      // Dropping the entry narrows (its endpoint is then undeclared); keeping it without its prefix would widen.
      ignored.push(
        `endpoints[${i}]: pathPrefix ${JSON.stringify(e.pathPrefix.slice(0, 80))} is not a plain path (no query, no encoded slash, no '..' above the root)`,
      );
      continue;
    }
    declared.push({
      host: e.host.toLowerCase(),
      pathPrefix,
      port: e.port ?? null,
      protocol: e.protocol ?? null,
      methods: e.methods ? e.methods.map((m) => m.toUpperCase()) : null,
    });
  }
  if (list.length > MAX_ENTRIES) ignored.push(`endpoints past the first ${MAX_ENTRIES}: ignored`);
  return {
    state: {
      file,
      status: 'read',
      sha256,
      endpoints: declared.length,
      // What the protocol's state carries at most (RepoPolicyState): the first ones, and how many more.
      ignored:
        ignored.length > MAX_IGNORED_SHOWN
          ? [
              ...ignored.slice(0, MAX_IGNORED_SHOWN - 1),
              `${ignored.length - MAX_IGNORED_SHOWN + 1} more ignored`,
            ]
          : ignored,
      problem: null,
    },
    declared,
  };
}

/** Whether the policy lets `t` be asked, ruled or learned: true without a policy (or one declaring nothing). */
export function repoAllows(policy: RepoPolicy | null, t: RuleTarget): boolean {
  if (!policy || policy.declared.length === 0) return true;
  const host = t.host.toLowerCase();
  const method = ruleMethod(t.protocol, t.method);
  return policy.declared.some(
    (d) =>
      d.host === host &&
      (d.port === null || d.port === t.port) &&
      // A declared CONNECT tunnel holds the requests inside it when the proxy intercepts them.
      (d.protocol === null ||
        d.protocol === t.protocol ||
        (d.protocol === 'https_connect' && t.protocol === 'https')) &&
      (d.methods === null || method === null || d.methods.includes(method)) &&
      // The path is seen on plain HTTP and inside an intercepted tunnel: there a prefix holds it (unreadable: never).
      (d.pathPrefix === null ||
        !pathVisible(t.protocol) ||
        (t.path != null && pathWithin(t.path, d.pathPrefix))),
  );
}
