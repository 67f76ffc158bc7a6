/**
 * `npm run bench`: imports every test/bench/*.bench.ts in name order, runs each module's `run()` one after the other
 * and prints a single table (section, metric, corral, reference, ratio, unit, target). A module that throws gets an
 * error row (the message) and the others still run; the run itself does not fail.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { BenchModule, BenchRow } from './types.js';

const dir = import.meta.dirname;
const filters = process.argv.slice(2).filter((a) => !a.startsWith('-'));
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.bench.ts'))
  .filter((f) => filters.length === 0 || filters.some((w) => f.includes(w)))
  .sort();

function fmt(v: number | string | undefined): string {
  if (v === undefined) return '';
  if (typeof v === 'string') return v;
  if (!Number.isFinite(v)) return String(v);
  const a = Math.abs(v);
  return a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
}

function ratio(r: BenchRow): string {
  if (typeof r.corral !== 'number' || typeof r.reference !== 'number' || r.reference === 0) return '';
  return `${(r.corral / r.reference).toFixed(2)}x`;
}

const rows: string[][] = [];
for (const f of files) {
  const started = performance.now();
  try {
    const mod = (await import(pathToFileURL(join(dir, f)).href)) as Partial<BenchModule>;
    if (typeof mod.run !== 'function') throw new Error('exports no run()');
    for (const r of await mod.run()) {
      rows.push([r.section, r.metric, fmt(r.corral), fmt(r.reference), ratio(r), r.unit, r.target ?? '']);
    }
  } catch (e) {
    const msg = e instanceof Error ? e.message : String(e);
    rows.push([f.replace(/\.bench\.ts$/, ''), 'ERROR', msg.split('\n')[0]!.slice(0, 100), '', '', '', '']);
  }
  process.stderr.write(`bench: ${f} took ${((performance.now() - started) / 1000).toFixed(1)} s\n`);
}

const header = ['section', 'metric', 'corral', 'reference', 'ratio', 'unit', 'target'];
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
const line = (cells: string[]) =>
  cells
    .map((c, i) => (i >= 2 && i <= 4 ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
    .join('  ')
    .trimEnd();
console.log(line(header));
console.log(widths.map((w) => '-'.repeat(w)).join('  '));
for (const r of rows) console.log(line(r));
// Modules may leave handles (servers, sockets) behind: the table is the result, so end here.
process.exit(0);
