// What a process used (ProcessUsage: src/process/usage.ts, read at its exit), as the panel shows it: one line for a
// process's head and History's facts. Formatting only.
import type { ProcessUsage } from '../../src/protocol/exec.js';
import { fmtBytes, h } from '../dom.js';

const cpu = (ms: number | null) =>
  ms === null ? '–' : ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(0)} ms`;

/** "CPU 1.02 s user, 30 ms sys · peak 52 MiB, 3 pids · io 0 B / 4 KiB · OOM 1 (cgroup-v1)". */
export function usageText(u: ProcessUsage): string {
  const parts = [`CPU ${cpu(u.cpuUserMs)} user, ${cpu(u.cpuSystemMs)} sys`];
  const peak: string[] = [];
  if (u.peakMemoryBytes !== null) peak.push(fmtBytes(u.peakMemoryBytes));
  if (u.peakPids !== null) peak.push(`${u.peakPids} pids`);
  if (peak.length > 0) parts.push(`peak ${peak.join(', ')}`);
  if (u.ioReadBytes !== null || u.ioWriteBytes !== null)
    parts.push(`io ${fmtBytes(u.ioReadBytes ?? 0)} in / ${fmtBytes(u.ioWriteBytes ?? 0)} out`);
  const limits: string[] = [];
  if (u.limitEvents.memory) limits.push(`OOM ${u.limitEvents.memory}`);
  if (u.limitEvents.pids) limits.push(`forks refused ${u.limitEvents.pids}`);
  if (limits.length > 0) parts.push(limits.join(', '));
  return `${parts.join(' · ')} (${u.source})`;
}

/** The facts' "Used" row (History and the live detail): dt and dd, or nothing before the exit. */
export function usageFacts(u: ProcessUsage | null | undefined): HTMLElement[] {
  if (!u) return [];
  return [h('dt', null, 'Used'), h('dd', { 'data-testid': 'process-usage', class: 'small' }, usageText(u))];
}

/** CPU time (user + system, ms) of a stored process, or null when its usage says nothing. */
export function cpuMs(u: ProcessUsage | null | undefined): number | null {
  if (!u || (u.cpuUserMs === null && u.cpuSystemMs === null)) return null;
  return (u.cpuUserMs ?? 0) + (u.cpuSystemMs ?? 0);
}

/** The History list's CPU cell text. */
export function cpuCell(u: ProcessUsage | null | undefined): string {
  const ms = cpuMs(u);
  return ms === null ? '–' : cpu(ms);
}

/** Items ordered by CPU, most first (those without usage last, in their order); others as they are. */
export function byCpu<T extends { type: string; usage?: ProcessUsage | null }>(items: readonly T[]): T[] {
  return items
    .map((item, i) => ({ item, i, ms: item.type === 'process' ? cpuMs(item.usage) : null }))
    .sort((a, b) => (b.ms ?? -1) - (a.ms ?? -1) || a.i - b.i)
    .map((x) => x.item);
}
