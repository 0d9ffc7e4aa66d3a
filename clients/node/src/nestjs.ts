/**
 * A ThrottlerStorage for @nestjs/throttler on redis-throttle:
 * `ThrottlerModule.forRoot({ throttlers: [...], storage: new RedisThrottleStorage(redis) })`.
 * By default an exact sliding window (CL.WINDOW), the meaning of the throttler's own in-memory
 * storage (each hit counts for `ttl`); `algorithm: 'counter'` for a fixed window, `'gcra'` for GCRA.
 *
 * `blockDuration` (the guard passes it; by default the throttler's `ttl`) is applied on the
 * server, as the throttler's own storages apply it: the request that goes over the limit blocks
 * the key for `blockDuration` ms from that denial (`isBlocked`, `timeToBlockExpire`, the guard's
 * `Retry-After`), requests during the block are denied without extending it, and when it ends
 * the count starts again from zero. The block is written into the limiter's own state
 * (Throttle.block), so every app server sharing the Redis sees it, and an admitted request pays
 * nothing for it:
 * - `'counter'`: the key held full for `blockDuration`, then expired;
 * - `'gcra'`: the key holds a block value until then (see Throttle.block), then it is full;
 * - `'window'` (default): the log refilled with `limit` hits at the denial, so the block lasts
 *   exactly one `ttl`, which is the default `blockDuration`. For a different `blockDuration`
 *   use algorithm `'counter'` or `'gcra'`.
 * A denial whose own wait is already as long as `blockDuration` writes nothing. Which denial
 * started the block is kept in a marker key beside the limiter's (`<key>:blocked`, in its hash
 * slot), written only on a denial and expiring with the block.
 *
 * `'counter'` on a server with only the Functions twin sends plain commands (Throttle.hit, as
 * the express-rate-limit, rate-limiter-flexible and Fastify stores do): the same stored bytes and
 * expiry as CL.COUNTER, at a fraction of `FCALL cl_counter`'s cost. They count every hit, denied
 * ones too, as the throttler's own Redis storages do; what is admitted and blocked is the same.
 */
import { type Algorithm, limiter, plainCounter } from './algorithm.js';
import { type Limiter, Throttle } from './throttle.js';

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
   * counted; it blocks the key for `blockDuration` ms (see the class), or until the limiter
   * admits again if that is later (`timeToBlockExpire`, seconds).
   */
  async increment(key: string, ttl: number, limit: number, blockDuration: number, throttlerName: string): Promise<ThrottlerStorageRecord> {
    const l = limiter(this.#algorithm, `${this.#prefix}${throttlerName}:${key}`, limit, ttl);
    if (this.#algorithm === 'counter' && plainCounter(limit, ttl) && (await this.#throttle.backend()) === 'twin') {
      const h = await this.#throttle.hit(l.key, ttl);
      const reset = h.ttlMs > 0 ? h.ttlMs : ttl;
      if (h.count <= limit) return { totalHits: h.count, timeToExpire: seconds(reset), isBlocked: false, timeToBlockExpire: 0 };
      return this.#denied(l, ttl, blockDuration, h.count, reset, reset);
    }
    const d = await this.#throttle.decide(l);
    if (!d.limited) return { totalHits: d.limit - d.remaining, timeToExpire: seconds(d.resetAfterMs), isBlocked: false, timeToBlockExpire: 0 };
    // retryAfterMs < 0: never admitted (nothing a block could add).
    const wait = d.retryAfterMs >= 0 ? d.retryAfterMs : Infinity;
    return this.#denied(l, ttl, blockDuration, d.limit + 1, d.resetAfterMs, wait);
  }

  /** A denied hit whose limiter admits again in `wait` ms: blocks the key (see the class) and answers. */
  async #denied(l: Limiter, ttl: number, blockDuration: number, totalHits: number, resetMs: number, wait: number): Promise<ThrottlerStorageRecord> {
    let block = Number.isFinite(wait) ? wait : resetMs;
    // A wait beyond one ttl is a block already (a limiter's own wait never exceeds its window).
    if (Number.isFinite(wait) && Number.isFinite(blockDuration) && blockDuration > wait && wait <= ttl) {
      // The first denial of a block writes it; later ones, while it lasts, do not extend it.
      block = (await this.#throttle.blockOnce(l, blockDuration)) ?? wait;
    }
    return { totalHits, timeToExpire: seconds(Math.max(resetMs, block)), isBlocked: true, timeToBlockExpire: Math.max(1, seconds(block)) };
  }
}

export default RedisThrottleStorage;
