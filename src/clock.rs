//! One instant per call: Redis's own command time where the server has it (frozen for a
//! whole MULTI/EXEC, script or function, so every call inside sees the same now), else the
//! system's real-time clock (Redis < 7.2), in whole microseconds either way, the resolution
//! of the server's clock and of `TIME` (which the Functions twin reads).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};
use throttle_core::Instant;

use crate::api::api;

/// Testing aid (`CL.DEBUG CLOCK`, registered only with `DEBUG-COMMANDS yes`): an instant in
/// Unix microseconds every call sees instead of the server's clock; `NOT_PINNED` when off.
/// The differential test of the Functions twin pins the module and the twin to one instant.
static PINNED_MICROS: AtomicI64 = AtomicI64::new(NOT_PINNED);
const NOT_PINNED: i64 = i64::MIN;

/// Pins every later call's instant to `micros` (Unix µs), or unpins with `None`.
pub fn pin(micros: Option<i64>) {
    PINNED_MICROS.store(micros.unwrap_or(NOT_PINNED), Ordering::Relaxed);
}

pub fn now() -> Instant {
    let pinned = PINNED_MICROS.load(Ordering::Relaxed);
    let micros = match api().cached_microseconds {
        _ if pinned != NOT_PINNED => pinned,
        // SAFETY: a server function without arguments, callable from any command.
        Some(cached) => unsafe { cached() },
        None => {
            let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
            i64::try_from(since_epoch.as_micros()).unwrap_or(i64::MAX)
        }
    };
    Instant::from_nanos(micros.saturating_mul(1_000))
}
