//! One instant per call: Redis's own command time where the server has it (frozen for a
//! whole MULTI/EXEC, script or function, so every call inside sees the same now), else the
//! system's real-time clock (Redis < 7.2), in whole microseconds either way, the resolution
//! of the server's clock and of `TIME` (which the Functions twin reads).

use redis_throttle_core::Instant;
use std::sync::atomic::{AtomicI64, Ordering};

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
        None => real_time_micros(),
    };
    Instant::from_nanos(micros.saturating_mul(1_000))
}

/// The real-time clock in Unix microseconds, as the server reads it (`clock_gettime`; the
/// standard library's `SystemTime` adds a checked subtraction of the epoch on every call).
#[allow(clippy::useless_conversion)] // `time_t` and `c_long` are 32 bits on some targets
fn real_time_micros() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_REALTIME exists on every target.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) } != 0 || ts.tv_sec < 0 {
        return 0;
    }
    i64::from(ts.tv_sec).saturating_mul(1_000_000).saturating_add(i64::from(ts.tv_nsec) / 1_000)
}
