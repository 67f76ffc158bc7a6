/**
 * The last `corral selftest` result, kept next to the audit database (selftest.ts writes it): what `corral doctor`
 * and the panel (monitor/selftest) point at. Light on purpose (no server import): the doctor's report reads it.
 * The shape is the protocol's (src/protocol/selftest.ts); a file that is not one (too large, not JSON, another shape)
 * reads as no result.
 */
import { closeSync, constants, fstatSync, openSync, readSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { defaultAuditPath } from '../audit/trail.js';
import {
  type SelftestCase as CaseResult,
  type SelftestCaseStatus as CaseStatus,
  SelftestReport,
  selftestPointer,
} from '../protocol/selftest.js';

export type { CaseResult, CaseStatus };
export { SelftestReport, selftestPointer };

/** A kept result is a few KiB; past this it is not one of ours. */
export const MAX_RESULT_BYTES = 1024 * 1024;

/** Where the last result is kept: next to the audit database. */
export function selftestResultPath(env: NodeJS.ProcessEnv = process.env): string {
  return join(dirname(defaultAuditPath(env)), 'selftest.json');
}

/** The last result, or null when there is none or it is unreadable, too large or not a report. */
export function readLastSelftest(path = selftestResultPath()): SelftestReport | null {
  let fd = -1;
  try {
    // Non-blocking: a FIFO put in its place must not hold the caller (it is then refused as not a file).
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW);
    const st = fstatSync(fd);
    if (!st.isFile() || st.size > MAX_RESULT_BYTES) return null;
    const buf = Buffer.alloc(st.size);
    const n = readSync(fd, buf, 0, buf.length, 0);
    const r = SelftestReport.safeParse(JSON.parse(buf.subarray(0, n).toString('utf8')));
    return r.success ? r.data : null;
  } catch {
    return null;
  } finally {
    if (fd >= 0) closeSync(fd);
  }
}
