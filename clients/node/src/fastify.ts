/**
 * A store for @fastify/rate-limit on redis-throttle:
 * `fastify.register(rateLimit, { max: 100, timeWindow: 60_000, store: redisThrottleStore(redis) })`.
 * By default a fixed window (CL.COUNTER), the plugin's meaning; `algorithm: 'window'` for the exact
 * sliding window, `'gcra'` for GCRA.
 *
 * The plugin's `ban` and `continueExceeding` are applied on the server, on denials only (an
 * admitted request sends one command, as without them):
 * - `ban` (≥ 0): the store counts the key's denials in `<key>:ban` (in the key's hash slot; one
 *   MULTI of `SET … 0 PX <until the limiter is full again> NX` and `INCR`), and answers
 *   `current = max + denials` and `ban: denials > ban`, so the plugin answers 403 from the
 *   (ban + 1)-th denial in a window on, as it documents.
 * - `continueExceeding`: each denied request blocks the key for `timeWindow` from now
 *   (`'counter'`: `PEXPIRE key timeWindow GT`, keeping the count; `'window'`/`'gcra'`:
 *   Throttle.block), so a client that keeps sending while limited stays limited until
 *   `timeWindow` after its last request.
 * With only the Functions twin, the default fixed window counts every request (Throttle.hit),
 * refused ones included, as the plugin's Redis store does: the plugin then derives `ban` from
 * the count itself, and `continueExceeding` is the same `PEXPIRE … GT`.
 */
import { type Algorithm, limiter, plainCounter } from './algorithm.js';
import { sibling } from './slot.js';
import { type Decision, type Limiter, Throttle } from './throttle.js';

export interface FastifyStoreOptions {
  /** Key prefix, as the plugin's `nameSpace`; default `fastify-rate-limit-`. */
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
  continueExceeding?: unknown;
  routeInfo?: { method?: string; url?: string };
}

/** The store interface @fastify/rate-limit calls (`new Store(options)`, `incr`, `child`). */
export interface FastifyRateLimitStore {
  incr(key: string, cb: Callback, max: number, ban?: number): void;
  child(routeOptions: FastifyStoreParams): FastifyRateLimitStore;
}

const parseWindow = (w: unknown): number => (typeof w === 'number' && Number.isFinite(w) && w > 0 ? Math.trunc(w) : 60_000);

/**
 * The class to pass as the plugin's `store` option, sending through `client` (node-redis v4/v5 or
 * ioredis, standalone or cluster).
 */
export function redisThrottleStore(client: object, options: FastifyStoreOptions = {}): new (pluginOptions: FastifyStoreParams) => FastifyRateLimitStore {
  const throttle = new Throttle(client, options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs });
  const algorithm = options.algorithm ?? 'counter';
  limiter(algorithm, 'x', 1, 1);
  const base = options.nameSpace ?? 'fastify-rate-limit-';

  class RedisThrottleFastifyStore implements FastifyRateLimitStore {
    readonly timeWindow: number;
    readonly continueExceeding: boolean;
    readonly prefix: string;
    constructor(pluginOptions: FastifyStoreParams, prefix = base) {
      this.timeWindow = parseWindow(pluginOptions?.timeWindow);
      this.continueExceeding = pluginOptions?.continueExceeding === true;
      this.prefix = prefix;
    }

    /** continueExceeding: the key stays limited for timeWindow from now (ms it waits). */
    async #renew(l: Limiter): Promise<number> {
      if (l.algorithm === 'counter') {
        await throttle.command(l.key, ['PEXPIRE', l.key, String(this.timeWindow), 'GT']);
        return this.timeWindow;
      }
      return throttle.block(l, this.timeWindow);
    }

    /** A denial of the limiter (which took nothing): the plugin denies when current > max. */
    async #denied(l: Limiter, d: Decision, max: number, ban: number): Promise<IncrResult> {
      let ttl = d.retryAfterMs >= 0 ? d.retryAfterMs : d.resetAfterMs;
      let reset = d.resetAfterMs;
      if (this.continueExceeding && d.retryAfterMs >= 0) {
        ttl = await this.#renew(l);
        reset = Math.max(reset, ttl);
      }
      if (!(ban >= 0)) return { current: max + 1, ttl };
      // This denial's number in the limiter's current window, counted on the server.
      const key = sibling(l.key, ':ban');
      const px = String(Math.max(1, reset));
      const cmds = [['SET', key, '0', 'PX', px, 'NX'], ['INCR', key]];
      if (this.continueExceeding) cmds.push(['PEXPIRE', key, px, 'GT']);
      const replies = await throttle.transaction(l.key, cmds);
      const denials = Number(replies[1]);
      return { current: max + denials, ttl, ban: denials > ban };
    }

    incr(key: string, cb: Callback, max: number, ban = -1): void {
      let l: Limiter;
      try {
        l = limiter(algorithm, this.prefix + key, max, this.timeWindow);
      } catch (e) {
        cb(e as Error);
        return;
      }
      const decide = (): Promise<IncrResult> =>
        throttle.decide(l).then((d) => (d.limited ? this.#denied(l, d, max, ban) : { current: d.limit - d.remaining, ttl: d.resetAfterMs }));
      // The fixed window with only the Functions twin: plain commands counting every hit, as the
      // plugin's Redis store does (Throttle.hit); the plugin compares the count with max (and
      // derives `ban` from it).
      const plain = async (): Promise<IncrResult> => {
        const h = await throttle.hit(l.key, this.timeWindow);
        if (h.count > max && this.continueExceeding) return { current: h.count, ttl: await this.#renew(l) };
        return { current: h.count, ttl: h.ttlMs > 0 ? h.ttlMs : this.timeWindow };
      };
      const run =
        algorithm === 'counter' && plainCounter(max, this.timeWindow)
          ? throttle.backend().then((b) => (b === 'twin' ? plain() : decide()))
          : decide();
      run.then(
        (r) => cb(null, r),
        (e: Error) => cb(e),
      );
    }

    child(routeOptions: FastifyStoreParams): FastifyRateLimitStore {
      const r = routeOptions.routeInfo ?? {};
      return new RedisThrottleFastifyStore(routeOptions, `${this.prefix}${r.method ?? ''}${r.url ?? ''}-`);
    }
  }
  return RedisThrottleFastifyStore;
}

export default redisThrottleStore;
