//! The argument caps an operator may change (the module's configs `throttle.max-exact-limit`
//! and `throttle.max-buckets`): how large a CL.WINDOW's exact log and bucket ring may be.
//! Parsing takes them as a value, so the pure core never reads a configuration.

use crate::window;

/// The largest exact-log limit and the most `PRECISION` buckets a call may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// The largest `limit` of an exact CL.WINDOW (its log holds up to two entries, 16 bytes,
    /// per unit of the limit).
    pub max_exact_limit: i64,
    /// The most buckets (`⌈window / precision⌉`) a CL.WINDOW with `PRECISION` may have.
    pub max_buckets: i64,
}

impl Caps {
    /// The defaults.
    pub const DEFAULT: Caps = Caps { max_exact_limit: window::MAX_EXACT_LIMIT, max_buckets: window::MAX_BUCKETS };

    /// The largest values the caps may be set to: the longest call they allow (a full exact
    /// log written at once, or a whole ring regrouped) stays in the low milliseconds (README,
    /// "Operating it"). A stored ring of up to this many buckets is read as valid whatever the
    /// current cap, so lowering a cap never makes live keys unreadable.
    pub const CEILING: Caps = Caps { max_exact_limit: 200_000, max_buckets: 100_000 };

    /// The smallest value of either cap.
    pub const FLOOR: i64 = 1;
}

impl Default for Caps {
    fn default() -> Self {
        Caps::DEFAULT
    }
}
