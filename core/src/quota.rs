//! CL.QUOTA: a calendar quota. At most `limit` units per calendar period (a minute, hour, day,
//! ISO week, month or year) in a time zone, optionally shifted to a billing anchor.
//!
//! The periods are the calendar's (`calendar`): this module counts within them.
//!
//! # Stored state
//!
//! The count as a decimal integer string (CL.COUNTER's form), on a key expiring when the
//! count ends (absolute milliseconds): the end of the period it was counted in, or later.
//! No call moves a key's expiry earlier: a live key expiring after the current period's end
//! was written under other parameters (PER, TZ or ANCHOR, or CL.COUNTER's window), or before
//! the clock stepped back, and every unit it holds belongs to a period that has not ended,
//! so the whole count stands until then. A live key expiring sooner has its count carried to
//! the current period's end (every unit was admitted at or before now, so none is in a later
//! period), and a key without an expiry ends with the current period. A call that writes (not
//! a peek) stores the count to the later of the two ends. So a unit stays counted until the
//! end of every period and window it was admitted in, and no sequence of calls on a key
//! admits more than a limit asked for in one of its periods.

use crate::calendar::{Calendar, Per, Zone, parse_anchor, period};
use crate::error::{Error, Range, Result};
use crate::time::{Instant, Nanos, Unit};
use crate::{Charge, Decision, Effect, Reply};

/// Counts stay below 10^18, as CL.COUNTER's (the same stored form).
pub const MAX_LIMIT: i64 = crate::counter::MAX_LIMIT;

/// Validated parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    limit: i64,
    calendar: Calendar,
}

impl Params {
    pub fn new(limit: i64, calendar: Calendar) -> Result<Params> {
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(Error::OutOfRange { name: "limit", range: Range::Integer { min: 1, max: MAX_LIMIT } });
        }
        Ok(Params { limit, calendar })
    }
    pub fn limit(&self) -> i64 {
        self.limit
    }
    pub fn calendar(&self) -> Calendar {
        self.calendar
    }

    fn reply(&self, limited: bool, count: i64, until_end: Nanos, retry_after: Option<Nanos>) -> Reply {
        // Nothing counted: the quota is full, as CL.COUNTER replies.
        let reset_after = if count > 0 { until_end } else { Nanos::ZERO };
        Reply {
            limited,
            limit: self.limit,
            remaining: crate::limits::remaining(self.limit, count),
            retry_after,
            reset_after,
        }
    }
}

/// The words of a quota after its key (CL.QUOTA) or its spec word (CL.ALL):
/// `limit PER unit` then, in any order, `TZ zone`, `ANCHOR instant` and the words `rest`
/// accepts (handed back for the caller's own tail parsing).
pub struct Words<'a> {
    pub limit: i64,
    pub per: Per,
    pub zone: Option<&'a [u8]>,
    pub anchor: Option<&'a [u8]>,
    /// The other words, in order (at most [`MAX_REST`]: as long as any tail a caller accepts).
    rest: [&'a [u8]; MAX_REST],
    rest_len: usize,
}

/// CL.QUOTA's longest tail: `QUANTITY q HELD t MS SHADOW DEBIT` (a longer one repeats a word,
/// a syntax error either way).
const MAX_REST: usize = 7;

impl<'a> Words<'a> {
    /// Splits `words`; a missing `PER`, or `TZ`/`ANCHOR` without a value or given twice, is
    /// an error.
    pub fn split(words: &[&'a [u8]]) -> Result<Words<'a>> {
        let [limit, per, unit, tail @ ..] = words else {
            return Err(Error::Syntax);
        };
        let limit = crate::args::integer(limit)?;
        if !crate::args::keyword(per, b"per") {
            return Err(Error::Call("expected PER unit after the limit (e.g. 1000 PER MONTH)".into()));
        }
        let per = Per::parse(unit)?;
        let (mut zone, mut anchor, mut rest, mut rest_len) = (None, None, [&[][..]; MAX_REST], 0);
        let mut it = tail.iter();
        while let Some(&word) = it.next() {
            let slot = if crate::args::keyword(word, b"tz") {
                &mut zone
            } else if crate::args::keyword(word, b"anchor") {
                &mut anchor
            } else {
                *rest.get_mut(rest_len).ok_or_else(|| Error::Syntax)? = word;
                rest_len += 1;
                continue;
            };
            if slot.is_some() {
                return Err(Error::Syntax);
            }
            *slot = Some(*it.next().ok_or_else(|| Error::Syntax)?);
        }
        Ok(Words { limit, per, zone, anchor, rest, rest_len })
    }

    /// The words other than the quota's own, for the caller's tail.
    pub fn rest(&self) -> &[&'a [u8]] {
        &self.rest[..self.rest_len]
    }

    /// The parameters, times of `ANCHOR` in `unit`.
    pub fn params(&self, unit: Unit) -> Result<Params> {
        let zone = self.zone.map(Zone::parse).transpose()?.unwrap_or(Zone::UTC);
        let anchor_ms = self.anchor.map(|a| parse_anchor(a, unit)).transpose()?;
        Params::new(self.limit, Calendar { per: self.per, zone, anchor_ms })
    }
}

/// The live key: its count and its expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    pub count: i64,
    pub expires_at: Instant,
}

/// Reads a stored count and its key's absolute expiry (`None`: no expiry, a mismatch).
#[inline]
pub fn decode(stored: &[u8], expires_at_ms: Option<i64>) -> Result<State> {
    let (count, expires_at) = crate::limits::integer_with_expiry(stored, expires_at_ms, 0, "CL.QUOTA")?;
    if count > MAX_LIMIT {
        return Err(Error::InvalidState("CL.QUOTA"));
    }
    Ok(State { count, expires_at })
}

/// A stored count without an expiry (`PERSIST`, `RESTORE key 0 …`, a `SET` without
/// `KEEPTTL`), or with one beyond the nanosecond range: no call decided when it ends.
const NO_EXPIRY: Instant = Instant::from_nanos(i64::MAX);

/// Decides a call consuming `quantity` units at `now`, charged as `charge` says. 0 peeks
/// (nothing written; admitted iff the count is not over the limit); a negative quantity
/// refunds, never below zero.
#[inline(always)]
pub fn decide(
    state: Option<State>,
    now: Instant,
    params: &Params,
    quantity: i64,
    charge: Charge,
) -> Result<Decision<i64>> {
    let period = period(&params.calendar, now)?;
    let live = state.filter(|s| s.expires_at > now);
    // The count ends at the later of the key's expiry and this period's end: an expiry some
    // call decided (another calendar's period, a counter's window, before the clock stepped
    // back) is never moved earlier, so every unit stays counted until the end of each period
    // it was admitted in. A key without an expiry ends with this period.
    let end = match live {
        Some(s) if s.expires_at != NO_EXPIRY => s.expires_at.max(period.end),
        _ => period.end,
    };
    let moved = live.is_some_and(|s| s.expires_at != end);
    let count = live.map_or(0, |s| s.count);
    let until_end = end.saturating_since(now);
    let store = |count: i64| Effect::Store { state: count, expires_at: end };
    let denied_effect = if moved && quantity != 0 { store(count) } else { Effect::Nothing };

    if quantity < 0 {
        if live.is_none() {
            return Ok(Decision { reply: params.reply(false, 0, until_end, None), effect: Effect::Nothing });
        }
        let count = count.saturating_sub(crate::limits::refunded(quantity)).max(0);
        let effect = if count == 0 { Effect::Delete } else { store(count) };
        return Ok(Decision { reply: params.reply(false, count, until_end, None), effect });
    }
    if charge == Charge::Debit && quantity > 0 {
        // Counted whatever the limit says; over it, a take waits for the count to end.
        let fits = count.saturating_add(quantity) <= params.limit;
        let count = crate::counter::debited(count, quantity)?;
        let retry_after = (!fits && quantity <= params.limit).then_some(until_end);
        return Ok(Decision { reply: params.reply(!fits, count, until_end, retry_after), effect: store(count) });
    }
    if quantity > params.limit {
        return Ok(Decision { reply: params.reply(true, count, until_end, None), effect: denied_effect });
    }
    if count.saturating_add(quantity) > params.limit {
        // The next period starts empty and `quantity <= limit`: retry when it begins.
        return Ok(Decision { reply: params.reply(true, count, until_end, Some(until_end)), effect: denied_effect });
    }
    if quantity == 0 {
        return Ok(Decision { reply: params.reply(false, count, until_end, None), effect: Effect::Nothing });
    }
    let count = count + quantity;
    Ok(Decision { reply: params.reply(false, count, until_end, None), effect: store(count) })
}

#[cfg(test)]
mod tests;
