//! CL.WINDOW: a sliding window, at most `limit` units in any span of `window`.
//!
//! By default the window is exact: every action is logged with its instant, an action
//! logged at `t` counts while `t > now − window`, a call is admitted iff
//! `in_window + quantity ≤ limit`, and then `quantity` actions are logged at `now`. With
//! `PRECISION p`, actions are counted per bucket `k = ⌊t / p⌋` instead, and a bucket
//! counts while its end `(k + 1)·p > now − window`: every action counts at least as long
//! as the exact rule says, so no span of `window` ever holds more than `limit`.
//!
//! # Stored state
//!
//! A binary string whose first byte is its layout's version. All integers are
//! little-endian; instants are nanoseconds since the Unix epoch. Both layouts are edited in
//! place ([`Patch`]): a call rewrites what it changes, not the whole string. The key expires
//! when its newest action leaves the window.
//!
//! ## Version 1: the exact log
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | version: `0x01` |
//! | 1 | 3 | reserved, zero |
//! | 4 | 4 | `head`: u32, the number of entries at the front that have left the window |
//! | 8 | 8 each | entries: one i64 instant per action, ascending |
//!
//! The live actions are the entries from `head` on (those still counting at `now` are the
//! ones after `now − window`, found by binary search). A call appends its actions at the
//! end and advances `head` past the actions that have left; once the dead entries outnumber
//! the live ones, the call rewrites the log without them. So the string holds at most 16
//! bytes per live action (plus the header), and a call costs O(log limit + quantity),
//! amortised. An entry after `now` can only come from a clock that stepped back: it
//! counts as logged at `now` (the next write rewrites it so), so the log stays sorted, the
//! entry still counts for a whole window, and no user is locked out for the size of the step.
//!
//! A refund gives back the *oldest* live actions: it advances `head` past them (a 4-byte
//! edit; the newest entry, and so the key's expiry, stays). Whichever real actions a refund
//! stands for, the log then holds, for each real action still counting, an entry at or
//! after it, so no span of `window` ever admits more than `limit` real actions. (Removing
//! the newest entries instead would let an older entry stand for a newer real action, and
//! the window admit more than its limit.) To read it: `GETRANGE key 4 7` is `head`,
//! `GETRANGE key 8 -1` the entries.
//!
//! ## Version 2: buckets (`PRECISION p`)
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | version: `0x02` |
//! | 1 | 7 | reserved, zero |
//! | 8 | 8 | `p`: i64, the precision in nanoseconds |
//! | 16 | 8 | `newest`: i64, the newest bucket written, `⌊t / p⌋` |
//! | 24 | 8 each | `m = ⌈window / p⌉ + 1` counts (u64), a ring: slot `k mod m` holds bucket `k` for `newest − m < k ≤ newest` |
//!
//! `m` is the most buckets that can count at once, so the string costs `24 + 8·m` bytes
//! whatever the limit, and a call O(m). A refund takes units from the oldest counting bucket
//! first, for the reason the exact log does. A call with another precision or window than
//! the stored one regroups the stored counts into its own buckets, each at the latest
//! instant its old bucket covered (so nothing leaves early).
//!
//! ## Switching between the layouts
//!
//! A call with `PRECISION` on an exact log, or without it on buckets (a deployment changing
//! the option), converts the stored state to its own layout, never counting a unit for less
//! time than before:
//! - exact log → buckets: each live entry `t` goes to bucket `⌊t / p⌋` (lossless);
//! - buckets → exact log: bucket `k` holding `c` units becomes `c` entries at its last
//!   instant `(k + 1)·p − 1`, or at `now` for a bucket not over yet; when they are more than
//!   the limit, only the newest `limit + 1` are kept (the others are older: they would leave
//!   first, and until they had, a log over its limit denies every take and refuses a check
//!   anyway).
//!
//! A call that writes stores the converted state; a peek or a denial leaves the key as it is
//! (the next call converts it the same way). A refund without `PRECISION` on buckets is the
//! exception: it is decided on the ring, in the ring's own precision (coarsened to a multiple
//! of it only where the call's window would span more than `Caps::CEILING`'s buckets), and
//! the ring stays, so that it gives back units out of the ring's whole count, never out of
//! the `limit + 1` a log would keep.

mod buckets;
mod exact;

use crate::caps::Caps;
use crate::error::{Error, Range, Result};
use crate::time::{Instant, MAX_DURATION, Nanos};
use crate::{Charge, Decision, Effect, Patch, Reply};

pub(crate) const INVALID: Error = Error::InvalidState("CL.WINDOW");

/// The largest limit of an exact log by default (`throttle.max-exact-limit`): its string may
/// hold two entries (16 bytes) per unit of the limit, and a larger limit is what `PRECISION`
/// is for.
pub const MAX_EXACT_LIMIT: i64 = 100_000;

/// The most buckets a window may be divided into (`⌈window / precision⌉`) by default
/// (`throttle.max-buckets`).
pub const MAX_BUCKETS: i64 = 10_000;

/// Validated parameters: at most `limit` units in any span of `window`, counted exactly or
/// per bucket of `precision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    limit: i64,
    window: Nanos,
    precision: Option<Nanos>,
    /// The most units one debit may log in an exact log (`throttle.max-exact-limit`).
    max_exact_debit: i64,
}

impl Params {
    /// Parameters within the default caps.
    pub fn new(limit: i64, window: Nanos, precision: Option<Nanos>) -> Result<Params> {
        Params::with_caps(limit, window, precision, &Caps::DEFAULT)
    }

    /// Parameters within `caps` (the largest exact limit, the most buckets).
    pub fn with_caps(limit: i64, window: Nanos, precision: Option<Nanos>, caps: &Caps) -> Result<Params> {
        let max_limit = if precision.is_some() { i64::MAX } else { caps.max_exact_limit };
        if !(1..=max_limit).contains(&limit) {
            let range = match precision {
                Some(_) => Range::Integer { min: 1, max: i64::MAX },
                None => Range::Limit { min: 1, max: caps.max_exact_limit, hint: "use PRECISION for larger limits" },
            };
            return Err(Error::OutOfRange { name: "limit", range });
        }
        if !(1..=MAX_DURATION.as_nanos()).contains(&window.as_nanos()) {
            return Err(Error::OutOfRange {
                name: "window",
                range: Range::Text("a positive duration of at most 1000000000 seconds"),
            });
        }
        if let Some(p) = precision
            && (p.as_nanos() < 1 || p > window || buckets::spanned(window, p) > caps.max_buckets)
        {
            return Err(Error::OutOfRange {
                name: "precision",
                range: Range::Text("a duration from the window divided by throttle.max-buckets to the window"),
            });
        }
        Ok(Params { limit, window, precision, max_exact_debit: caps.max_exact_limit })
    }

    pub fn limit(&self) -> i64 {
        self.limit
    }
    pub fn window(&self) -> Nanos {
        self.window
    }
    pub fn precision(&self) -> Option<Nanos> {
        self.precision
    }

    /// The reply when `used` units count at `now`, the newest of them leaving at
    /// `full_at` (`None`: nothing counts), and a denied call could retry at `retry_at`.
    fn reply(
        &self,
        now: Instant,
        limited: bool,
        used: i64,
        full_at: Option<Instant>,
        retry_at: Option<Instant>,
    ) -> Reply {
        Reply {
            limited,
            limit: self.limit,
            remaining: crate::limits::remaining(self.limit, used),
            retry_after: retry_at.map(|at| at.saturating_since(now)),
            reset_after: full_at.map_or(Nanos::ZERO, |at| at.saturating_since(now)),
        }
    }
}

/// Decides a call consuming `quantity` units at `now` against the stored string, if any
/// (either layout: a call converts the other one to its own), charged as `charge` says.
/// `quantity` 0 peeks (admitted iff the window does not hold more than the limit); a negative
/// quantity refunds the oldest units still counting, never beyond full.
/// The effect stores a [`Patch`] of the stored string, expiring when the newest action
/// leaves the window.
pub fn decide(
    stored: Option<&[u8]>,
    now: Instant,
    params: &Params,
    quantity: i64,
    charge: Charge,
) -> Result<Decision<Patch>> {
    let verdict = |used: i64| Verdict::of(quantity, used, params, charge);
    match (params.precision, stored) {
        // A refund on a ring read without PRECISION is decided in the ring's own layout and
        // precision, and the ring stays (the next call that writes converts it): a log keeps
        // only the newest `limit + 1` units, and a refund from those would forgive the rest.
        (None, Some(bytes)) if quantity < 0 && bytes.first() == Some(&buckets::VERSION) => {
            let precision = buckets::refund_precision(bytes, params.window)?;
            let params = Params { precision: Some(precision), ..*params };
            buckets::decide(stored, now, &params, precision, quantity, verdict)
        }
        (None, _) => exact::decide(stored, now, params, quantity, verdict),
        (Some(precision), _) => buckets::decide(stored, now, params, precision, quantity, verdict),
    }
}

/// The most units a bounded refund (`HELD`) of `units` may give back at `now`: only units
/// logged by the taking call (its key's expiry right after it was `held`) that still count.
pub fn held_units(stored: Option<&[u8]>, now: Instant, params: &Params, units: i64, held: Instant) -> Result<i64> {
    match (stored, params.precision) {
        (None, _) => Ok(0),
        (Some(bytes), None) => exact::held_units(bytes, now, params, units, held),
        (Some(bytes), Some(p)) => buckets::held_units(bytes, now, params, p, units, held),
    }
}

/// How a call relates to the limit, once the units in the window are known: the part of
/// deciding both layouts share.
enum Verdict {
    /// Give back up to this many units (a refund; `2^63` for `i64::MIN`: a ring's buckets may
    /// together hold more than `i64::MAX` units).
    Refund(u64),
    /// A peek, or a call that is denied (and whether it could ever be admitted): the reply
    /// only.
    Reply { limited: bool, admittable: bool },
    /// Log `quantity ≥ 1` actions: an admitted take, or a debit (`overdrawn` when the units
    /// did not fit).
    Admit { quantity: i64, overdrawn: bool },
}

impl Verdict {
    fn of(quantity: i64, used: i64, params: &Params, charge: Charge) -> Verdict {
        if quantity < 0 {
            Verdict::Refund(quantity.unsigned_abs())
        } else if charge == Charge::Debit && quantity > 0 {
            let fits = quantity <= params.limit && used.checked_add(quantity).is_some_and(|n| n <= params.limit);
            Verdict::Admit { quantity, overdrawn: !fits }
        } else if quantity > params.limit {
            Verdict::Reply { limited: true, admittable: false }
        } else if used.checked_add(quantity).is_none_or(|n| n > params.limit) {
            // A sum past i64::MAX is past every limit (saturated, it would admit at i64::MAX).
            Verdict::Reply { limited: true, admittable: true }
        } else if quantity == 0 {
            Verdict::Reply { limited: false, admittable: true }
        } else {
            Verdict::Admit { quantity, overdrawn: false }
        }
    }
}

/// The decision of a refund that empties the window: the key goes, if there was one.
fn emptied(now: Instant, params: &Params, had_units: bool) -> Decision<Patch> {
    let effect = if had_units { Effect::Delete } else { Effect::Nothing };
    Decision { reply: params.reply(now, false, 0, None, None), effect }
}

/// When an action at `at` leaves a window of `window`.
fn leaves(at: Instant, window: Nanos) -> Result<Instant> {
    at.checked_add(window)
}

/// Little-endian i64 at `offset` of `bytes`, if it is there.
fn read_i64(bytes: &[u8], offset: usize) -> Option<i64> {
    let end = offset.checked_add(8)?;
    bytes.get(offset..end)?.try_into().ok().map(i64::from_le_bytes)
}

#[cfg(test)]
mod tests;
