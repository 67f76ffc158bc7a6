/**
 * Runs one rig suite (rig.ts `runSuite`) from a job file and writes the result as JSON: the child process that
 * `runSuiteIsolated` starts inside its network namespace. Also usable by hand:
 *   node --import tsx test/e2e/codex/run-rig.ts job.json result.json
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { runSuite, type SuiteJob } from './rig.js';

const [jobFile, resultFile, isolation = 'none'] = process.argv.slice(2);
if (!jobFile || !resultFile) {
  console.error('usage: run-rig.ts <job.json> <result.json> [isolation]');
  process.exit(2);
}
const job = JSON.parse(readFileSync(jobFile, 'utf8')) as SuiteJob;
const result = await runSuite(job, isolation);
writeFileSync(resultFile, JSON.stringify(result));
for (const r of result.runs) {
  console.error(`rig: ${job.version} ${r.name}: exit ${r.exitCode ?? r.signal} in ${r.durationMs} ms`);
}
if (result.serverError) console.error(`rig: ${job.version}: ${result.serverError}`);
