/**
 * Time as the server sees it: the wall clock (`now`, epoch ms, for what is shown and stored, and for deadlines) and
 * timers (grace periods, approval and request timeouts, waits of `process/read`, idle trims, reconnection backoffs,
 * pings, health probes). Real by default; a test passes a fake one (test/helpers/clock.ts) and moves time forward
 * itself, so time-based behaviour is tested without waiting.
 */
export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): Timer;
  /** Runs `fn` every `ms` until cleared. */
  setInterval(fn: () => void, ms: number): Timer;
  /** Clears a timer of either kind (as Node's clearTimeout does). */
  clearTimeout(timer: Timer | null | undefined): void;
}

/** A pending timer. `unref`: it does not keep the process alive by itself (as Node's). */
export interface Timer {
  unref(): Timer;
}

export const realClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  setInterval: (fn, ms) => setInterval(fn, ms),
  clearTimeout(timer) {
    if (timer) clearTimeout(timer as unknown as NodeJS.Timeout);
  },
};
