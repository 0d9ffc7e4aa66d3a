//! The one error type. Each message is the exact text a Redis client receives,
//! error code first, so the module can reply with `to_string()` unchanged.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    #[error("ERR wrong number of arguments for '{0}' command")]
    WrongArity(&'static str),

    #[error("ERR value is not an integer or out of range")]
    NotAnInteger,

    /// A parameter outside its domain: `name` is the argument as the manual names it,
    /// `range` its valid values.
    #[error("ERR {name} must be {range}")]
    OutOfRange { name: &'static str, range: &'static str },

    #[error("ERR rate is too fast: {period} divided by {count} is less than one nanosecond")]
    RateTooFast { period: &'static str, count: &'static str },

    #[error("ERR parameters are too large: their nanosecond arithmetic overflows 64 bits")]
    TooLarge,

    #[error("ERR syntax error")]
    Syntax,

    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,

    #[error("ERR key does not hold valid {0} state")]
    InvalidState(&'static str),

    /// A bug caught at the command boundary (a panic); the server keeps running.
    #[error("ERR internal error in the throttle module: {0}")]
    Internal(String),
}

pub type Result<T> = std::result::Result<T, Error>;
