use super::*;
use crate::all::tests::{Key, limiter};
use crate::command::Tail;
use crate::limiter::Algorithm;
use crate::limits::testing::T0;
use crate::time::{NANOS_PER_MILLI, Unit};
use crate::{Charge, Effect, Error};
use proptest::prelude::*;

fn args(s: &str) -> Vec<&[u8]> {
    s.split(' ').filter(|w| !w.is_empty()).map(str::as_bytes).collect()
}

fn error(s: &str) -> String {
    parse(&args(s), &Caps::DEFAULT).unwrap_err().to_string()
}

#[test]
fn parses_cl_alls_grammar_with_its_own_options() {
    let r =
        parse(&args("2 rl:{u42}:s rl:{u42}:h THROTTLE 9 10 1 WINDOW 1000 3600 QUANTITY 2 MS SHADOW"), &Caps::DEFAULT)
            .unwrap();
    assert_eq!(r.keys, vec![&b"rl:{u42}:s"[..], b"rl:{u42}:h"]);
    assert_eq!(
        r.limiters.iter().map(|(l, q)| (l.algorithm(), *q)).collect::<Vec<_>>(),
        [(Algorithm::Throttle, 1), (Algorithm::Window, 2)]
    );
    assert_eq!((r.unit, r.shadow(), r.details, r.charge), (Unit::Millis, true, false, Charge::Take));
    let r = parse(&args("1 a COUNTER 5 10 DEBIT"), &Caps::DEFAULT).unwrap();
    assert_eq!(r.charge, Charge::Debit);
    assert_eq!(
        error("1 a COUNTER 5 10 QUANTITY -1 DEBIT"),
        "ERR limiter 1: DEBIT takes a quantity of 0 or more (a refund is a negative quantity without DEBIT)"
    );
    // DETAILS is CL.ALL's: every limiter's reply is CL.EACH's reply already.
    assert_eq!(parse(&args("1 a COUNTER 5 10 DETAILS"), &Caps::DEFAULT), Err(Error::Syntax));
    assert_eq!(parse(&args(""), &Caps::DEFAULT), Err(Error::WrongArity("cl.each")));
    assert_eq!(parse(&args("2 a"), &Caps::DEFAULT), Err(Error::WrongArity("cl.each")));
    assert_eq!(error("0 a COUNTER 1 1"), "ERR numkeys must be an integer from 1 to 16");
    assert_eq!(error("2 a a COUNTER 1 1 COUNTER 1 1"), "ERR limiters 1 and 2 name the same key");
    assert_eq!(error("2 a b COUNTER 1 1 BUCKET 1 1"), "ERR limiter 2: BUCKET takes 3 numbers");
}

fn counter(limit: i64) -> crate::limiter::Limiter {
    let tail = Tail::parse(&[], std::iter::empty()).unwrap();
    Algorithm::Counter.build(&[limit, 60, 0], &tail, Unit::Seconds, &Caps::DEFAULT).unwrap()
}

#[test]
fn a_denial_leaves_its_own_key_alone_and_the_others_are_charged() {
    let now = Instant::from_nanos(T0);
    let limiters = [(counter(5), 1), (counter(1), 1), (counter(3), 0), (counter(2), -1)];
    let mut keys = vec![Key::default(); limiters.len()];
    let first = decide(&limiters, &[], &[None, None, None, None], now, Charge::Take).unwrap();
    assert!(first.iter().all(|d| !d.reply.limited));
    for (key, d) in keys.iter_mut().zip(&first) {
        key.apply(&d.effect);
    }
    let stored: Vec<_> = keys.iter().map(|k| k.stored(T0)).collect();
    let second = decide(&limiters, &[], &stored, now, Charge::Take).unwrap();
    assert_eq!(second.iter().map(|d| d.reply.limited).collect::<Vec<_>>(), [false, true, false, false]);
    assert!(matches!(second[0].effect, Effect::Store { .. }), "the first is charged again");
    assert_eq!(second[1].effect, Effect::Nothing, "the denied one writes nothing");
    assert_eq!(second[2].effect, Effect::Nothing, "a peek writes nothing");
    assert_eq!(second[0].reply.remaining, 3);
}

/// With DEBIT every limiter counts its quantity, the one that overdraws too (`limited` 1, its
/// effect kept); the others are charged as well.
#[test]
fn a_debit_charges_every_limiter_and_says_which_overdrew() {
    let now = Instant::from_nanos(T0);
    let limiters = [(counter(5), 3), (counter(2), 3), (counter(4), 0)];
    let d = decide(&limiters, &[], &[None, None, None], now, Charge::Debit).unwrap();
    assert_eq!(d.iter().map(|d| d.reply.limited).collect::<Vec<_>>(), [false, true, false]);
    assert!(matches!(d[0].effect, Effect::Store { .. }) && matches!(d[1].effect, Effect::Store { .. }));
    assert_eq!(d[2].effect, Effect::Nothing, "DEBIT 0 is a pure check");
    assert_eq!((d[0].reply.remaining, d[1].reply.remaining), (2, 0));
}

#[test]
fn an_error_names_its_limiter() {
    let now = Instant::from_nanos(T0);
    let stored = Stored { value: b"not a count", expires_at_ms: Some(T0 / NANOS_PER_MILLI + 1000) };
    let e = decide(&[(counter(5), 1), (counter(5), 1)], &[], &[None, Some(stored)], now, Charge::Take).unwrap_err();
    assert!(e.to_string().starts_with("ERR limiter 2: "), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// CL.EACH is "decide each alone at one instant, apply each one's own effect": every
    /// reply and every effect is the single command's, whatever the others decide, over a
    /// history of CL.EACH calls and single calls on the same keys.
    #[test]
    fn equals_each_alone(
        limiters in proptest::collection::vec((limiter(), -2i64..5), 1..5),
        history in proptest::collection::vec((0usize..5, 0i64..3000, -1i64..4, any::<bool>()), 0..30),
    ) {
        let mut keys = vec![Key::default(); limiters.len()];
        let mut now = T0;
        for (which, step, q, debit) in history {
            now += step * NANOS_PER_MILLI / 3;
            let at = Instant::from_nanos(now);
            let stored: Vec<_> = keys.iter().map(|k| k.stored(now)).collect();
            if which == 4 {
                // A CL.EACH call, with DEBIT (of the quantities, made 0 or more) or not.
                let charge = Charge::of(debit);
                let calls: Vec<_> =
                    limiters.iter().map(|(l, q)| (*l, if debit { q.abs() } else { *q })).collect();
                let got = decide(&calls, &[], &stored, at, charge).unwrap();
                let alone: Vec<_> = calls
                    .iter()
                    .zip(&stored)
                    .map(|((l, q), s)| l.decide_charge(*s, at, *q, None, charge).unwrap())
                    .collect();
                prop_assert_eq!(&got, &alone);
                for d in &got {
                    if d.reply.limited && !debit {
                        prop_assert_eq!(&d.effect, &Effect::Nothing, "a denied take writes nothing");
                    }
                }
                drop(stored);
                for (key, d) in keys.iter_mut().zip(&got) {
                    key.apply(&d.effect);
                }
            } else {
                // A single call on one of the keys.
                let i = which % limiters.len();
                let d = limiters[i].0.decide(stored[i], at, q).unwrap();
                drop(stored);
                keys[i].apply(&d.effect);
            }
        }
    }
}
