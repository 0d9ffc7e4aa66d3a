//! CL.COUNTER: a fixed window counter, the cheapest limiter. A window opens at the first
//! counted action and lasts `window`; at most `limit` units are admitted in it.
//!
//! # Stored state
//!
//! A plain integer string, the units counted in the open window (`GET key`), on a key that
//! expires when the window closes (`PEXPIRETIME key`). No key means no open window. The
//! window opens on a whole millisecond (the last at or before the first counted action), so
//! the key's millisecond expiry is exactly the instant the window closes and no reply time
//! exceeds the window.
//!
//! A stored close is never moved earlier, even one beyond a window from now (the clock
//! stepped back, the window was shortened, or CL.QUOTA counted on the key to its period's
//! end): some call decided it, and every unit the count holds stays counted until then, so
//! no sequence of calls on a key admits more than a limit asked for in its window or
//! period. A key that lost its expiry (`PERSIST`, `RESTORE key 0 …`, a `SET` without
//! `KEEPTTL`) is read as closing one window from now, and a call other than a peek stores it
//! so.

use crate::error::{Error, Range, Result};
use crate::time::{Instant, Nanos};
use crate::{Charge, Decision, Effect, Reply};

/// An open window: `count` units counted, closing at `closes_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    pub count: i64,
    pub closes_at: Instant,
}

/// Reads a stored count and its key's absolute expiry in milliseconds. A negative count is
/// not a counter's state; a count without an expiry (or with one beyond the nanosecond
/// range) closes too far ahead, and deciding pulls it back.
#[inline]
pub fn decode(stored: &[u8], expires_at_ms: Option<i64>) -> Result<State> {
    let (count, closes_at) = crate::limits::integer_with_expiry(stored, expires_at_ms, 0, "CL.COUNTER")?;
    if count > MAX_LIMIT {
        return Err(Error::InvalidState("CL.COUNTER"));
    }
    Ok(State { count, closes_at })
}

/// Counts stay below 10^18, so that no count reads as a CL.THROTTLE TAT (see `kind`).
pub const MAX_LIMIT: i64 = crate::throttle::MIN_TAT - 1;

/// Validated parameters: at most `limit` units per window of `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    limit: i64,
    window: Nanos,
}

impl Params {
    /// `window` must be a positive whole number of milliseconds (as every time argument
    /// is), so that a window opening on a whole millisecond closes on one.
    pub fn new(limit: i64, window: Nanos) -> Result<Params> {
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(Error::OutOfRange { name: "limit", range: Range::Integer { min: 1, max: MAX_LIMIT } });
        }
        crate::time::whole_millis(window, "window")?;
        Ok(Params { limit, window })
    }

    pub fn limit(&self) -> i64 {
        self.limit
    }
    pub fn window(&self) -> Nanos {
        self.window
    }

    fn reply(&self, limited: bool, count: i64, until_close: Nanos, retry_after: Option<Nanos>) -> Reply {
        // A window with nothing counted is as good as closed: the limiter is full.
        let reset_after = if count > 0 { until_close } else { Nanos::ZERO };
        Reply {
            limited,
            limit: self.limit,
            remaining: crate::limits::remaining(self.limit, count),
            retry_after,
            reset_after,
        }
    }
}

/// Decides a call consuming `quantity` units at `now` against the open window, if any, charged
/// as `charge` says. `quantity` 0 peeks (admitted iff the count is not over the limit); a
/// negative quantity refunds, never below zero counted.
#[inline(always)]
pub fn decide(
    state: Option<State>,
    now: Instant,
    params: &Params,
    quantity: i64,
    charge: Charge,
) -> Result<Decision<i64>> {
    // A stored close is never moved earlier: some call decided it (this window, a longer
    // one, a CL.QUOTA period, or before the clock stepped back), and every unit counted stays
    // counted until then. A count without an expiry (or with one beyond the nanosecond
    // range) closes one window from now, and a call other than a peek stores that close.
    let unbounded = state.is_some_and(|s| s.closes_at == Instant::from_nanos(i64::MAX));
    let ceiling = now.whole_milli_at_or_before().and_then(|t| t.checked_add(params.window)).ok();
    let stepped = unbounded && ceiling.is_some();
    let open = state
        .map(|s| State { closes_at: if unbounded { ceiling.unwrap_or(s.closes_at) } else { s.closes_at }, ..s })
        .filter(|s| s.closes_at > now);
    // A denial stores the close it set (a peek stays pure): see `throttle::decide`.
    let denied_effect = match open {
        Some(open) if stepped && quantity != 0 => Effect::Store { state: open.count, expires_at: open.closes_at },
        _ => Effect::Nothing,
    };
    let count = open.map_or(0, |s| s.count);
    let until_close = open.map_or(Nanos::ZERO, |s| s.closes_at.saturating_since(now));

    if quantity < 0 {
        let Some(open) = open else {
            return Ok(Decision { reply: params.reply(false, 0, Nanos::ZERO, None), effect: Effect::Nothing });
        };
        let count = count.saturating_sub(crate::limits::refunded(quantity)).max(0);
        let effect =
            if count == 0 { Effect::Delete } else { Effect::Store { state: count, expires_at: open.closes_at } };
        return Ok(Decision { reply: params.reply(false, count, until_close, None), effect });
    }
    let closes_at = || match open {
        Some(open) => Ok(open.closes_at),
        None => now.whole_milli_at_or_before()?.checked_add(params.window),
    };
    if charge == Charge::Debit && quantity > 0 {
        // Counted whatever the limit says, in the open window or one it opens; over the limit,
        // a take waits for the window to close.
        let fits = count.saturating_add(quantity) <= params.limit;
        let count = debited(count, quantity)?;
        let closes_at = closes_at()?;
        let until_close = closes_at.saturating_since(now);
        let retry_after = (!fits && quantity <= params.limit).then_some(until_close);
        let reply = params.reply(!fits, count, until_close, retry_after);
        return Ok(Decision { reply, effect: Effect::Store { state: count, expires_at: closes_at } });
    }
    if quantity > params.limit {
        return Ok(Decision { reply: params.reply(true, count, until_close, None), effect: denied_effect });
    }
    // `quantity <= limit`, so a denial only happens in an open window: retry when it closes.
    if count.saturating_add(quantity) > params.limit {
        return Ok(Decision {
            reply: params.reply(true, count, until_close, Some(until_close)),
            effect: denied_effect,
        });
    }
    if quantity == 0 {
        return Ok(Decision { reply: params.reply(false, count, until_close, None), effect: Effect::Nothing });
    }
    let closes_at = closes_at()?;
    let count = count + quantity;
    let reply = params.reply(false, count, closes_at.saturating_since(now), None);
    Ok(Decision { reply, effect: Effect::Store { state: count, expires_at: closes_at } })
}

/// `count + quantity` of a debit, which must stay a counter's stored form (below 10^18, so
/// that it never reads as a TAT).
pub(crate) fn debited(count: i64, quantity: i64) -> Result<i64> {
    count.checked_add(quantity).filter(|&c| c <= MAX_LIMIT).ok_or_else(|| Error::DebitTooLarge(MAX_LIMIT))
}

#[cfg(test)]
mod tests;
