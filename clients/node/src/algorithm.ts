import type { Limiter } from './throttle.js';

/** The algorithm a host-library adapter sends: `counter` (fixed window), `window` (exact sliding window), `gcra` (CL.THROTTLE). */
export type Algorithm = 'counter' | 'window' | 'gcra';

/** `limit` units per `windowMs` as one limiter of the chosen algorithm. */
export function limiter(algorithm: Algorithm, key: string, limit: number | bigint, windowMs: number, quantity?: number): Limiter {
  // Values go to the server as they are: a limit or window it refuses gets its own error.
  const q = quantity === undefined ? {} : { quantity };
  switch (algorithm) {
    case 'counter':
      return { key, algorithm: 'counter', limit, windowMs, ...q };
    case 'window':
      return { key, algorithm: 'window', limit, windowMs, ...q };
    case 'gcra':
      // limit at once (max_burst = limit - 1), refilling limit per windowMs.
      return { key, algorithm: 'throttle', maxBurst: typeof limit === 'bigint' ? limit - 1n : limit - 1, count: limit, periodMs: windowMs, ...q };
    default:
      throw new RangeError(`redis-throttle: algorithm must be 'counter', 'window' or 'gcra', got ${JSON.stringify(algorithm)}`);
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
 * Whether a fixed window's arguments are ones CL.COUNTER takes (a limit from 1 to 10^18 - 1, a
 * window from 1 ms to 10^12 ms, a positive quantity), so the adapters may count it with plain
 * commands (Throttle.hit) on a twin-only server; anything else goes to the server as a call, for
 * its own error.
 */
export function plainCounter(limit: number | bigint, windowMs: number, quantity = 1): boolean {
  const whole = (v: number | bigint, lo: number, hi: number): boolean =>
    typeof v === 'bigint' ? v >= BigInt(lo) && v <= BigInt(hi) : Number.isSafeInteger(v) && v >= lo && v <= hi;
  return whole(limit, 1, Number.MAX_SAFE_INTEGER) && whole(windowMs, 1, 1_000_000_000_000) && whole(quantity, 1, Number.MAX_SAFE_INTEGER);
}
