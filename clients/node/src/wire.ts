/**
 * The wire: how the core's arguments become command words and the server's replies become
 * decisions (exact JS numbers, or a clear ThrottleError), and how a client's failure becomes one.
 */
import { ThrottleError } from './errors.js';
import type { Decision, Int, Limiter } from './types.js';

export function asError(e: unknown): ThrottleError {
  if (e instanceof ThrottleError) return e;
  // node-redis's MULTI fails with the commands' replies: the first error is the server's text.
  const multi = e as { replies?: unknown[]; errorIndexes?: number[] } | null;
  if (multi && Array.isArray(multi.replies) && Array.isArray(multi.errorIndexes) && multi.errorIndexes.length > 0) {
    const first = multi.replies[multi.errorIndexes[0] as number];
    if (first instanceof Error) return new ThrottleError(first.message, { cause: e });
  }
  const message = e instanceof Error ? e.message : String(e);
  return new ThrottleError(message, { cause: e });
}

/** A reply's integer, as a JS number: exact, or refused (a count beyond 2^53 - 1 cannot be one). */
export function int(v: unknown, what: string): number {
  let n: number | undefined;
  if (typeof v === 'number' && Number.isInteger(v)) n = v;
  else if (typeof v === 'bigint' || (typeof v === 'string' && /^-?\d+$/.test(v))) n = Number(v);
  if (n === undefined)
    throw new ThrottleError(
      `redis-throttle: expected an integer for ${what}, got ${JSON.stringify(typeof v === 'bigint' ? String(v) : v)}`,
    );
  if (!Number.isSafeInteger(n))
    throw new ThrottleError(
      `redis-throttle: ${what} ${String(v)} is beyond 2^53 - 1, which a JS number cannot hold exactly`,
    );
  return n;
}

/**
 * A count a plain command keeps (INCRBY's reply, a GET): exact up to 2^53 - 1; one beyond reads
 * as Infinity, above every limit a JS number can state (a count is only ever compared with one).
 */
export function count(v: unknown, what: string): number {
  if (typeof v === 'string' && /^\d{16,}$/.test(v) && BigInt(v) > BigInt(Number.MAX_SAFE_INTEGER)) return Infinity;
  if (typeof v === 'bigint' && v > BigInt(Number.MAX_SAFE_INTEGER)) return Infinity;
  if (typeof v === 'number' && v > Number.MAX_SAFE_INTEGER) return Infinity;
  return int(v, what);
}

/**
 * Refuses, before anything is sent, a limit whose replies a JS number could not hold exactly
 * (above 2^53 - 1). Other values go to the server as they are, for its own error.
 */
export function exact(v: Int | undefined, what: string): void {
  if (v === undefined) return;
  const big =
    typeof v === 'bigint'
      ? v > BigInt(Number.MAX_SAFE_INTEGER) || v < -BigInt(Number.MAX_SAFE_INTEGER)
      : Number.isInteger(v) && !Number.isSafeInteger(v);
  if (big)
    throw new ThrottleError(
      `redis-throttle: ${what} ${String(v)} is beyond 2^53 - 1: replies in JS numbers could not be exact (nothing was sent)`,
    );
}

export function decision(reply: unknown): Decision {
  if (!Array.isArray(reply) || reply.length < 5)
    throw new ThrottleError(`redis-throttle: expected five integers, got ${JSON.stringify(reply)}`);
  return {
    limited: int(reply[0], 'limited') === 1,
    limit: int(reply[1], 'limit'),
    remaining: int(reply[2], 'remaining'),
    retryAfterMs: int(reply[3], 'retry_after'),
    resetAfterMs: int(reply[4], 'reset_after'),
  };
}

export const s = (v: Int): string => (typeof v === 'bigint' ? v.toString() : String(v));

/** The words of a limiter after its key, as CL.ALL's spec and the single command take them (without quantity). */
export function params(l: Limiter): string[] {
  for (const [name, v] of Object.entries(l))
    if (name !== 'key' && name !== 'algorithm' && (typeof v === 'number' || typeof v === 'bigint')) exact(v, name);
  switch (l.algorithm) {
    case 'throttle':
      return [s(l.maxBurst), s(l.count), s(l.periodMs)];
    case 'window':
      return l.precisionMs === undefined
        ? [s(l.limit), s(l.windowMs)]
        : [s(l.limit), s(l.windowMs), 'PRECISION', s(l.precisionMs)];
    case 'bucket':
      return [s(l.capacity), s(l.tokens), s(l.intervalMs)];
    case 'counter':
      return [s(l.limit), s(l.windowMs)];
    case 'quota': {
      const w = [s(l.limit), 'PER', l.per];
      if (l.tz !== undefined) w.push('TZ', l.tz);
      if (l.anchor !== undefined) w.push('ANCHOR', l.anchor);
      return w;
    }
    default:
      throw new ThrottleError(
        `redis-throttle: unknown algorithm ${JSON.stringify((l as { algorithm: unknown }).algorithm)}`,
      );
  }
}
