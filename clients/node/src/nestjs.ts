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
 *
 * Every `limit` and `ttl` the guard passes keeps its meaning: a limit below 1 blocks every
 * request and a `ttl` of 0 or below lets each one through alone (a zero-length window), both
 * decided here without Redis; `2.5` admits 2; `Infinity` admits all.
 *
 * @nestjs/throttler 5 calls `increment(key, ttl)` and compares the count with its limit itself:
 * there the storage counts every hit ('window': the hits of the last `ttl`, up to 100,000;
 * 'counter': those of a fixed window), as its own storages do. GCRA needs the limit, which
 * version 5 does not pass: algorithm 'gcra' is refused at construction with it.
 */
import { ThrottlerStorageService } from '@nestjs/throttler';
import { type Algorithm, admits, limiter, longestWindow, plainCounter } from './algorithm.js';
import { Throttle } from './throttle.js';
import type { Limiter } from './types.js';

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

/** The most hits version 5's sliding window counts per `ttl` (CL.WINDOW's default exact limit). */
const COUNT_CAP = 100_000;
/** A count no fixed window reaches (a pure count, the guard comparing). */
const COUNTER_MAX = 1_000_000_000_000_000;

/** Whether the installed @nestjs/throttler calls `increment(key, ttl)` (version 5) rather than with the limit (6 on). */
function countsOnly(): boolean {
  const increment = (
    ThrottlerStorageService as unknown as { prototype?: { increment?: { length: number } } } | undefined
  )?.prototype?.increment;
  return typeof increment?.length === 'number' && increment.length < 3;
}

export class RedisThrottleStorage {
  readonly #throttle: Throttle;
  readonly #prefix: string;
  readonly #algorithm: Algorithm;
  #warned = false;

  /** `client`: a node-redis (4.7 to 6) or ioredis (5, 6) client, standalone or cluster. */
  constructor(client: object, options: RedisThrottleStorageOptions = {}) {
    this.#throttle = new Throttle(client, options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs });
    this.#prefix = options.prefix ?? 'throttler:';
    this.#algorithm = options.algorithm ?? 'window';
    limiter(this.#algorithm, 'x', 1, 1);
    if (this.#algorithm === 'gcra' && countsOnly()) {
      throw new TypeError(
        "redis-throttle: RedisThrottleStorage algorithm 'gcra' needs @nestjs/throttler 6 or later (version 5 does not pass the limit to its storage): use 'window' or 'counter'",
      );
    }
  }

  /**
   * One hit of `key` against `limit` per `ttl` ms, decided on the server. A denied hit is not
   * counted; it blocks the key for `blockDuration` ms (see the class), or until the limiter
   * admits again if that is later (`timeToBlockExpire`, seconds). Called by @nestjs/throttler 5
   * with `key` and `ttl` only: then a count of every hit, which the guard compares.
   */
  async increment(
    key: string,
    ttl: number,
    limit?: number,
    blockDuration?: number,
    throttlerName?: string,
  ): Promise<ThrottlerStorageRecord> {
    if (limit === undefined) return this.#count(key, ttl);
    const n = admits(limit);
    const block =
      typeof blockDuration === 'number' && blockDuration > 0
        ? longestWindow(blockDuration, "@nestjs/throttler's blockDuration")
        : 0;
    if (n <= 0) {
      // Nothing is admitted: every hit is over the limit, and blocked as the throttler blocks it.
      const ms = block > 0 ? block : ttl;
      return {
        totalHits: 1,
        timeToExpire: seconds(Math.max(ttl, ms)),
        isBlocked: true,
        timeToBlockExpire: Math.max(1, seconds(ms)),
      };
    }
    // A window of no length (or no limit) holds nothing: each hit is alone in it.
    if (!(ttl > 0) || n === Infinity)
      return { totalHits: 1, timeToExpire: seconds(ttl), isBlocked: false, timeToBlockExpire: 0 };
    const window =
      this.#algorithm === 'counter' ? Math.ceil(ttl) : longestWindow(Math.ceil(ttl), "@nestjs/throttler's ttl");
    const l = limiter(this.#algorithm, `${this.#prefix}${throttlerName ?? 'default'}:${key}`, n, window);
    if (this.#algorithm === 'counter' && (!plainCounter(n, window) || (await this.#throttle.backend()) === 'twin')) {
      const h = await this.#throttle.hit(l.key, window);
      const reset = h.ttlMs > 0 ? h.ttlMs : window;
      if (h.count <= n)
        return { totalHits: h.count, timeToExpire: seconds(reset), isBlocked: false, timeToBlockExpire: 0 };
      return this.#denied(l, window, block, h.count, reset, reset);
    }
    const d = await this.#throttle.decide(l);
    if (!d.limited)
      return {
        totalHits: d.limit - d.remaining,
        timeToExpire: seconds(d.resetAfterMs),
        isBlocked: false,
        timeToBlockExpire: 0,
      };
    // retryAfterMs < 0: never admitted (nothing a block could add).
    const wait = d.retryAfterMs >= 0 ? d.retryAfterMs : Infinity;
    if (this.#algorithm === 'window' && block > 0 && block !== window && !this.#warned) {
      // The documented difference, said once where it happens.
      this.#warned = true;
      process.emitWarning(
        `redis-throttle: RedisThrottleStorage algorithm 'window' blocks for one ttl (${window} ms), not blockDuration (${block} ms): use algorithm 'counter' or 'gcra' for another blockDuration`,
        'RedisThrottleWarning',
      );
    }
    return this.#denied(l, window, block, d.limit + 1, d.resetAfterMs, wait);
  }

  /** @nestjs/throttler 5: every hit counted (the hits of the last `ttl`, or of a fixed window); the guard compares. */
  async #count(key: string, ttl: number): Promise<ThrottlerStorageRecord> {
    if (!(ttl > 0)) return { totalHits: 1, timeToExpire: 0, isBlocked: false, timeToBlockExpire: 0 };
    const k = `${this.#prefix}${key}`;
    if (this.#algorithm === 'counter') {
      const window = Math.ceil(ttl);
      if (!plainCounter(COUNTER_MAX, window) || (await this.#throttle.backend()) === 'twin') {
        const h = await this.#throttle.hit(k, window);
        return {
          totalHits: h.count,
          timeToExpire: seconds(h.ttlMs > 0 ? h.ttlMs : window),
          isBlocked: false,
          timeToBlockExpire: 0,
        };
      }
      const d = await this.#throttle.decide(limiter('counter', k, COUNTER_MAX, window));
      return {
        totalHits: d.limited ? COUNTER_MAX + 1 : d.limit - d.remaining,
        timeToExpire: seconds(d.resetAfterMs),
        isBlocked: false,
        timeToBlockExpire: 0,
      };
    }
    const d = await this.#throttle.decide(
      limiter('window', k, COUNT_CAP, longestWindow(Math.ceil(ttl), "@nestjs/throttler's ttl")),
    );
    return {
      totalHits: d.limited ? COUNT_CAP + 1 : d.limit - d.remaining,
      timeToExpire: seconds(d.resetAfterMs),
      isBlocked: false,
      timeToBlockExpire: 0,
    };
  }

  /** A denied hit whose limiter admits again in `wait` ms: blocks the key (see the class) and answers. */
  async #denied(
    l: Limiter,
    ttl: number,
    blockDuration: number,
    totalHits: number,
    resetMs: number,
    wait: number,
  ): Promise<ThrottlerStorageRecord> {
    let block = Number.isFinite(wait) ? wait : resetMs;
    // A wait beyond one ttl is a block already (a limiter's own wait never exceeds its window).
    if (Number.isFinite(wait) && blockDuration > wait && wait <= ttl) {
      // The first denial of a block writes it; later ones, while it lasts, do not extend it.
      block = (await this.#throttle.blockOnce(l, blockDuration)) ?? wait;
    }
    return {
      totalHits,
      timeToExpire: seconds(Math.max(resetMs, block)),
      isBlocked: true,
      timeToBlockExpire: Math.max(1, seconds(block)),
    };
  }
}

export default RedisThrottleStorage;
