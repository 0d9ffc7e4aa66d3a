/** The types of the core: decisions, each command's parameters, the limiter of a CL.ALL call, the options. */

/** A rate-limiting decision. Times in milliseconds; `-1` where the server says "none". */
export interface Decision {
  /** true when the call was denied (nothing was taken). */
  limited: boolean;
  /** The most units a full limiter admits at once (`X-RateLimit-Limit`). */
  limit: number;
  /** Units that could still be admitted now, after this call. */
  remaining: number;
  /** Denied: ms until the same call would be admitted; -1 when admitted, or never admissible. */
  retryAfterMs: number;
  /** ms until the limiter is full again (0: it is; -1: never, a block without an end). */
  resetAfterMs: number;
}

/** CL.ALL's decision: the binding limiter's numbers, its index (0-based), and every limiter's own. */
export interface AllDecision extends Decision {
  binding: number;
  details: Decision[];
}

/** CL.PACE's reply. */
export interface PaceDecision {
  limited: boolean;
  /** ms to wait before acting (0 = now). */
  waitMs: number;
  /** Units reserved ahead of now after this call. */
  queued: number;
  retryAfterMs: number;
  resetAfterMs: number;
}

export type Int = number | bigint;
export interface ThrottleParams {
  maxBurst: Int;
  count: Int;
  periodMs: Int;
  quantity?: Int;
  /** Count `quantity` whatever the limit says (DEBIT: a charge for what was already used); `limited`: it overdrew. */
  debit?: boolean;
}
export interface WindowParams {
  limit: Int;
  windowMs: Int;
  precisionMs?: Int;
  quantity?: Int;
  /** Count `quantity` whatever the limit says (DEBIT: a charge for what was already used); `limited`: it overdrew. */
  debit?: boolean;
}
export interface BucketParams {
  capacity: Int;
  tokens: Int;
  intervalMs: Int;
  quantity?: Int;
  /** Count `quantity` whatever the limit says (DEBIT: a charge for what was already used); `limited`: it overdrew. */
  debit?: boolean;
}
export interface CounterParams {
  limit: Int;
  windowMs: Int;
  quantity?: Int;
  /** Count `quantity` whatever the limit says (DEBIT: a charge for what was already used); `limited`: it overdrew. */
  debit?: boolean;
}
export interface QuotaParams {
  limit: Int;
  per: 'MINUTE' | 'HOUR' | 'DAY' | 'WEEK' | 'MONTH' | 'YEAR';
  /** IANA name (module) or a fixed offset such as +01:00 (module and twin). */
  tz?: string;
  /** A billing anchor instant, as CL.QUOTA's ANCHOR takes it. */
  anchor?: string;
  quantity?: Int;
  /** Count `quantity` whatever the limit says (DEBIT: a charge for what was already used); `limited`: it overdrew. */
  debit?: boolean;
}
export interface AcquireParams {
  limit: Int;
  leaseMs: Int;
  id: string;
}
export interface PaceParams {
  count: Int;
  periodMs: Int;
  maxWaitMs?: Int;
  quantity?: Int;
}

/** One limiter of a CL.ALL call. */
export type Limiter =
  | ({ key: string; algorithm: 'throttle' } & ThrottleParams)
  | ({ key: string; algorithm: 'window' } & WindowParams)
  | ({ key: string; algorithm: 'bucket' } & BucketParams)
  | ({ key: string; algorithm: 'counter' } & CounterParams)
  | ({ key: string; algorithm: 'quota' } & QuotaParams);

export type Backend = 'module' | 'twin';

/** node-redis (client or cluster, 4.7 to 6) or ioredis (Redis or Cluster): anything with `sendCommand` or `call`. */
export type RedisLike = object;

export interface ThrottleOptions {
  /** Skip detection: 'module' sends CL.*, 'twin' sends FCALL cl_*. */
  backend?: Backend;
  /**
   * Milliseconds to wait for a reply before failing the call with a ThrottleError (default
   * 1000; 0 = wait forever), so a paused or unreachable server reaches the host library's
   * failure option. The command may still be applied if the server answers later.
   */
  timeoutMs?: number;
}
