//! CL.PACE: the leaky bucket as a meter (uber-go/ratelimit's `Take()`, shared by every caller).
//! Callers are not refused but scheduled: one unit every `emission_interval = floor(period /
//! count)`, so work leaves evenly spaced however it arrives. A call reserves the next free slot
//! `at = max(now, TAT)` if it is at most `max_wait` away, and moves the TAT on by its quantity.
//!
//! The state is the TAT as decimal nanoseconds behind the letter `P` (`P1795354456188603542`),
//! on a key expiring at the TAT: a stored form of its own, so that no other command reads a
//! pacer's key (CL.THROTTLE and CL.ALL answer WRONGTYPE, as CL.PACE does on their keys). It
//! used to be CL.THROTTLE's bare TAT, and the two commands shared keys: CL.THROTTLE reads a
//! TAT beyond its tolerance as a clock step and stores the cut-back one even when it denies,
//! which erased a pacer's queue and handed its slots out again. A bare TAT (CL.THROTTLE's,
//! or a pacer key the previous version wrote) is WRONGTYPE here.
//!
//! Two deliberate rules:
//! - **No clock-step clamp.** A TAT far ahead is a queue of reservations other callers already
//!   hold (their MAXWAIT may be longer than this caller's): cutting it would give a slot twice
//!   and break "never faster". A clock stepped back therefore delays pacing by the step.
//! - **No refunds.** A reservation is a point in a shared schedule: giving one back would move
//!   the TAT back under later reservations and hand their slots out a second time. `QUANTITY 0`
//!   peeks (the wait a call would get); negative quantities are refused.

use crate::args::duration;
use crate::command::{Arg, Command, Keys, Parsed};
use crate::error::{Error, Range, Result};
use crate::limiter::Algorithm;
use crate::time::{Instant, MAX_DURATION, Nanos, Unit};
use crate::{Decision, Effect, throttle};

pub static COMMAND: Command = Command {
    name: "cl.pace",
    summary: "Schedules work evenly: reserves the next free slot of count per period if it is at most maxwait away (the leaky bucket as a meter); BLOCK waits for the slot on the server.",
    complexity: "O(1)",
    since: "1.1.0",
    // Like XREAD and BLPOP: `blocking` (ACL @blocking), and not `fast`, as BLOCK may hold the
    // connection (the call itself is O(1)); so @slow, which the server gives its own commands
    // that are not @fast but a module's only when declared.
    flags: "write deny-oom blocking",
    acl_categories: "write slow blocking",
    keys: Keys::One,
    args: &[Arg::integer("count"), Arg::duration("period"), MAXWAIT, Arg::QUANTITY_OPTION, Arg::MS, BLOCK, Arg::SHADOW],
};

/// `MAXWAIT w`: the longest wait a call accepts (default: one period).
const MAXWAIT: Arg = Arg::option("maxwait", "MAXWAIT");
/// `BLOCK`: the server holds the reply until the slot arrives.
const BLOCK: Arg = Arg::flag("block", "BLOCK");

/// Validated parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Time one unit occupies in the schedule: `floor(period / count)`, at least 1 ns.
    emission_interval: Nanos,
    /// The longest wait a call accepts.
    max_wait: Nanos,
}

impl Params {
    /// `max_wait` defaults to `period`.
    pub fn new(count: i64, period: Nanos, max_wait: Option<Nanos>) -> Result<Params> {
        if !(1..=MAX_DURATION.as_nanos()).contains(&count) {
            return Err(Error::OutOfRange {
                name: "count",
                range: Range::Integer { min: 1, max: MAX_DURATION.as_nanos() },
            });
        }
        let emission_interval = Nanos::new(period.as_nanos() / count)
            .filter(|ei| ei.as_nanos() > 0)
            .ok_or_else(|| Error::RateTooFast { period: "period", count: "count" })?;
        Ok(Params { emission_interval, max_wait: max_wait.unwrap_or(period) })
    }

    pub fn emission_interval(&self) -> Nanos {
        self.emission_interval
    }
    pub fn max_wait(&self) -> Nanos {
        self.max_wait
    }

    /// A reservation of `quantity` units: 0 (a peek) or more, spanning at most
    /// [`MAX_DURATION`], so that no instant a call computes can overflow.
    pub fn check_quantity(&self, quantity: i64) -> Result<()> {
        let max = MAX_DURATION.as_nanos();
        if !(0..=max).contains(&quantity) {
            return Err(Error::OutOfRange {
                name: "quantity",
                range: Range::Limit { min: 0, max, hint: "a reservation cannot be refunded" },
            });
        }
        match self.emission_interval.checked_mul_nanos(quantity as u64) {
            Ok(span) if span <= MAX_DURATION => Ok(()),
            _ => Err(Error::SpanTooLong("quantity * period / count")),
        }
    }
}

/// A parsed `CL.PACE key count period [MAXWAIT w] [QUANTITY q] [MS] [BLOCK]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    pub key: &'a [u8],
    pub params: Params,
    /// Units reserved: 0 peeks.
    pub quantity: i64,
    pub unit: Unit,
    /// `BLOCK`: wait for the slot on the server.
    pub block: bool,
    /// `SHADOW`: a refusal is answered as an admission to act now (see [`Reply::shadowed`]).
    pub shadow: bool,
}

impl<'a> Request<'a> {
    /// Checks, in order: arity, integers, options, then period, maxwait, count, the rate,
    /// quantity, its span, and BLOCK with a peek.
    pub fn parse(args: &[&'a [u8]]) -> Result<Request<'a>> {
        let parsed = Parsed::parse(&COMMAND, args)?;
        let unit = parsed.tail.unit;
        let period = duration(parsed.integer(1), unit, "period")?;
        let max_wait = match parsed.tail.value("MAXWAIT") {
            None => None,
            Some(w) => {
                let max = unit.max_duration();
                if !(0..=max).contains(&w) {
                    return Err(Error::OutOfRange { name: "maxwait", range: Range::Duration { min: 0, max, unit } });
                }
                Some(unit.to_nanos(w)?)
            }
        };
        let params = Params::new(parsed.integer(0), period, max_wait)?;
        let quantity = parsed.tail.quantity.unwrap_or(1);
        params.check_quantity(quantity)?;
        let block = parsed.tail.has("BLOCK");
        if block && quantity == 0 {
            return Err(Error::OutOfRange {
                name: "quantity",
                range: Range::Text("at least 1 with BLOCK (a peek reserves no slot to wait for)"),
            });
        }
        Ok(Request { key: parsed.key, params, quantity, unit, block, shadow: parsed.tail.has("SHADOW") })
    }
}

/// CL.PACE's reply, times in nanoseconds: `[limited, wait, queued, retry_after, reset_after]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub limited: bool,
    /// When admitted, the time to wait before acting (zero: act now); `None` (`-1`) when
    /// refused, so that a client that ignores `limited` and sleeps `wait` fails loudly instead
    /// of acting in a slot it does not hold.
    pub wait: Option<Nanos>,
    /// Units whose slots have not ended (this call's included), after this call:
    /// `ceil((TAT − now) / emission_interval)`, as `reset_after` counts them. Counting only the
    /// slots starting at or after now made every reply one short a few microseconds after the
    /// reservation before it (the second of two calls in a row: `queued` 1, `reset_after` two
    /// slots).
    pub queued: i64,
    /// When refused, the time until a slot within MAXWAIT frees; `None` (`-1`) when admitted.
    pub retry_after: Option<Nanos>,
    /// The time until the schedule is idle (the TAT).
    pub reset_after: Nanos,
}

impl Reply {
    /// A refusal as shadow mode answers it: admitted, to act now (`wait` 0, nothing to block
    /// for), no retry time; `queued` and `reset_after` as decided (nothing was reserved).
    pub fn shadowed(self) -> Reply {
        Reply { limited: false, wait: Some(Nanos::ZERO), retry_after: None, ..self }
    }

    /// The reply as sent, times in `unit` (rounded as every command's are).
    pub fn to_array(&self, unit: Unit) -> [i64; 5] {
        [
            i64::from(self.limited),
            self.wait.map_or(-1, |d| unit.reply_value(d)),
            self.queued,
            self.retry_after.map_or(-1, |d| unit.reply_value(d)),
            unit.reply_value(self.reset_after),
        ]
    }

    /// What a blocked call replies when it is released at `now`: `wait` the time still to its
    /// slot (`slot`, decided when the call was made), `queued` and `reset_after` as the
    /// schedule stands then. `tat` is the TAT the key holds at `now` (`None`: the key is gone,
    /// or holds something else); `end` is where the call's own reservation ends, counted even
    /// when the key was deleted, flushed or replaced meanwhile (the caller holds its slot).
    pub fn released(slot: Instant, end: Instant, tat: Option<Instant>, now: Instant, params: &Params) -> Reply {
        let reset_after = tat.map_or(end, |tat| tat.max(end)).saturating_since(now);
        Reply {
            limited: false,
            wait: Some(slot.saturating_since(now)),
            queued: units(reset_after, params.emission_interval),
            retry_after: None,
            reset_after,
        }
    }
}

/// Decides a call reserving `quantity` units at `now` against the stored `tat` (`None`: no
/// key, an idle schedule). Admitted iff the slot `max(now, TAT)` is at most `max_wait` away;
/// then the TAT moves on by `quantity` emission intervals (a peek, quantity 0, writes nothing).
/// A refusal writes nothing.
pub fn decide(tat: Option<Instant>, now: Instant, params: &Params, quantity: i64) -> Result<Decision<Instant, Reply>> {
    let quantity = u64::try_from(quantity).map_err(|_| Error::OutOfRange {
        name: "quantity",
        range: Range::Text("0 or more (a reservation cannot be refunded)"),
    })?;
    let at = tat.map_or(now, |tat| tat.max(now));
    let wait = at.saturating_since(now);
    if wait > params.max_wait {
        let reply = Reply {
            limited: true,
            wait: None,
            queued: units(wait, params.emission_interval),
            retry_after: Some(wait.saturating_sub(params.max_wait)),
            reset_after: wait,
        };
        return Ok(Decision { reply, effect: Effect::Nothing });
    }
    let new_tat = at.checked_add(params.emission_interval.checked_mul_nanos(quantity)?)?;
    let reset_after = new_tat.saturating_since(now);
    let reply = Reply {
        limited: false,
        wait: Some(wait),
        queued: units(reset_after, params.emission_interval),
        retry_after: None,
        reset_after,
    };
    let effect = if quantity == 0 { Effect::Nothing } else { Effect::Store { state: new_tat, expires_at: new_tat } };
    Ok(Decision { reply, effect })
}

/// The units `ahead` spans, a slot under way counting as one: `ceil(ahead / ei)`.
fn units(ahead: Nanos, ei: Nanos) -> i64 {
    // Both non-negative, `ei` at least 1 ns.
    (ahead.as_nanos() as u64).div_ceil(ei.as_nanos() as u64) as i64
}

/// The first byte of a pacer's stored value: no other limiter's value starts with it (see
/// [`crate::limiter`]).
pub const TAG: u8 = b'P';

/// The TAT a pacer's key holds: `P` and the TAT as decimal nanoseconds (from 2001 on, as
/// CL.THROTTLE's). Another limiter's value (a bare TAT included) is WRONGTYPE; anything else is
/// not valid state.
pub fn read(value: &[u8]) -> Result<Instant> {
    decode(value).ok_or_else(|| match Algorithm::owning(value) {
        Some(_) => Error::WrongType,
        None => Error::InvalidState("CL.PACE"),
    })
}

/// The TAT of a value in the pacer's form, `None` for any other value.
pub fn decode(value: &[u8]) -> Option<Instant> {
    match value {
        [TAG, digits @ ..] => throttle::decode(digits).ok(),
        _ => None,
    }
}

/// The pacer's form of `tat`, as the key stores it.
pub fn encode(tat: Instant) -> Vec<u8> {
    crate::args::Decimal::tagged(TAG, tat.as_nanos()).as_bytes().to_vec()
}

#[cfg(test)]
mod tests;
