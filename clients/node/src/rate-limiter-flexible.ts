/**
 * rate-limiter-flexible on redis-throttle: `RateLimiterRedisThrottle` takes RateLimiterRedis's
 * options and methods (consume, penalty, reward, get, set, block, delete, deleteInMemoryBlockedAll,
 * getKey, parseKey; insuranceLimiter, blockDuration, inMemoryBlockOnConsumed…), and
 * `RateLimiterUnionAtomic` decides several limiters by one CL.ALL, all or nothing. By default a
 * fixed window per `duration` (CL.COUNTER), RateLimiterRedis's meaning; `algorithm: 'window'`
 * for the exact sliding window, `'gcra'` for GCRA.
 *
 * The limiter is a RateLimiterAbstract, the class every rate-limiter-flexible version checks for
 * (RateLimiterUnion, insuranceLimiter, the wrappers), taken from the installed version: its
 * options are checked as that version checks them.
 */
import * as flexible from 'rate-limiter-flexible';
import type { IRateLimiterOptions, RateLimiterAbstract } from 'rate-limiter-flexible';
import { type Algorithm, admits, limiter, plainCounter, refund } from './algorithm.js';
import { ThrottleError } from './errors.js';
import { Throttle } from './throttle.js';
import type { Decision, Limiter } from './types.js';

const { RateLimiterRes, RateLimiterMemory } = flexible;
type RateLimiterRes = flexible.RateLimiterRes;

/** RateLimiterAbstract: the installed version's, the parent of its RateLimiterMemory (it is not exported by name). */
const Abstract = ((): typeof RateLimiterAbstract => {
  let c: unknown = Object.getPrototypeOf(RateLimiterMemory);
  while (typeof c === 'function' && c.name !== 'RateLimiterAbstract') c = Object.getPrototypeOf(c);
  return (typeof c === 'function' ? c : Object.getPrototypeOf(RateLimiterMemory)) as typeof RateLimiterAbstract;
})();

/** What rate-limiter-flexible accepts as a limiter (an insurance limiter here). */
function compatible(v: unknown): boolean {
  const Compatible = (flexible as { RateLimiterCompatibleAbstract?: new () => object }).RateLimiterCompatibleAbstract;
  return v instanceof Abstract || (typeof Compatible === 'function' && v instanceof Compatible);
}

interface Insurance {
  blockDuration: number;
  execEvenly: boolean;
}

export interface RateLimiterRedisThrottleOptions {
  /** A node-redis (4.7 to 6) or ioredis (5, 6) client, standalone or cluster. */
  storeClient: object;
  /** Units per `duration` (rate-limiter-flexible's default and checks). */
  points?: number;
  /** Seconds; 0 = never resets (algorithm 'counter'). */
  duration?: number;
  /** Default 'rlflx'; keys are `${keyPrefix}:${key}`. */
  keyPrefix?: string;
  /** Seconds to block a key once it is over its points (0: no block). */
  blockDuration?: number;
  /** Consumed points at which a key is blocked for blockDuration (above points; as RateLimiterRedis). */
  blockOnConsumed?: number;
  /** Consumed points at which a key is blocked in this process's memory, without asking Redis. */
  inMemoryBlockOnConsumed?: number;
  /** Seconds of that in-memory block (0: until the key's window ends). */
  inMemoryBlockDuration?: number;
  /** Answers when Redis fails (any rate-limiter-flexible limiter, e.g. RateLimiterMemory). */
  insuranceLimiter?: object;
  /** Reject at once (or ask insuranceLimiter) when the client is not connected, as RateLimiterRedis. */
  rejectIfRedisNotReady?: boolean;
  /** 'counter' (default, fixed window), 'window' (exact sliding window) or 'gcra'. */
  algorithm?: Algorithm;
  /** Accepted for RateLimiterRedis compatibility; the client kind is detected. */
  useRedisPackage?: boolean;
  useRedis3AndLowerPackage?: boolean;
  /** Delay each admitted consume to spread the points over the duration, as RateLimiterRedis does. */
  execEvenly?: boolean;
  execEvenlyMinDelayMs?: number;
  /** ms to wait for Redis before the call fails (then insuranceLimiter answers); default 1000. */
  timeoutMs?: number;
  [other: string]: unknown;
}

type Options = { customDuration?: number; [other: string]: unknown };
type Insured = Record<string, (...args: unknown[]) => Promise<unknown>>;

const REFUSED: Record<string, string> = {
  customIncrTtlLuaScript: 'the store runs no Lua script',
};

/** A server's refusal of a command (an error reply, `CODE text`), which wrote nothing. */
const refusal = (e: unknown): boolean => e instanceof ThrottleError && /^[A-Z]+ /.test(e.message);

/**
 * The limit of the fixed window's count on the module (#hit), above which a count reads as
 * Infinity (as Throttle.hit reads one beyond 2^53 - 1): 64 below 2^53 - 1, so that every integer
 * of its replies (the limit, the units left) is exact in every client (ioredis 6 reads an
 * integer within 57 of 2^53 inexactly).
 */
const MOST = Number.MAX_SAFE_INTEGER - 64;

/** parseInt as RateLimiterStoreAbstract reads its in-memory and block thresholds. */
const whole = (v: unknown): number => (v ? parseInt(String(v), 10) || 0 : 0);

/**
 * The points of a consume, penalty, reward or set as RateLimiterRedis takes them (from 11):
 * an integer, or a string of digits; anything else is refused with its own error.
 */
function wholePoints(points: unknown): number {
  if (typeof points === 'string') {
    if (!/^[1-9][0-9]*$/.test(points))
      throw new Error('Consuming string different than integer values is not supported by this package');
    return Number(points);
  }
  if (!Number.isInteger(points)) throw new Error('Consuming decimal number of points is not supported by this package');
  return points as number;
}

/**
 * RateLimiterRedis's readiness of a client for `rlKey` (`rejectIfRedisNotReady`): ioredis's
 * status, node-redis 3's isReady(), 4+'s isReady, and a 4+ cluster's client for the key's slot.
 */
function ready(client: Record<string, unknown>, rlKey: string, readonly: boolean): boolean {
  if (client.status) return client.status === 'ready';
  if (typeof client.isReady === 'function') return (client.isReady as () => boolean)() === true;
  if (typeof client.isReady === 'boolean') return client.isReady;
  const slots = client._slots as { getClient?: (key: string, readonly: boolean) => { isReady?: unknown } } | undefined;
  if (slots && typeof slots.getClient === 'function') {
    if (typeof client.isOpen === 'boolean' && client.isOpen !== true) return false;
    try {
      return slots.getClient(rlKey, readonly)?.isReady === true;
    } catch {
      return false;
    }
  }
  return true;
}

/** Keys blocked in this process's memory (RateLimiterStoreAbstract's `_inMemoryBlockedKeys`): rlKey → when the block ends. */
class BlockedKeys {
  readonly #until = new Map<string, number>();

  addMs(rlKey: string, ms: number): void {
    this.#until.set(rlKey, Date.now() + ms);
  }

  /** ms left of the key's block; 0 when none (an ended block is forgotten). */
  msBeforeExpire(rlKey: string): number {
    const until = this.#until.get(rlKey);
    if (until === undefined) return 0;
    const ms = until - Date.now();
    if (ms >= 0) return ms;
    this.#until.delete(rlKey);
    return 0;
  }

  delete(rlKey: string): void {
    this.#until.delete(rlKey);
  }

  clear(): void {
    this.#until.clear();
  }
}

export class RateLimiterRedisThrottle extends Abstract {
  /** Made at the first call (a client that is not ready, or not a client, fails that call, not the constructor). */
  #throttleMade: Throttle | undefined;
  readonly #storeClient: object;
  readonly #timeoutMs: number | undefined;
  readonly #algorithm: Algorithm;
  /** The points a window admits (the host rejects when consumed > points). */
  readonly #admits: number;
  readonly #ready: (rlKey: string, readonly: boolean) => boolean;
  /** Keys blocked in memory, under RateLimiterStoreAbstract's name for them. */
  readonly _inMemoryBlockedKeys = new BlockedKeys();
  readonly blockOnConsumed: number;
  readonly inMemoryBlockOnConsumed: number;
  readonly inMemoryBlockDuration: number;
  #insurance: object | undefined;

  constructor(opts: RateLimiterRedisThrottleOptions) {
    super(opts as unknown as IRateLimiterOptions);
    if (opts.storeClient === undefined) throw new Error('storeClient is not set');
    for (const [name, why] of Object.entries(REFUSED)) {
      if (opts[name] !== undefined && opts[name] !== false)
        throw new TypeError(`redis-throttle: ${name} is not supported (${why})`);
    }
    this.#storeClient = opts.storeClient;
    this.#timeoutMs = opts.timeoutMs;
    this.#algorithm = opts.algorithm ?? 'counter';
    limiter(this.#algorithm, 'x', 1, 1);
    this.#admits = admits(this.points);
    // The thresholds, checked as RateLimiterStoreAbstract checks them.
    this.blockOnConsumed = whole(opts.blockOnConsumed);
    if (this.blockOnConsumed > 0 && this.points > this.blockOnConsumed)
      throw new Error('blockOnConsumed option must be greater or equal "points" option');
    this.inMemoryBlockOnConsumed = whole(opts.inMemoryBlockOnConsumed);
    if (this.inMemoryBlockOnConsumed > 0 && this.points > this.inMemoryBlockOnConsumed)
      throw new Error('inMemoryBlockOnConsumed option must be greater or equal "points" option');
    this.inMemoryBlockDuration = whole(opts.inMemoryBlockDuration);
    if (this.inMemoryBlockDuration > 0 && this.inMemoryBlockOnConsumed === 0)
      throw new Error('inMemoryBlockOnConsumed option must be set up');
    // GCRA and the exact window decide on the server, so a consume reports at most the points
    // plus its own: thresholds above that, a limit below 1 and a window without an end need
    // every consume counted (the fixed window's plain commands).
    const beyond = (t: number): boolean => t > Math.min(this.#admits, Number.MAX_SAFE_INTEGER - 1) + 1;
    const needs = [
      this.#admits <= 0 || this.#admits === Infinity ? `points ${this.points}` : undefined,
      this.duration === 0 ? 'duration 0 (never expires)' : undefined,
      beyond(this.blockOnConsumed) ? `blockOnConsumed above points + 1` : undefined,
      beyond(this.inMemoryBlockOnConsumed) ? `inMemoryBlockOnConsumed above points + 1` : undefined,
    ].filter((x): x is string => x !== undefined);
    if (needs.length > 0 && this.#algorithm !== 'counter')
      throw new TypeError(`redis-throttle: ${needs.join(', ')} needs algorithm 'counter'`);
    if (this.blockDuration > 0 && this.#algorithm === 'window')
      throw new TypeError("redis-throttle: blockDuration needs algorithm 'counter' or 'gcra'");
    this.insuranceLimiter = opts.insuranceLimiter;
    const client = opts.storeClient as Record<string, unknown>;
    this.#ready =
      opts.rejectIfRedisNotReady === true ? (rlKey, readonly) => ready(client, rlKey, readonly) : () => true;
  }

  get #throttle(): Throttle {
    this.#throttleMade ??= new Throttle(
      this.#storeClient,
      this.#timeoutMs === undefined ? {} : { timeoutMs: this.#timeoutMs },
    );
    return this.#throttleMade;
  }

  get insuranceLimiter(): object | undefined {
    return this.#insurance;
  }

  /** As RateLimiterRedis: any rate-limiter-flexible limiter, given this one's blockDuration and execEvenly. */
  set insuranceLimiter(value: object | undefined) {
    if (value !== undefined && !compatible(value))
      throw new Error('insuranceLimiter must be instance of RateLimiterAbstract or RateLimiterCompatibleAbstract');
    this.#insurance = value;
    if (value) {
      (value as Insurance).blockDuration = this.blockDuration;
      (value as Insurance).execEvenly = this.execEvenly;
    }
  }

  /** The redis-throttle core this limiter sends through. */
  get redisThrottle(): Throttle {
    return this.#throttle;
  }

  /** ms of a window of `sec` seconds (customDuration as rate-limiter-flexible reads it); null: never expires. */
  #windowMs(options: Options = {}): number | null {
    const c = options.customDuration;
    const sec = typeof c === 'number' && c >= 0 ? c : this.duration;
    return sec > 0 ? Math.max(1, Math.round(sec * 1000)) : null;
  }

  /** The limiter of `key` (what CL.ALL takes too). */
  limiterOf(key: string | number, quantity?: number, durationSec?: number): Limiter {
    const ms = this.#windowMs(durationSec === undefined ? {} : { customDuration: durationSec });
    if (ms === null)
      throw new ThrottleError(
        `redis-throttle: a window that never expires (duration 0) is counted, not decided by ${this.#algorithm === 'counter' ? 'CL.COUNTER' : 'the server'}`,
      );
    if (this.#admits <= 0 || this.#admits === Infinity)
      throw new ThrottleError(`redis-throttle: points ${this.points} cannot be decided by the server`);
    return limiter(this.#algorithm, this.getKey(key), this.#admits, ms, quantity);
  }

  static resOf(d: Decision, points: number): RateLimiterRes {
    const used = d.limit - d.remaining;
    const denied = d.limited;
    // A denial (counted by a debit, or refused by CL.ALL) reads above `points` in consumedPoints.
    const consumed = denied ? used + points : used;
    const ms = d.resetAfterMs < 0 ? -1 : denied && d.retryAfterMs >= 0 ? d.retryAfterMs : d.resetAfterMs;
    return new RateLimiterRes(denied ? 0 : d.remaining, ms, consumed, !denied && used === points);
  }

  async #insured<T>(name: string, args: unknown[], run: () => Promise<T>): Promise<T> {
    try {
      if (!this.#ready(this.getKey(args[0] as string | number), name === 'get'))
        throw new Error('Redis connection is not ready');
      return await run();
    } catch (e) {
      if (e instanceof RateLimiterRes || !this.#insurance) throw e;
      return (await (this.#insurance as unknown as Insured)[name]!(...args)) as T;
    }
  }

  /**
   * Whether calls count (#hit, Throttle.hit): the fixed window always does, as RateLimiterRedis's
   * script counts (every consume and penalty adds its points, a reward takes them off, below 0
   * too, and the host compares the count with its points), on the module and the twin alike;
   * GCRA and the exact window decide on the server.
   */
  #counting(options: Options): boolean {
    if (this.#algorithm === 'counter') return true;
    if (this.#windowMs(options) === null)
      throw new ThrottleError("redis-throttle: customDuration 0 (never expires) needs algorithm 'counter'");
    return false;
  }

  /**
   * Counts `points` of a consume or a penalty as RateLimiterRedis counts them (every one, past
   * the points too): Throttle.hit's plain commands, or on the module, where CL.COUNTER counts the
   * same, one `CL.COUNTER … DEBIT` against a limit near 2^53 (`MOST`), so that its reply gives
   * the count back: the same bytes and expiry, one command instead of a MULTI of three. Points
   * below 1, a window beyond CL.COUNTER's, and a stored value it refuses (a count below 0 after
   * rewards, a string that is not an integer, another type: it writes nothing) go to the plain
   * commands, whose answer or error stands.
   */
  async #hit(rlKey: string, ms: number | null, points: number): Promise<{ count: number; ttlMs: number }> {
    if (ms !== null && plainCounter(MOST, ms, points) && (await this.#throttle.hasModule())) {
      try {
        const d = await this.#throttle.decide({
          key: rlKey,
          algorithm: 'counter',
          limit: MOST,
          windowMs: ms,
          quantity: points,
          debit: true,
        });
        // Overdrawn: a count beyond MOST, read as Infinity (as Throttle.hit reads one beyond 2^53 - 1).
        return { count: d.limited ? Infinity : d.limit - d.remaining, ttlMs: d.resetAfterMs };
      } catch (e) {
        if (!refusal(e)) throw e;
      }
    }
    return this.#throttle.hit(rlKey, ms, points);
  }

  #res(consumed: number, ttlMs: number, changed: number): RateLimiterRes {
    return new RateLimiterRes(Math.max(this.points - consumed, 0), ttlMs, consumed, consumed === changed);
  }

  /** Takes `points`; rejects with a RateLimiterRes when the key is over its points. */
  override consume(key: string | number, pointsGiven: number = 1, options: Options = {}): Promise<RateLimiterRes> {
    let points: number;
    try {
      points = wholePoints(pointsGiven);
    } catch (e) {
      return Promise.reject(e);
    }
    const rlKey = this.getKey(key);
    const inMemory = this.#inMemoryMs(rlKey);
    if (inMemory > 0) return Promise.reject(new RateLimiterRes(0, inMemory));
    return this.#insured('consume', [key, points, options], async () => {
      let res: RateLimiterRes;
      let over: boolean;
      let crossed: boolean;
      if (this.#counting(options)) {
        // Every consume counted, as RateLimiterRedis's script counts it; the points compared here.
        const ms = this.#windowMs(options);
        const h = await this.#hit(rlKey, ms, points);
        res = this.#res(h.count, h.ttlMs, points);
        over = h.count > this.points;
        crossed = this.#crossed(h.count, points);
      } else {
        // Counted whether admitted or not (DEBIT), as RateLimiterRedis counts every consume.
        const l = this.limiterOf(key, points, options.customDuration);
        const d = await this.#throttle.decide({ ...l, debit: true });
        res = RateLimiterRedisThrottle.resOf(d, points);
        // More points than the limiter holds: as RateLimiterRedis reports it, the window's time.
        if (d.limited && d.retryAfterMs < 0 && d.resetAfterMs === 0)
          (res as { msBeforeNext: number }).msBeforeNext =
            (l as { windowMs?: number; periodMs?: number }).windowMs ?? (l as { periodMs: number }).periodMs;
        over = d.limited;
        // The one that goes over blocks, unless a block is in force (blockOnce).
        crossed = over;
      }
      return this.#afterConsume(key, rlKey, res, over, crossed, points, options);
    });
  }

  /** The consume whose count first reaches the block threshold (RateLimiterStoreAbstract's rule). */
  #crossed(consumed: number, changed: number): boolean {
    if (!(this.blockOnConsumed > 0 && this.blockOnConsumed > this.points))
      return consumed > this.points && consumed <= this.points + changed;
    return consumed >= this.blockOnConsumed && consumed - changed < this.blockOnConsumed;
  }

  /** RateLimiterStoreAbstract's `_afterConsume`: in-memory blocks, then the storage block. */
  async #afterConsume(
    key: string | number,
    rlKey: string,
    res: RateLimiterRes,
    over: boolean,
    crossed: boolean,
    points: number,
    options: Options,
  ): Promise<RateLimiterRes> {
    const r = res as { msBeforeNext: number };
    if (
      this.inMemoryBlockOnConsumed > 0 &&
      !(this.inMemoryBlockDuration > 0) &&
      res.consumedPoints >= this.inMemoryBlockOnConsumed
    ) {
      this._inMemoryBlockedKeys.addMs(rlKey, res.msBeforeNext);
      if (over) throw res;
      return res;
    }
    if (!over) return this.#evenly(res);
    if (this.blockDuration > 0 && crossed) {
      const ms = this.blockDuration * 1000;
      if (this.#counting(options)) {
        // RateLimiterRedis writes the consumed points for the block (its `_block`).
        await this._block(rlKey, res.consumedPoints, ms, options);
        r.msBeforeNext = ms;
      } else if (
        (await this.#throttle.blockOnce(this.limiterOf(key, points, options.customDuration), ms)) !== undefined
      ) {
        r.msBeforeNext = ms;
      }
    }
    if (this.inMemoryBlockOnConsumed > 0 && res.consumedPoints >= this.inMemoryBlockOnConsumed) {
      this._inMemoryBlockedKeys.addMs(rlKey, this.inMemoryBlockDuration * 1000);
      r.msBeforeNext = this.inMemoryBlockDuration * 1000;
    }
    throw res;
  }

  /**
   * execEvenly: an admitted consume (not the first of its window) resolves after the window's
   * time left shared among the points left, as RateLimiterStoreAbstract delays it.
   */
  #evenly(res: RateLimiterRes): Promise<RateLimiterRes> | RateLimiterRes {
    if (!(this.execEvenly && this.points > 0 && res.msBeforeNext > 0 && !res.isFirstInDuration)) return res;
    let delay = Math.ceil(res.msBeforeNext / (res.remainingPoints + 2));
    if (delay < this.execEvenlyMinDelayMs) delay = res.consumedPoints * this.execEvenlyMinDelayMs;
    (res as { msBeforeNext: number }).msBeforeNext = Math.max(res.msBeforeNext - delay, 0);
    return new Promise((resolve) => setTimeout(resolve, delay, res));
  }

  #inMemoryMs(rlKey: string): number {
    return this.inMemoryBlockOnConsumed > 0 ? this._inMemoryBlockedKeys.msBeforeExpire(rlKey) : 0;
  }

  /**
   * Blocks a counted key for `msDuration` ms by writing `initPoints` as its count (RateLimiterRedis's
   * `_block`, under its name: blockDuration's block goes through it).
   */
  _block(rlKey: string, initPoints: number, msDuration: number, _options: Options = {}): Promise<RateLimiterRes> {
    return this.#throttle
      .put(rlKey, String(initPoints), msDuration > 0 ? msDuration : Infinity)
      .then(() => new RateLimiterRes(0, msDuration > 0 ? msDuration : -1, initPoints));
  }

  /** ms left of the key's in-memory block (0: none), as RateLimiterStoreAbstract answers. */
  getInMemoryBlockMsBeforeExpire(rlKey: string): number {
    return this.#inMemoryMs(rlKey);
  }

  /** Forgets every in-memory block, expired or not. */
  deleteInMemoryBlockedAll(): void {
    this._inMemoryBlockedKeys.clear();
  }

  /** Takes `points` whatever the limit (past it too: DEBIT on the server's algorithms). */
  override penalty(key: string | number, pointsGiven: number = 1, options: Options = {}): Promise<RateLimiterRes> {
    return this.#insured('penalty', [key, pointsGiven, options], async () => {
      const points = wholePoints(pointsGiven);
      if (this.#counting(options)) {
        const h = await this.#hit(this.getKey(key), this.#windowMs(options), points);
        return this.#res(h.count, h.ttlMs, points);
      }
      const d = await this.#throttle.decide({ ...this.limiterOf(key, points, options.customDuration), debit: true });
      return RateLimiterRedisThrottle.resOf({ ...d, limited: false }, points);
    });
  }

  /** Gives `points` back (the fixed window's count goes below 0 too, as RateLimiterRedis's; the others stop at full). */
  override reward(key: string | number, pointsGiven: number = 1, options: Options = {}): Promise<RateLimiterRes> {
    return this.#insured('reward', [key, pointsGiven, options], async () => {
      const points = wholePoints(pointsGiven);
      if (this.#counting(options)) {
        const h = await this.#throttle.hit(this.getKey(key), this.#windowMs(options), -points);
        return this.#res(h.count, h.ttlMs, -points);
      }
      const d = await this.#throttle.decide(refund(this.limiterOf(key, undefined, options.customDuration), points));
      return RateLimiterRedisThrottle.resOf(d, 0);
    });
  }

  /** The key's state without taking anything; null when it has none. */
  override get(key: string | number, options: Options = {}): Promise<RateLimiterRes | null> {
    return this.#insured('get', [key, options], async () => {
      if (this.#algorithm === 'counter') {
        // The fixed window's state is its count, whichever way it was written (as RateLimiterRedis reads it).
        const c = await this.#throttle.count(this.getKey(key));
        return c === undefined ? null : this.#res(c.count, c.ttlMs, 0);
      }
      const d = await this.#throttle.decide(this.limiterOf(key, 0, options.customDuration));
      if (d.remaining >= d.limit && d.resetAfterMs === 0) return null;
      return new RateLimiterRes(d.remaining, d.resetAfterMs, d.limit - d.remaining, false);
    });
  }

  /** Deletes the key (and its in-memory block): true if it existed. */
  override delete(key: string | number, options: Options = {}): Promise<boolean> {
    return this.#insured('delete', [key, options], async () => {
      const rlKey = this.getKey(key);
      const existed = (await this.#throttle.del(rlKey)) > 0;
      this._inMemoryBlockedKeys.delete(rlKey);
      return existed;
    });
  }

  /**
   * Denies the key for `secDuration` seconds (algorithm 'counter' or 'gcra'); 0 or less: without
   * an end, as RateLimiterRedis writes it (a counter key then keeps its points until its next
   * consume opens a window on it, as RateLimiterRedis's script does; a GCRA key until deleted).
   */
  override block(key: string | number, secDuration: number, options: Options = {}): Promise<RateLimiterRes> {
    return this.#insured('block', [key, secDuration, options], async () => {
      const ms = secDuration * 1000;
      const points =
        this.blockOnConsumed > 0 && this.blockOnConsumed > this.points
          ? this.blockOnConsumed
          : Math.floor(this.points) + 1;
      if (this.#algorithm === 'window')
        throw new ThrottleError("redis-throttle: block() needs algorithm 'counter' or 'gcra'");
      if (this.#algorithm === 'counter')
        await this.#throttle.put(this.getKey(key), String(points), ms >= 1 ? ms : Infinity);
      else await this.#throttle.block(this.limiterOf(key), ms >= 1 ? ms : Infinity);
      return new RateLimiterRes(0, ms >= 1 ? ms : -1, points);
    });
  }

  /** Sets the points consumed for `secDuration` seconds (default `duration`; 0: no expiry); algorithm 'counter' only (its state is that count). */
  override set(
    key: string | number,
    points: number,
    secDuration: number,
    options: Options = {},
  ): Promise<RateLimiterRes> {
    return this.#insured('set', [key, points, secDuration, options], async () => {
      if (this.#algorithm !== 'counter') throw new ThrottleError("redis-throttle: set() needs algorithm 'counter'");
      wholePoints(points);
      const ms = (secDuration >= 0 ? secDuration : this.duration) * 1000;
      await this.#throttle.put(this.getKey(key), String(points), ms >= 1 ? ms : Infinity);
      return new RateLimiterRes(0, ms >= 1 ? ms : -1, points);
    });
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
    if (!limiters.every((l) => l instanceof RateLimiterRedisThrottle))
      throw new Error('RateLimiterUnionAtomic: every limiter must be a RateLimiterRedisThrottle');
    const prefixes = new Set(limiters.map((l) => l.keyPrefix));
    if (prefixes.size !== limiters.length)
      throw new Error('RateLimiterUnionAtomic: every limiter needs its own keyPrefix');
    for (const l of limiters) l.limiterOf('x');
    this.#limiters = limiters;
    // Every limiter sends through its own client; one CL.ALL goes through the first's.
    this.#throttle = (limiters[0] as RateLimiterRedisThrottle).redisThrottle;
  }

  async consume(key: string | number, points = 1): Promise<Record<string, RateLimiterRes>> {
    const d = await this.#throttle.all(this.#limiters.map((l) => l.limiterOf(key, points)));
    const out: Record<string, RateLimiterRes> = {};
    this.#limiters.forEach((l, i) => {
      const each = d.details[i] as Decision;
      if (!d.limited || each.limited)
        out[l.keyPrefix] = RateLimiterRedisThrottle.resOf(d.limited ? each : { ...each, limited: false }, points);
    });
    if (d.limited) throw out;
    return out;
  }
}
