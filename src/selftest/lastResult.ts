/**
 * The last `corral selftest` result, kept next to the audit database (selftest.ts writes it): what `corral doctor`
 * and the panel point at. Light on purpose (no server import): the doctor's report reads it.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { defaultAuditPath } from '../audit/trail.js';

export type CaseStatus = 'held' | 'broken' | 'not-applicable';

export interface CaseResult {
  name: string;
  status: CaseStatus;
  /** What was tried and what happened (or why it does not apply). */
  detail: string;
}

export interface SelftestReport {
  time: string;
  ok: boolean;
  cases: CaseResult[];
}

/** Where the last result is kept: next to the audit database. */
export function selftestResultPath(env: NodeJS.ProcessEnv = process.env): string {
  return join(dirname(defaultAuditPath(env)), 'selftest.json');
}

/** The last result, or null when there is none or it is unreadable. */
export function readLastSelftest(path = selftestResultPath()): SelftestReport | null {
  try {
    const r = JSON.parse(readFileSync(path, 'utf8')) as SelftestReport;
    return typeof r.time === 'string' && typeof r.ok === 'boolean' && Array.isArray(r.cases) ? r : null;
  } catch {
    return null;
  }
}

/** One line for `corral doctor`: the last result and its time, or how to get one. */
export function selftestPointer(r: SelftestReport | null): string {
  if (!r)
    return "self-test: never run here; `corral selftest` tries known escapes against this machine's sandbox";
  const broken = r.cases.filter((c) => c.status === 'broken').map((c) => c.name);
  return r.ok
    ? `self-test: held at ${r.time} (${r.cases.length} cases); run \`corral selftest\` again after changes`
    : `self-test: BROKEN at ${r.time}: ${broken.join(', ')}; see \`corral selftest\``;
}
