//! The words of a call: strict integers (as Redis itself parses them) and durations.

use crate::error::{Error, Range, Result};
use crate::time::{Nanos, Unit};

/// A base-10 signed 64-bit integer, exactly as Redis's `string2ll` accepts it: an optional
/// `-`, no `+`, no spaces, no leading zeros, nothing after the digits.
#[inline]
pub fn integer(arg: &[u8]) -> Result<i64> {
    let (negative, digits) = match arg {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, arg),
    };
    match digits {
        [b'0'] if !negative => return Ok(0),
        // At most 19 digits (i64::MAX has 19): their value is below 10^19 < 2^64, so the
        // unsigned sum below cannot wrap, and the range is checked once at the end.
        [b'1'..=b'9', ..] if digits.len() <= 19 => {}
        _ => return Err(Error::NotAnInteger),
    }
    // The leading digits one by one, then eight at a time (a TAT has 19).
    let (head, words) = digits.split_at(digits.len() % 8);
    let mut value: u64 = 0;
    for &b in head {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return Err(Error::NotAnInteger);
        }
        value = value.wrapping_mul(10).wrapping_add(u64::from(digit));
    }
    if !words.is_empty() {
        // A `match`, not `ok_or`: that would build the error (which has drop glue) and drop
        // it on every call.
        value = match long_tail(value, words) {
            Some(value) => value,
            None => return Err(Error::NotAnInteger),
        };
    }
    match negative {
        false => i64::try_from(value).map_err(|_| Error::NotAnInteger),
        true if value <= i64::MIN.unsigned_abs() => Ok(0i64.wrapping_sub_unsigned(value)),
        true => Err(Error::NotAnInteger),
    }
}

/// `value` followed by `words` (a multiple of eight digits), eight at a time; `None` if a
/// byte is not a digit. (An `Option`, not a `Result`: it comes back in registers.)
#[inline(always)]
fn long_tail(mut value: u64, words: &[u8]) -> Option<u64> {
    for word in words.chunks_exact(8) {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        value = value.wrapping_mul(100_000_000).wrapping_add(eight_digits(u64::from_le_bytes(bytes))?);
    }
    Some(value)
}

/// The number of decimal digits of `n` (1 for 0), from its bit length and one comparison
/// (`ilog10` is a call and a chain of comparisons on this path, taken by every call).
#[inline(always)]
fn digits(n: u64) -> usize {
    const POW10: [u64; 20] = {
        let mut p = [1u64; 20];
        let mut i = 1;
        while i < 20 {
            p[i] = p[i - 1] * 10;
            i += 1;
        }
        p
    };
    // `n | 1` has as many digits as `n` (a power of ten above 1 is even) and is never 0.
    let m = n | 1;
    // ⌊bits · log10(2)⌋ (1233 / 4096 ≈ 0.30103), at most 19: the digits are `t` or `t + 1`.
    let t = ((64 - m.leading_zeros()) as usize * 1233) >> 12;
    t + usize::from(m >= POW10[t])
}

/// Whether `word` is the keyword `lower` (lowercase ASCII letters) in any case, exactly as
/// `word.eq_ignore_ascii_case(lower)`: a byte ORed with 0x20 equals a lowercase letter only
/// when it is that letter or its capital. One OR and one comparison a byte (the standard
/// comparison lowercases both sides), for the keywords every call of some commands reads.
#[inline(always)]
pub fn keyword<const N: usize>(word: &[u8], lower: &[u8; N]) -> bool {
    debug_assert!(lower.iter().all(u8::is_ascii_lowercase));
    match <&[u8; N]>::try_from(word) {
        Ok(word) => word.iter().zip(lower).all(|(&b, &l)| b | 0x20 == l),
        Err(_) => false,
    }
}

/// The value of eight ASCII digits loaded little-endian (the first digit in the low byte),
/// all checked at once: each byte's high nibble is 3, and stays 3 when 6 is added (a byte
/// at 0xFA or above fails the first test, so a carry between bytes never hides one).
fn eight_digits(word: u64) -> Option<u64> {
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const ZEROS: u64 = 0x3030_3030_3030_3030;
    if word & HIGH != ZEROS || word.wrapping_add(0x0606_0606_0606_0606) & HIGH != ZEROS {
        return None;
    }
    let v = word.wrapping_sub(ZEROS);
    let v = v.wrapping_mul(10).wrapping_add(v >> 8) & 0x00FF_00FF_00FF_00FF;
    let v = v.wrapping_mul(100).wrapping_add(v >> 16) & 0x0000_FFFF_0000_FFFF;
    Some(v.wrapping_mul(10_000).wrapping_add(v >> 32) & 0xFFFF_FFFF)
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

    #[inline(always)]
    pub fn new(v: i64) -> Decimal {
        let mut bytes = [b'0'; 21];
        let n = v.unsigned_abs(); // at most 19 digits: 9223372036854775808
        // Fixed positions, eight digits at a time in one 64-bit word each (this runs on every
        // call: no loop, no index computed at run time); bytes[0] is left for a sign or a tag.
        if n < 10_000 {
            four(&mut bytes, 17, n as u32);
        } else {
            bytes[13..21].copy_from_slice(&eight(n % 100_000_000));
        }
        if n >= 100_000_000 {
            bytes[5..13].copy_from_slice(&eight(n / 100_000_000 % 100_000_000));
            four(&mut bytes, 1, (n / 10_000_000_000_000_000) as u32);
        }
        let digits = digits(n);
        let mut start = 21 - digits;
        if v < 0 {
            start -= 1;
            bytes[start] = b'-';
        }
        Decimal { bytes, start }
    }

    #[inline(always)]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[self.start..]
    }

    /// The text of `⌈v / 10^6⌉` (a nanosecond instant's milliseconds, as `Instant::ceil_millis`)
    /// for the non-negative `v` this is the text of, made from that text: its digits but the
    /// last six, plus one when any of those is not 0. `None` for a negative or tagged text.
    #[inline(always)]
    pub fn ceil_millis(&self) -> Option<Decimal> {
        if !self.bytes[self.start].is_ascii_digit() {
            return None;
        }
        // The last six digits (unused places hold '0'), read as one word.
        let mut last = [0u8; 8];
        last.copy_from_slice(&self.bytes[13..21]);
        let round_up = u64::from_le_bytes(last) >> 16 != 0x3030_3030_3030;
        // The digits sit at the end of `bytes`: shifted six places right, the last six drop.
        let mut bytes = self.bytes;
        bytes.copy_within(0..15, 6);
        let mut start = if self.start < 15 { self.start + 6 } else { 20 }; // below 10^6: "0" or "1"
        if round_up {
            let mut at = 20;
            while at > 0 && bytes[at] == b'9' {
                bytes[at] = b'0';
                at -= 1; // stops within bytes[0..7], which hold '0'
            }
            bytes[at] += 1;
            start = start.min(at);
        }
        Some(Decimal { bytes, start })
    }
}

/// Two decimal digits per pair, "00" to "99".
const PAIRS: &[u8; 200] =
    b"0001020304050607080910111213141516171819202122232425262728293031323334353637383940414243444546474849\
    5051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";

/// `x` (below 10^8) as eight ASCII digits, computed in one word: its two four-digit halves in
/// 32-bit lanes, split into two-digit 16-bit lanes (÷100 as a multiply and a shift, exact below
/// 10^4), then into digits in bytes (÷10 likewise, exact below 100). No lane overflows into the
/// next: 9999 × 10486 < 2^27 and 99 × 103 < 2^14.
#[inline(always)]
fn eight(x: u64) -> [u8; 8] {
    // (Wrapping operations: none can wrap, as above; they spare the overflow checks.)
    let v = (x / 10_000) | ((x % 10_000) << 32);
    let q = (v.wrapping_mul(10_486) >> 20) & 0x0000_007F_0000_007F;
    let v = q | (v.wrapping_sub(q.wrapping_mul(100)) << 16);
    let q = (v.wrapping_mul(103) >> 10) & 0x000F_000F_000F_000F;
    let v = q | (v.wrapping_sub(q.wrapping_mul(10)) << 8);
    (v | 0x3030_3030_3030_3030).to_le_bytes()
}

/// Writes `x` (below 10^4) as four digits at `bytes[at..at + 4]`.
#[inline(always)]
fn four(bytes: &mut [u8; 21], at: usize, x: u32) {
    let (hi, lo) = ((x / 100) as usize * 2, (x % 100) as usize * 2);
    bytes[at..at + 2].copy_from_slice(&PAIRS[hi..hi + 2]);
    bytes[at + 2..at + 4].copy_from_slice(&PAIRS[lo..lo + 2]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_parse_like_redis() {
        for (s, v) in
            [("0", 0), ("7", 7), ("-7", -7), ("9223372036854775807", i64::MAX), ("-9223372036854775808", i64::MIN)]
        {
            assert_eq!(integer(s.as_bytes()), Ok(v), "{s}");
        }
        for s in [
            "",
            "-",
            "-0",
            "+5",
            "05",
            " 5",
            "5 ",
            "1.5",
            "0x10",
            "1e3",
            "9223372036854775808",
            "-9223372036854775809",
            "５",
        ] {
            assert_eq!(integer(s.as_bytes()), Err(Error::NotAnInteger), "{s:?}");
        }
        assert_eq!(integer(b"\xff\xfe"), Err(Error::NotAnInteger));
    }

    #[test]
    fn keywords_match_as_eq_ignore_ascii_case_does() {
        // Every byte against each letter of a keyword, and lengths around it.
        for b in 0..=255u8 {
            for (word, lower) in [([b, b'z'], b"tz"), ([b'T', b], b"tz")] {
                assert_eq!(keyword(&word, lower), word.eq_ignore_ascii_case(lower), "{word:?}");
            }
        }
        for word in [&b""[..], b"t", b"tzz", b"anchor", b"ANCHOR", b"Anch0r", b"anchor "] {
            assert_eq!(keyword(word, b"anchor"), word.eq_ignore_ascii_case(b"anchor"), "{word:?}");
        }
    }

    #[test]
    fn digits_count_as_std_does_at_every_power_of_ten() {
        let mut p = 1u64;
        for _ in 0..20 {
            for n in [p - 1, p, p + 1, p.saturating_mul(2), p.saturating_mul(9)] {
                assert_eq!(digits(n), n.checked_ilog10().map_or(1, |l| l as usize + 1), "{n}");
            }
            p = p.saturating_mul(10);
        }
        assert_eq!(digits(u64::MAX), 20);
        assert_eq!(digits(i64::MIN.unsigned_abs()), 19);
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

    #[test]
    fn ceil_millis_of_a_decimal_is_the_decimal_of_its_ceil_millis() {
        for v in [
            0i64,
            1,
            999_999,
            1_000_000,
            1_000_001,
            9_999_999,
            999_999_999,
            999_999_999_999,
            1_795_354_456_188_603_542,
            1_795_354_456_188_000_000,
            9_223_372_036_854_000_001,
            i64::MAX,
        ] {
            let expected = crate::time::Instant::from_nanos(v).ceil_millis();
            assert_eq!(
                Decimal::new(v).ceil_millis().map(|d| d.as_bytes().to_vec()),
                Some(expected.to_string().into_bytes()),
                "{v}"
            );
        }
        assert!(Decimal::new(-5).ceil_millis().is_none());
        assert!(Decimal::tagged(b'P', 5).ceil_millis().is_none());
    }

    proptest::proptest! {
        #[test]
        fn ceil_millis_matches_the_instants(v in 0i64..) {
            let expected = crate::time::Instant::from_nanos(v).ceil_millis().to_string();
            proptest::prop_assert_eq!(Decimal::new(v).ceil_millis().map(|d| d.as_bytes().to_vec()), Some(expected.into_bytes()));
        }

        #[test]
        fn decimals_match_std(v: i64) {
            let (d, text) = (Decimal::new(v), v.to_string());
            proptest::prop_assert_eq!(d.as_bytes(), text.as_bytes());
        }

        #[test]
        fn integers_match_std_on_canonical_text(v: i64) {
            proptest::prop_assert_eq!(integer(v.to_string().as_bytes()), Ok(v));
        }

        #[test]
        fn a_byte_that_is_not_a_digit_is_refused_anywhere(v in 1_000_000_000_000_000_000i64.., at in 0usize..19, b: u8) {
            let mut text = v.to_string().into_bytes();
            text[at] = b;
            let expected = std::str::from_utf8(&text).ok().and_then(|t| t.parse::<i64>().ok()).filter(|n| n.to_string().as_bytes() == &text[..]);
            proptest::prop_assert_eq!(integer(&text).ok(), expected);
        }

        #[test]
        fn integers_refuse_what_is_out_of_range(v in proptest::num::u64::ANY, negative: bool) {
            // Twenty digits and more, and the 19-digit values beyond the range.
            let text = format!("{}{v}{v}", if negative { "-" } else { "" });
            proptest::prop_assert_eq!(integer(text.as_bytes()).ok(), text.parse::<i64>().ok().filter(|_| !text.starts_with("-0") && !text.starts_with('0')));
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
