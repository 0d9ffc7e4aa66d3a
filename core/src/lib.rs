//! The pure core of redis-throttle: rate-limiting algorithms over integer nanoseconds,
//! the parsing of their arguments, and the reply they produce. Nothing here touches Redis,
//! a clock or I/O, so every rule can be tested (and fuzzed) exhaustively on its own.
//!
//! Each algorithm *decides* without writing: it returns a [`Decision`] holding the reply and
//! the [`Effect`] on its stored state. The caller applies the effect, or not (a multi-key
//! call applies every effect only when every limiter admits).

pub mod args;
pub mod error;
pub mod gcra;
pub mod request;
pub mod time;

pub use error::{Error, Result};
pub use time::{Instant, Nanos, Unit};

/// The five integers every command replies with, times still in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub limited: bool,
    /// The most units a full limiter admits at once.
    pub limit: i64,
    /// Units that could still be admitted right now, after this call; within `[0, limit]`.
    pub remaining: i64,
    /// When denied, how long until the same request would be admitted; `None` when allowed
    /// or when it can never be (quantity > limit).
    pub retry_after: Option<Nanos>,
    /// How long until the limiter is full again.
    pub reset_after: Nanos,
}

impl Reply {
    /// The reply as sent: `[limited, limit, remaining, retry_after, reset_after]`.
    pub fn to_array(&self, unit: Unit) -> [i64; 5] {
        [
            i64::from(self.limited),
            self.limit,
            self.remaining,
            self.retry_after.map_or(-1, |d| unit.reply_value(d)),
            unit.reply_value(self.reset_after),
        ]
    }
}

/// What a call does to its limiter's stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect<S> {
    /// Nothing changes (denied, or a peek): nothing is written or replicated.
    Nothing,
    /// Store `state`, expiring when the limiter is full again.
    Store { state: S, expires_at: Instant },
    /// The limiter is full again (a refund): remove its key.
    Delete,
}

impl<S> Effect<S> {
    pub fn map<T>(self, f: impl FnOnce(S) -> T) -> Effect<T> {
        match self {
            Effect::Nothing => Effect::Nothing,
            Effect::Store { state, expires_at } => Effect::Store { state: f(state), expires_at },
            Effect::Delete => Effect::Delete,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<S> {
    pub reply: Reply,
    pub effect: Effect<S>,
}
