/**
 * An express-rate-limit store on redis-throttle, with rate-limit-redis's options (`sendCommand`,
 * `sendCommandCluster`, `prefix`): switching is replacing the import. By default a fixed window
 * (CL.COUNTER), express-rate-limit's meaning; `algorithm: 'window'` for the exact sliding window,
 * `'gcra'` for GCRA.
 */
import { type Algorithm, limiter, plainCounter, refund } from './algorithm.js';
import { type Decision, type Limiter, Throttle } from './throttle.js';

type Reply = unknown;
export type SendCommandFn = (...args: string[]) => Promise<Reply>;
export type SendCommandClusterFn = (details: { key?: string; isReadOnly: boolean; command: string[] }) => Promise<Reply>;

export interface RedisThrottleStoreOptions {
  /** As rate-limit-redis: `(...args) => client.sendCommand(args)` (node-redis) or `(cmd, ...args) => client.call(cmd, ...args)` (ioredis). */
  sendCommand?: SendCommandFn;
  /** As rate-limit-redis, for a cluster: routed by `key`. */
  sendCommandCluster?: SendCommandClusterFn;
  /** Prepended to every key; default `rl:`, as rate-limit-redis. */
  prefix?: string;
  /** 'counter' (default, a fixed window), 'window' (exact sliding window) or 'gcra'. */
  algorithm?: Algorithm;
  /** The limit when express-rate-limit's `limit` is a function (the store needs it on the server). */
  limit?: number;
  /** ms to wait for Redis before the call fails (express-rate-limit's passOnStoreError then applies); default 1000. */
  timeoutMs?: number;
}

interface ClientRateLimitInfo {
  totalHits: number;
  resetTime: Date | undefined;
}

/** A limit no count reaches, well inside the exact integers of JS numbers and of the twin (1e15): a pure counter, express-rate-limit comparing. */
const COUNTER_MAX = 1_000_000_000_000_000;

export class RedisThrottleStore {
  readonly prefix: string;
  readonly localKeys = false;
  readonly #throttle: Throttle;
  readonly #algorithm: Algorithm;
  #windowMs = 60_000;
  #limit: number | undefined;
  #serverLimit = true;
  /** Denied calls took nothing, but express-rate-limit refunds failed (429) responses with skipFailedRequests. */
  #owed = new Map<string, { count: number; until: number }>();
  #trackOwed = false;

  constructor(options: RedisThrottleStoreOptions) {
    if (typeof options !== 'object' || options === null) throw new TypeError('redis-throttle: RedisThrottleStore needs an options object');
    const { sendCommand, sendCommandCluster } = options;
    if ((sendCommand === undefined) === (sendCommandCluster === undefined)) {
      throw new TypeError('redis-throttle: give RedisThrottleStore either sendCommand or sendCommandCluster (not both)');
    }
    const client = sendCommand
      ? { sendCommand: (args: string[]) => sendCommand(...args) }
      : {
          masters: [],
          sendCommand: (key: string | undefined, isReadOnly: boolean, args: string[]) =>
            (sendCommandCluster as SendCommandClusterFn)({ ...(key === undefined ? {} : { key }), isReadOnly, command: args }),
        };
    this.#throttle = new Throttle(client, options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs });
    this.prefix = options.prefix ?? 'rl:';
    this.#algorithm = options.algorithm ?? 'counter';
    this.#limit = options.limit;
    limiter(this.#algorithm, 'x', 1, 1); // rejects an unknown algorithm now
  }

  /** express-rate-limit passes its options: `windowMs` and `limit`. */
  init(options: { windowMs: number; limit?: unknown; max?: unknown; skipFailedRequests?: boolean }): void {
    this.#windowMs = options.windowMs;
    const l = options.limit ?? options.max;
    if (typeof l === 'number') this.#limit ??= l;
    if (this.#limit === undefined) {
      if (this.#algorithm !== 'counter') {
        throw new TypeError("redis-throttle: express-rate-limit's limit is a function: give RedisThrottleStore a number `limit` for algorithm 'window' or 'gcra'");
      }
      // A pure counter: express-rate-limit compares the count with its per-request limit.
      this.#serverLimit = false;
    }
    this.#trackOwed = options.skipFailedRequests === true;
    void this.#throttle.backend().catch(() => undefined);
  }

  #limiter(key: string, quantity?: number): Limiter {
    const limit = this.#serverLimit ? (this.#limit as number) : COUNTER_MAX;
    return limiter(this.#serverLimit ? this.#algorithm : 'counter', this.prefix + key, limit, this.#windowMs, quantity);
  }

  #info(d: Decision, denied: boolean): ClientRateLimitInfo {
    const ms = denied && d.retryAfterMs >= 0 ? d.retryAfterMs : d.resetAfterMs;
    // A denial took nothing: express-rate-limit denies when totalHits > limit.
    const totalHits = denied ? d.limit + 1 : d.limit - d.remaining;
    return { totalHits, resetTime: new Date(Date.now() + (ms > 0 ? ms : this.#windowMs)) };
  }

  /**
   * The fixed window on a server with only the Functions twin: plain commands (Throttle.hit),
   * counting every hit as rate-limit-redis does; express-rate-limit compares the count with its limit.
   */
  async #plain(): Promise<boolean> {
    if (this.#serverLimit && this.#algorithm !== 'counter') return false;
    if (!plainCounter(this.#serverLimit ? (this.#limit as number) : COUNTER_MAX, this.#windowMs)) return false;
    return (await this.#throttle.backend()) === 'twin';
  }

  async increment(key: string): Promise<ClientRateLimitInfo> {
    if (await this.#plain()) {
      const h = await this.#throttle.hit(this.prefix + key, this.#windowMs);
      return { totalHits: h.count, resetTime: new Date(Date.now() + (h.ttlMs > 0 ? h.ttlMs : this.#windowMs)) };
    }
    const d = await this.#throttle.decide(this.#limiter(key));
    if (d.limited && this.#trackOwed) {
      const now = Date.now();
      const o = this.#owed.get(key);
      const until = now + Math.max(d.resetAfterMs, d.retryAfterMs, 0);
      this.#owed.set(key, o && o.until > now ? { count: o.count + 1, until: Math.max(until, o.until) } : { count: 1, until });
    }
    return this.#info(d, d.limited);
  }

  async get(key: string): Promise<ClientRateLimitInfo | undefined> {
    const plain = await this.#plain();
    const l = plain ? limiter('counter', this.prefix + key, COUNTER_MAX, this.#windowMs, 0) : this.#limiter(key, 0);
    const d = await this.#throttle.decide(l);
    return { totalHits: d.limit - d.remaining, resetTime: new Date(Date.now() + d.resetAfterMs) };
  }

  /** A refund of one unit (skipFailedRequests / skipSuccessfulRequests); a denied request's is absorbed (it took nothing). */
  async decrement(key: string): Promise<void> {
    const o = this.#owed.get(key);
    if (o) {
      if (o.until > Date.now() && o.count > 0) {
        if (--o.count === 0) this.#owed.delete(key);
        return;
      }
      this.#owed.delete(key);
    }
    const plain = await this.#plain();
    await this.#throttle.decide(refund(plain ? limiter('counter', this.prefix + key, COUNTER_MAX, this.#windowMs) : this.#limiter(key), 1));
  }

  async resetKey(key: string): Promise<void> {
    this.#owed.delete(key);
    await this.#throttle.command(this.prefix + key, ['DEL', this.prefix + key]);
  }
}

export default RedisThrottleStore;
