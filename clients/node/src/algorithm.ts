import type { Limiter } from './types.js';

/** The algorithm a host-library adapter sends: `counter` (fixed window), `window` (exact sliding window), `gcra` (CL.THROTTLE). */
export type Algorithm = 'counter' | 'window' | 'gcra';

/** The longest window (ms) the commands take (CL.COUNTER, CL.WINDOW, CL.THROTTLE's period). */
export const MAX_WINDOW_MS = 1_000_000_000_000;

/** `limit` units per `windowMs` as one limiter of the chosen algorithm. */
export function limiter(
  algorithm: Algorithm,
  key: string,
  limit: number | bigint,
  windowMs: number,
  quantity?: number,
): Limiter {
  // Values go to the server as they are: a limit or window it refuses gets its own error.
  const q = quantity === undefined ? {} : { quantity };
  switch (algorithm) {
    case 'counter':
      return { key, algorithm: 'counter', limit, windowMs, ...q };
    case 'window':
      return { key, algorithm: 'window', limit, windowMs, ...q };
    case 'gcra':
      // limit at once (max_burst = limit - 1), refilling limit per windowMs.
      return {
        key,
        algorithm: 'throttle',
        maxBurst: typeof limit === 'bigint' ? limit - 1n : limit - 1,
        count: limit,
        periodMs: windowMs,
        ...q,
      };
    default:
      throw new RangeError(
        `redis-throttle: algorithm must be 'counter', 'window' or 'gcra', got ${JSON.stringify(algorithm)}`,
      );
  }
}

/**
 * Every refund of the adapters goes through here (express-rate-limit's decrement,
 * rate-limiter-flexible's reward): a negative quantity of the same limiter, which the server
 * caps at full. (A bounded refund, `HELD t`, is not on the server yet; when it is, this is the one
 * place that sends it.)
 */
export function refund(l: Limiter, units: number): Limiter {
  return { ...l, quantity: -Math.abs(units) };
}

/**
 * Whether a fixed window's arguments are ones CL.COUNTER takes (a limit from 1 to 2^53 - 1, a
 * window from 1 ms to 10^12 ms, a positive quantity), so the adapters may count it with plain
 * commands (Throttle.hit) on a twin-only server; anything else goes to the server as a call, for
 * its own error.
 */
export function plainCounter(limit: number | bigint, windowMs: number, quantity = 1): boolean {
  const whole = (v: number | bigint, lo: number, hi: number): boolean =>
    typeof v === 'bigint' ? v >= BigInt(lo) && v <= BigInt(hi) : Number.isSafeInteger(v) && v >= lo && v <= hi;
  return (
    whole(limit, 1, Number.MAX_SAFE_INTEGER) &&
    whole(windowMs, 1, MAX_WINDOW_MS) &&
    whole(quantity, 1, Number.MAX_SAFE_INTEGER)
  );
}

/**
 * How many hits a host library admits per window for its `limit`, since each denies a hit when
 * the count of hits goes above the limit: the whole part of the limit (`2.5` admits 2; `0` and
 * below admit none), and Infinity for a limit no count exceeds (`Infinity`, `NaN`, or one beyond
 * 2^53 - 1, which a count never reaches).
 */
export function admits(limit: number): number {
  if (Number.isNaN(limit) || limit > Number.MAX_SAFE_INTEGER) return Infinity;
  return Math.floor(limit);
}

let warned = false;
/**
 * A window longer than the commands take (10^12 ms, 31.7 years) for an algorithm that needs the
 * server's commands: the longest they take, with a warning once per process (the fixed window
 * counts with plain commands instead, which take any length).
 */
export function longestWindow(windowMs: number, what: string): number {
  if (windowMs <= MAX_WINDOW_MS) return windowMs;
  if (!warned) {
    warned = true;
    process.emitWarning(
      `redis-throttle: ${what} ${windowMs} ms is longer than the commands take: ${MAX_WINDOW_MS} ms (31.7 years) is used`,
      'RedisThrottleWarning',
    );
  }
  return MAX_WINDOW_MS;
}
