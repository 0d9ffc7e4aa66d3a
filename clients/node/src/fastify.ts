/**
 * A store for @fastify/rate-limit on redis-throttle:
 * `fastify.register(rateLimit, { max: 100, timeWindow: 60_000, store: redisThrottleStore(redis) })`.
 * By default a fixed window (CL.COUNTER), the plugin's meaning; `algorithm: 'window'` for the exact
 * sliding window, `'gcra'` for GCRA.
 *
 * The plugin calls `incr(key, cb, max, ban)` up to version 9 and `incr(key, cb, timeWindow, max)`
 * (and `read`, the same without counting) from version 10, when `max` and `timeWindow` may be
 * functions of the request: the store tells the two apart by the plugin's options it was built
 * with, and uses the window and limit of each call.
 *
 * A denial takes nothing from the limiter; the store counts a key's denials on the server, in
 * `<key>:ban` (in the key's hash slot; one MULTI of `SET … 0 PX <until the limiter is full
 * again> NX` and `INCR`), and answers `current = max + denials`, so the plugin's `ban` (403 from
 * the (ban + 1)-th denial in a window on), `exponentialBackoff` and `read` mean what they mean
 * with the plugin's own stores:
 * - `continueExceeding`: each denied request blocks the key for `timeWindow` from now
 *   (`'counter'`: `PEXPIRE key timeWindow GT`, keeping the count; `'window'`/`'gcra'`:
 *   Throttle.block), so a client that keeps sending while limited stays limited until
 *   `timeWindow` after its last request.
 * - `exponentialBackoff`: the n-th denial blocks the key for `timeWindow × 2^(n-1)` from now.
 * A `max` below 1 denies every request, decided here without Redis (its denials still counted
 * for `ban`), and a `timeWindow` of 0 admits each request alone.
 * With only the Functions twin, the default fixed window counts every request (Throttle.hit),
 * refused ones included, as the plugin's Redis store does: the plugin then derives `ban` from
 * the count itself, and `continueExceeding` and `exponentialBackoff` are the same `PEXPIRE`s.
 */
import { type Algorithm, admits, limiter, longestWindow, plainCounter } from './algorithm.js';
import { Throttle } from './throttle.js';
import type { Decision, Limiter } from './types.js';

export interface FastifyStoreOptions {
  /**
   * Key prefix, as the plugin's `nameSpace` (which the plugin does not hand a custom store: see
   * withRedisThrottle); default `fastify-rate-limit-`.
   */
  nameSpace?: string;
  /** 'counter' (default), 'window' or 'gcra'. */
  algorithm?: Algorithm;
  /** ms to wait for Redis before the call fails (the plugin's skipOnError then applies); default 1000. */
  timeoutMs?: number;
}

interface IncrResult {
  current: number;
  ttl: number;
  ban?: boolean;
}
type Callback = (err: Error | null, result?: IncrResult) => void;

/** The plugin's options a store reads (`new Store(globalParams)`, `child(routeParams)`). */
export interface FastifyStoreParams {
  timeWindow?: unknown;
  max?: unknown;
  ban?: unknown;
  continueExceeding?: unknown;
  exponentialBackoff?: unknown;
  routeInfo?: { method?: string; url?: string };
  [option: string]: unknown;
}

/**
 * The store interface @fastify/rate-limit calls (`new Store(options)`, `incr`, `read`, `child`),
 * typed to fit every version's declarations (`incr(key, cb)` up to 9, with the window and limit
 * from 10); the options are the plugin's, read as FastifyStoreParams.
 */
export interface FastifyRateLimitStore {
  incr(key: string, cb: Callback, timeWindow?: number, max?: number): void;
  read(key: string, cb: Callback, timeWindow?: number, max?: number): void;
  child(routeOptions: object): FastifyRateLimitStore;
}

const DEFAULT_WINDOW = 60_000;
/** The longest exponential backoff (ms), exact in a JS number and in PTTL's reply. */
const MAX_BACKOFF = 1_000_000_000_000_000;

const num = (v: unknown): number | undefined => (typeof v === 'number' && !Number.isNaN(v) ? v : undefined);

/**
 * The class to pass as the plugin's `store` option, sending through `client` (node-redis (4.7 to 6) or
 * ioredis, standalone or cluster).
 */
export function redisThrottleStore(
  client: object,
  options: FastifyStoreOptions = {},
): new (pluginOptions: object) => FastifyRateLimitStore {
  const throttle = new Throttle(client, options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs });
  const algorithm = options.algorithm ?? 'counter';
  limiter(algorithm, 'x', 1, 1);
  const base = options.nameSpace ?? 'fastify-rate-limit-';
  /** Which way the plugin passes its arguments, once a call has shown it (shared by every route's store). */
  let protocol: 'v9' | 'v10' | undefined;

  class RedisThrottleFastifyStore implements FastifyRateLimitStore {
    readonly params: FastifyStoreParams;
    readonly continueExceeding: boolean;
    readonly exponentialBackoff: boolean;
    readonly prefix: string;
    constructor(pluginOptions: object, prefix = base) {
      this.params = (pluginOptions ?? {}) as FastifyStoreParams;
      this.continueExceeding = this.params.continueExceeding === true;
      this.exponentialBackoff = this.params.exponentialBackoff === true;
      this.prefix = prefix;
      if (this.exponentialBackoff && algorithm === 'window') {
        throw new TypeError(
          "redis-throttle: @fastify/rate-limit's exponentialBackoff needs algorithm 'counter' or 'gcra' (a window's block lasts one window)",
        );
      }
      // Up to version 9 the plugin leaves its callbacks null when not given; from 10 they are functions.
      if (
        protocol === undefined &&
        (this.params.onBanReach === null || this.params.onExceeding === null || this.params.onExceeded === null)
      )
        protocol = 'v9';
    }

    /** The window (ms) and limit of a call, read as the plugin that made it passes them. */
    #args(a: unknown, b: unknown): { timeWindow: number; max: number; ban: number } {
      const p = this.params;
      const tw = num(p.timeWindow);
      const mx = num(p.max);
      const ban = num(p.ban) ?? -1;
      const x = num(a);
      const y = num(b);
      const v9 = { timeWindow: tw ?? DEFAULT_WINDOW, max: x ?? mx ?? 1000, ban: y ?? ban };
      const v10 = { timeWindow: x ?? tw ?? DEFAULT_WINDOW, max: y ?? mx ?? 1000, ban };
      if (protocol === 'v9') return v9;
      if (protocol === 'v10') return v10;
      // Version 9: (max, ban), its window a number; from 10: (timeWindow, max).
      const is10 = (typeof p.timeWindow !== 'number' || x === tw) && (typeof p.max !== 'number' || y === mx);
      const is9 = y === ban && (typeof p.max !== 'number' || x === mx);
      if (is10 && !is9) protocol = 'v10';
      else if (is9 && !is10) protocol = 'v9';
      else if (is9 && is10 && v9.max !== v10.max) return { ...v10, max: Math.min(v9.max, v10.max) }; // undecided: the lower limit
      return protocol === 'v9' ? v9 : v10;
    }

    /** continueExceeding / exponentialBackoff: the key stays limited for `ms` from now. */
    async #extend(l: Limiter, ms: number): Promise<number> {
      if (l.algorithm === 'counter') {
        await throttle.renew(l.key, ms);
        return ms;
      }
      return throttle.block(l, ms);
    }

    /** A denial of the limiter (which took nothing): the plugin denies when current > max. */
    async #denied(l: Limiter, d: Decision, max: number, timeWindow: number, ban: number): Promise<IncrResult> {
      let ttl = d.retryAfterMs >= 0 ? d.retryAfterMs : d.resetAfterMs > 0 ? d.resetAfterMs : timeWindow;
      const reset = Math.max(d.resetAfterMs, ttl);
      // This denial's number in the limiter's current window, counted on the server.
      const denials = await throttle.tally(l.key, ':ban', reset, {
        extend: this.continueExceeding || this.exponentialBackoff,
      });
      if (this.continueExceeding && d.retryAfterMs >= 0) ttl = await this.#extend(l, timeWindow);
      else if (this.exponentialBackoff && d.retryAfterMs >= 0) {
        const ms = Math.min(timeWindow * 2 ** (denials - 1), MAX_BACKOFF);
        // The denial count outlives the backoff it sets (INCRBY 0 only renews it).
        [ttl] = await Promise.all([this.#extend(l, ms), throttle.tally(l.key, ':ban', ms, { extend: true, by: 0 })]);
      }
      return { current: max + denials, ttl, ban: ban >= 0 && denials > ban };
    }

    /** A limit below 1: denied without the limiter; its denials still counted for `ban` (a failed count leaves a plain denial). */
    async #refused(key: string, timeWindow: number, ban: number): Promise<IncrResult> {
      const ttl = timeWindow > 0 ? timeWindow : DEFAULT_WINDOW;
      const denials = await throttle.tally(this.prefix + key, ':ban', ttl).catch(() => 1);
      return { current: denials, ttl, ban: ban >= 0 && denials > ban };
    }

    async #incr(key: string, a: unknown, b: unknown): Promise<IncrResult> {
      const { timeWindow: tw, max: m, ban } = this.#args(a, b);
      const max = admits(m);
      if (max <= 0) return this.#refused(key, tw, ban);
      if (!(tw > 0)) return { current: 1, ttl: 0 };
      const limit = max === Infinity ? Number.MAX_SAFE_INTEGER : max;
      const timeWindow =
        algorithm === 'counter' ? Math.ceil(tw) : longestWindow(Math.ceil(tw), "@fastify/rate-limit's timeWindow");
      const l = limiter(algorithm, this.prefix + key, limit, timeWindow);
      // The fixed window with only the Functions twin (or beyond CL.COUNTER's range): plain
      // commands counting every hit, as the plugin's Redis store does (Throttle.hit); the plugin
      // compares the count with max (and derives `ban` from it).
      if (algorithm === 'counter' && (!plainCounter(limit, timeWindow) || (await throttle.backend()) === 'twin')) {
        const h = await throttle.hit(l.key, timeWindow);
        if (h.count > max && this.continueExceeding)
          return { current: h.count, ttl: await this.#extend(l, timeWindow) };
        if (h.count > max && this.exponentialBackoff)
          return {
            current: h.count,
            ttl: await this.#extend(l, Math.min(timeWindow * 2 ** (h.count - max - 1), MAX_BACKOFF)),
          };
        return { current: h.count, ttl: h.ttlMs > 0 ? h.ttlMs : timeWindow };
      }
      const d = await throttle.decide(l);
      return d.limited
        ? this.#denied(l, d, max, timeWindow, ban)
        : { current: d.limit - d.remaining, ttl: d.resetAfterMs };
    }

    /** The key's state without counting (the plugin's `{ increment: false }`). */
    async #read(key: string, a: unknown, b: unknown): Promise<IncrResult> {
      const { timeWindow: tw, max: m } = this.#args(a, b);
      const max = admits(m);
      if (max <= 0 || !(tw > 0)) {
        const denials = max <= 0 ? await throttle.tallied(this.prefix + key, ':ban') : 0;
        return { current: denials, ttl: 0 };
      }
      const limit = max === Infinity ? Number.MAX_SAFE_INTEGER : max;
      const timeWindow =
        algorithm === 'counter' ? Math.ceil(tw) : longestWindow(Math.ceil(tw), "@fastify/rate-limit's timeWindow");
      const l = limiter(algorithm, this.prefix + key, limit, timeWindow);
      if (algorithm === 'counter' && (!plainCounter(limit, timeWindow) || (await throttle.backend()) === 'twin')) {
        const c = await throttle.count(l.key);
        return c === undefined ? { current: 0, ttl: 0 } : { current: c.count, ttl: Math.max(c.ttlMs, 0) };
      }
      const [d, denials] = await Promise.all([throttle.decide({ ...l, quantity: 0 }), throttle.tallied(l.key, ':ban')]);
      const used = d.limit - d.remaining;
      return { current: denials > 0 && used >= d.limit ? max + denials : used, ttl: d.resetAfterMs };
    }

    incr(key: string, cb: Callback, timeWindow?: number, max?: number): void {
      this.#incr(key, timeWindow, max).then(
        (r) => cb(null, r),
        (e: Error) => cb(e),
      );
    }

    read(key: string, cb: Callback, timeWindow?: number, max?: number): void {
      this.#read(key, timeWindow, max).then(
        (r) => cb(null, r),
        (e: Error) => cb(e),
      );
    }

    child(routeOptions: object): FastifyRateLimitStore {
      const r = (routeOptions as FastifyStoreParams).routeInfo ?? {};
      return new RedisThrottleFastifyStore(routeOptions, `${this.prefix}${r.method ?? ''}${r.url ?? ''}-`);
    }
  }
  return RedisThrottleFastifyStore;
}

/**
 * The plugin's options with a redis-throttle store in them:
 * `fastify.register(rateLimit, withRedisThrottle(redis, { max: 100, timeWindow: 60_000, nameSpace: 'api-' }))`.
 * The plugin hands a custom store none of its `nameSpace` (only its own Redis store reads it), so
 * this is how the plugin's own `nameSpace` keys the limit: the store is built with it (keys
 * `<nameSpace><key>`, per-route `<nameSpace><METHOD><url>-<key>`, as the plugin's Redis store names
 * them), and two registrations with different `nameSpace`s count apart (with the same one, or
 * none, they count together, as with the plugin's Redis store). `store` (the store's own
 * `algorithm`, `timeoutMs`). Refused: plugin options that would replace the store (`store`, `redis`).
 */
export function withRedisThrottle<O extends { nameSpace?: string; store?: unknown; redis?: unknown }>(
  client: object,
  pluginOptions: O,
  store: Omit<FastifyStoreOptions, 'nameSpace'> = {},
): O & { store: new (pluginOptions: object) => FastifyRateLimitStore } {
  if (typeof pluginOptions !== 'object' || pluginOptions === null)
    throw new TypeError("redis-throttle: withRedisThrottle needs the plugin's options object");
  for (const taken of ['store', 'redis'] as const) {
    if (pluginOptions[taken] !== undefined)
      throw new TypeError(`redis-throttle: withRedisThrottle supplies the plugin's store: leave out \`${taken}\``);
  }
  if ('nameSpace' in store)
    throw new TypeError("redis-throttle: withRedisThrottle takes the plugin's own `nameSpace`, not the store's");
  const nameSpace = pluginOptions.nameSpace;
  if (nameSpace !== undefined && typeof nameSpace !== 'string')
    throw new TypeError(`redis-throttle: the plugin's nameSpace must be a string, got ${String(nameSpace)}`);
  return {
    ...pluginOptions,
    store: redisThrottleStore(client, { ...store, ...(nameSpace === undefined ? {} : { nameSpace }) }),
  };
}

export default redisThrottleStore;
