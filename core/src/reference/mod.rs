//! Reference models: each algorithm written again, as plainly as the contract states it, in
//! i128 arithmetic that cannot overflow. They are the oracles of the property tests and of
//! the fuzz targets (compiled for tests and with the `fuzzing` feature, never in the module).
//! Replies are `[limited, limit, remaining, retry_after, reset_after]` in nanoseconds,
//! `-1` for no retry time.

pub mod bucket;
pub mod counter;
pub mod each;
pub mod lease;
pub mod pace;
pub mod quota;
pub mod throttle;
pub mod window;

/// The first whole millisecond at or after `ns`, in milliseconds: a key's expiry.
pub fn ceil_ms(ns: i128) -> i128 {
    ns.div_euclid(1_000_000) + i128::from(ns.rem_euclid(1_000_000) != 0)
}

/// The last whole millisecond at or before `ns`, in nanoseconds: where clocks start.
pub fn floor_ms(ns: i128) -> i128 {
    ns.div_euclid(1_000_000) * 1_000_000
}

/// A module reply as the models give theirs.
pub fn reply_i128(r: crate::Reply) -> [i128; 5] {
    [
        i128::from(r.limited),
        r.limit.into(),
        r.remaining.into(),
        r.retry_after.map_or(-1, |d| d.as_nanos().into()),
        r.reset_after.as_nanos().into(),
    ]
}
