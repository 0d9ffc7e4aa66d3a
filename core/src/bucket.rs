//! CL.BUCKET: a token bucket refilled by whole intervals. A bucket starts full with
//! `capacity` tokens; every whole `interval` after its refill clock started, `tokens` tokens
//! are added, never beyond `capacity`. The clock starts when a full bucket is first drawn
//! from (on the whole millisecond at or before the draw, so no wait exceeds the intervals
//! it needs) and then only ever advances by whole intervals, so refills never drift,
//! however the calls fall between them.
//!
//! # Stored state
//!
//! As small as a counter: the key holds `−D`, minus the bucket's deficit (tokens missing from
//! full, at least 1; above the capacity after a `DEBIT` overdrew it: debt) as a decimal integer, measured when the key was last written (negative,
//! so that no bucket value reads as another limiter's: see `kind`); the key
//! expires at `full_at` (`PEXPIRETIME key`, whole milliseconds), the refill at which the
//! bucket is full again. No key means a full bucket.
//!
//! The refill grid is implied: refills happen at `full_at − j·interval` (`j ≥ 0`), and the
//! last `n = ⌈D / tokens⌉` of them refill the stored deficit. At `now`, with
//! `r = ⌈(full_at − now) / interval⌉` grid refills still ahead (a refill at exactly `now`
//! has happened), the bucket holds `capacity − (D − (n − min(r, n))·tokens)` tokens. The
//! `min` covers the instants between a draw and its clock's first refill.
//!
//! A stored deficit above the capacity (a debit overdrew the bucket, or the capacity was
//! lowered) is debt, read as it is: it is repaid refill by refill before the bucket admits
//! again. A key stamped further ahead than its deficit's refills allow
//! (`full_at > ⌊now⌋ₘₛ + ⌈D / tokens⌉·interval`: the clock stepped back, the capacity or
//! the rate was lowered, or the key lost its expiry: `PERSIST`, `RESTORE key 0 …`, a `SET`
//! without `KEEPTTL`) is read as if its grid restarted now, so it refills within the time
//! its deficit needs instead of waiting for the clock to catch up; a call other than a peek
//! stores it so.

use crate::error::{Error, Range, Result};
use crate::time::{Instant, MAX_DURATION, Nanos};
use crate::{Charge, Decision, Effect, Reply};

/// A bucket that is not full: `deficit` tokens missing when it was stored, full at `full_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    pub deficit: i64,
    pub full_at: Instant,
}

/// Reads a stored `−deficit` and its key's absolute expiry in milliseconds. A deficit below
/// one is not a bucket's state. A deficit above the capacity is accepted (debt, or the
/// capacity was lowered), and so is a key without an expiry (or with one
/// beyond the nanosecond range): it is full too far ahead, and deciding pulls it back.
#[inline]
pub fn decode(stored: &[u8], expires_at_ms: Option<i64>) -> Result<State> {
    let (negated, full_at) = crate::limits::integer_with_expiry(stored, expires_at_ms, i64::MIN, "CL.BUCKET")?;
    match negated.checked_neg() {
        Some(deficit) if deficit >= 1 => Ok(State { deficit, full_at }),
        _ => Err(Error::InvalidState("CL.BUCKET")),
    }
}

/// The stored form of a deficit: its negation.
fn encode(deficit: i64) -> i64 {
    -deficit
}

/// Validated parameters: `capacity` tokens when full, `tokens` more every `interval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    capacity: i64,
    tokens: i64,
    interval: Nanos,
}

impl Params {
    /// `interval` must be a positive whole number of milliseconds (as every time argument
    /// is), so that refills fall on whole milliseconds and the key's expiry is exact.
    /// The time to refill an empty bucket must fit in 64-bit nanoseconds.
    pub fn new(capacity: i64, tokens: i64, interval: Nanos) -> Result<Params> {
        if capacity < 1 {
            return Err(Error::OutOfRange { name: "capacity", range: Range::Integer { min: 1, max: i64::MAX } });
        }
        if tokens < 1 {
            return Err(Error::OutOfRange { name: "tokens", range: Range::Integer { min: 1, max: i64::MAX } });
        }
        crate::time::whole_millis(interval, "interval")?;
        let params = Params { capacity, tokens, interval };
        let refill_all = interval.checked_mul(params.refills_to_cover(capacity)).ok();
        if refill_all.is_none_or(|ns| ns > MAX_DURATION.as_nanos()) {
            return Err(Error::SpanTooLong("interval * ceil(capacity / tokens)"));
        }
        Ok(params)
    }

    pub fn capacity(&self) -> i64 {
        self.capacity
    }
    pub fn tokens(&self) -> i64 {
        self.tokens
    }
    pub fn interval(&self) -> Nanos {
        self.interval
    }

    /// Refills needed to make up a deficit `d ≥ 0`: `⌈d / tokens⌉`.
    fn refills_to_cover(&self, d: i64) -> i64 {
        d / self.tokens + i64::from(d % self.tokens != 0)
    }

    fn reply(&self, limited: bool, deficit: i64, reset_after: Nanos, retry_after: Option<Nanos>) -> Reply {
        Reply {
            limited,
            limit: self.capacity,
            remaining: crate::limits::remaining(self.capacity, deficit),
            retry_after,
            reset_after,
        }
    }
}

/// A bucket at `now`: its deficit and the refill grid ahead of it.
#[derive(Clone, Copy)]
struct Now {
    deficit: i64,
    /// Whether the stored `full_at` was pulled back (the clock stepped back).
    stepped: bool,
    /// The next refill strictly after `now` (meaningful when `deficit > 0`).
    next_refill: Instant,
}

impl Now {
    fn of(state: Option<State>, now: Instant, p: &Params) -> Result<Now> {
        let start = now.whole_milli_at_or_before();
        // A bucket is full at most `⌈deficit / tokens⌉` refills after the whole millisecond
        // at or before now (a draw starts or keeps a grid whose next refill is at most one
        // interval ahead). A later `full_at` (the clock stepped back, the parameters were
        // lowered, the key lost its expiry) restarts the grid now, so no user waits longer
        // than the refills their deficit needs. A deficit above the capacity is debt: the
        // ceiling is that of the whole deficit.
        let mut stepped = false;
        let state = state.map(|s| {
            let deficit = s.deficit;
            let ceiling = start.as_ref().ok().and_then(|start| {
                let d = p.interval.checked_mul(p.refills_to_cover(deficit)).ok().and_then(Nanos::new)?;
                start.checked_add(d).ok()
            });
            let full_at = ceiling.map_or(s.full_at, |c| s.full_at.min(c));
            stepped = full_at < s.full_at;
            State { deficit, full_at }
        });
        let Some(state) = state.filter(|s| s.full_at > now) else {
            // Full: a draw starts the clock on the whole millisecond at or before now.
            return Ok(Now { deficit: 0, stepped: false, next_refill: start?.checked_add(p.interval)? });
        };
        // The deficit is made up by the last `n` grid refills up to `full_at`.
        let deficit = state.deficit;
        let n = p.refills_to_cover(deficit);
        let until_full = state.full_at.saturating_since(now).as_nanos();
        let ahead = (until_full / p.interval.as_nanos() + i64::from(until_full % p.interval.as_nanos() != 0)).min(n);
        // (n − ahead)·tokens < deficit since ahead ≥ 1, and (ahead − 1)·interval <
        // full_at − now: neither overflows.
        let deficit = deficit - (n - ahead) * p.tokens;
        let next_refill = state
            .full_at
            .checked_sub(Nanos::new((ahead - 1) * p.interval.as_nanos()).ok_or_else(|| Error::TooLarge)?)?;
        Ok(Now { deficit, stepped, next_refill })
    }

    /// The refill at which the deficit is at most `target`, and `now` when it already is.
    fn refill_covering(&self, target: i64, now: Instant, p: &Params) -> Result<Instant> {
        let missing = self.deficit.saturating_sub(target);
        if missing <= 0 {
            return Ok(now);
        }
        let later = p.interval.checked_mul(p.refills_to_cover(missing) - 1)?;
        self.next_refill.checked_add(Nanos::new(later).ok_or_else(|| Error::TooLarge)?)
    }

    /// The effect and reply of leaving the bucket with `deficit` after an accepted call: the
    /// grid stays, and the key expires at the grid refill that covers the new deficit.
    /// The effect of a denial: nothing, but for a pulled-back bucket, which is stored so
    /// that it refills from now (see `throttle::decide`).
    fn denied_effect(&self, now: Instant, p: &Params) -> Result<Effect<i64>> {
        match self.stepped && self.deficit > 0 {
            true => Ok(Effect::Store { state: encode(self.deficit), expires_at: self.refill_covering(0, now, p)? }),
            false => Ok(Effect::Nothing),
        }
    }

    fn settle(&self, deficit: i64, now: Instant, p: &Params, had_state: bool) -> Result<Decision<i64>> {
        let full_at = Now { deficit, ..*self }.refill_covering(0, now, p)?;
        let effect = match (deficit, had_state) {
            (0, true) => Effect::Delete,
            (0, false) => Effect::Nothing,
            _ => Effect::Store { state: encode(deficit), expires_at: full_at },
        };
        Ok(Decision { reply: p.reply(false, deficit, full_at.saturating_since(now), None), effect })
    }

    /// A debit of `quantity ≥ 1` tokens: the deficit grows by them whatever the capacity says
    /// (past it: debt), the bucket settled as after a draw; `limited` when they did not fit,
    /// with a retry time (for a draw of as many tokens on the bucket the debit leaves) unless
    /// they never could. The refills repaying the new deficit must span a duration.
    fn debit(&self, quantity: i64, now: Instant, p: &Params, had_state: bool) -> Result<Decision<i64>> {
        let too_long = || Error::SpanTooLong("interval * ceil(deficit / tokens)");
        let deficit = self.deficit.checked_add(quantity).ok_or_else(too_long)?;
        if p.interval.checked_mul(p.refills_to_cover(deficit)).ok().is_none_or(|ns| ns > MAX_DURATION.as_nanos()) {
            return Err(too_long());
        }
        let mut decision = self.settle(deficit, now, p, had_state)?;
        if deficit > p.capacity {
            let after = Now { deficit, ..*self };
            decision.reply.limited = true;
            decision.reply.retry_after = match quantity <= p.capacity {
                true => Some(after.refill_covering(p.capacity - quantity, now, p)?.saturating_since(now)),
                false => None,
            };
        }
        Ok(decision)
    }
}

/// The most tokens a bounded refund (`HELD`) of `units` may put back at `now`: none once
/// `now ≥ held` (the bucket the draw left was full again by then), else what the refills of
/// the bucket's grid from now to `held` would still add (the tokens the draw still holds
/// are among those), at most `units`. `held` is the key's expiry right after the draw
/// (`PEXPIRETIME`: a whole millisecond on the grid).
///
/// Exact when `tokens` is 1, and for a refund before any refill came. Otherwise the refill at
/// `held` may have been only partly the draw's (it made up the draw's deficit and overshot by
/// up to `tokens − 1`), which `held` does not say, and a later draw may have used the spare:
/// after a refill came between the draw and the refund, this can exceed what the draw still
/// holds by up to `tokens − 1`. No rule can tell: two histories leave the same key, `held`
/// and quantity, one needing everything back (a refund sent at once), the other `tokens − 1`
/// less (`held_tests::no_bounded_bucket_refund_can_be_exact_with_several_tokens_per_refill`;
/// the reply page shows them).
pub fn held_units(state: Option<State>, now: Instant, params: &Params, units: i64, held: Instant) -> Result<i64> {
    if now >= held || units <= 0 {
        return Ok(0);
    }
    let bucket = Now::of(state, now, params)?;
    if bucket.deficit == 0 || held < bucket.next_refill {
        return Ok(0);
    }
    let refills = (held.saturating_since(bucket.next_refill).as_nanos() / params.interval.as_nanos()).saturating_add(1);
    Ok(refills.saturating_mul(params.tokens).min(units).min(bucket.deficit))
}

/// Decides a call drawing `quantity` tokens at `now` from the stored bucket, if any, charged as
/// `charge` says. `quantity` 0 peeks (admitted iff the bucket is not in debt); a negative
/// quantity puts tokens back, never beyond `capacity`.
#[inline(always)]
pub fn decide(
    state: Option<State>,
    now: Instant,
    params: &Params,
    quantity: i64,
    charge: Charge,
) -> Result<Decision<i64>> {
    let had_state = state.is_some_and(|s| s.full_at > now);
    let bucket = Now::of(state, now, params)?;
    let reset_after = bucket.refill_covering(0, now, params)?.saturating_since(now);

    if quantity < 0 {
        let deficit = bucket.deficit.saturating_sub(crate::limits::refunded(quantity)).max(0);
        return bucket.settle(deficit, now, params, had_state);
    }
    if charge == Charge::Debit && quantity > 0 {
        return bucket.debit(quantity, now, params, had_state);
    }
    if quantity > params.capacity {
        return Ok(Decision {
            reply: params.reply(true, bucket.deficit, reset_after, None),
            effect: bucket.denied_effect(now, params)?,
        });
    }
    // The deficit may exceed the capacity (debt), and their sum overflow (a capacity near
    // i64::MAX): then it is above the capacity too.
    let Some(deficit) = bucket.deficit.checked_add(quantity).filter(|&d| d <= params.capacity) else {
        let retry_after = Some(bucket.refill_covering(params.capacity - quantity, now, params)?.saturating_since(now));
        // A peek (of a bucket in debt) stays pure.
        let effect = if quantity == 0 { Effect::Nothing } else { bucket.denied_effect(now, params)? };
        return Ok(Decision { reply: params.reply(true, bucket.deficit, reset_after, retry_after), effect });
    };
    if quantity == 0 {
        return Ok(Decision { reply: params.reply(false, bucket.deficit, reset_after, None), effect: Effect::Nothing });
    }
    bucket.settle(deficit, now, params, had_state)
}

#[cfg(test)]
mod tests;
