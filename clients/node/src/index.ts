/**
 * redis-throttle: the redis-throttle commands (the module's `CL.*`, or the Functions twin's
 * `FCALL cl_*` where the module is absent, detected once) through the caller's own Redis client:
 * node-redis (4.7 to 6, `sendCommand`) or ioredis (`call`), standalone or cluster. Every time is in
 * milliseconds (each call sends `MS`).
 */
export { slot, crossSlot, sibling } from './slot.js';
export { Throttle } from './throttle.js';
export { ThrottleError } from './errors.js';
export { loadTwin, twinLibrary, TwinDowngradeError } from './twin.js';
export type { LoadTwinOptions, TwinAction, TwinNodeReport, TwinReport } from './twin.js';
export type {
  Decision,
  AllDecision,
  PaceDecision,
  Limiter,
  ThrottleParams,
  WindowParams,
  BucketParams,
  CounterParams,
  QuotaParams,
  AcquireParams,
  PaceParams,
  Backend,
  RedisLike,
  ThrottleOptions,
} from './types.js';
