/**
 * rate-limiter-flexible on redis-throttle: `RateLimiterRedisThrottle` takes RateLimiterRedis's
 * options and methods (consume, penalty, reward, get, set, block, delete; insuranceLimiter), and
 * `RateLimiterUnionAtomic` decides several limiters by one CL.ALL, all or nothing. By default a
 * fixed window per `duration` (CL.COUNTER), RateLimiterRedis's meaning; `algorithm: 'window'`
 * for the exact sliding window, `'gcra'` for GCRA.
 */
import { RateLimiterCompatibleAbstract, RateLimiterRes } from 'rate-limiter-flexible';
import { type Algorithm, limiter, plainCounter, refund } from './algorithm.js';
import { type Decision, type Limiter, Throttle, ThrottleError } from './throttle.js';

export interface RateLimiterRedisThrottleOptions {
  /** A node-redis (v4/v5) or ioredis client, standalone or cluster. */
  storeClient: object;
  /** Units per `duration` (default 4, as rate-limiter-flexible). */
  points?: number;
  /** Seconds (default 1); 0 = never resets (a very long window here). */
  duration?: number;
  /** Default 'rlflx'; keys are `${keyPrefix}:${key}`. */
  keyPrefix?: string;
  /** Seconds to block a key once it is over its points (0: no block). */
  blockDuration?: number;
  /** Answers when Redis fails (any rate-limiter-flexible limiter, e.g. RateLimiterMemory). */
  insuranceLimiter?: RateLimiterCompatibleAbstract;
  /** 'counter' (default, fixed window), 'window' (exact sliding window) or 'gcra'. */
  algorithm?: Algorithm;
  /** Accepted for RateLimiterRedis compatibility; the client kind is detected. */
  useRedisPackage?: boolean;
  execEvenly?: boolean;
  /** ms to wait for Redis before the call fails (then insuranceLimiter answers); default 1000. */
  timeoutMs?: number;
  [other: string]: unknown;
}

/** duration 0 ("never expires") as the longest window the commands take: 1e9 s. */
const FOREVER_MS = 1_000_000_000_000;

/** A limit no count reaches (a pure count, as Throttle.hit keeps), within the twin's exact integers. */
const COUNT_ALL = 1_000_000_000_000_000;

type Insured = Record<string, (...args: unknown[]) => Promise<unknown>>;

export class RateLimiterRedisThrottle extends RateLimiterCompatibleAbstract {
  readonly #throttle: Throttle;
  readonly #algorithm: Algorithm;
  override readonly keyPrefix: string;
  override blockDuration: number;
  override execEvenly = false;
  points: number;
  duration: number;
  insuranceLimiter: RateLimiterCompatibleAbstract | undefined;

  constructor(opts: RateLimiterRedisThrottleOptions) {
    super();
    if (opts.storeClient === undefined) throw new Error('storeClient is not set');
    if (opts.execEvenly) throw new TypeError('redis-throttle: execEvenly is not supported (use algorithm "gcra", which spaces admissions)');
    this.#throttle = new Throttle(opts.storeClient, opts.timeoutMs === undefined ? {} : { timeoutMs: opts.timeoutMs });
    this.#algorithm = opts.algorithm ?? 'counter';
    this.keyPrefix = opts.keyPrefix ?? 'rlflx';
    this.points = opts.points ?? 4;
    this.duration = opts.duration ?? 1;
    if (!Number.isInteger(this.points) || this.points < 1) throw new TypeError('redis-throttle: points must be a whole number of at least 1');
    if (!(this.duration >= 0)) throw new TypeError('duration must be set and must be a finite, non-negative number');
    this.blockDuration = opts.blockDuration ?? 0;
    if (this.blockDuration > 0 && this.#algorithm === 'window') throw new TypeError("redis-throttle: blockDuration needs algorithm 'counter' or 'gcra'");
    this.insuranceLimiter = opts.insuranceLimiter;
    limiter(this.#algorithm, 'x', 1, 1);
  }

  /** The redis-throttle core this limiter sends through. */
  get redisThrottle(): Throttle {
    return this.#throttle;
  }

  getKey(key: string | number): string {
    return this.keyPrefix.length > 0 ? `${this.keyPrefix}:${key}` : String(key);
  }

  /** The limiter of `key` (what CL.ALL takes too). */
  limiterOf(key: string | number, quantity?: number, durationSec?: number): Limiter {
    const sec = durationSec ?? this.duration;
    return limiter(this.#algorithm, this.getKey(key), this.points, sec > 0 ? Math.round(sec * 1000) : FOREVER_MS, quantity);
  }

  static resOf(d: Decision, points: number): RateLimiterRes {
    const used = d.limit - d.remaining;
    const denied = d.limited;
    // A denial took nothing; rate-limiter-flexible's consumedPoints then reads above `points`.
    const consumed = denied ? used + points : used;
    const ms = denied && d.retryAfterMs >= 0 ? d.retryAfterMs : d.resetAfterMs;
    return new RateLimiterRes(denied ? 0 : d.remaining, ms, consumed, !denied && used === points);
  }

  async #insured<T>(name: string, args: unknown[], run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (e) {
      if (e instanceof RateLimiterRes || !this.insuranceLimiter) throw e;
      return (await (this.insuranceLimiter as unknown as Insured)[name]!(...args)) as T;
    }
  }

  /** Takes `points`; rejects with a RateLimiterRes when the key is over its points (nothing is taken then). */
  override consume(key: string | number, points = 1, options: { customDuration?: number } = {}): Promise<RateLimiterRes> {
    return this.#insured('consume', [key, points, options], async () => {
      const windowMs = (this.limiterOf(key, points, options.customDuration) as { windowMs: number }).windowMs;
      if (plainCounter(this.points, windowMs, points) && (await this.#plain())) {
        // Only the Functions twin: plain commands counting every point, as RateLimiterRedis does
        // (Throttle.hit); the limit is compared here.
        const l = this.limiterOf(key, points, options.customDuration) as { key: string; windowMs: number };
        const h = await this.#throttle.hit(l.key, l.windowMs, points);
        const over = h.count > this.points;
        const res = new RateLimiterRes(Math.max(this.points - h.count, 0), h.ttlMs > 0 ? h.ttlMs : l.windowMs, h.count, h.count === points);
        if (!over) return res;
        // As RateLimiterRedis: only the consume that goes over blocks (not every later denial).
        if (this.blockDuration > 0 && h.count - points <= this.points) {
          await this.#block(key, this.blockDuration * 1000);
          (res as { msBeforeNext: number }).msBeforeNext = this.blockDuration * 1000;
        }
        throw res;
      }
      const d = await this.#throttle.decide(this.limiterOf(key, points, options.customDuration));
      const res = RateLimiterRedisThrottle.resOf(d, points);
      if (!d.limited) return res;
      // A denial takes nothing, so the one that goes over is the first without a block in force.
      if (this.blockDuration > 0 && (await this.#throttle.blockOnce(this.limiterOf(key, points, options.customDuration), this.blockDuration * 1000)) !== undefined) {
        (res as { msBeforeNext: number }).msBeforeNext = this.blockDuration * 1000;
      }
      throw res;
    });
  }

  /** The fixed window on a server with only the Functions twin: Throttle.hit's plain commands. */
  async #plain(): Promise<boolean> {
    return this.#algorithm === 'counter' && (await this.#throttle.backend()) === 'twin';
  }

  /** Takes up to `points` whatever the limit (never beyond full). */
  override penalty(key: string | number, points = 1, options: { customDuration?: number } = {}): Promise<RateLimiterRes> {
    return this.#insured('penalty', [key, points, options], async () => {
      let d = await this.#throttle.decide(this.limiterOf(key, points, options.customDuration));
      if (d.limited && d.remaining > 0) d = await this.#throttle.decide(this.limiterOf(key, d.remaining, options.customDuration));
      return RateLimiterRedisThrottle.resOf({ ...d, limited: false }, points);
    });
  }

  /** Gives `points` back (never beyond full). */
  override reward(key: string | number, points = 1, options: { customDuration?: number } = {}): Promise<RateLimiterRes> {
    return this.#insured('reward', [key, points, options], async () => {
      const d = await this.#throttle.decide(refund(this.limiterOf(key, undefined, options.customDuration), points));
      return RateLimiterRedisThrottle.resOf(d, 0);
    });
  }

  /** The key's state without taking anything; null when it is full (no key). */
  override get(key: string | number, options: { customDuration?: number } = {}): Promise<RateLimiterRes | null> {
    return this.#insured('get', [key, options], async () => {
      const l = this.limiterOf(key, 0, options.customDuration);
      // With plain counting (twin) a count may exceed points: read it whole.
      const d = await this.#throttle.decide((await this.#plain()) ? { ...l, limit: COUNT_ALL } as Limiter : l);
      if (d.limit !== this.points) {
        const used = d.limit - d.remaining;
        if (used === 0 && d.resetAfterMs === 0) return null;
        return new RateLimiterRes(Math.max(this.points - used, 0), d.resetAfterMs, used, false);
      }
      if (d.remaining >= d.limit && d.resetAfterMs === 0) return null;
      return new RateLimiterRes(d.remaining, d.resetAfterMs, d.limit - d.remaining, false);
    });
  }

  /** Deletes the key: true if it existed. */
  override delete(key: string | number, options: object = {}): Promise<boolean> {
    return this.#insured('delete', [key, options], async () => {
      const k = this.getKey(key);
      return Number(await this.#throttle.command(k, ['DEL', k])) > 0;
    });
  }

  /** Denies the key for `secDuration` seconds (algorithm 'counter' or 'gcra'). */
  override block(key: string | number, secDuration: number, options: object = {}): Promise<RateLimiterRes> {
    return this.#insured('block', [key, secDuration, options], async () => {
      await this.#block(key, secDuration * 1000);
      return new RateLimiterRes(0, secDuration > 0 ? secDuration * 1000 : -1, this.points + 1);
    });
  }

  /** Sets the points consumed for `secDuration` seconds (algorithm 'counter' only: its state is that count). */
  override set(key: string | number, points: number, secDuration: number, options: object = {}): Promise<RateLimiterRes> {
    return this.#insured('set', [key, points, secDuration, options], async () => {
      if (this.#algorithm !== 'counter') throw new ThrottleError("redis-throttle: set() needs algorithm 'counter'");
      const k = this.getKey(key);
      const ms = (secDuration > 0 ? secDuration : this.duration) * 1000;
      await this.#throttle.command(k, ms > 0 ? ['SET', k, String(points), 'PX', String(Math.round(ms))] : ['SET', k, String(points)]);
      return new RateLimiterRes(Math.max(this.points - points, 0), ms > 0 ? ms : -1, points);
    });
  }

  /** Denies `key` for `ms` (Throttle.block: the limiter's own state, on the server's clock). */
  async #block(key: string | number, ms: number): Promise<void> {
    if (this.#algorithm === 'window') throw new ThrottleError("redis-throttle: block() needs algorithm 'counter' or 'gcra'");
    await this.#throttle.block(this.limiterOf(key), Math.max(1, ms));
  }
}

/**
 * Several RateLimiterRedisThrottle limiters decided by one CL.ALL: every one takes its points, or
 * none does. Resolves (or rejects) like RateLimiterUnion: an object keyed by each limiter's
 * keyPrefix (on rejection, only the limiters that denied). In a cluster the keys must share a
 * hash slot: give keys a hash tag (`{user42}`).
 */
export class RateLimiterUnionAtomic {
  readonly #limiters: RateLimiterRedisThrottle[];
  readonly #throttle: Throttle;

  constructor(...limiters: RateLimiterRedisThrottle[]) {
    if (limiters.length < 1) throw new Error('RateLimiterUnionAtomic: at least one limiter is required');
    if (!limiters.every((l) => l instanceof RateLimiterRedisThrottle)) throw new Error('RateLimiterUnionAtomic: every limiter must be a RateLimiterRedisThrottle');
    const prefixes = new Set(limiters.map((l) => l.keyPrefix));
    if (prefixes.size !== limiters.length) throw new Error('RateLimiterUnionAtomic: every limiter needs its own keyPrefix');
    this.#limiters = limiters;
    // Every limiter sends through its own client; one CL.ALL goes through the first's.
    this.#throttle = (limiters[0] as RateLimiterRedisThrottle).redisThrottle;
  }

  async consume(key: string | number, points = 1): Promise<Record<string, RateLimiterRes>> {
    const d = await this.#throttle.all(this.#limiters.map((l) => l.limiterOf(key, points)));
    const out: Record<string, RateLimiterRes> = {};
    this.#limiters.forEach((l, i) => {
      const each = d.details[i] as Decision;
      if (!d.limited || each.limited) out[l.keyPrefix] = RateLimiterRedisThrottle.resOf(d.limited ? each : { ...each, limited: false }, points);
    });
    if (d.limited) throw out;
    return out;
  }
}

