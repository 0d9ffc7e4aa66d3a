/**
 * An express-rate-limit store on redis-throttle, with rate-limit-redis's options (`sendCommand`,
 * `sendCommandCluster`, `prefix`): switching is replacing the import. By default a fixed window
 * (CL.COUNTER), express-rate-limit's meaning; `algorithm: 'window'` for the exact sliding window,
 * `'gcra'` for GCRA.
 *
 * Every `limit` and `windowMs` express-rate-limit accepts keeps its meaning there (it denies a
 * request when the count of hits is above `limit`): a limit below 1 (`0`, `-1`, `0.5`) denies
 * every request and `windowMs` 0 or below admits each one alone, both decided here without
 * Redis; `2.5` admits 2; `Infinity` admits all (counted); a fixed window longer than the commands
 * take (10^12 ms) is counted with plain commands, which take any length, as rate-limit-redis's
 * are.
 */
import { type Algorithm, admits, limiter, longestWindow, plainCounter, refund } from './algorithm.js';
import { Throttle } from './throttle.js';
import type { Decision, Limiter } from './types.js';

type Reply = unknown;
export type SendCommandFn = (...args: string[]) => Promise<Reply>;
export type SendCommandClusterFn = (details: {
  key?: string;
  isReadOnly: boolean;
  command: string[];
}) => Promise<Reply>;

export interface RedisThrottleStoreOptions {
  /** As rate-limit-redis: `(...args) => client.sendCommand(args)` (node-redis) or `(cmd, ...args) => client.call(cmd, ...args)` (ioredis). */
  sendCommand?: SendCommandFn;
  /** As rate-limit-redis, for a cluster: routed by `key`. */
  sendCommandCluster?: SendCommandClusterFn;
  /** Prepended to every key; default `rl:`, as rate-limit-redis. */
  prefix?: string;
  /** 'counter' (default, a fixed window), 'window' (exact sliding window) or 'gcra'. */
  algorithm?: Algorithm;
  /**
   * The limit the server applies when express-rate-limit's `limit` is a function (needed for
   * algorithm 'window' or 'gcra'); a number `limit` given to express-rate-limit is used instead.
   */
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

/** A key whose name comes back from `EVAL "return KEYS[1]"` with the client's key prefix, if any. */
const PROBE = 'redis-throttle:key-prefix-probe';

/**
 * The sendCommand function's client prefix, asked once: ioredis with a `keyPrefix` prefixes the
 * keys of the commands it knows (EVAL, FCALL, SET, DEL…) and not those of CL.*, so the store
 * prefixes CL.*'s keys itself and every key carries the prefix exactly once.
 */
function prefixing(
  send: (key: string | undefined, args: string[]) => Promise<Reply>,
): (key: string | undefined, args: string[]) => Promise<Reply> {
  let prefix: Promise<string> | undefined;
  const ask = (): Promise<string> => {
    const p = send(PROBE, ['EVAL', 'return KEYS[1]', '1', PROBE]).then(
      (r) => {
        const name = String(r);
        return name.endsWith(PROBE) ? name.slice(0, -PROBE.length) : '';
      },
      (e: unknown) => {
        // A server that refuses EVAL (an ACL, a proxy) answers: no client prefix can be seen.
        if (
          e instanceof Error &&
          /^[A-Z]+ /.test(e.message) &&
          !/^(LOADING|BUSY|TRYAGAIN|MASTERDOWN|CLUSTERDOWN) /.test(e.message)
        )
          return '';
        prefix = undefined;
        throw e;
      },
    );
    prefix = p;
    return p;
  };
  return async (key, args) => {
    const p = await (prefix ?? ask());
    const name = (args[0] ?? '').toUpperCase();
    if (p === '' || !name.startsWith('CL.')) return send(key, args);
    const out = [...args];
    if (name === 'CL.ALL') for (let i = 0; i < Number(args[1]); i++) out[2 + i] = p + out[2 + i];
    else out[1] = p + out[1];
    return send(key === undefined ? undefined : p + key, out);
  };
}

export class RedisThrottleStore {
  readonly prefix: string;
  readonly localKeys = false;
  readonly #throttle: Throttle;
  readonly #algorithm: Algorithm;
  /** ms; 0 for a window of 0 or less (each hit alone), Infinity for one that never ends. */
  #windowMs = 60_000;
  /** express-rate-limit's number limit (undefined when it is a function). */
  #fixed: number | undefined;
  readonly #storeLimit: number | undefined;
  /**
   * Through sendCommandCluster the store sends no MULTI (a cluster client may send a raw MULTI and
   * its EXEC on different connections): its fixed window is CL.COUNTER's (FCALL cl_counter's).
   */
  readonly #cluster: boolean;

  constructor(options: RedisThrottleStoreOptions) {
    if (typeof options !== 'object' || options === null)
      throw new TypeError('redis-throttle: RedisThrottleStore needs an options object');
    const { sendCommand, sendCommandCluster } = options;
    if ((sendCommand === undefined) === (sendCommandCluster === undefined)) {
      throw new TypeError(
        'redis-throttle: give RedisThrottleStore either sendCommand or sendCommandCluster (not both)',
      );
    }
    const send = prefixing(
      sendCommand
        ? (_key, args) => sendCommand(...args)
        : (key, args) =>
            (sendCommandCluster as SendCommandClusterFn)({
              ...(key === undefined ? {} : { key }),
              isReadOnly: false,
              command: args,
            }),
    );
    const client = sendCommand
      ? { sendCommand: (args: string[]) => send(args[0] === 'FCALL' ? args[3] : args[1], args) }
      : {
          masters: [],
          sendCommand: (key: string | undefined, _isReadOnly: boolean, args: string[]) => send(key, args),
        };
    this.#throttle = new Throttle(client, options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs });
    this.prefix = options.prefix ?? 'rl:';
    this.#algorithm = options.algorithm ?? 'counter';
    if (options.limit !== undefined && typeof options.limit !== 'number')
      throw new TypeError('redis-throttle: RedisThrottleStore `limit` must be a number');
    this.#storeLimit = options.limit;
    this.#cluster = sendCommandCluster !== undefined;
    limiter(this.#algorithm, 'x', 1, 1); // rejects an unknown algorithm now
  }

  /** express-rate-limit passes its options: `windowMs` and `limit`. */
  init(options: { windowMs: number; limit?: unknown; max?: unknown }): void {
    const w = options.windowMs;
    if (typeof w !== 'number' || Number.isNaN(w))
      throw new TypeError(`redis-throttle: express-rate-limit's windowMs must be a number of ms, got ${String(w)}`);
    this.#windowMs = w <= 0 ? 0 : w === Infinity ? Infinity : Math.ceil(w);
    if ((this.#algorithm !== 'counter' || this.#cluster) && this.#windowMs > 0)
      this.#windowMs = longestWindow(this.#windowMs, "express-rate-limit's windowMs");
    const l = options.limit ?? options.max;
    this.#fixed = typeof l === 'number' ? l : undefined;
    if (this.#fixed === undefined && this.#storeLimit === undefined && this.#algorithm !== 'counter') {
      throw new TypeError(
        "redis-throttle: express-rate-limit's limit is a function: give RedisThrottleStore a number `limit` for algorithm 'window' or 'gcra'",
      );
    }
    void this.#throttle.backend().catch(() => undefined);
  }

  /** The hits a window admits (Infinity: a pure count, express-rate-limit comparing). */
  #admits(): number {
    if (this.#fixed !== undefined) return admits(this.#fixed);
    if (this.#storeLimit !== undefined && this.#algorithm !== 'counter') return admits(this.#storeLimit);
    return Infinity;
  }

  #resetTime(ms: number): Date | undefined {
    return ms === Infinity || ms < 0 ? undefined : new Date(Date.now() + ms);
  }

  /**
   * How the key is kept: 'local' (nothing to keep: a window of 0, or a limit admitting none),
   * 'count' (every hit counted with plain commands, express-rate-limit comparing: a pure count
   * outside CL.COUNTER's range, or the default fixed window on a twin-only server, as
   * rate-limit-redis counts), 'tally' (a pure count by CL.COUNTER), or 'decide' (the limiter
   * decides on the server).
   */
  async #mode(): Promise<'local' | 'count' | 'tally' | 'decide'> {
    const n = this.#admits();
    if (this.#windowMs === 0 || n <= 0) return 'local';
    const counter = n === Infinity || this.#algorithm === 'counter';
    if (!counter) return 'decide';
    const limit = n === Infinity ? COUNTER_MAX : n;
    if (!this.#cluster && (!plainCounter(limit, this.#windowMs) || (await this.#throttle.backend()) === 'twin'))
      return 'count';
    return n === Infinity ? 'tally' : 'decide';
  }

  #limiter(key: string, quantity?: number): Limiter {
    const n = this.#admits();
    return limiter(
      n === Infinity ? 'counter' : this.#algorithm,
      this.prefix + key,
      n === Infinity ? COUNTER_MAX : n,
      this.#windowMs,
      quantity,
    );
  }

  #count(key: string, quantity = 1): Promise<{ count: number; ttlMs: number }> {
    return this.#throttle.hit(this.prefix + key, this.#windowMs === Infinity ? null : this.#windowMs, quantity);
  }

  async increment(key: string): Promise<ClientRateLimitInfo> {
    const mode = await this.#mode();
    // A hit above any limit below 1 (express-rate-limit denies when totalHits > limit), or alone in its window.
    if (mode === 'local') return { totalHits: 1, resetTime: this.#resetTime(this.#windowMs) };
    if (mode === 'count') {
      const h = await this.#count(key);
      return { totalHits: h.count, resetTime: this.#resetTime(h.ttlMs >= 0 ? h.ttlMs : this.#windowMs) };
    }
    // Every hit counted, refused or not (DEBIT), as MemoryStore and rate-limit-redis count: the
    // decrement express-rate-limit sends for any response then gives back a hit that was counted.
    return this.#info(await this.#throttle.decide({ ...this.#limiter(key), debit: true }));
  }

  #info(d: Decision): ClientRateLimitInfo {
    const ms = d.limited && d.retryAfterMs >= 0 ? d.retryAfterMs : d.resetAfterMs;
    // A denial overdrew. express-rate-limit denies when totalHits > its limit: with a number
    // limit that is the server's (limit + 1 is above it); with a function, whatever it returns.
    const totalHits = !d.limited
      ? d.limit - d.remaining
      : this.#fixed !== undefined
        ? d.limit + 1
        : Number.MAX_SAFE_INTEGER;
    return { totalHits, resetTime: new Date(Date.now() + (ms > 0 ? ms : this.#windowMs)) };
  }

  /** The key's hits and reset without counting; undefined when it has none (as express-rate-limit's own stores answer). */
  async get(key: string): Promise<ClientRateLimitInfo | undefined> {
    const mode = await this.#mode();
    if (mode === 'local') return undefined;
    if (mode === 'count') {
      const c = await this.#throttle.count(this.prefix + key);
      if (c === undefined) return undefined;
      return { totalHits: c.count, resetTime: this.#resetTime(c.ttlMs) };
    }
    const l = this.#limiter(key, 0);
    if (l.algorithm === 'counter') {
      // A fixed window's state is its count, past the limit too (CL.COUNTER keeps every hit it
      // was charged): read as MemoryStore answers it, by a GET and a PTTL sent at once (no MULTI,
      // which a cluster client behind sendCommand could split across nodes).
      const k = this.prefix + key;
      const [v, ttl] = await Promise.all([
        this.#throttle.command(k, ['GET', k]),
        this.#throttle.command(k, ['PTTL', k]),
      ]);
      if (v == null) return undefined;
      const hits = Number(v);
      if (Number.isSafeInteger(hits)) return { totalHits: hits, resetTime: this.#resetTime(Number(ttl)) };
    }
    const d = await this.#throttle.decide(l);
    if (d.remaining >= d.limit && d.resetAfterMs === 0) return undefined;
    return { totalHits: d.limit - d.remaining, resetTime: new Date(Date.now() + d.resetAfterMs) };
  }

  /** A refund of one hit (skipFailedRequests / skipSuccessfulRequests), admitted or refused: each was counted. */
  async decrement(key: string): Promise<void> {
    const mode = await this.#mode();
    if (mode === 'local') return;
    if (mode === 'count' && !plainCounter(COUNTER_MAX, this.#windowMs)) {
      await this.#count(key, -1);
      return;
    }
    await this.#throttle.decide(
      refund(
        mode === 'count' ? limiter('counter', this.prefix + key, COUNTER_MAX, this.#windowMs) : this.#limiter(key),
        1,
      ),
    );
  }

  async resetKey(key: string): Promise<void> {
    await this.#throttle.del(this.prefix + key);
  }
}

export default RedisThrottleStore;
