//! Time as integer nanoseconds. `Instant` is a point (since the Unix epoch), `Nanos` a
//! non-negative span. Every operation that could overflow is checked and reports
//! `Error::TooLarge`, so no input can wrap around into a wrong decision.

use crate::error::{Error, Result};

pub const NANOS_PER_MILLI: i64 = 1_000_000;
pub const NANOS_PER_SEC: i64 = 1_000_000_000;

/// Nanoseconds since the Unix epoch (may be negative only in hostile stored state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(i64);

/// A span of nanoseconds; never negative.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(i64);

impl Instant {
    pub const fn from_nanos(ns: i64) -> Self {
        Instant(ns)
    }
    pub const fn as_nanos(self) -> i64 {
        self.0
    }
    pub fn checked_add(self, d: Nanos) -> Result<Instant> {
        self.0.checked_add(d.0).map(Instant).ok_or_else(|| Error::TooLarge)
    }
    pub fn checked_sub(self, d: Nanos) -> Result<Instant> {
        self.0.checked_sub(d.0).map(Instant).ok_or_else(|| Error::TooLarge)
    }
    /// `self - earlier`, or zero when `earlier` is not earlier.
    pub fn saturating_since(self, earlier: Instant) -> Nanos {
        Nanos(self.0.saturating_sub(earlier.0).max(0))
    }
    /// The first whole millisecond at or after this instant: when a key expiring "at" this
    /// instant may go, so that it never disappears before its limiter is full again.
    pub fn ceil_millis(self) -> i64 {
        self.0.div_euclid(NANOS_PER_MILLI) + i64::from(self.0.rem_euclid(NANOS_PER_MILLI) != 0)
    }
    /// The last whole millisecond at or before this instant: where a limiter that starts a
    /// clock at this instant starts it, so that its key's millisecond expiry is exact and no
    /// wait it replies exceeds what its parameters allow (a clock started after now would
    /// add up to a millisecond to every reply time).
    pub fn whole_milli_at_or_before(self) -> Result<Instant> {
        self.0.checked_sub(self.0.rem_euclid(NANOS_PER_MILLI)).map(Instant).ok_or_else(|| Error::TooLarge)
    }
}

impl Nanos {
    pub const ZERO: Nanos = Nanos(0);

    /// `None` for a negative count.
    pub const fn new(ns: i64) -> Option<Nanos> {
        if ns >= 0 { Some(Nanos(ns)) } else { None }
    }
    pub const fn as_nanos(self) -> i64 {
        self.0
    }
    pub fn checked_mul(self, n: i64) -> Result<i64> {
        self.0.checked_mul(n).ok_or_else(|| Error::TooLarge)
    }
    pub fn checked_mul_nanos(self, n: u64) -> Result<Nanos> {
        i64::try_from(n).ok().and_then(|n| self.0.checked_mul(n)).map(Nanos).ok_or_else(|| Error::TooLarge)
    }
    pub fn checked_add(self, other: Nanos) -> Result<Nanos> {
        self.0.checked_add(other.0).map(Nanos).ok_or_else(|| Error::TooLarge)
    }
    pub fn saturating_sub(self, other: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(other.0).max(0))
    }
}

/// The longest duration any parameter, or any span they combine into (a GCRA tolerance, the
/// refill of an empty bucket), may have: 10^18 ns, about 31.7 years. With it, no instant a
/// limiter computes from now (until the year 2200) can overflow 64 bits, so every error about
/// size is decided when the arguments are parsed, never later.
pub const MAX_DURATION: Nanos = Nanos(1_000_000_000_000_000_000);

/// Checks that a duration parameter is a positive whole number of milliseconds, as every
/// time argument is: a limiter whose key expires on its own schedule needs its instants on
/// whole milliseconds, since a key's expiry has no finer resolution.
pub fn whole_millis(d: Nanos, name: &'static str) -> Result<()> {
    if d.0 > 0 && d.0 % NANOS_PER_MILLI == 0 {
        Ok(())
    } else {
        Err(Error::OutOfRange { name, range: crate::error::Range::Text("a positive whole number of milliseconds") })
    }
}

/// The unit of a call's time arguments and reply times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unit {
    #[default]
    Seconds,
    Millis,
}

impl Unit {
    /// The unit's name as error messages give it.
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Seconds => "seconds",
            Unit::Millis => "milliseconds",
        }
    }

    /// [`MAX_DURATION`] in this unit.
    pub const fn max_duration(self) -> i64 {
        MAX_DURATION.0 / self.nanos()
    }

    const fn nanos(self) -> i64 {
        match self {
            Unit::Seconds => NANOS_PER_SEC,
            Unit::Millis => NANOS_PER_MILLI,
        }
    }

    /// A time argument (already known to be positive) in nanoseconds.
    pub fn to_nanos(self, value: i64) -> Result<Nanos> {
        value.checked_mul(self.nanos()).and_then(Nanos::new).ok_or_else(|| Error::TooLarge)
    }

    /// A reply time. Seconds round as redis-cell does (whole seconds, plus one when the
    /// leftover is at least a millisecond); milliseconds round up, so a client that waits
    /// the reply's time never retries too early.
    pub fn reply_value(self, d: Nanos) -> i64 {
        let ns = d.as_nanos();
        match self {
            Unit::Seconds => ns / NANOS_PER_SEC + i64::from(ns % NANOS_PER_SEC >= NANOS_PER_MILLI),
            Unit::Millis => ns / NANOS_PER_MILLI + i64::from(ns % NANOS_PER_MILLI != 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_like_redis_cell() {
        let s = |ns| Unit::Seconds.reply_value(Nanos::new(ns).unwrap());
        assert_eq!(s(0), 0);
        assert_eq!(s(2 * NANOS_PER_SEC), 2);
        assert_eq!(s(2 * NANOS_PER_SEC + 999_999), 2);
        assert_eq!(s(2 * NANOS_PER_SEC + NANOS_PER_MILLI), 3);
        assert_eq!(s(999_999), 0);
    }

    #[test]
    fn millis_round_up() {
        let m = |ns| Unit::Millis.reply_value(Nanos::new(ns).unwrap());
        assert_eq!(m(0), 0);
        assert_eq!(m(1), 1);
        assert_eq!(m(NANOS_PER_MILLI), 1);
        assert_eq!(m(NANOS_PER_MILLI + 1), 2);
    }

    #[test]
    fn expiry_never_precedes_the_instant() {
        assert_eq!(Instant::from_nanos(5 * NANOS_PER_MILLI).ceil_millis(), 5);
        assert_eq!(Instant::from_nanos(5 * NANOS_PER_MILLI + 1).ceil_millis(), 6);
        assert_eq!(Instant::from_nanos(-1).ceil_millis(), 0);
    }

    #[test]
    fn clocks_start_on_the_whole_millisecond_at_or_before() {
        let floor = |ns| Instant::from_nanos(ns).whole_milli_at_or_before().map(Instant::as_nanos);
        assert_eq!(floor(5 * NANOS_PER_MILLI), Ok(5 * NANOS_PER_MILLI));
        assert_eq!(floor(5 * NANOS_PER_MILLI + 999_999), Ok(5 * NANOS_PER_MILLI));
        assert_eq!(floor(-1), Ok(-NANOS_PER_MILLI));
        assert_eq!(floor(i64::MIN), Err(Error::TooLarge));
    }
}
