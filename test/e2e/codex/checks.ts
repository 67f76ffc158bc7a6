/**
 * Helpers that turn a rig run into assertions with a precise diagnosis: on failure, the message carries the exact
 * JSON-RPC exchange (method, params, the server's answer) that went wrong.
 */
import { type Exchange, exchanges, notifications } from './relay.js';
import type { RunResult } from './rig.js';

const MAX = 1200;

export function clip(v: unknown, max = MAX): string {
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  if (s === undefined) return 'undefined';
  return s.length > max ? `${s.slice(0, max)}…(${s.length} chars)` : s;
}

export function describeExchange(e: Exchange): string {
  const answer = e.error
    ? `error ${clip(e.error)}`
    : e.result === undefined
      ? 'NO ANSWER'
      : `result ${clip(e.result)}`;
  return `#${String(e.id)} ${e.method} ${clip(e.params, 700)}\n    → ${answer}`;
}

/** The exchanges of a run, optionally only those of some methods. */
export function calls(run: RunResult, ...methods: string[]): Exchange[] {
  const all = exchanges(run.frames);
  return methods.length === 0 ? all : all.filter((e) => methods.includes(e.method));
}

/** A readable account of a run for failure messages: exit, the failing exchanges, tool outputs, the CLI's stderr tail. */
export function explain(run: RunResult, focus: string[] = []): string {
  const all = exchanges(run.frames);
  // Expected errors are left out: "not found" (-32004) and -32601 for environment/info (spec §8).
  const failed = all.filter(
    (e) =>
      e.error && e.error.code !== -32004 && !(e.method === 'environment/info' && e.error.code === -32601),
  );
  const unanswered = all.filter((e) => e.error === undefined && e.result === undefined);
  const focused = focus.length > 0 ? all.filter((e) => focus.includes(e.method)) : [];
  const parts = [
    `run ${run.version} ${run.name}: exit ${run.exitCode ?? run.signal}${run.timedOut ? ' (TIMED OUT)' : ''} in ${run.durationMs} ms, ${run.frames.length} frames`,
  ];
  if (run.frames.length === 0)
    parts.push('  the client never talked to the server (no frames through the relay)');
  if (run.modelErrors.length > 0) parts.push(`  fake model errors: ${run.modelErrors.join('; ')}`);
  for (const e of focused) parts.push(`  ${describeExchange(e)}`);
  for (const e of failed) if (!focused.includes(e)) parts.push(`  FAILED ${describeExchange(e)}`);
  for (const e of unanswered) if (!focused.includes(e)) parts.push(`  UNANSWERED ${describeExchange(e)}`);
  parts.push(`  tool outputs: ${clip(run.outputs, 2500)}`);
  parts.push(`  codex stderr tail: ${clip(run.stderr.slice(-1500), 1500)}`);
  return parts.join('\n');
}

/** PIDs named in the `ancestor <pid> <cmdline>` lines of the basic step's output. */
export function ancestorPids(output: string): number[] {
  return [...output.matchAll(/^ancestor (\d+) /gm)].map((m) => Number(m[1]));
}

export function starts(run: RunResult): Exchange[] {
  return calls(run, 'process/start');
}

export { notifications };
