use super::*;
use crate::limits::testing::T0;
use crate::time::{NANOS_PER_MILLI, NANOS_PER_SEC};
use proptest::prelude::*;

fn args(s: &str) -> Vec<&[u8]> {
    s.split(' ').filter(|w| !w.is_empty()).map(str::as_bytes).collect()
}

fn parse(s: &str) -> Result<Request<'_>> {
    Request::parse(&args(s), &Caps::DEFAULT)
}

fn error(s: &str) -> String {
    parse(s).unwrap_err().to_string()
}

#[test]
fn parses_the_documented_examples() {
    let r = parse("2 rl:{u42}:s rl:{u42}:h THROTTLE 9 10 1 WINDOW 1000 3600").unwrap();
    assert_eq!(r.keys, vec![&b"rl:{u42}:s"[..], b"rl:{u42}:h"]);
    assert_eq!(
        r.limiters.iter().map(|(l, q)| (l.algorithm(), *q)).collect::<Vec<_>>(),
        [(Algorithm::Throttle, 1), (Algorithm::Window, 1)]
    );
    assert_eq!((r.unit, r.details), (Unit::Seconds, false));

    let r = parse("2 req:{t7} tok:{t7} THROTTLE 59 60 60 BUCKET 100000 100000 60 QUANTITY 750").unwrap();
    assert_eq!(r.limiters.iter().map(|(_, q)| *q).collect::<Vec<_>>(), [1, 750]);

    let r = parse("3 a b c COUNTER 5 10 quantity -2 window 10 1000 precision 100 BUCKET 5 1 100 MS details").unwrap();
    assert_eq!((r.unit, r.details), (Unit::Millis, true));
    assert_eq!(r.limiters[0].1, -2);
    let Limiter::Window(w) = r.limiters[1].0 else { panic!("a window") };
    assert_eq!(w.precision().map(|p| p.as_nanos()), Some(100 * NANOS_PER_MILLI));
}

#[test]
fn shadow_is_a_call_option() {
    let r = parse("2 a b COUNTER 5 10 SHADOW THROTTLE 1 1 1 details").unwrap();
    assert_eq!((r.shadow(), r.details), (true, true));
    assert!(!parse("1 a COUNTER 5 10").unwrap().shadow());
    assert_eq!(parse("1 a COUNTER 5 10 SHADOW shadow"), Err(Error::Syntax));
    let caps = Caps { max_exact_limit: 7, max_buckets: 10 };
    assert_eq!(
        Request::parse(&args("1 a WINDOW 8 10"), &caps).unwrap_err().to_string(),
        "ERR limiter 1: limit must be an integer from 1 to 7 (use PRECISION for larger limits)"
    );
}

#[test]
fn errors_say_what_and_which_limiter() {
    assert_eq!(parse(""), Err(Error::WrongArity("cl.all")));
    assert_eq!(parse("2 a"), Err(Error::WrongArity("cl.all")));
    assert_eq!(error("0 a COUNTER 1 1"), "ERR numkeys must be an integer from 1 to 16");
    assert_eq!(error("17 a COUNTER 1 1"), "ERR numkeys must be an integer from 1 to 16");
    assert_eq!(error("2 a b COUNTER 1 1"), "ERR numkeys is 2 but 1 limiter specs follow the keys");
    assert_eq!(error("1 a COUNTER 1 1 COUNTER 1 1"), "ERR numkeys is 1 but 2 limiter specs follow the keys");
    assert_eq!(error("3 a b a COUNTER 1 1 COUNTER 1 1 COUNTER 1 1"), "ERR limiters 1 and 3 name the same key");
    assert_eq!(
        error("1 a LEAKY 1 1"),
        "ERR limiter 1: expected THROTTLE, WINDOW, BUCKET, COUNTER or QUOTA, got 'LEAKY'"
    );
    assert_eq!(
        error("2 a b COUNTER 1 1 WINDOW 0 10"),
        "ERR limiter 2: limit must be an integer from 1 to 100000 (use PRECISION for larger limits)"
    );
    assert_eq!(error("2 a b COUNTER 1 1 BUCKET 1 1"), "ERR limiter 2: BUCKET takes 3 numbers");
    assert_eq!(
        error("2 a b COUNTER 1 1 BOGUS 1 1"),
        "ERR limiter 2: expected THROTTLE, WINDOW, BUCKET, COUNTER or QUOTA, got 'BOGUS'"
    );
    assert_eq!(error("1 a COUNTER 1 1 BOGUS"), "ERR syntax error");
    assert_eq!(error("1 a COUNTER 1 1 5"), "ERR syntax error");
    assert_eq!(error("1 a THROTTLE 1 1 1 QUANTITY"), "ERR limiter 1: syntax error");
    assert_eq!(error("1 a THROTTLE 1 1 1 QUANTITY 1 QUANTITY 2"), "ERR limiter 1: syntax error");
    assert_eq!(error("1 a COUNTER 1 1 MS MS"), "ERR syntax error");
    assert_eq!(
        error("1 a COUNTER 1 1000000000001 MS"),
        "ERR limiter 1: window must be an integer from 1 to 1000000000000 (milliseconds)"
    );
}

#[test]
fn a_non_integer_in_a_spec_names_its_limiter() {
    let not_integer = |i: usize| format!("ERR limiter {i}: value is not an integer or out of range");
    assert_eq!(error("1 a THROTTLE 1 1.5 1"), not_integer(1));
    assert_eq!(error("2 a b COUNTER 1 60 THROTTLE 1 x 60"), not_integer(2));
    assert_eq!(error("2 a b COUNTER 1 60 QUANTITY 0x1 THROTTLE 1 1 60"), not_integer(1));
    assert_eq!(error("2 a b COUNTER 1 60 WINDOW 5 60 PRECISION 1.5"), not_integer(2));
    assert_eq!(
        error("2 a b COUNTER 1 PRECISION THROTTLE 1 1 1"),
        not_integer(1),
        "a word among the numbers is a number"
    );
    // Before any spec, the plain text.
    assert_eq!(error("x a COUNTER 1 1"), Error::NotAnInteger.to_string());
}

#[test]
fn an_option_the_spec_does_not_take_names_that_spec() {
    assert_eq!(
        error("2 a b COUNTER 4 60 PRECISION 5 THROTTLE 1 1 1"),
        "ERR limiter 1: COUNTER does not take PRECISION"
    );
    assert_eq!(
        error("2 a b THROTTLE 1 1 1 precision 5 COUNTER 1 1"),
        "ERR limiter 1: THROTTLE does not take PRECISION"
    );
    assert_eq!(
        error("2 a b COUNTER 4 60 QUANTITY 2 PRECISION 5 THROTTLE 1 1 1"),
        "ERR limiter 1: COUNTER does not take PRECISION"
    );
    // After the last spec alike.
    assert_eq!(error("1 a THROTTLE 1 1 1 PRECISION 5"), "ERR limiter 1: THROTTLE does not take PRECISION");
    assert_eq!(error("2 a b WINDOW 5 60 BUCKET 5 1 60 PRECISION 5"), "ERR limiter 2: BUCKET does not take PRECISION");
    // A window takes it.
    assert!(parse("2 a b WINDOW 5 60 PRECISION 5 COUNTER 1 1").is_ok());
    // Not right after the spec (a call option between ends it): the word is no spec.
    assert_eq!(
        error("2 a b WINDOW 5 60 MS PRECISION 5 COUNTER 1 1"),
        "ERR limiter 2: expected THROTTLE, WINDOW, BUCKET, COUNTER or QUOTA, got 'PRECISION'"
    );
    assert_eq!(error("1 a WINDOW 5 60 MS PRECISION 5"), "ERR syntax error");
    // A word that is no option at all keeps the texts above.
    assert_eq!(
        error("2 a b COUNTER 4 60 MAXWAIT 5 THROTTLE 1 1 1"),
        "ERR limiter 2: expected THROTTLE, WINDOW, BUCKET, COUNTER or QUOTA, got 'MAXWAIT'"
    );
    assert_eq!(error("1 a COUNTER 4 60 MAXWAIT 5"), "ERR syntax error");
}

#[test]
fn the_table_derives_arity_and_an_unbounded_length() {
    assert_eq!(COMMAND.arity(), -6, "CL.ALL 1 key COUNTER limit window");
    assert_eq!(COMMAND.max_words(), None);
}

/// A key as the module keeps it: bytes and an expiry in whole milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Key {
    value: Option<Vec<u8>>,
    expires_ms: Option<i64>,
}

impl Key {
    pub(crate) fn stored(&self, now: i64) -> Option<Stored<'_>> {
        let live = self.expires_ms.is_none_or(|ms| i128::from(ms) * i128::from(NANOS_PER_MILLI) > i128::from(now));
        match (&self.value, live) {
            (Some(value), true) => Some(Stored { value, expires_at_ms: self.expires_ms }),
            _ => None,
        }
    }

    pub(crate) fn apply(&mut self, effect: &Effect<Write>) {
        match effect {
            Effect::Nothing => {}
            Effect::Delete => *self = Key::default(),
            Effect::Store { state, expires_at } => {
                let value = match state {
                    Write::Integer(v) => v.to_string().into_bytes(),
                    Write::Tagged(tag, v) => format!("{}{v}", char::from(*tag)).into_bytes(),
                    Write::Patch(patch) => {
                        let mut value = self.value.take().unwrap_or_default();
                        patch.apply(&mut value);
                        value
                    }
                };
                *self = Key { value: Some(value), expires_ms: Some(expires_at.ceil_millis()) };
            }
        }
    }
}

/// A limiter with small parameters, so that random calls reach every outcome.
pub(crate) fn limiter() -> impl Strategy<Value = Limiter> {
    (0usize..5, 1i64..6, 1i64..4, 1i64..2000).prop_map(|(kind, a, b, ms)| {
        let algorithm = Algorithm::ALL[kind];
        let values = match algorithm {
            Algorithm::Throttle => [a - 1, b, ms],
            Algorithm::Window | Algorithm::Counter => [a, ms, 0],
            Algorithm::Bucket => [a, b, ms],
            Algorithm::Quota => {
                let calendar = crate::calendar::Calendar {
                    per: crate::calendar::Per::Minute,
                    zone: crate::calendar::Zone::UTC,
                    anchor_ms: None,
                };
                return Limiter::Quota(crate::quota::Params::new(a, calendar).unwrap());
            }
        };
        let tail = Tail::parse(&[], std::iter::empty()).unwrap();
        algorithm.build(&values, &tail, Unit::Millis, &Caps::DEFAULT).unwrap()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    /// CL.ALL is "decide each alone, apply all iff all admit", and its reply is the binding
    /// limiter's, chosen by the contract's rule.
    #[test]
    fn equals_each_alone_applied_all_or_nothing(
        limiters in proptest::collection::vec((limiter(), -2i64..5), 1..5),
        history in proptest::collection::vec((0usize..4, 0i64..3000, -1i64..4), 0..30),
        quantities_at in 0i64..3000,
        millis in any::<bool>(),
    ) {
        let unit = if millis { Unit::Millis } else { Unit::Seconds };
        let mut keys = vec![Key::default(); limiters.len()];
        let mut now = T0;
        // Earlier single calls build up each key's state.
        for (which, step, q) in history {
            now += step * NANOS_PER_MILLI / 3;
            let i = which % limiters.len();
            let d = limiters[i].0.decide(keys[i].stored(now), Instant::from_nanos(now), q).unwrap();
            keys[i].apply(&d.effect);
        }
        now += quantities_at * NANOS_PER_MILLI / 7;
        let at = Instant::from_nanos(now);

        let stored: Vec<_> = keys.iter().map(|k| k.stored(now)).collect();
        let outcome = decide(&limiters, &stored, at, unit).unwrap();
        let alone: Vec<_> = limiters.iter().zip(&stored).map(|((l, q), s)| l.decide(*s, at, *q).unwrap()).collect();

        let all_admit = alone.iter().all(|d| !d.reply.limited);
        prop_assert_eq!(outcome.admitted(), all_admit);
        for (got, want) in outcome.decisions.iter().zip(&alone) {
            prop_assert_eq!(got.reply, want.reply, "each limiter replies as alone");
            if all_admit {
                prop_assert_eq!(&got.effect, &want.effect, "all admit: every effect as alone");
            } else {
                prop_assert_eq!(&got.effect, &Effect::Nothing, "one denies: nothing is written");
            }
        }
        // The binding limiter, by the rule written out plainly: retry times as the reply
        // shows them, in the call's unit.
        let want_binding = if all_admit {
            let fewest = alone.iter().map(|d| d.reply.remaining).min().unwrap();
            alone.iter().position(|d| d.reply.remaining == fewest).unwrap()
        } else {
            let wait = |d: &Decision<Write>| d.reply.to_array(unit)[3];
            let wait = |d: &Decision<Write>| if wait(d) == -1 { i64::MAX } else { wait(d) };
            let longest = alone.iter().filter(|d| d.reply.limited).map(wait).max().unwrap();
            alone.iter().position(|d| d.reply.limited && wait(d) == longest).unwrap()
        };
        prop_assert_eq!(outcome.binding, want_binding);
    }
}

#[test]
fn a_denial_anywhere_writes_nothing_anywhere() {
    let tail = Tail::parse(&[], std::iter::empty()).unwrap();
    let one_per_minute = Algorithm::Counter.build(&[1, 60, 0], &tail, Unit::Seconds, &Caps::DEFAULT).unwrap();
    let generous = Algorithm::Throttle.build(&[99, 100, 60], &tail, Unit::Seconds, &Caps::DEFAULT).unwrap();
    let now = Instant::from_nanos(T0);
    let limiters = [(generous, 1), (one_per_minute, 1)];
    let first = decide(&limiters, &[None, None], now, Unit::Seconds).unwrap();
    assert!(first.admitted());
    assert_eq!(first.binding, 1, "the counter has fewer units left");
    let mut keys = [Key::default(), Key::default()];
    for (key, d) in keys.iter_mut().zip(&first.decisions) {
        key.apply(&d.effect);
    }
    let later = Instant::from_nanos(T0 + NANOS_PER_SEC);
    let stored: Vec<_> = keys.iter().map(|k| k.stored(later.as_nanos())).collect();
    let second = decide(&limiters, &stored, later, Unit::Seconds).unwrap();
    assert!(!second.admitted());
    assert_eq!(second.binding, 1);
    assert_eq!(second.reply().retry_after.map(|r| r.as_nanos()), Some(59 * NANOS_PER_SEC));
    assert!(second.decisions.iter().all(|d| d.effect == Effect::Nothing));
}

/// Ties are ties as the reply shows them: two denials 1.2 s and 1.9 s away both reply a
/// `retry_after` of 2 (seconds), and the first names the call; in milliseconds (1200 and 1900)
/// the second is the longer. Compared in nanoseconds, the seconds reply named the second.
#[test]
fn ties_are_judged_on_the_replied_retry_after() {
    let tail = Tail::parse(&[], std::iter::empty()).unwrap();
    let throttle =
        |period_ms| Algorithm::Throttle.build(&[0, 1, period_ms], &tail, Unit::Millis, &Caps::DEFAULT).unwrap();
    let limiters = [(throttle(1200), 1), (throttle(1900), 1)];
    let now = Instant::from_nanos(T0);
    let mut keys = [Key::default(), Key::default()];
    for (key, d) in keys.iter_mut().zip(&decide(&limiters, &[None, None], now, Unit::Millis).unwrap().decisions) {
        key.apply(&d.effect);
    }
    let stored: Vec<_> = keys.iter().map(|k| k.stored(T0)).collect();
    let seconds = decide(&limiters, &stored, now, Unit::Seconds).unwrap();
    assert_eq!(seconds.decisions.iter().map(|d| d.reply.to_array(Unit::Seconds)[3]).collect::<Vec<_>>(), [2, 2]);
    assert_eq!(seconds.binding, 0, "equal as replied: the first");
    let millis = decide(&limiters, &stored, now, Unit::Millis).unwrap();
    assert_eq!(millis.decisions.iter().map(|d| d.reply.to_array(Unit::Millis)[3]).collect::<Vec<_>>(), [1200, 1900]);
    assert_eq!(millis.binding, 1, "the longest");
}

/// `Parsed::parse` reads a table's positional arguments up to its first option: every
/// table lists them first.
#[test]
fn every_table_lists_its_positional_arguments_first() {
    let tables = Algorithm::ALL.iter().map(|a| a.command()).chain([&COMMAND, &crate::top::COMMAND]);
    for table in tables {
        let first_option = table.args.iter().position(|a| a.optional || a.multiple).unwrap_or(table.args.len());
        assert!(
            table.args[first_option..].iter().all(|a| a.optional || a.multiple),
            "{}: a required argument after an option",
            table.name
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// A refund is never limited, a check is a denial exactly when it is refused, and so a
    /// call of CL.ALL's grammar is a denial (counted, recorded and shadowed as one) exactly
    /// when it is refused: a take denied, a debit overdrawn or a check refused, whatever the
    /// limiters hold (takes and debits past their limits before it).
    #[test]
    fn a_call_is_a_denial_exactly_when_it_is_refused(
        limiters in proptest::collection::vec(limiter(), 1..4),
        history in proptest::collection::vec((0i64..3000, 0i64..8, any::<bool>()), 0..6),
        quantities in proptest::collection::vec(-2i64..3, 4),
        debit in any::<bool>(),
    ) {
        let mut keys = vec![Key::default(); limiters.len()];
        let mut now = T0;
        for (dt, q, debits) in history {
            now += dt * NANOS_PER_MILLI;
            for (l, key) in limiters.iter().zip(&mut keys) {
                let at = Instant::from_nanos(now);
                if let Ok(d) = l.decide_charge(key.stored(now), at, q, None, Charge::of(debits)) {
                    key.apply(&d.effect);
                }
            }
        }
        let call: Vec<(Limiter, i64)> = limiters
            .iter()
            .zip(&quantities)
            .map(|(&l, &q)| (l, if debit { q.abs() } else { q }))
            .collect();
        let stored: Vec<_> = keys.iter().map(|k| k.stored(now)).collect();
        let outcome = decide_charge(&call, &[], &stored, Instant::from_nanos(now), Unit::Millis, Charge::of(debit));
        let Ok(outcome) = outcome else { return Ok(()) };
        for (d, &(_, q)) in outcome.decisions.iter().zip(&call) {
            if q < 0 {
                prop_assert!(!d.reply.limited && !d.reply.denies(q), "a refund is never a denial");
            } else {
                prop_assert_eq!(d.reply.denies(q), d.reply.limited);
            }
        }
        prop_assert_eq!(outcome.denied(&call), !outcome.admitted());
    }
}
