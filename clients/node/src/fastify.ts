/**
 * A store for @fastify/rate-limit on redis-throttle:
 * `fastify.register(rateLimit, { max: 100, timeWindow: 60_000, store: redisThrottleStore(redis) })`.
 * By default a fixed window (CL.COUNTER), the plugin's meaning; `algorithm: 'window'` for the exact
 * sliding window, `'gcra'` for GCRA.
 */
import { type Algorithm, limiter, plainCounter } from './algorithm.js';
import { type Limiter, Throttle } from './throttle.js';

export interface FastifyStoreOptions {
  /** Key prefix, as the plugin's `nameSpace`; default `fastify-rate-limit-`. */
  nameSpace?: string;
  /** 'counter' (default), 'window' or 'gcra'. */
  algorithm?: Algorithm;
  /** ms to wait for Redis before the call fails (the plugin's skipOnError then applies); default 1000. */
  timeoutMs?: number;
}

type Callback = (err: Error | null, result?: { current: number; ttl: number }) => void;

/** The store interface @fastify/rate-limit calls (`new Store(options)`, `incr`, `child`). */
export interface FastifyRateLimitStore {
  incr(key: string, cb: Callback, max: number, ban?: number): void;
  child(routeOptions: { timeWindow?: number | string; routeInfo?: { method?: string; url?: string } }): FastifyRateLimitStore;
}

const parseWindow = (w: unknown): number => (typeof w === 'number' && Number.isFinite(w) && w > 0 ? Math.trunc(w) : 60_000);

/**
 * The class to pass as the plugin's `store` option, sending through `client` (node-redis v4/v5 or
 * ioredis, standalone or cluster).
 */
export function redisThrottleStore(client: object, options: FastifyStoreOptions = {}): new (pluginOptions: { timeWindow?: unknown }) => FastifyRateLimitStore {
  const throttle = new Throttle(client, options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs });
  const algorithm = options.algorithm ?? 'counter';
  limiter(algorithm, 'x', 1, 1);
  const base = options.nameSpace ?? 'fastify-rate-limit-';

  class RedisThrottleFastifyStore implements FastifyRateLimitStore {
    readonly timeWindow: number;
    readonly prefix: string;
    constructor(pluginOptions: { timeWindow?: unknown }, prefix = base) {
      this.timeWindow = parseWindow(pluginOptions?.timeWindow);
      this.prefix = prefix;
    }

    incr(key: string, cb: Callback, max: number): void {
      let l: Limiter;
      try {
        l = limiter(algorithm, this.prefix + key, max, this.timeWindow);
      } catch (e) {
        cb(e as Error);
        return;
      }
      const decide = (): Promise<{ current: number; ttl: number }> =>
        throttle.decide(l).then((d) =>
          // A denial took nothing: the plugin denies when current > max.
          d.limited ? { current: max + 1, ttl: d.retryAfterMs >= 0 ? d.retryAfterMs : d.resetAfterMs } : { current: d.limit - d.remaining, ttl: d.resetAfterMs },
        );
      // The fixed window with only the Functions twin: plain commands counting every hit, as the
      // plugin's Redis store does (Throttle.hit); the plugin compares the count with max.
      const run =
        algorithm === 'counter' && plainCounter(max, this.timeWindow)
          ? throttle.backend().then((b) =>
              b === 'twin' ? throttle.hit(l.key, this.timeWindow).then((h) => ({ current: h.count, ttl: h.ttlMs > 0 ? h.ttlMs : this.timeWindow })) : decide(),
            )
          : decide();
      run.then(
        (r) => cb(null, r),
        (e: Error) => cb(e),
      );
    }

    child(routeOptions: { timeWindow?: unknown; routeInfo?: { method?: string; url?: string } }): FastifyRateLimitStore {
      const r = routeOptions.routeInfo ?? {};
      return new RedisThrottleFastifyStore(routeOptions, `${this.prefix}${r.method ?? ''}${r.url ?? ''}-`);
    }
  }
  return RedisThrottleFastifyStore;
}

export default redisThrottleStore;
