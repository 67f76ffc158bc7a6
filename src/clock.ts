/**
 * Time as the server sees it: the wall clock (`now`, epoch ms, for what is shown and stored) and one-shot timers
 * (grace periods, approval timeouts, waits of `process/read`, idle trims). Real by default; a test passes a fake one
 * (test/helpers/clock.ts) and moves time forward itself, so time-based behaviour is tested without waiting.
 */
export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): Timer;
  clearTimeout(timer: Timer | null | undefined): void;
}

/** A pending timer. `unref`: it does not keep the process alive by itself (as Node's). */
export interface Timer {
  unref(): Timer;
}

export const realClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout(timer) {
    if (timer) clearTimeout(timer as unknown as NodeJS.Timeout);
  },
};
