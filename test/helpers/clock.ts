/**
 * A Clock (src/clock.ts) whose time moves only when the test says so: `advance(ms)` runs every timer that falls due,
 * in order, each at its own time, and lets the event loop turn after each (so work a timer starts, and the timers it
 * sets in turn, happen at the time they would). Chosen over node:test's mock.timers, which replace the timers of the
 * whole test process (ws, child processes, the test's own waits): this one moves only the server's time.
 */
import type { Clock, Timer } from '../../src/clock.js';

interface Pending {
  at: number;
  seq: number;
  fn: () => void;
  /** An interval's period: it is set again this far after each run, until cleared. */
  every?: number;
}

interface FakeTimer extends Timer {
  readonly seq: number;
}

export class FakeClock implements Clock {
  private time: number;
  private seq = 0;
  private readonly timers = new Map<number, Pending>();
  /** whenPending's waiters, told each time a timer is set. */
  private readonly onSet = new Set<() => void>();

  /** Starts at the real time (so timestamps read as they would), unless given another. */
  constructor(start = Date.now()) {
    this.time = start;
  }

  now(): number {
    return this.time;
  }

  setTimeout(fn: () => void, ms: number): Timer {
    return this.set({ at: this.time + Math.max(0, ms), seq: ++this.seq, fn });
  }

  setInterval(fn: () => void, ms: number): Timer {
    // As Node's: a period below 1 ms is 1 ms (so advance() always ends).
    const every = Math.max(1, ms);
    return this.set({ at: this.time + every, seq: ++this.seq, fn, every });
  }

  private set(p: Pending): Timer {
    this.timers.set(p.seq, p);
    const timer: FakeTimer = { seq: p.seq, unref: () => timer };
    for (const w of this.onSet) w();
    return timer;
  }

  clearTimeout(timer: Timer | null | undefined): void {
    if (timer) this.timers.delete((timer as FakeTimer).seq);
  }

  /** Timers set and not yet run or cleared. */
  get pending(): number {
    return this.timers.size;
  }

  /** Resolves once at least `n` timers are set (the code under test has reached its wait), or fails after `ms`. */
  whenPending(n = 1, ms = 10_000): Promise<void> {
    if (this.timers.size >= n) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const check = () => {
        if (this.timers.size < n) return;
        done();
        resolve();
      };
      const deadline = setTimeout(() => {
        done();
        reject(new Error(`timed out waiting for ${n} timer(s) on the fake clock`));
      }, ms);
      const done = () => {
        clearTimeout(deadline);
        this.onSet.delete(check);
      };
      this.onSet.add(check);
    });
  }

  /** Moves time forward by `ms`, running each timer that falls due at its own time, oldest first (an interval as
   * many times as it falls due). */
  async advance(ms: number): Promise<void> {
    const end = this.time + ms;
    for (;;) {
      let next: Pending | undefined;
      for (const t of this.timers.values()) {
        if (t.at <= end && (!next || t.at < next.at || (t.at === next.at && t.seq < next.seq))) next = t;
      }
      if (!next) break;
      this.timers.delete(next.seq);
      this.time = next.at;
      // An interval is set again before it runs (its run may clear it), under the same timer.
      if (next.every !== undefined) this.timers.set(next.seq, { ...next, at: next.at + next.every });
      next.fn();
      await new Promise((r) => setImmediate(r));
    }
    this.time = end;
    await new Promise((r) => setImmediate(r));
  }
}
