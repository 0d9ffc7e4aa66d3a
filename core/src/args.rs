//! The words of a call: strict integers (as Redis itself parses them) and durations.

use crate::error::{Error, Range, Result};
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
            .ok_or_else(|| Error::NotAnInteger)?;
    }
    if negative { Ok(value) } else { value.checked_neg().ok_or_else(|| Error::NotAnInteger) }
}

/// A duration argument (`value` in `unit`): 1 to [`crate::time::MAX_DURATION`].
pub fn duration(value: i64, unit: Unit, name: &'static str) -> Result<Nanos> {
    let max = unit.max_duration();
    if !(1..=max).contains(&value) {
        return Err(Error::OutOfRange { name, range: Range::Duration { min: 1, max, unit } });
    }
    unit.to_nanos(value)
}

/// The decimal text of an i64, formatted on the stack (this runs on every call), perhaps behind
/// a one-byte tag.
pub struct Decimal {
    bytes: [u8; 21],
    start: usize,
}

impl Decimal {
    /// `tag` and the decimal text of `v` (CL.PACE's `P` and TAT).
    pub fn tagged(tag: u8, v: i64) -> Decimal {
        let mut d = Decimal::new(v);
        d.start -= 1; // at most 20 of the 21 bytes hold the text
        d.bytes[d.start] = tag;
        d
    }

    pub fn new(v: i64) -> Decimal {
        // Two digits per division: a TAT has 19.
        const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819202122232425262728293031323334353637383940414243444546474849\
            5051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";
        let mut d = Decimal { bytes: [0; 21], start: 21 };
        let mut n = v.unsigned_abs();
        while n >= 100 {
            let pair = (n % 100) as usize * 2;
            n /= 100;
            d.start -= 2;
            d.bytes[d.start..d.start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        }
        if n >= 10 {
            let pair = n as usize * 2;
            d.start -= 2;
            d.bytes[d.start..d.start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        } else {
            d.start -= 1;
            d.bytes[d.start] = b'0' + n as u8;
        }
        if v < 0 {
            d.start -= 1;
            d.bytes[d.start] = b'-';
        }
        d
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[self.start..]
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
    fn decimals_print_as_std_does_behind_a_tag_or_not() {
        for v in [0i64, 7, -7, 42, 1_795_354_456_188_603_542, i64::MAX, i64::MIN] {
            assert_eq!(Decimal::new(v).as_bytes(), v.to_string().as_bytes());
            assert_eq!(Decimal::tagged(b'P', v).as_bytes(), format!("P{v}").as_bytes());
        }
    }

    #[test]
    fn integers_agree_with_std_on_canonical_text() {
        for v in [1i64, 42, -42, i64::MAX, i64::MIN, 1_000_000_007] {
            assert_eq!(integer(v.to_string().as_bytes()), Ok(v));
        }
    }

    #[test]
    fn decimals_are_the_text_integer_parses() {
        for v in [0i64, 7, -7, 10, 99, 100, -100, 1_000_000_007, 1_795_354_456_188_603_542, i64::MAX, i64::MIN] {
            let d = Decimal::new(v);
            assert_eq!(d.as_bytes(), v.to_string().as_bytes());
            assert_eq!(integer(d.as_bytes()), Ok(v));
        }
    }

    proptest::proptest! {
        #[test]
        fn decimals_match_std(v: i64) {
            let (d, text) = (Decimal::new(v), v.to_string());
            proptest::prop_assert_eq!(d.as_bytes(), text.as_bytes());
        }
    }

    #[test]
    fn durations_are_capped_in_their_unit() {
        assert_eq!(duration(1_000_000_000, Unit::Seconds, "w").map(Nanos::as_nanos), Ok(1_000_000_000_000_000_000));
        let too_long = duration(1_000_000_000_001, Unit::Millis, "w").unwrap_err();
        assert_eq!(too_long.to_string(), "ERR w must be an integer from 1 to 1000000000000 (milliseconds)");
        assert!(duration(0, Unit::Seconds, "w").is_err());
    }
}
