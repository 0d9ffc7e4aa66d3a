//! Argument parsing shared by every command: strict integers (as Redis itself parses them)
//! and the optional tail `[quantity] [MS] [PRECISION p]`.

use crate::error::{Error, Result};
use crate::time::{Nanos, Unit};

/// A base-10 signed 64-bit integer, exactly as Redis's `string2ll` accepts it: an optional
/// `-`, no `+`, no spaces, no leading zeros, nothing after the digits.
pub fn integer(arg: &[u8]) -> Result<i64> {
    let (negative, digits) = match arg {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, arg),
    };
    match digits {
        [b'0'] if !negative => return Ok(0),
        [b'1'..=b'9', ..] => {}
        _ => return Err(Error::NotAnInteger),
    }
    // Accumulate negatively so that i64::MIN parses.
    let mut value: i64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return Err(Error::NotAnInteger);
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_sub(i64::from(b - b'0')))
            .ok_or(Error::NotAnInteger)?;
    }
    if negative { Ok(value) } else { value.checked_neg().ok_or(Error::NotAnInteger) }
}

/// An integer that must be at least 1 (a count, period, window, limit or capacity).
pub fn positive(arg: &[u8], name: &'static str) -> Result<i64> {
    match integer(arg)? {
        v if v >= 1 => Ok(v),
        _ => Err(Error::OutOfRange { name, range: "an integer from 1 to 9223372036854775807" }),
    }
}

/// An integer that must be at least 0 (a max_burst).
pub fn non_negative(arg: &[u8], name: &'static str) -> Result<i64> {
    match integer(arg)? {
        v if v >= 0 => Ok(v),
        _ => Err(Error::OutOfRange { name, range: "an integer from 0 to 9223372036854775807" }),
    }
}

/// The optional arguments after a command's positional ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tail {
    /// Units consumed: 0 peeks, negative refunds. Defaults to 1.
    pub quantity: i64,
    pub unit: Unit,
    /// `PRECISION p`, in the call's unit (only where the command accepts it).
    pub precision: Option<i64>,
}

impl Tail {
    /// Parses `[quantity] [MS] [PRECISION p]` in any order; `quantity` at most once.
    /// A word that is not a known option is a syntax error; anything else in the quantity's
    /// place must be an integer.
    pub fn parse(args: &[&[u8]], accepts_precision: bool) -> Result<Tail> {
        let mut tail = Tail { quantity: 1, unit: Unit::Seconds, precision: None };
        let mut quantity_seen = false;
        let mut rest = args.iter();
        while let Some(&arg) = rest.next() {
            if arg.eq_ignore_ascii_case(b"MS") && tail.unit == Unit::Seconds {
                tail.unit = Unit::Millis;
            } else if accepts_precision && arg.eq_ignore_ascii_case(b"PRECISION") && tail.precision.is_none() {
                let value = rest.next().ok_or(Error::Syntax)?;
                tail.precision = Some(positive(value, "precision")?);
            } else if !quantity_seen && !arg.first().is_some_and(u8::is_ascii_alphabetic) {
                tail.quantity = integer(arg)?;
                quantity_seen = true;
            } else {
                return Err(Error::Syntax);
            }
        }
        Ok(tail)
    }

    /// A positive time argument in nanoseconds, in this call's unit.
    pub fn duration(&self, value: i64) -> Result<Nanos> {
        self.unit.to_nanos(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_parse_like_redis() {
        for (s, v) in [("0", 0), ("7", 7), ("-7", -7), ("9223372036854775807", i64::MAX), ("-9223372036854775808", i64::MIN)] {
            assert_eq!(integer(s.as_bytes()), Ok(v), "{s}");
        }
        for s in ["", "-", "-0", "+5", "05", " 5", "5 ", "1.5", "0x10", "1e3", "9223372036854775808", "-9223372036854775809", "５"] {
            assert_eq!(integer(s.as_bytes()), Err(Error::NotAnInteger), "{s:?}");
        }
        assert_eq!(integer(b"\xff\xfe"), Err(Error::NotAnInteger));
    }

    #[test]
    fn integers_agree_with_std_on_canonical_text() {
        for v in [1i64, 42, -42, i64::MAX, i64::MIN, 1_000_000_007] {
            assert_eq!(integer(v.to_string().as_bytes()), Ok(v));
        }
    }

    #[test]
    fn tail_accepts_options_in_any_order() {
        let t = Tail::parse(&[b"ms", b"5"], false).unwrap();
        assert_eq!((t.quantity, t.unit), (5, Unit::Millis));
        let t = Tail::parse(&[b"-3", b"MS"], false).unwrap();
        assert_eq!((t.quantity, t.unit), (-3, Unit::Millis));
        let t = Tail::parse(&[b"PRECISION", b"10", b"2"], true).unwrap();
        assert_eq!((t.quantity, t.precision), (2, Some(10)));
        assert_eq!(Tail::parse(&[], false).unwrap().quantity, 1);
    }

    #[test]
    fn tail_rejects_unknown_and_repeated_words() {
        assert_eq!(Tail::parse(&[b"FOO"], false), Err(Error::Syntax));
        assert_eq!(Tail::parse(&[b"MS", b"MS"], false), Err(Error::Syntax));
        assert_eq!(Tail::parse(&[b"1", b"2"], false), Err(Error::Syntax));
        assert_eq!(Tail::parse(&[b"PRECISION", b"1"], false), Err(Error::Syntax));
        assert_eq!(Tail::parse(&[b"PRECISION"], true), Err(Error::Syntax));
        assert_eq!(Tail::parse(&[b"1.5"], false), Err(Error::NotAnInteger));
        assert!(matches!(Tail::parse(&[b"PRECISION", b"0"], true), Err(Error::OutOfRange { .. })));
    }
}
