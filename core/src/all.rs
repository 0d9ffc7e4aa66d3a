//! CL.ALL: several limiters, of any algorithms, decided at one instant, all or nothing.
//!
//! `CL.ALL numkeys key [key ...] spec [spec ...] [MS] [DETAILS]`, one spec per key, in order:
//!
//! ```text
//! spec := THROTTLE max_burst count period [QUANTITY q] [HELD t]
//!       | WINDOW limit window [PRECISION p] [QUANTITY q] [HELD t]
//!       | BUCKET capacity tokens interval [QUANTITY q] [HELD t]
//!       | COUNTER limit window [QUANTITY q] [HELD t]
//!       | QUOTA limit PER unit [TZ zone] [ANCHOR instant] [QUANTITY q] [HELD t]
//! ```
//!
//! Parameters mean what they mean in the single commands, and each key holds exactly the state
//! its single command would hold. Every limiter decides against its state at the same instant;
//! if all admit, every effect is applied, else none is. With `DEBIT` (one word for the call)
//! every limiter counts its quantity and every effect is applied, whether or not some overdrew.

use crate::caps::Caps;
use crate::command::{Arg, ArgKind, Command, Keys, Tail};
use crate::error::{Error, Range, Result};
use crate::limiter::{Algorithm, LIMITER_FLAGS, Limiter, Stored, Write};
use crate::time::{Instant, Unit};
use crate::{Charge, Decision, Effect, Reply};

/// The most limiters (keys) one call may hold.
pub const MAX_KEYS: usize = 16;

/// The tables of the commands a spec names, in [`Algorithm::ALL`]'s order.
pub const SPECS: [&Command; Algorithm::ALL.len()] = {
    let mut tables = [Algorithm::ALL[0].command(); Algorithm::ALL.len()];
    let mut i = 1;
    while i < tables.len() {
        tables[i] = Algorithm::ALL[i].command();
        i += 1;
    }
    tables
};

pub static COMMAND: Command = Command {
    name: "cl.all",
    summary: "Decides several limiters of any algorithms at one instant: all admit and every one is charged, or none is.",
    complexity: "The sum of the limiters' own complexities",
    since: "1.1.0",
    flags: LIMITER_FLAGS,
    acl_categories: "write fast",
    keys: Keys::Counted { max: MAX_KEYS },
    args: &[
        Arg { name: "spec", kind: ArgKind::Spec(&SPECS), optional: false, multiple: true },
        Arg::MS,
        DETAILS,
        Arg::DEBIT,
        Arg::SHADOW,
    ],
};

const DETAILS: Arg = Arg::flag("details", "DETAILS");

/// The call-level options of `table` (CL.ALL's, CL.EACH's), after the specs.
fn call_options(table: &'static Command) -> impl Iterator<Item = &'static Arg> + Clone {
    table.args.iter().filter(|a| matches!(a.kind, ArgKind::Flag(_)))
}

/// A parsed CL.ALL (or CL.EACH) call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    pub keys: Vec<&'a [u8]>,
    /// One per key, in order, with the units it consumes.
    pub limiters: Vec<(Limiter, i64)>,
    /// One per key, in order: the `HELD t` of its refund, if given (see
    /// [`Limiter::decide_held`]).
    pub held: Vec<Option<Instant>>,
    pub unit: Unit,
    /// `DETAILS`: reply every limiter's own five integers too.
    pub details: bool,
    /// `DEBIT` (one word for the whole call): every limiter counts its quantity.
    pub charge: Charge,
    pub tail: Tail,
}

impl<'a> Request<'a> {
    /// Parses a call, every limiter's parameters within `caps`.
    pub fn parse(args: &[&'a [u8]], caps: &Caps) -> Result<Request<'a>> {
        Request::parse_as(&COMMAND, args, caps)
    }

    /// Parses a call of `table`, a command of CL.ALL's grammar (CL.ALL, CL.EACH): `numkeys`,
    /// the keys, one spec per key, then the call options `table` lists.
    pub fn parse_as(table: &'static Command, args: &[&'a [u8]], caps: &Caps) -> Result<Request<'a>> {
        let arity = || Error::WrongArity(table.name);
        let (&numkeys, rest) = args.split_first().ok_or_else(arity)?;
        let numkeys = crate::args::integer(numkeys)?;
        let max = MAX_KEYS as i64;
        if !(1..=max).contains(&numkeys) {
            return Err(Error::OutOfRange { name: "numkeys", range: Range::Integer { min: 1, max } });
        }
        let numkeys = numkeys as usize;
        if rest.len() < numkeys {
            return Err(arity());
        }
        let (keys, mut rest) = rest.split_at(numkeys);
        for (i, key) in keys.iter().enumerate() {
            if let Some(j) = keys[..i].iter().position(|k| k == key) {
                return Err(Error::Call(format!("limiters {} and {} name the same key", j + 1, i + 1)));
            }
        }

        // Split the specs: each is its algorithm's word, its numbers, and the options it
        // accepts with their values; call-level options may come between and after them.
        // The numbers are read once the call's unit is known.
        let is_call_option = |w: &[u8]| {
            call_options(table).any(|a| matches!(a.kind, ArgKind::Flag(t) if w.eq_ignore_ascii_case(t.as_bytes())))
        };
        let mut specs: Vec<(Algorithm, &[&'a [u8]])> = Vec::with_capacity(numkeys);
        let mut call_words: Vec<&[u8]> = Vec::new();
        // Whether the word read next directly follows a spec (no call option between).
        let mut after_spec = false;
        while let Some((&word, after)) = rest.split_first() {
            if is_call_option(word) {
                call_words.push(word);
                rest = after;
                after_spec = false;
                continue;
            }
            let index = specs.len() + 1;
            let Some(algorithm) = Algorithm::named(word) else {
                // An option of another algorithm's spec: the spec it follows does not take it.
                if let Some((previous, _)) = specs.last().filter(|_| after_spec)
                    && let Some(option) = spec_option(word)
                {
                    return Err(Error::Call(format!(
                        "limiter {}: {} does not take {option}",
                        index - 1,
                        previous.word()
                    )));
                }
                if index > numkeys {
                    return Err(Error::Syntax);
                }
                return Err(Error::Call(format!(
                    "limiter {index}: expected THROTTLE, WINDOW, BUCKET, COUNTER or QUOTA, got '{}'",
                    printable(word)
                )));
            };
            let mut end = algorithm.param_words();
            if after.len() < end {
                return Err(Error::Call(format!("limiter {index}: {} takes {end} numbers", algorithm.word())));
            }
            let accepts = |w: &[u8]| {
                algorithm.options().chain([&Arg::QUANTITY_OPTION]).any(
                    |a| matches!(a.kind, ArgKind::Option(t) | ArgKind::Text(t) if w.eq_ignore_ascii_case(t.as_bytes())),
                )
            };
            while after.get(end).is_some_and(|w| accepts(w)) {
                end += 2; // the option and its value (a missing value is the spec's syntax error)
            }
            let end = end.min(after.len());
            specs.push((algorithm, &after[..end]));
            rest = &after[end..];
            after_spec = true;
        }
        if specs.len() != numkeys {
            return Err(Error::Call(format!("numkeys is {numkeys} but {} limiter specs follow the keys", specs.len())));
        }
        let tail = Tail::parse(&call_words, call_options(table))?;
        let charge = Charge::of(tail.has("DEBIT"));
        let (limiters, held) = specs
            .into_iter()
            .enumerate()
            .map(|(i, (algorithm, words))| {
                spec(algorithm, words, tail.unit, caps, charge).map_err(|e| e.in_limiter(i + 1))
            })
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .map(|(limiter, quantity, held)| ((limiter, quantity), held))
            .unzip();
        Ok(Request { keys: keys.to_vec(), limiters, held, unit: tail.unit, details: tail.has("DETAILS"), charge, tail })
    }

    /// `SHADOW`: a denial is answered as an admission (read only when a call is denied).
    pub fn shadow(&self) -> bool {
        self.tail.has("SHADOW")
    }
}

/// One spec's numbers and options (after its word): the limiter, its quantity and the
/// `HELD t` of its refund, checked against the call's `charge`.
fn spec(
    algorithm: Algorithm,
    words: &[&[u8]],
    unit: Unit,
    caps: &Caps,
    charge: Charge,
) -> Result<(Limiter, i64, Option<Instant>)> {
    let (limiter, tail) = if let Algorithm::Quota = algorithm {
        crate::limiter::quota_spec(words, unit, [&Arg::QUANTITY_OPTION, &Arg::HELD].into_iter())?
    } else {
        let (numbers, options) = words.split_at(algorithm.params().count().min(words.len()));
        let mut values = [0i64; 3];
        for (slot, word) in values.iter_mut().zip(numbers) {
            *slot = crate::args::integer(word)?;
        }
        // The common spec, its numbers and at most `QUANTITY q` (a gateway's every call), reads
        // as the table's parse reads it, without the search through the options.
        let tail = match options {
            [] => Tail::EMPTY,
            [word, q] if word.eq_ignore_ascii_case(b"QUANTITY") && crate::args::integer(q).is_ok() => {
                let mut tail = Tail::EMPTY;
                tail.quantity = crate::args::integer(q).ok();
                tail
            }
            _ => Tail::parse(options, algorithm.options().chain([&Arg::QUANTITY_OPTION]))?,
        };
        (algorithm.build(&values, &tail, unit, caps)?, tail)
    };
    let quantity = tail.quantity.unwrap_or(1);
    if charge == Charge::Debit && quantity < 0 {
        return Err(Error::DebitRefund);
    }
    Ok((limiter, quantity, crate::limiter::held(tail.value("HELD"), quantity)?))
}

/// The option `word` names if some spec takes it (`QUANTITY`, `PRECISION`), as its table spells it.
fn spec_option(word: &[u8]) -> Option<&'static str> {
    Algorithm::ALL.into_iter().flat_map(Algorithm::options).chain([&Arg::QUANTITY_OPTION]).find_map(|a| match a.kind {
        ArgKind::Option(token) | ArgKind::Text(token) if word.eq_ignore_ascii_case(token.as_bytes()) => Some(token),
        _ => None,
    })
}

/// A word for an error message: printable ASCII, at most 32 characters.
fn printable(word: &[u8]) -> String {
    word.iter().take(32).map(|&b| if b.is_ascii_graphic() { b as char } else { '?' }).collect()
}

/// Several limiters decided at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Each limiter's own decision, as its single command would have made it; when any
    /// denied a take, every effect is `Nothing`.
    pub decisions: Vec<Decision<Write>>,
    /// The index (0-based) of the limiter whose reply describes the call.
    pub binding: usize,
}

impl Outcome {
    pub fn admitted(&self) -> bool {
        self.decisions.iter().all(|d| !d.reply.limited)
    }

    /// Whether the call of these `limiters` (their quantities) is a denial: some limiter
    /// denied a take, overdrew a debit or refused a check (see [`Reply::denies`]); then a call
    /// without `DEBIT` wrote nothing, its refunds included.
    pub fn denied(&self, limiters: &[(Limiter, i64)]) -> bool {
        self.decisions.iter().zip(limiters).any(|(d, &(_, q))| d.reply.denies(q))
    }

    /// The reply of the binding limiter.
    pub fn reply(&self) -> Reply {
        self.decisions[self.binding].reply
    }
}

/// Decides every limiter against its key's state at `now`. If all admit, each keeps its effect;
/// if any denies, nothing is written for any key. The binding limiter: among the denying ones
/// the one with the longest `retry_after` (never counts as longest), else the one with the
/// fewest `remaining`; the first of those the reply shows as equal: `retry_after`s are
/// compared as replied in `unit` (two denials 1.2 s and 1.9 s away both show 2 seconds, and
/// the first names the call), not in nanoseconds.
pub fn decide(limiters: &[(Limiter, i64)], stored: &[Option<Stored<'_>>], now: Instant, unit: Unit) -> Result<Outcome> {
    decide_held(limiters, &[], stored, now, unit)
}

/// [`decide`], each refund bounded by its `HELD t` (`held[i]`, missing entries `None`): see
/// [`Limiter::decide_held`].
pub fn decide_held(
    limiters: &[(Limiter, i64)],
    held: &[Option<Instant>],
    stored: &[Option<Stored<'_>>],
    now: Instant,
    unit: Unit,
) -> Result<Outcome> {
    decide_charge(limiters, held, stored, now, unit, Charge::Take)
}

/// [`decide_held`], every quantity charged as `charge` says. With [`Charge::Debit`] every
/// limiter counts its quantity and keeps its effect whether or not some overdrew (a charge
/// is never refused); the binding limiter is chosen as for a denial when any overdrew.
pub fn decide_charge(
    limiters: &[(Limiter, i64)],
    held: &[Option<Instant>],
    stored: &[Option<Stored<'_>>],
    now: Instant,
    unit: Unit,
    charge: Charge,
) -> Result<Outcome> {
    let mut decisions = Vec::with_capacity(limiters.len());
    for (i, ((limiter, quantity), stored)) in limiters.iter().zip(stored).enumerate() {
        let held = held.get(i).copied().flatten();
        let decision = limiter.decide_charge(*stored, now, *quantity, held, charge);
        decisions.push(decision.map_err(|e| e.in_limiter(i + 1))?);
    }
    let admitted = decisions.iter().all(|d| !d.reply.limited);
    let binding = if admitted {
        // `min_by_key` keeps the first of equal keys.
        decisions.iter().enumerate().min_by_key(|(_, d)| d.reply.remaining).map_or(0, |(i, _)| i)
    } else {
        let wait = |d: &Decision<Write>| d.reply.retry_after.map_or(i64::MAX, |r| unit.reply_value(r));
        let denied = decisions.iter().enumerate().filter(|(_, d)| d.reply.limited);
        // `max_by_key` keeps the last of equal keys: reverse to keep the first.
        denied.rev().max_by_key(|(_, d)| wait(d)).map_or(0, |(i, _)| i)
    };
    if !admitted && charge == Charge::Take {
        for d in &mut decisions {
            d.effect = Effect::Nothing;
        }
    }
    Ok(Outcome { decisions, binding })
}

#[cfg(test)]
pub(crate) mod tests;
