/**
 * A ThrottlerStorage for @nestjs/throttler on redis-throttle:
 * `ThrottlerModule.forRoot({ throttlers: [...], storage: new RedisThrottleStorage(redis) })`.
 * By default an exact sliding window (CL.WINDOW), the meaning of the throttler's own in-memory
 * storage (each hit counts for `ttl`); `algorithm: 'counter'` for a fixed window, `'gcra'` for GCRA.
 */
import { type Algorithm, limiter } from './algorithm.js';
import { Throttle } from './throttle.js';

export interface RedisThrottleStorageOptions {
  /** Prepended to the throttler's keys; default `throttler:`. */
  prefix?: string;
  /** 'window' (default), 'counter' or 'gcra'. */
  algorithm?: Algorithm;
  /** ms to wait for Redis before the call fails; default 1000. */
  timeoutMs?: number;
}

/** @nestjs/throttler's ThrottlerStorageRecord. */
export interface ThrottlerStorageRecord {
  totalHits: number;
  timeToExpire: number;
  isBlocked: boolean;
  timeToBlockExpire: number;
}

const seconds = (ms: number): number => (ms > 0 ? Math.ceil(ms / 1000) : 0);

export class RedisThrottleStorage {
  readonly #throttle: Throttle;
  readonly #prefix: string;
  readonly #algorithm: Algorithm;

  /** `client`: a node-redis (v4/v5) or ioredis client, standalone or cluster. */
  constructor(client: object, options: RedisThrottleStorageOptions = {}) {
    this.#throttle = new Throttle(client, options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs });
    this.#prefix = options.prefix ?? 'throttler:';
    this.#algorithm = options.algorithm ?? 'window';
    limiter(this.#algorithm, 'x', 1, 1);
  }

  /**
   * One hit of `key` against `limit` per `ttl` ms, decided on the server. A denied hit is not
   * counted; it is blocked until the limiter admits again (`timeToBlockExpire`, seconds).
   */
  async increment(key: string, ttl: number, limit: number, _blockDuration: number, throttlerName: string): Promise<ThrottlerStorageRecord> {
    const d = await this.#throttle.decide(limiter(this.#algorithm, `${this.#prefix}${throttlerName}:${key}`, limit, ttl));
    if (d.limited) {
      const wait = d.retryAfterMs >= 0 ? d.retryAfterMs : d.resetAfterMs;
      return { totalHits: d.limit + 1, timeToExpire: seconds(d.resetAfterMs), isBlocked: true, timeToBlockExpire: Math.max(1, seconds(wait)) };
    }
    return { totalHits: d.limit - d.remaining, timeToExpire: seconds(d.resetAfterMs), isBlocked: false, timeToBlockExpire: 0 };
  }
}

export default RedisThrottleStorage;
