//! CL.THROTTLE: GCRA, exactly as redis-cell computes it (so keys and replies carry over), in checked
//! integer nanoseconds. The state is the theoretical arrival time (TAT): the instant at
//! which the limiter will be full again. A missing state, or a TAT in the past, is full.
//!
//! A stored TAT beyond `now + tolerance` is read as it is, as redis-cell reads it: a `DEBIT`
//! leaves such a TAT (units counted past the burst), and a debt cannot be told apart from a
//! clock that stepped back, so forgiving either would over-admit. After a step back of the
//! clock, a limiter therefore waits out the step (at most the time its TAT was ahead).

use crate::error::{Error, Range, Result};
use crate::time::{Instant, MAX_DURATION, Nanos};
use crate::{Charge, Decision, Effect, Reply};

/// Validated parameters: `limit = max_burst + 1` units at once, one more every
/// `emission_interval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Time one unit occupies: `floor(period / count)`, at least 1 ns.
    emission_interval: Nanos,
    /// `max_burst + 1`.
    limit: i64,
    /// The delay variation tolerance: `emission_interval × limit`, how far ahead of now
    /// the TAT may run.
    tolerance: Nanos,
}

impl Params {
    #[inline(always)]
    pub fn new(max_burst: i64, count: i64, period: Nanos) -> Result<Params> {
        // The tolerance, at least one nanosecond per unit of the limit, is at most MAX_DURATION.
        if !(0..MAX_DURATION.as_nanos()).contains(&max_burst) {
            return Err(Error::OutOfRange {
                name: "max_burst",
                range: Range::Integer { min: 0, max: MAX_DURATION.as_nanos() - 1 },
            });
        }
        // At least a nanosecond per unit over the longest period.
        if !(1..=MAX_DURATION.as_nanos()).contains(&count) {
            return Err(Error::OutOfRange {
                name: "count",
                range: Range::Integer { min: 1, max: MAX_DURATION.as_nanos() },
            });
        }
        let emission_interval = Nanos::new(period.as_nanos() / count)
            .filter(|ei| ei.as_nanos() > 0)
            .ok_or_else(|| Error::RateTooFast { period: "period", count: "count" })?;
        let limit = max_burst + 1;
        let tolerance = emission_interval
            .checked_mul_nanos(limit as u64)
            .ok()
            .filter(|t| *t <= MAX_DURATION)
            .ok_or_else(|| Error::SpanTooLong("(max_burst + 1) * period / count"))?;
        Ok(Params { emission_interval, limit, tolerance })
    }

    pub fn limit(&self) -> i64 {
        self.limit
    }
    pub fn emission_interval(&self) -> Nanos {
        self.emission_interval
    }
    pub fn tolerance(&self) -> Nanos {
        self.tolerance
    }

    /// Units a limiter whose TAT is `ttl` ahead of now could still admit.
    #[inline]
    fn remaining(&self, ttl: Nanos) -> i64 {
        let free = self.tolerance.as_nanos() - ttl.as_nanos();
        (free.div_euclid(self.emission_interval.as_nanos())).clamp(0, self.limit)
    }

    #[inline]
    fn reply(&self, limited: bool, ttl: Nanos, retry_after: Option<Nanos>) -> Reply {
        Reply { limited, limit: self.limit, remaining: self.remaining(ttl), retry_after, reset_after: ttl }
    }
}

/// Decides a call consuming `quantity` units at `now` against the stored `tat`, charged as
/// `charge` says. `quantity` 0 peeks (admitted iff the limiter is not over its limit); a
/// negative quantity refunds, never beyond full.
#[inline(always)]
pub fn decide(
    tat: Option<Instant>,
    now: Instant,
    params: &Params,
    quantity: i64,
    charge: Charge,
) -> Result<Decision<Instant>> {
    let tat = tat.map_or(now, |tat| tat.max(now));
    let ttl = tat.saturating_since(now);

    if quantity < 0 {
        // A refund moves the TAT back by the units returned, stopping at now (full).
        return Ok(refund(
            tat,
            now,
            params,
            params.emission_interval.as_nanos().saturating_mul(crate::limits::refunded(quantity)),
        ));
    }
    if charge == Charge::Debit && quantity > 0 {
        return debit(tat, now, params, quantity);
    }

    if quantity > params.limit {
        // More than a full limiter holds: never admitted, so no retry time.
        return Ok(Decision { reply: params.reply(true, ttl, None), effect: Effect::Nothing });
    }

    let increment = params.emission_interval.checked_mul_nanos(quantity as u64)?;
    let new_tat = tat.checked_add(increment)?;
    let allow_at = new_tat.checked_sub(params.tolerance)?;
    if now < allow_at {
        let retry_after = allow_at.saturating_since(now);
        return Ok(Decision { reply: params.reply(true, ttl, Some(retry_after)), effect: Effect::Nothing });
    }
    let reply = params.reply(false, new_tat.saturating_since(now), None);
    let effect = if quantity == 0 { Effect::Nothing } else { Effect::Store { state: new_tat, expires_at: new_tat } };
    Ok(Decision { reply, effect })
}

/// A debit of `quantity ≥ 1` units on the TAT `tat ≥ now`: the TAT moves on by the units
/// whatever the limit says, `limited` when they did not fit; a retry time, when they did not,
/// for a take of as many units on the TAT the debit leaves. `quantity × EI` must be a
/// duration and the new TAT an instant.
fn debit(tat: Instant, now: Instant, params: &Params, quantity: i64) -> Result<Decision<Instant>> {
    let increment = params
        .emission_interval
        .checked_mul_nanos(quantity as u64)
        .ok()
        .filter(|i| *i <= MAX_DURATION)
        .ok_or_else(|| Error::SpanTooLong("quantity * period / count"))?;
    let new_tat = tat.checked_add(increment)?;
    let fits = quantity <= params.limit && now >= new_tat.checked_sub(params.tolerance)?;
    let retry_after = match fits || quantity > params.limit {
        true => None,
        // `new_TAT + increment − tolerance`, and `increment ≤ tolerance` (a quantity within the
        // limit): never past the new TAT.
        false => Some(new_tat.checked_sub(params.tolerance.saturating_sub(increment))?.saturating_since(now)),
    };
    let reply = params.reply(!fits, new_tat.saturating_since(now), retry_after);
    Ok(Decision { reply, effect: Effect::Store { state: new_tat, expires_at: new_tat } })
}

/// A refund moving `tat` back by `back` nanoseconds, stopping at now (full).
fn refund(tat: Instant, now: Instant, params: &Params, back: i64) -> Decision<Instant> {
    let new_tat = Instant::from_nanos(tat.as_nanos().saturating_sub(back.max(0))).max(now);
    let ttl = new_tat.saturating_since(now);
    let effect = if new_tat <= now { Effect::Delete } else { Effect::Store { state: new_tat, expires_at: new_tat } };
    Decision { reply: params.reply(false, ttl, None), effect }
}

/// A bounded refund (`HELD`): gives `units ≥ 1` back, but no more than the limiter still
/// holds of them at `now`. `held` is the key's expiry right after the call that took them
/// (`PEXPIRETIME`, whole milliseconds: that call's TAT lies in `(held − 1 ms, held]`).
///
/// The TAT moves back by `min(units·EI, max(0, held⁻ − now))`, `held⁻ = held − 1 ms + 1 ns`
/// the least that TAT can have been. Why it is safe: every later call maps the TAT as
/// `x ↦ max(c, x + a)`, `c` its own instant (at or before now), so the TAT
/// with the units taken stays ahead of the TAT of the same history without them by at least
/// `min(units·EI, TAT_taken − now)` as long as no other refund pulls the TAT back: moving
/// back by that much never admits more than that history would.
pub fn refund_held(
    tat: Option<Instant>,
    now: Instant,
    params: &Params,
    units: i64,
    held: Instant,
) -> Result<Decision<Instant>> {
    let tat = tat.map_or(now, |tat| tat.max(now));
    let least = held.as_nanos().saturating_sub(crate::time::NANOS_PER_MILLI - 1);
    let still = least.saturating_sub(now.as_nanos()).max(0);
    let back = params.emission_interval.as_nanos().saturating_mul(units.max(0)).min(still);
    Ok(refund(tat, now, params, back))
}

/// The smallest TAT CL.THROTTLE reads (an instant in 2001): anything smaller is another
/// limiter's value (see [`crate::limiter`]).
pub const MIN_TAT: i64 = 1_000_000_000_000_000_000;

/// The stored form: redis-cell's, the TAT as decimal nanoseconds since the Unix epoch (from
/// 2001 on: smaller values are other limiters').
#[inline]
pub fn decode(stored: &[u8]) -> Result<Instant> {
    crate::args::integer(stored)
        .ok()
        .filter(|&ns| ns >= MIN_TAT)
        .map(Instant::from_nanos)
        .ok_or_else(|| Error::InvalidState("CL.THROTTLE"))
}

#[cfg(test)]
mod tests;
