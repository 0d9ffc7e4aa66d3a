//! One instant per call: Redis's own command time where the server has it (frozen for a
//! whole MULTI/EXEC, script or function, so every call inside sees the same now), else the
//! system's real-time clock (Redis < 7.2).

use std::time::{SystemTime, UNIX_EPOCH};
use throttle_core::Instant;

pub fn now() -> Instant {
    if let Some(cached) = unsafe { redis_module::raw::RedisModule_CachedMicroseconds } {
        let micros = unsafe { cached() };
        return Instant::from_nanos(micros.saturating_mul(1_000));
    }
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    Instant::from_nanos(i64::try_from(since_epoch.as_nanos()).unwrap_or(i64::MAX))
}
