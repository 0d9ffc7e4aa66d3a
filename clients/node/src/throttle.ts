/**
 * The client core: the commands, one method each, and the stores' helpers, through the caller's
 * Redis client. The work is done by connection.ts (transport, detection, timeouts), commands.ts
 * (the limiter commands) and store.ts (the host-library stores' helpers); this is the facade.
 */
import { acquire, all, decide, pace, release } from './commands.js';
import { Connection } from './connection.js';
import * as store from './store.js';
import type {
  AcquireParams,
  AllDecision,
  Backend,
  BucketParams,
  CounterParams,
  Decision,
  Int,
  Limiter,
  PaceDecision,
  PaceParams,
  QuotaParams,
  RedisLike,
  ThrottleOptions,
  ThrottleParams,
  WindowParams,
} from './types.js';

/**
 * The commands, one method each, through the caller's Redis client. Whether the server has the
 * module or only the Functions twin is asked once, at the first call (and again after a failed
 * detection).
 *
 * Keys are the caller's: with an ioredis client whose `keyPrefix` is set, every key this class
 * sends (in CL.*, FCALL and the plain commands alike) carries that prefix exactly once, as
 * ioredis's own commands do, and slots are those of the prefixed keys.
 */
export class Throttle {
  readonly #c: Connection;

  constructor(client: RedisLike, options: ThrottleOptions = {}) {
    this.#c = new Connection(client, options);
  }

  /** Whether the client is a cluster client (keys routed by slot; CL.ALL's keys must share one). */
  get cluster(): boolean {
    return this.#c.t.cluster;
  }

  /** The client's key prefix (ioredis `keyPrefix`; '' for node-redis), carried by every key sent. */
  get keyPrefix(): string {
    return this.#c.t.prefix;
  }

  /** 'module' or 'twin', detected once: `COMMAND INFO cl.throttle`, then `FUNCTION LIST LIBRARYNAME throttle`. */
  backend(): Promise<Backend> {
    return this.#c.backend();
  }

  /**
   * Whether the server has the module (detected as `backend` is), for a caller choosing between a
   * module command and plain commands keeping the same state: false with the twin, on a server
   * with neither (asked once), and when the server could not be asked this time.
   */
  hasModule(): Promise<boolean> {
    return this.#c.module();
  }

  /** GCRA (redis-cell's CL.THROTTLE): max_burst + 1 at once, then `count` per `periodMs`. */
  throttle(key: string, p: ThrottleParams): Promise<Decision> {
    return decide(this.#c, { ...p, key: this.#c.w(key), algorithm: 'throttle' });
  }

  /** Sliding window: at most `limit` units in any span of `windowMs` (exact, or bucketed by `precisionMs`). */
  window(key: string, p: WindowParams): Promise<Decision> {
    return decide(this.#c, { ...p, key: this.#c.w(key), algorithm: 'window' });
  }

  /** Token bucket: `capacity` tokens, `tokens` more every whole `intervalMs`. */
  bucket(key: string, p: BucketParams): Promise<Decision> {
    return decide(this.#c, { ...p, key: this.#c.w(key), algorithm: 'bucket' });
  }

  /** Fixed window: at most `limit` per `windowMs`, the window opening at its first action. */
  counter(key: string, p: CounterParams): Promise<Decision> {
    return decide(this.#c, { ...p, key: this.#c.w(key), algorithm: 'counter' });
  }

  /** Calendar quota: at most `limit` per calendar `per`. */
  quota(key: string, p: QuotaParams): Promise<Decision> {
    return decide(this.#c, { ...p, key: this.#c.w(key), algorithm: 'quota' });
  }

  /**
   * Several limiters decided at one instant, all or nothing (CL.ALL … MS DETAILS). In a cluster
   * the keys must share a slot (hash tags). `debit`: every limiter counts its quantity whatever
   * its limit says (CL.ALL … DEBIT); the reply says whether any overdrew.
   */
  async all(limiters: readonly Limiter[], options: { debit?: boolean } = {}): Promise<AllDecision> {
    return all(
      this.#c,
      limiters.map((l) => this.#c.wl(l)),
      options.debit === true,
    );
  }

  /** A lease for `id` among at most `limit` live leases (CL.ACQUIRE; the module only). */
  acquire(key: string, p: AcquireParams): Promise<Decision> {
    return acquire(this.#c, this.#c.w(key), p);
  }

  /** Gives `id`'s lease back: true if it held a live one (CL.RELEASE; the module only). */
  release(key: string, id: string): Promise<boolean> {
    return release(this.#c, this.#c.w(key), id);
  }

  /** Reserves the next free slot of `count` per `periodMs` within `maxWaitMs` (CL.PACE; the module only). */
  pace(key: string, p: PaceParams): Promise<PaceDecision> {
    return pace(this.#c, this.#c.w(key), p);
  }

  /**
   * A fixed-window count of every hit, for the adapters whose host library compares the count
   * with its own limit (and for a count the module's commands cannot keep): plain commands in
   * one MULTI/EXEC on `key` (`SET key 0 PX windowMs NX`, `INCRBY key quantity`, `PTTL key`),
   * which store the bytes and absolute expiry CL.COUNTER stores, at a fraction of
   * `FCALL cl_counter`'s cost. The count includes denied hits (the host library's own meaning).
   * A key of another type or a string that is not an integer gets the server's error and is
   * left as it was; an integer string without an expiry (written by someone else) is counted
   * and then given the window's expiry, as CL.COUNTER does, by a second command.
   *
   * `windowMs` null: a count that never expires (`INCRBY`, `PTTL`; ttlMs -1), as
   * rate-limiter-flexible's `duration: 0`.
   */
  hit(key: string, windowMs: Int | null, quantity: Int = 1): Promise<{ count: number; ttlMs: number }> {
    return store.hit(this.#c, this.#c.w(key), windowMs, quantity);
  }

  /**
   * The count Throttle.hit (or CL.COUNTER) keeps at `key` and its ms left (-1: no expiry), read
   * in one MULTI (`GET`, `PTTL`); undefined when there is no key.
   */
  count(key: string): Promise<{ count: number; ttlMs: number } | undefined> {
    return store.count(this.#c, this.#c.w(key));
  }

  /**
   * Commands in one MULTI/EXEC on `key`'s node (every key must share its slot): EXEC's replies,
   * in order. A command's error inside EXEC fails the call (after every command ran, as Redis
   * runs them). Sent as the client's own commands are: with an ioredis keyPrefix, ioredis
   * prefixes the keys of the commands it knows (as `client.call` does).
   */
  transaction(key: string, commands: string[][]): Promise<unknown[]> {
    return this.#c.transactionAsClient(key, commands);
  }

  /**
   * Blocks a limiter: writes its own key for "admits nothing before now + ms", on the server's
   * clock, so every caller of the key sees the block in the limiter's reply (`retryAfterMs`).
   * The one way the package blocks (rate-limiter-flexible's `blockDuration` and `block()`,
   * @nestjs/throttler's `blockDuration`, @fastify/rate-limit's `continueExceeding`).
   *
   * - `counter`: `SET key <limit + 1> PX ms` (over the limit, as RateLimiterRedis's block writes
   *   it, so a plain count's next hit does not read as the one going over): full until then; the
   *   key then expires, so the count starts again from zero.
   * - `throttle` (GCRA): `SET key BLOCKED PX ms`. A TAT cannot hold a block: the commands read a
   *   TAT beyond now + the limiter's tolerance as exactly empty (a clock stepped back), which
   *   admits again within one emission interval. CL.THROTTLE refuses the value BLOCKED as not its
   *   state (an error, on the denial path only): this class then answers the call as denied
   *   until the key expires (`retryAfterMs` = its PTTL), after which the limiter is full again.
   *   A CL.ALL (`all()`) naming the key gets the server's error until then.
   * - `window`: in one MULTI, `DEL key` and the window command taking `limit` units, which leaves
   *   the exact log full until now + `windowMs`, then empty at once: the block lasts one window,
   *   whatever `ms` is.
   *
   * `ms` Infinity: the key is written without an expiry, as RateLimiterRedis's `block(key, 0)`.
   * A GCRA key is then denied (`retryAfterMs` and `resetAfterMs` -1) until it is deleted; a
   * counter key holds `limit + 1` until the next counting call opens a window on it (CL.COUNTER
   * and Throttle.hit give an integer without an expiry the window's, as RateLimiterRedis's own
   * script does). A window cannot be blocked without an end.
   *
   * `marker`: a key in `key`'s slot (see `sibling`) written in the same transaction to expire when
   * the block ends. Returns the block's length in ms (`windowMs` for a window).
   */
  block(l: Limiter, ms: number, options: { marker?: string } = {}): Promise<number> {
    return store.block(
      this.#c,
      this.#c.wl(l),
      ms,
      options.marker === undefined ? undefined : this.#c.w(options.marker),
    );
  }

  /**
   * Blocks `l` as `block` does, unless a block started here is in force: its marker
   * (`<key>:blocked`, in the key's slot) lives exactly as long as the block, so denials during a
   * block do not extend it (the host libraries block once, at the denial that goes over). Returns
   * the block's length in ms, or undefined when none was written.
   *
   * Call it after a denial of `l` (its `quantity` the denied units). That denial was decided a
   * round trip earlier, possibly under a block that has ended since (its marker gone with it): so
   * the caller that wins the marker first asks the limiter again (a peek) and blocks only if it
   * still refuses those units, with no block in force; otherwise it gives the marker back.
   */
  blockOnce(l: Limiter, ms: number): Promise<number | undefined> {
    return store.blockOnce(this.#c, this.#c.wl(l), ms);
  }

  /** One limiter by its algorithm name (what the host-library adapters use). */
  decide(l: Limiter): Promise<Decision> {
    return decide(this.#c, this.#c.wl(l));
  }

  /**
   * Keyed plain commands of the adapters (the client's key prefix applied once): `del` (DEL; 1
   * when the key existed), `put` (SET, with PX unless `ms` is Infinity), `renew` (PEXPIRE … GT).
   */
  del(key: string): Promise<number> {
    return store.del(this.#c, this.#c.w(key));
  }

  put(key: string, value: string, ms: number): Promise<void> {
    return store.put(this.#c, this.#c.w(key), value, ms);
  }

  renew(key: string, ms: number): Promise<void> {
    return store.renew(this.#c, this.#c.w(key), ms);
  }

  /**
   * Counts an event beside `key`: `<key><suffix>` in the key's hash slot (see `sibling`), in one
   * MULTI of `SET … 0 PX ms NX` and `INCRBY … by` (and `PEXPIRE … GT` with `extend`), so the
   * count lives `ms` from its first event (or from its latest, with `extend`). Returns the count.
   * @fastify/rate-limit's `ban`, `exponentialBackoff` and `read` count a key's denials with it.
   */
  tally(key: string, suffix: string, ms: number, options: { extend?: boolean; by?: number } = {}): Promise<number> {
    return store.tally(this.#c, this.#c.w(key), suffix, ms, options);
  }

  /** The count `tally` keeps beside `key` (0 when none). */
  tallied(key: string, suffix: string): Promise<number> {
    return store.tallied(this.#c, this.#c.w(key), suffix);
  }

  /**
   * A raw command, routed by `key` (errors as ThrottleError). Sent as the client's own commands
   * are: with an ioredis keyPrefix, ioredis prefixes the keys of the commands it knows (as
   * `client.call` does), not those of CL.*.
   */
  command(key: string, args: string[]): Promise<unknown> {
    return this.#c.callAsClient(key, args);
  }
}
