//! Which limiter a stored value belongs to. The four stored forms are disjoint, so a key used
//! by the wrong command is refused with WRONGTYPE instead of being misread (and overwritten):
//!
//! | command | stored value |
//! |---|---|
//! | CL.THROTTLE | the TAT, decimal nanoseconds ≥ 10^18 (any instant after 2001-09-09) |
//! | CL.COUNTER | the count, decimal, 0 ≤ count < 10^18 |
//! | CL.BUCKET | minus the deficit, decimal ≤ −1 |
//! | CL.WINDOW | binary, first byte 0x01 (exact log) or 0x02 (buckets) |

use crate::error::{Error, Result};

/// The smallest TAT CL.THROTTLE reads; anything smaller is a counter's value.
pub const MIN_TAT: i64 = 1_000_000_000_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Throttle,
    Window,
    Bucket,
    Counter,
}

/// The limiter `stored` looks like, `None` for a value of none of them.
pub fn of(stored: &[u8]) -> Option<Kind> {
    if let Some(1 | 2) = stored.first() {
        return Some(Kind::Window);
    }
    match crate::args::integer(stored).ok()? {
        v if v >= MIN_TAT => Some(Kind::Throttle),
        v if v >= 0 => Some(Kind::Counter),
        _ => Some(Kind::Bucket),
    }
}

/// Reads `stored` with `own`'s decoder; a value that belongs to another limiter is
/// WRONGTYPE, anything else undecodable keeps the decoder's error.
pub fn read<T>(own: Kind, stored: &[u8], decode: impl FnOnce(&[u8]) -> Result<T>) -> Result<T> {
    decode(stored).map_err(|e| match (e, of(stored)) {
        (Error::InvalidState(_), Some(kind)) if kind != own => Error::WrongType,
        (e, _) => e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_forms_are_disjoint() {
        assert_eq!(of(b"1795354456188603542"), Some(Kind::Throttle));
        assert_eq!(of(b"1000000000000000000"), Some(Kind::Throttle));
        assert_eq!(of(b"999999999999999999"), Some(Kind::Counter));
        assert_eq!(of(b"0"), Some(Kind::Counter));
        assert_eq!(of(b"-1"), Some(Kind::Bucket));
        assert_eq!(of(b"\x01\0\0\0\0\0\0\0"), Some(Kind::Window));
        assert_eq!(of(b"\x02"), Some(Kind::Window));
        for junk in [&b""[..], b"hello", b"1.5", b"\x03abc", b" 5"] {
            assert_eq!(of(junk), None, "{junk:?}");
        }
    }

    #[test]
    fn another_limiters_value_is_wrongtype_and_junk_is_invalid() {
        let decode = |_: &[u8]| -> Result<()> { Err(Error::InvalidState("CL.COUNTER")) };
        assert_eq!(read(Kind::Counter, b"-3", decode), Err(Error::WrongType));
        assert_eq!(read(Kind::Counter, b"junk", decode), Err(Error::InvalidState("CL.COUNTER")));
        assert_eq!(read(Kind::Counter, b"1795354456188603542", |_| Err(Error::TooLarge)), Err::<(), _>(Error::TooLarge));
    }
}
