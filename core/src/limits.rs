//! Small rules every limiter shares.

use crate::error::{Error, Result};
use crate::time::{Instant, NANOS_PER_MILLI};

/// Units still admissible when `used` of `limit` are taken: always within `[0, limit]`,
/// even for a stored state that holds more than the limit (the parameters were lowered).
pub(crate) fn remaining(limit: i64, used: i64) -> i64 {
    limit.saturating_sub(used).clamp(0, limit)
}

/// The units a refund of `quantity < 0` gives back, as a count that cannot overflow.
pub(crate) fn refunded(quantity: i64) -> i64 {
    quantity.saturating_neg()
}

/// Reads a state stored as a decimal integer of at least `min` on a key expiring at
/// `expires_at_ms` (whole milliseconds, as `PEXPIRETIME` reports it): the value and the
/// expiry as an instant. A value that is not such an integer is not `command`'s state.
///
/// A key without an expiry (after `PERSIST`, `RESTORE key 0 …`, a `SET` without `KEEPTTL`)
/// or with one beyond the nanosecond range reads as expiring at the last representable
/// instant: stamped too far ahead, which every limiter pulls back as after a clock step,
/// instead of a state that errors for as long as the key never expires.
pub(crate) fn integer_with_expiry(
    stored: &[u8],
    expires_at_ms: Option<i64>,
    min: i64,
    command: &'static str,
) -> Result<(i64, Instant)> {
    let value = crate::args::integer(stored).ok().filter(|&v| v >= min).ok_or_else(|| Error::InvalidState(command))?;
    let expires_at = match expires_at_ms {
        None => Instant::from_nanos(i64::MAX),
        Some(ms) => {
            Instant::from_nanos(ms.checked_mul(NANOS_PER_MILLI).unwrap_or(if ms < 0 { i64::MIN } else { i64::MAX }))
        }
    };
    Ok((value, expires_at))
}

/// Helpers the algorithms' tests share.
#[cfg(test)]
pub(crate) mod testing {
    use crate::Effect;
    use crate::time::{NANOS_PER_MILLI, NANOS_PER_SEC};

    /// A realistic now: November 2023.
    pub const T0: i64 = 1_700_000_000 * NANOS_PER_SEC;

    pub use crate::reference::reply_i128;

    /// An integer state as the glue carries it between calls: the stored value and the
    /// key's expiry in whole milliseconds (`None`: no key).
    pub type IntegerKey = Option<(i64, i64)>;

    /// Applies `effect` to `key` as the glue does, checking that the expiry is a whole
    /// millisecond (so that storing it loses nothing).
    pub fn carry(key: &mut IntegerKey, effect: Effect<i64>) {
        match effect {
            Effect::Store { state, expires_at } => {
                assert_eq!(expires_at.as_nanos() % NANOS_PER_MILLI, 0, "{expires_at:?} is not a whole ms");
                *key = Some((state, expires_at.ceil_millis()));
            }
            Effect::Delete => *key = None,
            Effect::Nothing => {}
        }
    }
}
