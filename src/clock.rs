//! One instant per call: Redis's own command time where the server has it (frozen for a
//! whole MULTI/EXEC, script or function, so every call inside sees the same now), else the
//! system's real-time clock (Redis < 7.2), in whole microseconds either way, the resolution
//! of the server's clock and of `TIME` (which the Functions twin reads).

use std::time::{SystemTime, UNIX_EPOCH};
use throttle_core::Instant;

use crate::api::api;

pub fn now() -> Instant {
    let micros = match api().cached_microseconds {
        // SAFETY: a server function without arguments, callable from any command.
        Some(cached) => unsafe { cached() },
        None => {
            let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
            i64::try_from(since_epoch.as_micros()).unwrap_or(i64::MAX)
        }
    };
    Instant::from_nanos(micros.saturating_mul(1_000))
}
