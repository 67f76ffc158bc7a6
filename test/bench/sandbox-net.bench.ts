/**
 * A proxied connection from inside a sandbox with enforceManagedNetwork, bwrap's in-namespace bridge next to the
 * Landlock backend's connect supervisor (issue 33, item 3): latency and the server's CPU per new connection. The
 * measurement is proxy.bench.ts's (measureNetns); this file runs only these rows: `npm run bench -- sandbox-net`.
 */
import { sandboxConnectionRows, startOrigin } from './proxy.bench.js';
import type { BenchRow } from './types.js';

export async function run(): Promise<BenchRow[]> {
  const origin = await startOrigin();
  try {
    return await sandboxConnectionRows(origin.web, ['handed', 'landlock']);
  } finally {
    origin.kill();
  }
}
