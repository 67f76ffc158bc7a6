/**
 * `corral selftest`'s report (issue 37, item 5): what the command prints with --json, what it keeps in the user's
 * state directory (selftest.json, next to the audit database), what `corral doctor` points at and what the panel shows
 * (monitor/selftest). Pure: no Node imports. Bounded, so that a damaged or planted file is refused rather than shown.
 */
import { z } from 'zod';

export const SelftestCaseStatus = z.enum(['held', 'broken', 'not-applicable']);
export type SelftestCaseStatus = z.infer<typeof SelftestCaseStatus>;

export const SelftestCase = z.object({
  name: z.string().max(200),
  status: SelftestCaseStatus,
  /** What was tried and what happened (or why it does not apply). */
  detail: z.string().max(16 * 1024),
});
export type SelftestCase = z.infer<typeof SelftestCase>;

export const SelftestReport = z.object({
  /** When it ran (ISO 8601). */
  time: z.string().max(64),
  /** Nothing broken. */
  ok: z.boolean(),
  cases: z.array(SelftestCase).max(500),
});
export type SelftestReport = z.infer<typeof SelftestReport>;

export const MonitorSelftestResult = z.object({
  /** The last result kept on the host's machine; null when none was ever kept, or the file is not a report. */
  last: SelftestReport.nullable(),
});
export type MonitorSelftestResult = z.infer<typeof MonitorSelftestResult>;

/** One line for `corral doctor` and the panel: the last result and its time, or how to get one. */
export function selftestPointer(r: SelftestReport | null): string {
  if (!r)
    return "self-test: never run here; `corral selftest` tries known escapes against this machine's sandbox";
  const broken = r.cases.filter((c) => c.status === 'broken').map((c) => c.name);
  return r.ok
    ? `self-test: held at ${r.time} (${r.cases.length} cases); run \`corral selftest\` again after changes`
    : `self-test: BROKEN at ${r.time}: ${broken.join(', ')}; see \`corral selftest\``;
}
