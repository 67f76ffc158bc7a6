/**
 * Time as the server sees it: the wall clock (`now`, epoch ms, for what is shown and stored) and one-shot timers
 * (grace periods, approval timeouts, waits of `process/read`, idle trims). Real by default; a test passes a fake one
 * (test/helpers/fakeClock.ts) and moves time forward itself, so time-based behaviour is tested without waiting.
 *
 * Timers never keep the process alive by themselves (the real clock unrefs them): each one guards work that something
 * else (a connection, a child, a pending request) is already waiting for.
 */
export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): Timer;
  clearTimeout(timer: Timer | null | undefined): void;
}

/** An opaque handle of a pending timer. */
export interface Timer {
  readonly [timerBrand]: true;
}
declare const timerBrand: unique symbol;

export const realClock: Clock = {
  now: () => Date.now(),
  setTimeout(fn, ms) {
    const t = setTimeout(fn, ms);
    t.unref();
    return t as unknown as Timer;
  },
  clearTimeout(timer) {
    if (timer) clearTimeout(timer as unknown as NodeJS.Timeout);
  },
};
