//! What the client could not do, and why a request got no reply to use.

use redis::RedisError;

use crate::decision::Reason;

/// What the client could not do.
#[derive(Debug)]
pub enum Error {
    /// The server has neither the module nor the Functions library `throttle` (at connect).
    NoLimiter(String),
    /// The server answered with an error (WRONGTYPE, an argument the server refuses): the
    /// server is up, so the failure policy does not apply.
    Server(RedisError),
    /// Connecting failed.
    Connect(RedisError),
    /// Keys of one CL.ALL call in different hash slots of a cluster: refused before sending.
    CrossSlot { first: Vec<u8>, other: Vec<u8> },
    /// A call the client refuses before sending (no policies, a reply of an unexpected shape).
    Invalid(String),
    /// The in-memory backend refused the call as the server would have (`ERR …`, `WRONGTYPE …`).
    Memory(redis_throttle_core::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NoLimiter(text) => write!(f, "{text}"),
            Error::Server(e) => write!(f, "the server refused the call: {e}"),
            Error::Connect(e) => write!(f, "cannot connect: {e}"),
            Error::CrossSlot { first, other } => write!(
                f,
                "keys {:?} and {:?} are in different hash slots: one CL.ALL call must keep its keys in one slot; use a hash tag, e.g. rl:{{user42}}:s and rl:{{user42}}:h",
                String::from_utf8_lossy(first),
                String::from_utf8_lossy(other)
            ),
            Error::Invalid(text) => write!(f, "{text}"),
            Error::Memory(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

/// Why a request got no reply to use.
pub(crate) enum Failed {
    /// The server cannot answer now: the failure policy applies.
    Down(Reason),
    /// The server answered with an error.
    Refused(RedisError),
}
