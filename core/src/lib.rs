//! The pure core of redis-throttle: rate-limiting algorithms over integer nanoseconds,
//! the parsing of their arguments, and the reply they produce. Nothing here touches Redis,
//! a clock or I/O, so every rule can be tested (and fuzzed) exhaustively on its own.
//!
//! Each algorithm *decides* without writing: it returns a [`Decision`] holding the reply and
//! the [`Effect`] on its stored state. The caller applies the effect, or not (a multi-key
//! call applies every effect only when every limiter admits).

#![forbid(unsafe_code)]
// `Error` owns heap data in its rare variants, so building one that is not returned costs a
// drop on the hot path (measured: a tenth of a call): errors are built lazily, `ok_or_else`
// even for unit variants, which this lint would turn back into `ok_or`.
#![allow(clippy::unnecessary_lazy_evaluations)]

pub mod all;
pub mod args;
pub mod bucket;
pub mod calendar;
pub mod caps;
pub mod command;
pub mod counter;
pub mod each;
pub mod error;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod lease;
pub mod limiter;
mod limits;
pub mod pace;
pub mod quota;
#[cfg(any(test, feature = "fuzzing"))]
pub mod reference;
pub mod throttle;
pub mod time;
pub mod top;
#[cfg(test)]
mod vectors;
pub mod window;

pub use caps::Caps;
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
    #[inline]
    pub fn to_array(&self, unit: Unit) -> [i64; 5] {
        [
            i64::from(self.limited),
            self.limit,
            self.remaining,
            self.retry_after.map_or(-1, |d| unit.reply_value(d)),
            unit.reply_value(self.reset_after),
        ]
    }

    /// Whether this reply to a call of `quantity` units is a denial (counted, recorded and
    /// shadowed as one): a refused take, a debit that overdrew, or a refused check (quantity
    /// 0 on a limiter over its limit: the decision a check-then-debit caller acts on). A
    /// refund is never one.
    #[inline]
    pub fn denies(&self, quantity: i64) -> bool {
        self.limited && quantity >= 0
    }

    /// This reply as shadow mode answers it: a denial reads as an admission (`limited` 0, no
    /// retry time); `limit`, `remaining` and `reset_after` stay what the limiter decided.
    pub fn shadowed(self) -> Reply {
        Reply { limited: false, retry_after: None, ..self }
    }
}

/// How a call charges a positive quantity. (A quantity of 0 peeks and a negative one refunds
/// whatever the charge: `DEBIT 0` is a pure check, and a debit of a negative quantity is an
/// argument error.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Charge {
    /// Admitted only when the units fit, then counted; a refused take counts nothing.
    #[default]
    Take,
    /// `DEBIT`: a charge for units already used (tokens an LLM call consumed), counted whatever
    /// the limit says, exactly as an admitted take of them would be. `limited` says whether
    /// they overdrew; later takes are refused until time has repaid the overdraft.
    Debit,
}

impl Charge {
    /// The charge of a call given `DEBIT` (`debit`) or not.
    pub fn of(debit: bool) -> Charge {
        if debit { Charge::Debit } else { Charge::Take }
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

/// What a call decides: its reply (the five integers of a limiter, or a command's own reply
/// shape, as CL.PACE's) and the effect on its stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<S, R = Reply> {
    pub reply: R,
    pub effect: Effect<S>,
}

/// An edit of a stored binary string: set its length to `len` (growth zero-filled), then
/// copy each chunk at its offset. Every chunk lies within `len`. A limiter whose state is a
/// long log (CL.WINDOW) returns a patch instead of a whole new value, so a call costs what
/// it changes, not the size of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    pub len: usize,
    pub chunks: Vec<(usize, Vec<u8>)>,
}

impl Patch {
    /// Applies the edit to `buf` (an empty buffer for a key that does not exist yet).
    pub fn apply(&self, buf: &mut Vec<u8>) {
        buf.resize(self.len, 0);
        for (offset, bytes) in &self.chunks {
            let end = offset.saturating_add(bytes.len());
            debug_assert!(end <= self.len, "a chunk lies within the patched length");
            if let Some(target) = buf.get_mut(*offset..end) {
                target.copy_from_slice(bytes);
            }
        }
    }

    /// True when the patch writes the whole value (one chunk from offset 0 to `len`), so
    /// it can be applied, or replicated, as a plain `SET`.
    pub fn is_whole(&self) -> bool {
        matches!(self.chunks.as_slice(), [(0, bytes)] if bytes.len() == self.len)
    }
}
