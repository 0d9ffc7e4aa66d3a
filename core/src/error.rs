//! The one error type. Each message is the exact text a Redis client receives, error code
//! first, so the module replies with `to_string()` unchanged.

use std::fmt;

use thiserror::Error;

use crate::time::Unit;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    #[error("ERR wrong number of arguments for '{0}' command")]
    WrongArity(&'static str),

    #[error("ERR value is not an integer or out of range")]
    NotAnInteger,

    /// A parameter outside its domain: `name` is the argument as the manual names it.
    #[error("ERR {name} must be {range}")]
    OutOfRange { name: &'static str, range: Range },

    #[error("ERR rate is too fast: {period} divided by {count} is less than one nanosecond")]
    RateTooFast { period: &'static str, count: &'static str },

    /// Parameters each within range whose combination is too long a span: `what` names the
    /// span (e.g. "(max_burst + 1) * period / count").
    #[error("ERR parameters are too large: {0} must be at most 1000000000 seconds (1000000000000 milliseconds)")]
    SpanTooLong(&'static str),

    /// Nanosecond arithmetic that would overflow (hostile stored state, or an instant near the
    /// end of the 64-bit range): never a wrapped, wrong answer.
    #[error("ERR parameters are too large: their nanosecond arithmetic overflows 64 bits")]
    TooLarge,

    #[error("ERR syntax error")]
    Syntax,

    /// `HELD t` on a call that is not a refund.
    #[error("ERR HELD is valid only with a negative quantity (a refund)")]
    HeldWithoutRefund,

    /// `DEBIT` with a negative quantity.
    #[error("ERR DEBIT takes a quantity of 0 or more (a refund is a negative quantity without DEBIT)")]
    DebitRefund,

    /// A debit that would count more than a stored form holds: `most` units for a counter
    /// or a quota (their forms stay disjoint from a TAT's), an i64 in a window's bucket.
    #[error("ERR DEBIT is too large: a count must stay at most {0}")]
    DebitTooLarge(i64),

    /// A debit on an exact window logging more than `throttle.max-exact-limit` units at once.
    #[error("ERR DEBIT is too large: an exact window logs at most {0} units a call (use PRECISION for larger budgets)")]
    DebitTooLong(i64),

    /// A debit that would leave an exact window holding more than `most` live units (twice
    /// `throttle.max-exact-limit`: a log at its limit plus one debit at its cap), so that the
    /// log stays within its bytes per unit.
    #[error("ERR DEBIT is too large: an exact window holds at most {0} units (use PRECISION for larger budgets)")]
    DebitTooDeep(i64),

    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,

    #[error("ERR key does not hold valid {0} state")]
    InvalidState(&'static str),

    /// An error in one limiter of a multi-limiter call (CL.ALL): the code stays first, the
    /// 1-based index of the limiter follows.
    #[error("{}", in_limiter(*.index, .error))]
    InLimiter { index: usize, error: Box<Error> },

    /// A multi-limiter call's own syntax (numkeys, specs not matching keys, a key twice).
    #[error("ERR {0}")]
    Call(String),

    /// A bug caught at the command boundary (a panic); the server keeps running.
    #[error("ERR internal error in the throttle module: {0}")]
    Internal(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// This error as raised by the limiter at 1-based `index` of a multi-limiter call: every
    /// argument error names it (a non-integer too), key errors do not.
    pub fn in_limiter(self, index: usize) -> Error {
        match self {
            // WRONGTYPE is Redis's own key error, which clients match as it is; a bug is no
            // limiter's.
            Error::WrongType | Error::Internal(_) => self,
            error => Error::InLimiter { index, error: Box::new(error) },
        }
    }
}

fn in_limiter(index: usize, error: &Error) -> String {
    let text = error.to_string();
    match text.split_once(' ') {
        Some((code, detail)) => format!("{code} limiter {index}: {detail}"),
        None => format!("ERR limiter {index}: {text}"),
    }
}

/// The valid values of a parameter, as its error message states them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Range {
    /// An integer from `min` to `max`.
    Integer { min: i64, max: i64 },
    /// A duration in the call's unit, from `min` to `max` units.
    Duration { min: i64, max: i64, unit: Unit },
    /// An integer from `min` to `max`, and a hint.
    Limit { min: i64, max: i64, hint: &'static str },
    /// Described in words (a unit-free bound of the pure algorithms).
    Text(&'static str),
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Range::Integer { min, max } => write!(f, "an integer from {min} to {max}"),
            Range::Duration { min, max, unit } => write!(f, "an integer from {min} to {max} ({})", unit.name()),
            Range::Limit { min, max, hint } => write!(f, "an integer from {min} to {max} ({hint})"),
            Range::Text(text) => f.write_str(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_start_with_their_code() {
        let e = Error::OutOfRange {
            name: "window",
            range: Range::Duration { min: 1, max: 1_000_000_000, unit: Unit::Seconds },
        };
        assert_eq!(e.to_string(), "ERR window must be an integer from 1 to 1000000000 (seconds)");
        assert_eq!(
            e.clone().in_limiter(2).to_string(),
            "ERR limiter 2: window must be an integer from 1 to 1000000000 (seconds)"
        );
        assert_eq!(Error::WrongType.in_limiter(3), Error::WrongType);
        assert_eq!(
            Error::NotAnInteger.in_limiter(2).to_string(),
            "ERR limiter 2: value is not an integer or out of range"
        );
        let span = Error::SpanTooLong("interval * ceil(capacity / tokens)");
        assert_eq!(
            span.to_string(),
            "ERR parameters are too large: interval * ceil(capacity / tokens) must be at most 1000000000 seconds (1000000000000 milliseconds)"
        );
    }
}
