// A reporter for node's test runner that scripts/test.mjs adds beside the usual one: it writes one line per failed
// or cancelled test (file, the names from the outermost suite down, what failed) to a file, which scripts/test.mjs
// prints at the end of the run. A CI log that is cut to its last lines then still says which test failed and why.
import { relative } from 'node:path';

/**
 * @param {AsyncIterable<{type: string, data: {name: string, nesting: number, file?: string,
 *   details?: {error?: {failureType?: string, cause?: {message?: string}, message?: string}}}}>} source
 */
export default async function* failures(source) {
  /** The names of the suites and tests open at each nesting level, by file. */
  const open = new Map();
  for await (const { type, data } of source) {
    if (type === 'test:start') {
      const names = open.get(data.file) ?? [];
      names.length = data.nesting;
      names.push(data.name);
      open.set(data.file, names);
    } else if (type === 'test:fail') {
      const error = data.details?.error;
      // A suite fails when one of its tests did: that test has its own line.
      if (error?.failureType === 'subtestsFailed') continue;
      const names = (open.get(data.file) ?? []).slice(0, data.nesting);
      names.push(data.name);
      const what =
        error?.failureType === 'cancelledByParent'
          ? 'cancelled'
          : error?.failureType === 'testTimeoutFailure'
            ? 'timed out'
            : 'failed';
      const cause = error?.cause ?? error;
      const message = String(cause?.message ?? cause ?? '')
        .split('\n')
        .filter((l) => l.trim() !== '')
        .slice(0, 6)
        .join(' ⏎ ')
        .slice(0, 600);
      const file = data.file ? relative(process.cwd(), data.file) : '(no file)';
      yield `${JSON.stringify({ what, file, test: names.join(' › '), message })}\n`;
    }
  }
}
