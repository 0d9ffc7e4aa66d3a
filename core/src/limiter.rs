//! One value for any limiter, so a command (or CL.ALL, holding several of different kinds)
//! handles every algorithm the same way: parse its arguments by its command's table, decide
//! from what its key holds, and only then, if told to, apply the effect.
//!
//! Every algorithm is named by its command, everywhere:
//!
//! | command | [`Algorithm`] / [`Limiter`] | module | stored value (an ordinary string key) |
//! |---|---|---|---|
//! | CL.THROTTLE | `Throttle` | [`crate::throttle`] (GCRA) | the TAT, decimal nanoseconds ≥ 10^18 |
//! | CL.WINDOW | `Window` | [`crate::window`] (sliding window) | binary, first byte `0x01` (exact log) or `0x02` (buckets) |
//! | CL.BUCKET | `Bucket` | [`crate::bucket`] (token bucket) | minus the deficit, decimal ≤ −1 |
//! | CL.COUNTER | `Counter` | [`crate::counter`] (fixed window) | the count, decimal, 0 ≤ count < 10^18 |
//! | CL.QUOTA | `Quota` | [`crate::quota`] (calendar quota) | as CL.COUNTER (the key expires at the period's end) |
//! | CL.PACE | (not a limiter of CL.ALL) | [`crate::pace`] (leaky bucket as a meter) | `P` and the TAT, decimal nanoseconds ≥ 10^18 |
//!
//! The stored forms are disjoint (but CL.QUOTA's, which is CL.COUNTER's: either reads the
//! other's count, carried into its own window or period), so a key used by the wrong command is refused with WRONGTYPE
//! instead of being misread (and overwritten): above all a pacer's key, whose TAT is a queue of
//! reservations that CL.THROTTLE would read as a clock step and cut back.

use crate::args::duration;
use crate::caps::Caps;
use crate::command::{Arg, ArgKind, Command, Keys, Parsed, Tail};
use crate::error::{Error, Range, Result};
use crate::time::{Instant, Unit};
use crate::{Charge, Decision, Patch, bucket, counter, pace, quota, throttle, window};

/// The algorithms, one per limiter command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Throttle,
    Window,
    Bucket,
    Counter,
    Quota,
}

/// A limiter with its validated parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limiter {
    Throttle(throttle::Params),
    Window(window::Params),
    Bucket(bucket::Params),
    Counter(counter::Params),
    Quota(quota::Params),
}

/// What a decision stores: an integer value, one behind a one-byte tag (CL.PACE's `P` and
/// TAT), or an edit of a binary one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    Integer(i64),
    Tagged(u8, i64),
    Patch(Patch),
}

/// What a limiter's key holds when the call starts.
#[derive(Debug, Clone, Copy)]
pub struct Stored<'a> {
    pub value: &'a [u8],
    /// The key's absolute expiry in Unix milliseconds (`None`: the key never expires); read
    /// only for limiters whose state includes it ([`Algorithm::reads_expiry`]).
    pub expires_at_ms: Option<i64>,
}

/// Flags of every limiter command: it writes, may grow memory, and runs in O(1)-ish time.
pub const LIMITER_FLAGS: &str = "write deny-oom fast";
const LIMITER_ACL: &str = "write fast";
const SINCE: &str = "1.0.0";

static THROTTLE: Command = Command {
    name: "cl.throttle",
    summary: "Rate-limits with GCRA (redis-cell compatible): admits max_burst+1 at once, then count per period.",
    complexity: "O(1)",
    since: SINCE,
    flags: LIMITER_FLAGS,
    acl_categories: LIMITER_ACL,
    keys: Keys::One,
    args: &[
        Arg::integer("max_burst"),
        Arg::integer("count"),
        Arg::duration("period"),
        Arg::QUANTITY,
        Arg::HELD,
        Arg::MS,
        Arg::DEBIT,
        Arg::SHADOW,
    ],
};

static WINDOW: Command = Command {
    name: "cl.window",
    summary: "Rate-limits with a sliding window: at most limit units in any span of window (exact, or bucketed with PRECISION).",
    complexity: "O(log limit + quantity); O(window / precision) with PRECISION",
    since: SINCE,
    flags: LIMITER_FLAGS,
    acl_categories: LIMITER_ACL,
    keys: Keys::One,
    args: &[
        Arg::integer("limit"),
        Arg::duration("window"),
        Arg::QUANTITY,
        Arg::HELD,
        Arg::MS,
        PRECISION,
        Arg::DEBIT,
        Arg::SHADOW,
    ],
};

static BUCKET: Command = Command {
    name: "cl.bucket",
    summary: "Rate-limits with a token bucket: capacity tokens, refilled by tokens every whole interval.",
    complexity: "O(1)",
    since: SINCE,
    flags: LIMITER_FLAGS,
    acl_categories: LIMITER_ACL,
    keys: Keys::One,
    args: &[
        Arg::integer("capacity"),
        Arg::integer("tokens"),
        Arg::duration("interval"),
        Arg::QUANTITY,
        Arg::HELD,
        Arg::MS,
        Arg::DEBIT,
        Arg::SHADOW,
    ],
};

static COUNTER: Command = Command {
    name: "cl.counter",
    summary: "Rate-limits with a fixed window: at most limit units per window, counted from the window's first action.",
    complexity: "O(1)",
    since: SINCE,
    flags: LIMITER_FLAGS,
    acl_categories: LIMITER_ACL,
    keys: Keys::One,
    args: &[Arg::integer("limit"), Arg::duration("window"), Arg::QUANTITY, Arg::HELD, Arg::MS, Arg::DEBIT, Arg::SHADOW],
};

static QUOTA: Command = Command {
    name: "cl.quota",
    summary: "A calendar quota: at most limit units per calendar minute, hour, day, week (ISO), month or year in a time zone, optionally from a billing anchor.",
    complexity: "O(1)",
    since: "1.2.0",
    flags: LIMITER_FLAGS,
    acl_categories: LIMITER_ACL,
    keys: Keys::One,
    args: &[
        Arg::integer("limit"),
        Arg { name: "unit", kind: ArgKind::Text("PER"), optional: false, multiple: false },
        Arg { name: "zone", kind: ArgKind::Text("TZ"), optional: true, multiple: false },
        Arg { name: "instant", kind: ArgKind::Text("ANCHOR"), optional: true, multiple: false },
        Arg::QUANTITY_OPTION,
        Arg::HELD,
        Arg::MS,
        Arg::DEBIT,
        Arg::SHADOW,
    ],
};

/// `PRECISION p` (CL.WINDOW only).
const PRECISION: Arg = Arg::option("precision", "PRECISION");

impl Algorithm {
    pub const ALL: [Algorithm; 5] =
        [Algorithm::Throttle, Algorithm::Window, Algorithm::Bucket, Algorithm::Counter, Algorithm::Quota];

    /// Its own command's table.
    pub const fn command(self) -> &'static Command {
        match self {
            Algorithm::Throttle => &THROTTLE,
            Algorithm::Window => &WINDOW,
            Algorithm::Bucket => &BUCKET,
            Algorithm::Counter => &COUNTER,
            Algorithm::Quota => &QUOTA,
        }
    }

    /// The word naming it in a CL.ALL spec: its command's name without `cl.`, upper case.
    pub fn word(self) -> &'static str {
        match self {
            Algorithm::Throttle => "THROTTLE",
            Algorithm::Window => "WINDOW",
            Algorithm::Bucket => "BUCKET",
            Algorithm::Counter => "COUNTER",
            Algorithm::Quota => "QUOTA",
        }
    }

    /// The algorithm a CL.ALL spec word names.
    pub fn named(word: &[u8]) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|a| word.eq_ignore_ascii_case(a.word().as_bytes()))
    }

    /// Its positional parameters (after the key), in order.
    pub fn params(self) -> impl Iterator<Item = &'static Arg> + Clone {
        self.command().params()
    }

    /// Its options other than the shared quantity and unit (`PRECISION p`, `TZ zone`).
    pub fn options(self) -> impl Iterator<Item = &'static Arg> + Clone {
        self.command().options()
    }

    /// The words its positional parameters take (`PER unit` takes two).
    pub fn param_words(self) -> usize {
        self.command().param_words()
    }

    /// How many positional arguments follow the key, when every one is an integer or a
    /// duration (at most three); `None` for CL.QUOTA, whose words are not all numbers.
    /// Derived from the command's table once, at compile time.
    pub const fn positional_integers(self) -> Option<usize> {
        const fn count(command: &Command) -> Option<usize> {
            let mut i = 0;
            while i < command.args.len() {
                let arg = &command.args[i];
                if arg.optional || arg.multiple {
                    break;
                }
                if !matches!(arg.kind, ArgKind::Integer | ArgKind::Duration) {
                    return None;
                }
                i += 1;
            }
            if i <= 3 { Some(i) } else { None }
        }
        match self {
            Algorithm::Throttle => const { count(&THROTTLE) },
            Algorithm::Window => const { count(&WINDOW) },
            Algorithm::Bucket => const { count(&BUCKET) },
            Algorithm::Counter => const { count(&COUNTER) },
            Algorithm::Quota => const { count(&QUOTA) },
        }
    }

    /// Whether the key's expiry is part of the state (reading it costs the server a lookup).
    pub fn reads_expiry(self) -> bool {
        matches!(self, Algorithm::Bucket | Algorithm::Counter | Algorithm::Quota)
    }

    /// The name its errors about stored state use.
    fn state_name(self) -> &'static str {
        match self {
            Algorithm::Throttle => "CL.THROTTLE",
            Algorithm::Window => "CL.WINDOW",
            Algorithm::Bucket => "CL.BUCKET",
            Algorithm::Counter => "CL.COUNTER",
            Algorithm::Quota => "CL.QUOTA",
        }
    }

    /// The algorithm whose stored form `value` is, `None` for a value of none of them.
    pub fn owning(value: &[u8]) -> Option<Algorithm> {
        if let Some(1 | 2) = value.first() {
            return Some(Algorithm::Window);
        }
        match crate::args::integer(value).ok()? {
            v if v >= throttle::MIN_TAT => Some(Algorithm::Throttle),
            v if v >= 0 => Some(Algorithm::Counter),
            _ => Some(Algorithm::Bucket),
        }
    }

    /// Builds a limiter from its positional integers (durations in `unit`) and options, within
    /// the argument `caps`.
    #[inline(always)]
    pub fn build(self, values: &[i64], tail: &Tail, unit: Unit, caps: &Caps) -> Result<Limiter> {
        let value = |i: usize| values.get(i).copied().unwrap_or(0);
        Ok(match self {
            Algorithm::Throttle => {
                Limiter::Throttle(throttle::Params::new(value(0), value(1), duration(value(2), unit, "period")?)?)
            }
            Algorithm::Window => {
                let window = duration(value(1), unit, "window")?;
                let precision = match tail.value("PRECISION") {
                    None => None,
                    Some(p) => {
                        // At most `caps.max_buckets` buckets: stated in the call's unit.
                        let (w, most) = (value(1), caps.max_buckets);
                        let (min, max) = (w / most + i64::from(w % most != 0), w);
                        if !(min..=max).contains(&p) {
                            return Err(Error::OutOfRange {
                                name: "precision",
                                range: Range::Duration { min, max, unit },
                            });
                        }
                        Some(duration(p, unit, "precision")?)
                    }
                };
                Limiter::Window(window::Params::with_caps(value(0), window, precision, caps)?)
            }
            Algorithm::Bucket => {
                Limiter::Bucket(bucket::Params::new(value(0), value(1), duration(value(2), unit, "interval")?)?)
            }
            Algorithm::Counter => {
                Limiter::Counter(counter::Params::new(value(0), duration(value(1), unit, "window")?)?)
            }
            // Its words are not all numbers: see `quota_spec`.
            Algorithm::Quota => return Err(Error::Internal("CL.QUOTA is parsed from its words".into())),
        })
    }
}

impl Limiter {
    pub fn algorithm(&self) -> Algorithm {
        match self {
            Limiter::Throttle(_) => Algorithm::Throttle,
            Limiter::Window(_) => Algorithm::Window,
            Limiter::Bucket(_) => Algorithm::Bucket,
            Limiter::Counter(_) => Algorithm::Counter,
            Limiter::Quota(_) => Algorithm::Quota,
        }
    }

    /// Decides a take of `quantity` units at `now` without writing anything. A value that
    /// belongs to another algorithm is WRONGTYPE.
    #[inline]
    pub fn decide(&self, stored: Option<Stored<'_>>, now: Instant, quantity: i64) -> Result<Decision<Write>> {
        self.decide_charge(stored, now, quantity, None, Charge::Take)
    }

    /// Decides a call of `quantity` units at `now` charged as `charge` says (a take, or a
    /// `DEBIT`: counted whatever the limit says), a refund bounded by `held` (see
    /// [`Limiter::decide_held`]), without writing anything. A debit of a negative quantity
    /// is an error.
    #[inline]
    pub fn decide_charge(
        &self,
        stored: Option<Stored<'_>>,
        now: Instant,
        quantity: i64,
        held: Option<Instant>,
        charge: Charge,
    ) -> Result<Decision<Write>> {
        if charge == Charge::Debit && quantity < 0 {
            return Err(Error::DebitRefund);
        }
        if held.is_some() && quantity < 0 {
            return self.refund_held(stored, now, quantity, held);
        }
        let integer = |d: Decision<i64>| Decision { reply: d.reply, effect: d.effect.map(Write::Integer) };
        let decided = match self {
            Limiter::Throttle(p) => match stored {
                None => throttle::decide(None, now, p, quantity, charge),
                Some(s) => {
                    throttle::decode(s.value).and_then(|tat| throttle::decide(Some(tat), now, p, quantity, charge))
                }
            }
            .map(|d| integer(d.map(Instant::as_nanos))),
            Limiter::Window(p) => {
                window::decide(stored.map(|s| s.value), now, p, quantity, charge).map(|d| d.map(Write::Patch))
            }
            Limiter::Bucket(p) => match stored {
                None => bucket::decide(None, now, p, quantity, charge),
                Some(s) => bucket::decode(s.value, s.expires_at_ms)
                    .and_then(|state| bucket::decide(Some(state), now, p, quantity, charge)),
            }
            .map(integer),
            Limiter::Counter(p) => match stored {
                None => counter::decide(None, now, p, quantity, charge),
                Some(s) => counter::decode(s.value, s.expires_at_ms)
                    .and_then(|state| counter::decide(Some(state), now, p, quantity, charge)),
            }
            .map(integer),
            Limiter::Quota(p) => match stored {
                None => quota::decide(None, now, p, quantity, charge),
                Some(s) => quota::decode(s.value, s.expires_at_ms)
                    .and_then(|state| quota::decide(Some(state), now, p, quantity, charge)),
            }
            .map(integer),
        };
        decided.map_err(|e| self.algorithm().state_error(e, stored.map(|s| s.value)))
    }

    /// Decides as [`Limiter::decide`], but a refund (`quantity < 0`) with `held` (`HELD t`: the
    /// instant the limiter would have been full again right after the call that took the
    /// units) gives back at most what the limiter still holds of those units at `now`, never
    /// units it has already regained by time:
    /// - CL.THROTTLE: the TAT moves back by at most what is left of those units' emission
    ///   time ([`throttle::refund_held`]);
    /// - CL.COUNTER, CL.QUOTA: only while the window or period they were counted in (the one
    ///   ending at `held`) is still open;
    /// - CL.BUCKET: at most the tokens the refills between now and `held` would still add;
    /// - CL.WINDOW: only units logged at the taking instant that still count.
    ///
    /// Without `held`, or for a call that is not a refund, it is [`Limiter::decide`].
    pub fn decide_held(
        &self,
        stored: Option<Stored<'_>>,
        now: Instant,
        quantity: i64,
        held: Option<Instant>,
    ) -> Result<Decision<Write>> {
        self.decide_charge(stored, now, quantity, held, Charge::Take)
    }

    /// A refund of `quantity < 0` bounded by `held`: see [`Limiter::decide_held`].
    fn refund_held(
        &self,
        stored: Option<Stored<'_>>,
        now: Instant,
        quantity: i64,
        held: Option<Instant>,
    ) -> Result<Decision<Write>> {
        let Some(held) = held.filter(|_| quantity < 0) else {
            return self.decide(stored, now, quantity);
        };
        let units = crate::limits::refunded(quantity);
        let bounded = match self {
            Limiter::Throttle(p) => {
                let tat = stored
                    .map(|s| throttle::decode(s.value))
                    .transpose()
                    .map_err(|e| self.algorithm().state_error(e, stored.map(|s| s.value)))?;
                let d = throttle::refund_held(tat, now, p, units, held)?;
                return Ok(Decision { reply: d.reply, effect: d.effect.map(|t| Write::Integer(t.as_nanos())) });
            }
            Limiter::Window(p) => window::held_units(stored.map(|s| s.value), now, p, units, held),
            Limiter::Bucket(p) => stored
                .map(|s| bucket::decode(s.value, s.expires_at_ms))
                .transpose()
                .and_then(|state| bucket::held_units(state, now, p, units, held)),
            Limiter::Counter(_) => {
                stored.map(|s| counter::decode(s.value, s.expires_at_ms)).transpose().map(|state| match state {
                    Some(s) if s.closes_at == held && now < held => units,
                    _ => 0,
                })
            }
            Limiter::Quota(_) => {
                stored.map(|s| quota::decode(s.value, s.expires_at_ms)).transpose().map(|state| match state {
                    Some(s) if s.expires_at == held && now < held => units,
                    _ => 0,
                })
            }
        };
        let bounded = bounded.map_err(|e| self.algorithm().state_error(e, stored.map(|s| s.value)))?;
        // A refund of nothing answers as a peek would, but never as a denial: it is a refund.
        let mut decision = self.decide(stored, now, -bounded)?;
        decision.reply.limited = false;
        decision.reply.retry_after = None;
        Ok(decision)
    }
}

/// A call's quantity (default 1), the instant of its `HELD t` and its charge, checked against
/// each other: `DEBIT` takes a quantity of 0 or more, `HELD` only a refund.
pub fn charged(tail: &Tail) -> Result<(i64, Option<Instant>, Charge)> {
    let quantity = tail.quantity.unwrap_or(1);
    let charge = Charge::of(tail.has("DEBIT"));
    if charge == Charge::Debit && quantity < 0 {
        return Err(Error::DebitRefund);
    }
    Ok((quantity, held(tail.value("HELD"), quantity)?, charge))
}

/// The instant of `HELD t` (Unix milliseconds), valid only with a refund (a negative quantity).
pub fn held(t: Option<i64>, quantity: i64) -> Result<Option<Instant>> {
    let Some(t) = t else { return Ok(None) };
    if quantity >= 0 {
        return Err(Error::HeldWithoutRefund);
    }
    let max = i64::MAX / crate::time::NANOS_PER_MILLI;
    if !(0..=max).contains(&t) {
        return Err(Error::OutOfRange { name: "held", range: Range::Integer { min: 0, max } });
    }
    Ok(Some(Instant::from_nanos(t * crate::time::NANOS_PER_MILLI)))
}

impl Algorithm {
    /// An error of deciding on `stored` as this algorithm: a value that is not its state
    /// (`InvalidState`) is WRONGTYPE when it is another limiter's or a pacer's, else invalid
    /// state named after this algorithm's command; any other error as it is.
    #[cold]
    fn state_error(self, e: Error, stored: Option<&[u8]>) -> Error {
        let Error::InvalidState(_) = e else { return e };
        match stored {
            Some(value) => match Algorithm::owning(value) {
                Some(owner) if owner != self => Error::WrongType,
                None if pace::decode(value).is_some() => Error::WrongType,
                _ => Error::InvalidState(self.state_name()),
            },
            None => Error::InvalidState(self.state_name()),
        }
    }
}

/// A single-limiter call (`CL.THROTTLE key …` and its siblings), parsed by its table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    pub key: &'a [u8],
    pub limiter: Limiter,
    /// Units consumed: 0 peeks, negative refunds.
    pub quantity: i64,
    /// The unit of the call's times.
    pub unit: Unit,
    /// `HELD t` of a refund: see [`Limiter::decide_held`].
    pub held: Option<Instant>,
    /// `SHADOW`: a denial is answered as an admission.
    shadow: bool,
    /// `DEBIT`, or a plain take.
    pub charge: Charge,
}

impl<'a> Request<'a> {
    /// Parses a call of `algorithm`'s command, its parameters within `caps`.
    pub fn parse(algorithm: Algorithm, args: &[&'a [u8]], caps: &Caps) -> Result<Request<'a>> {
        if let Algorithm::Quota = algorithm {
            return Request::parse_quota(args);
        }
        if let Some(request) = Request::parse_common(algorithm, args, caps)? {
            return Ok(request);
        }
        let parsed = Parsed::parse(algorithm.command(), args)?;
        let mut values = [0i64; 3];
        for (i, slot) in values.iter_mut().enumerate() {
            *slot = parsed.integer(i);
        }
        let limiter = algorithm.build(&values, &parsed.tail, parsed.tail.unit, caps)?;
        let (quantity, held, charge) = charged(&parsed.tail)?;
        Ok(Request {
            key: parsed.key,
            limiter,
            quantity,
            unit: parsed.tail.unit,
            held,
            shadow: parsed.tail.has("SHADOW"),
            charge,
        })
    }

    /// The common shapes, without walking the table: the key, the positional integers, then
    /// at most `MS`, `DEBIT` and a bare quantity, in any order. Gives what `Parsed::parse` gives
    /// for them (the arity holds; the words are parsed in the same order, so the same error
    /// comes first, and a debit's quantity is checked after the parameters, as `charged` checks
    /// it), or `None` for any other shape, which the table then parses.
    fn parse_common(algorithm: Algorithm, args: &[&'a [u8]], caps: &Caps) -> Result<Option<Request<'a>>> {
        let Some(count) = algorithm.positional_integers() else { return Ok(None) };
        let [key, words @ ..] = args else { return Ok(None) };
        if !(count..=count + 3).contains(&words.len()) {
            return Ok(None);
        }
        let (fixed, tail) = words.split_at(count);
        let mut values = [0i64; 3];
        for (slot, word) in values.iter_mut().zip(fixed) {
            *slot = crate::args::integer(word)?;
        }
        let (mut unit, mut quantity, mut charge) = (Unit::Seconds, None, Charge::Take);
        for &word in tail {
            if word.eq_ignore_ascii_case(b"MS") && unit == Unit::Seconds {
                unit = Unit::Millis;
            } else if word.eq_ignore_ascii_case(b"DEBIT") && charge == Charge::Take {
                charge = Charge::Debit;
            } else if !word.first().is_some_and(u8::is_ascii_alphabetic) && quantity.is_none() {
                quantity = Some(crate::args::integer(word)?);
            } else {
                return Ok(None);
            }
        }
        let limiter = algorithm.build(&values, &Tail::EMPTY, unit, caps)?;
        let quantity = quantity.unwrap_or(1);
        if charge == Charge::Debit && quantity < 0 {
            return Err(Error::DebitRefund);
        }
        Ok(Some(Request { key, limiter, quantity, unit, held: None, shadow: false, charge }))
    }

    /// `SHADOW`: a denial is answered as an admission (read only when a call is denied).
    pub fn shadow(&self) -> bool {
        self.shadow
    }

    /// `CL.QUOTA key limit PER unit [TZ zone] [ANCHOR instant] [QUANTITY q] [MS] [SHADOW]`.
    fn parse_quota(args: &[&'a [u8]]) -> Result<Request<'a>> {
        let table = Algorithm::Quota.command();
        let arity = || Error::WrongArity(table.name);
        let (&key, rest) = args.split_first().ok_or_else(arity)?;
        // (As in `Parsed::parse`: the longest call the table allows matters only for a call of
        // more words than the table has arguments, each taking at least one word.)
        if rest.len() < Algorithm::Quota.param_words()
            || (args.len() > 1 + table.args.len() && table.max_words().is_some_and(|max| args.len() > max))
        {
            return Err(arity());
        }
        let tail_args = table.args.iter().filter(|a| matches!(a.kind, ArgKind::Flag(_) | ArgKind::Option(_)));
        let (limiter, tail) = quota_words(rest, tail_args, None)?;
        let (quantity, held, charge) = charged(&tail)?;
        Ok(Request { key, limiter, quantity, unit: tail.unit, held, shadow: tail.has("SHADOW"), charge })
    }
}

/// A quota's words (after its key, or its CL.ALL spec word): the limiter and the tail of the
/// words `accepted` (`unit`: the call's, when the tail cannot set it).
fn quota_words<'t>(
    words: &[&[u8]],
    accepted: impl Iterator<Item = &'t Arg> + Clone,
    unit: Option<Unit>,
) -> Result<(Limiter, Tail)> {
    let words = quota::Words::split(words)?;
    let tail = Tail::parse(words.rest(), accepted)?;
    Ok((Limiter::Quota(words.params(unit.unwrap_or(tail.unit))?), tail))
}

/// A CL.ALL `QUOTA limit PER unit [TZ zone] [ANCHOR instant] [QUANTITY q] [HELD t]` spec (after
/// its word): the limiter and the tail of its options.
pub fn quota_spec<'t>(
    words: &[&[u8]],
    unit: Unit,
    accepted: impl Iterator<Item = &'t Arg> + Clone,
) -> Result<(Limiter, Tail)> {
    quota_words(words, accepted, Some(unit))
}

impl<S> Decision<S> {
    /// The same decision with its stored state mapped.
    pub fn map<T>(self, f: impl FnOnce(S) -> T) -> Decision<T> {
        Decision { reply: self.reply, effect: self.effect.map(f) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::{NANOS_PER_MILLI, NANOS_PER_SEC, Nanos};

    fn args(s: &str) -> Vec<&[u8]> {
        s.split(' ').filter(|w| !w.is_empty()).map(str::as_bytes).collect()
    }

    fn parse(algorithm: Algorithm, s: &str) -> Result<Request<'_>> {
        Request::parse(algorithm, &args(s), &Caps::DEFAULT)
    }

    fn error(algorithm: Algorithm, s: &str) -> String {
        parse(algorithm, s).unwrap_err().to_string()
    }

    #[test]
    fn stored_forms_are_disjoint() {
        assert_eq!(Algorithm::owning(b"1795354456188603542"), Some(Algorithm::Throttle));
        assert_eq!(Algorithm::owning(b"1000000000000000000"), Some(Algorithm::Throttle));
        assert_eq!(Algorithm::owning(b"999999999999999999"), Some(Algorithm::Counter));
        assert_eq!(Algorithm::owning(b"0"), Some(Algorithm::Counter));
        assert_eq!(Algorithm::owning(b"-1"), Some(Algorithm::Bucket));
        assert_eq!(Algorithm::owning(b"\x01\0\0\0\0\0\0\0"), Some(Algorithm::Window));
        assert_eq!(Algorithm::owning(b"\x02"), Some(Algorithm::Window));
        assert_eq!(Algorithm::owning(b"hello"), None);
        assert_eq!(Algorithm::owning(b""), None);
    }

    #[test]
    fn another_limiters_value_is_wrongtype_and_junk_is_invalid() {
        let counter = parse(Algorithm::Counter, "k 5 60").unwrap().limiter;
        let stored = |value: &'static [u8]| Some(Stored { value, expires_at_ms: Some(1) });
        let now = Instant::from_nanos(1_700_000_000 * NANOS_PER_SEC);
        assert_eq!(counter.decide(stored(b"-3"), now, 1), Err(Error::WrongType));
        assert_eq!(counter.decide(stored(b"junk"), now, 1), Err(Error::InvalidState("CL.COUNTER")));
        let throttle = parse(Algorithm::Throttle, "k 5 1 60").unwrap().limiter;
        assert_eq!(throttle.decide(stored(b"\x01\0\0\0\0\0\0\0"), now, 1), Err(Error::WrongType));
        // A pacer's key is no limiter's: WRONGTYPE for every one, its queue left as it is.
        for limiter in [
            throttle,
            counter,
            parse(Algorithm::Bucket, "k 5 1 60").unwrap().limiter,
            parse(Algorithm::Window, "k 5 60").unwrap().limiter,
        ] {
            assert_eq!(limiter.decide(stored(b"P1700000000000000000"), now, 1), Err(Error::WrongType), "{limiter:?}");
            assert_eq!(limiter.decide(stored(b"P1700000000000000000"), now, 0), Err(Error::WrongType), "{limiter:?}");
        }
        // `P` and anything but a TAT is nobody's.
        for junk in [&b"P"[..], b"P5", b"P-1", b"Pabc", b"P 1700000000000000000"] {
            assert_eq!(
                throttle.decide(Some(Stored { value: junk, expires_at_ms: Some(1) }), now, 1),
                Err(Error::InvalidState("CL.THROTTLE"))
            );
        }
    }

    #[test]
    fn window_parses_its_arguments() {
        let w = parse(Algorithm::Window, "k 10 60").unwrap();
        assert_eq!((w.key, w.quantity, w.unit), (&b"k"[..], 1, Unit::Seconds));
        assert_eq!(
            w.limiter,
            Limiter::Window(window::Params::new(10, Nanos::new(60 * NANOS_PER_SEC).unwrap(), None).unwrap())
        );
        let w = parse(Algorithm::Window, "k 10 600 PRECISION 5 3 MS").unwrap();
        assert_eq!((w.quantity, w.unit), (3, Unit::Millis));
        let Limiter::Window(p) = w.limiter else { panic!() };
        assert_eq!(p.precision(), Nanos::new(5 * NANOS_PER_MILLI));
        assert_eq!(p.window(), Nanos::new(600 * NANOS_PER_MILLI).unwrap());
    }

    #[test]
    fn errors_state_the_real_range() {
        use Algorithm::*;
        for bad in ["", "k", "k 1", "k 1 1 1 HELD 1 MS PRECISION 1 DEBIT SHADOW x"] {
            assert_eq!(parse(Window, bad), Err(Error::WrongArity("cl.window")), "{bad:?}");
        }
        assert_eq!(
            error(Window, "k 0 1"),
            "ERR limit must be an integer from 1 to 100000 (use PRECISION for larger limits)"
        );
        assert_eq!(error(Window, "k 1 -1"), "ERR window must be an integer from 1 to 1000000000 (seconds)");
        assert_eq!(
            error(Window, "k 1 1000000000001 MS"),
            "ERR window must be an integer from 1 to 1000000000000 (milliseconds)"
        );
        assert_eq!(error(Window, "k 1 60 PRECISION 61"), "ERR precision must be an integer from 1 to 60 (seconds)");
        assert_eq!(
            error(Window, "k 1 60000 PRECISION 5 MS"),
            "ERR precision must be an integer from 6 to 60000 (milliseconds)"
        );
        assert!(parse(Window, "k 100001 1 PRECISION 1").is_ok());
        assert_eq!(parse(Window, "k 1 1.5"), Err(Error::NotAnInteger));
        assert_eq!(parse(Window, "k 1 1 FOO"), Err(Error::Syntax));
        assert_eq!(parse(Bucket, "k 1 1 1 PRECISION 1"), Err(Error::Syntax));
        assert_eq!(error(Throttle, "k -1 1 1"), "ERR max_burst must be an integer from 0 to 999999999999999999");
        assert_eq!(error(Throttle, "k 0 0 1"), "ERR count must be an integer from 1 to 1000000000000000000");
        assert_eq!(
            error(Throttle, "k 0 1000000001 1"),
            "ERR rate is too fast: period divided by count is less than one nanosecond"
        );
        assert!(
            error(Throttle, "k 999999999999999999 1 1")
                .starts_with("ERR parameters are too large: (max_burst + 1) * period / count")
        );
        assert!(parse(Throttle, "k 999999999999999999 1000000000 1").is_ok(), "one nanosecond per unit");
        assert_eq!(error(Bucket, "k 0 1 1"), "ERR capacity must be an integer from 1 to 9223372036854775807");
        assert!(
            error(Bucket, "k 9223372036854775807 1 1")
                .starts_with("ERR parameters are too large: interval * ceil(capacity / tokens)")
        );
        assert_eq!(error(Counter, "k 0 1"), "ERR limit must be an integer from 1 to 999999999999999999");
        assert_eq!(error(Counter, "k 1 0"), "ERR window must be an integer from 1 to 1000000000 (seconds)");
    }

    /// The common shapes parsed without the table give exactly what the table gives.
    #[test]
    fn common_shapes_parse_as_the_table_does() {
        let by_table = |algorithm: Algorithm, s: &str| -> Result<(Limiter, i64, Unit, bool, Charge)> {
            let words = args(s);
            let parsed = Parsed::parse(algorithm.command(), &words)?;
            let values = [parsed.integer(0), parsed.integer(1), parsed.integer(2)];
            let limiter = algorithm.build(&values, &parsed.tail, parsed.tail.unit, &Caps::DEFAULT)?;
            let (quantity, _, charge) = charged(&parsed.tail)?;
            Ok((limiter, quantity, parsed.tail.unit, parsed.tail.has("SHADOW"), charge))
        };
        let tails = [
            "",
            "MS",
            "ms",
            "3",
            "-2",
            "0",
            "3 MS",
            "MS 3",
            "1.5",
            "MS MS",
            "3 3",
            "MS 1.5",
            "x",
            "SHADOW",
            "MS SHADOW",
            "05",
            "+3",
            "QUANTITY 3",
            "DEBIT",
            "debit",
            "3 DEBIT MS",
            "MS DEBIT 3",
            "DEBIT 0",
            "-2 DEBIT",
            "DEBIT -2 MS",
            "DEBIT DEBIT",
            "DEBIT 1.5",
            "DEBIT x",
            "DEBIT MS SHADOW",
            "DEBIT 3 3",
        ];
        for algorithm in [Algorithm::Throttle, Algorithm::Window, Algorithm::Bucket, Algorithm::Counter] {
            let count = algorithm.positional_integers().unwrap();
            for positional in ["5 1 60", "0 1 60", "x 1 60", "5 x 60", "5 1 1.5", "100000000 100000000 1", "5 1 0"] {
                let positional: Vec<&str> = positional.split(' ').take(count).collect();
                for tail in tails {
                    let s = format!("k {} {tail}", positional.join(" "));
                    let fast = Request::parse(algorithm, &args(&s), &Caps::DEFAULT)
                        .map(|r| (r.limiter, r.quantity, r.unit, r.shadow, r.charge));
                    assert_eq!(fast, by_table(algorithm, &s), "{algorithm:?} {s}");
                }
            }
        }
    }

    #[test]
    fn caps_bound_the_window_and_its_messages_state_them() {
        let caps = Caps { max_exact_limit: 500, max_buckets: 40 };
        let parse = |s: &str| Request::parse(Algorithm::Window, &args(s), &caps).map(|_| ()).map_err(|e| e.to_string());
        assert!(parse("k 500 60").is_ok());
        assert_eq!(
            parse("k 501 60").unwrap_err(),
            "ERR limit must be an integer from 1 to 500 (use PRECISION for larger limits)"
        );
        assert!(parse("k 501 60 PRECISION 2").is_ok());
        assert_eq!(parse("k 1 60 PRECISION 1").unwrap_err(), "ERR precision must be an integer from 2 to 60 (seconds)");
        assert_eq!(parse("k 1 81 PRECISION 2").unwrap_err(), "ERR precision must be an integer from 3 to 81 (seconds)");
        let most = Caps::CEILING;
        assert!(Request::parse(Algorithm::Window, &args("k 200000 60"), &most).is_ok());
        assert!(Request::parse(Algorithm::Window, &args("k 1 100000 PRECISION 1"), &most).is_ok());
    }

    #[test]
    fn shadow_is_an_option_of_every_limiter_command() {
        for (algorithm, words) in [
            (Algorithm::Throttle, "k 1 1 1"),
            (Algorithm::Window, "k 1 1"),
            (Algorithm::Bucket, "k 1 1 1"),
            (Algorithm::Counter, "k 1 1"),
        ] {
            assert!(!parse(algorithm, words).unwrap().shadow());
            let with_options = format!("{words} shadow 3 MS");
            let r = parse(algorithm, &with_options).unwrap();
            assert_eq!((r.shadow(), r.quantity, r.unit), (true, 3, Unit::Millis), "{algorithm:?}");
            assert_eq!(parse(algorithm, &format!("{words} SHADOW SHADOW")).map(|_| ()), Err(Error::Syntax));
        }
    }

    #[test]
    fn every_option_of_a_command_at_once_parses() {
        // The longest call of each command: every option of its table, in any order.
        for (algorithm, words) in [
            (Algorithm::Throttle, "k 1 1 1 -1 HELD 5 MS SHADOW"),
            (Algorithm::Window, "k 1 1 -1 HELD 5 MS SHADOW PRECISION 1"),
            (Algorithm::Bucket, "k 1 1 1 -1 HELD 5 MS SHADOW"),
            (Algorithm::Counter, "k 1 1 -1 HELD 5 MS SHADOW"),
            (Algorithm::Quota, "k 1 PER DAY TZ +01:00 ANCHOR 0 QUANTITY -1 HELD 5 MS SHADOW"),
        ] {
            let r = parse(algorithm, words).unwrap_or_else(|e| panic!("{words}: {e}"));
            assert_eq!((r.quantity, r.unit, r.shadow()), (-1, Unit::Millis, true), "{words}");
            // DEBIT too: its own error for a refund, nothing else.
            assert_eq!(parse(algorithm, &format!("{words} DEBIT")).map(|_| ()), Err(Error::DebitRefund), "{words}");
            let charge = format!("{} DEBIT", words.replace("-1 HELD 5 ", "3 "));
            let r = parse(algorithm, &charge).map(|r| (r.quantity, r.charge));
            assert_eq!(r, Ok((3, Charge::Debit)), "{charge}");
        }
    }

    #[test]
    fn the_largest_values_the_messages_state_are_accepted() {
        use Algorithm::*;
        for (algorithm, words) in [
            (Throttle, "k 0 1 1000000000"),
            (Throttle, "k 0 1 1000000000000 MS"),
            (Window, "k 1 1000000000"),
            (Window, "k 1 1000000000 PRECISION 100000"),
            (Bucket, "k 1 1 1000000000"),
            (Counter, "k 999999999999999999 1000000000"),
        ] {
            assert!(parse(algorithm, words).is_ok(), "{algorithm:?} {words}");
        }
    }
}

#[cfg(test)]
#[path = "limiter/held_tests.rs"]
mod held_tests;

#[cfg(test)]
#[path = "limiter/debit_tests.rs"]
mod debit_tests;
