//! `DEBIT`: a charge for units already used, counted whatever the limit says. Per algorithm:
//! a check, a debit past the limit, a check refused, takes refused until time has repaid the
//! overdraft and admitted right after; the argument rules; the bounds; CL.ALL's one word.

use super::held_tests::Key;
use super::*;
use crate::time::{NANOS_PER_MILLI, NANOS_PER_SEC};

/// A whole minute (so that a quota's period starts there): November 2023.
const T0: i64 = 1_700_000_040 * NANOS_PER_SEC;
const MS: i64 = NANOS_PER_MILLI;

/// A call as the module makes it.
trait Run {
    /// A call as the module makes it: `words` parsed by `algorithm`'s table, decided at `now`,
    /// its effect applied; the reply in the call's unit.
    fn run(&mut self, algorithm: Algorithm, words: &str, now: i64) -> Result<[i64; 5]>;
}

impl Run for Key {
    fn run(&mut self, algorithm: Algorithm, words: &str, now: i64) -> Result<[i64; 5]> {
        let words: Vec<&[u8]> = words.split(' ').map(str::as_bytes).collect();
        let r = Request::parse(algorithm, &words, &Caps::DEFAULT)?;
        let d = r.limiter.decide_charge(self.live(now), Instant::from_nanos(now), r.quantity, r.held, r.charge)?;
        self.apply(now, d.effect);
        Ok(d.reply.to_array(r.unit))
    }
}

/// check(0) → a debit past the limit → check(0) refused → takes refused until `repaid`
/// (ms after the debit) and admitted then. `words`: the key and parameters, in ms.
#[allow(clippy::too_many_arguments)]
fn overdraft(
    algorithm: Algorithm,
    words: &str,
    debit: i64,
    debited: [i64; 5],
    check_at: i64,
    checked: [i64; 5],
    repaid: i64,
    admitted: [i64; 5],
) {
    let mut key = Key::default();
    // CL.QUOTA's quantity is an option; the others' a bare integer.
    let q = |q: i64| if algorithm == Algorithm::Quota { format!("QUANTITY {q}") } else { q.to_string() };
    let call = |key: &mut Key, tail: &str, ms: i64| {
        key.run(algorithm, &format!("{words} {tail}"), T0 + ms * MS).unwrap_or_else(|e| panic!("{words} {tail}: {e}"))
    };
    let limit = debited[1];
    assert_eq!(
        call(&mut key, &format!("{} DEBIT", q(0)), 0),
        [0, limit, limit, -1, 0],
        "{words}: a check of a full limiter"
    );
    assert_eq!(key, Key::default(), "{words}: a check writes nothing");
    assert_eq!(call(&mut key, &format!("{} DEBIT", q(debit)), 0), debited, "{words}: the debit");
    let after_debit = key.clone();
    assert!(after_debit.0.is_some(), "{words}: a debit past the limit is counted");
    assert_eq!(call(&mut key, &q(0), check_at), checked, "{words}: a check over the limit is refused");
    assert_eq!(call(&mut key, &format!("DEBIT {}", q(0)), check_at), checked, "{words}: DEBIT 0 is the same check");
    assert_eq!(key, after_debit, "{words}: checks write nothing");
    let refused = call(&mut key, &q(1), repaid - 1);
    assert_eq!((refused[0], refused[3]), (1, 1), "{words}: refused a millisecond before the debt is repaid");
    assert_eq!(key, after_debit, "{words}: a refused take writes nothing");
    assert_eq!(call(&mut key, &q(1), repaid), admitted, "{words}: admitted once repaid");
}

#[test]
fn throttle_debits_move_the_tat_past_the_burst() {
    // Burst 4 (limit 5) at 1 per 10 s: 7 units debited leave the TAT 70 s ahead, 20 s past
    // the tolerance; a take of 1 waits until its TAT (80 s) is within the tolerance: 30 s.
    overdraft(
        Algorithm::Throttle,
        "k 4 1 10000 MS",
        7,
        [1, 5, 0, -1, 70_000],
        5_000,
        [1, 5, 0, 15_000, 65_000],
        30_000,
        [0, 5, 0, -1, 50_000],
    );
    // A debit of as many units as a take may be: the retry time of a take of as many after it.
    let mut key = Key::default();
    let t = |ms: i64| T0 + ms * MS;
    assert_eq!(key.run(Algorithm::Throttle, "k 4 1 10000 4 MS", t(0)), Ok([0, 5, 1, -1, 40_000]));
    assert_eq!(key.run(Algorithm::Throttle, "k 4 1 10000 3 MS DEBIT", t(0)), Ok([1, 5, 0, 50_000, 70_000]));
    assert_eq!(key.run(Algorithm::Throttle, "k 4 1 10000 3 MS", t(49_999)), Ok([1, 5, 2, 1, 20_001]));
    assert_eq!(key.run(Algorithm::Throttle, "k 4 1 10000 3 MS", t(50_000)), Ok([0, 5, 0, -1, 50_000]));
}

#[test]
fn counter_debits_pass_the_limit_until_the_window_closes() {
    overdraft(
        Algorithm::Counter,
        "k 5 10000 MS",
        8,
        [1, 5, 0, -1, 10_000],
        4_000,
        [1, 5, 0, 6_000, 6_000],
        10_000,
        [0, 5, 4, -1, 10_000],
    );
}

#[test]
fn quota_debits_pass_the_limit_until_the_period_ends() {
    overdraft(
        Algorithm::Quota,
        "k 5 PER MINUTE MS",
        8,
        [1, 5, 0, -1, 60_000],
        20_000,
        [1, 5, 0, 40_000, 40_000],
        60_000,
        [0, 5, 4, -1, 60_000],
    );
}

#[test]
fn bucket_debits_go_into_debt_repaid_refill_by_refill() {
    // 5 tokens, 1 a second: 8 debited leave a debt of 3; a take of 1 needs 4 refills.
    overdraft(
        Algorithm::Bucket,
        "k 5 1 1000 MS",
        8,
        [1, 5, 0, -1, 8_000],
        500,
        [1, 5, 0, 2_500, 7_500],
        4_000,
        [0, 5, 0, -1, 5_000],
    );
    // The key expires when the bucket is full again: the refill that repays all 8.
    let mut key = Key::default();
    key.run(Algorithm::Bucket, "k 5 1 1000 8 MS DEBIT", T0).unwrap();
    assert_eq!(key.0, Some((b"-8".to_vec(), T0 / MS + 8_000)));
}

#[test]
fn window_debits_log_every_unit() {
    overdraft(
        Algorithm::Window,
        "k 5 10000 MS",
        8,
        [1, 5, 0, -1, 10_000],
        4_000,
        [1, 5, 0, 6_000, 6_000],
        10_000,
        [0, 5, 4, -1, 10_000],
    );
    // Every unit is logged: 8 entries at the debit's instant.
    let mut key = Key::default();
    key.run(Algorithm::Window, "k 5 10000 8 MS DEBIT", T0).unwrap();
    let (bytes, _) = key.0.clone().unwrap();
    assert_eq!(bytes.len(), 8 + 8 * 8);
    // Over the limit by units logged at different instants: a take waits for the oldest to leave.
    key.run(Algorithm::Window, "k 5 10000 6 MS DEBIT", T0 + 3_000 * MS).unwrap();
    assert_eq!(key.run(Algorithm::Window, "k 5 10000 MS", T0 + 10_000 * MS), Ok([1, 5, 0, 3_000, 3_000]));
    assert_eq!(key.run(Algorithm::Window, "k 5 10000 MS", T0 + 13_000 * MS), Ok([0, 5, 4, -1, 10_000]));
}

#[test]
fn precision_debits_count_in_the_current_bucket() {
    // Buckets of 1 s: the debit's bucket [0, 1 s) counts until 11 s.
    overdraft(
        Algorithm::Window,
        "k 5 10000 MS PRECISION 1000",
        8,
        [1, 5, 0, -1, 11_000],
        4_000,
        [1, 5, 0, 7_000, 7_000],
        11_000,
        [0, 5, 4, -1, 11_000],
    );
}

#[test]
fn a_debit_that_fits_is_a_take() {
    for (algorithm, words) in [
        (Algorithm::Throttle, "k 4 1 10000 MS"),
        (Algorithm::Counter, "k 5 10000 MS"),
        (Algorithm::Quota, "k 5 PER HOUR MS"),
        (Algorithm::Bucket, "k 5 2 1000 MS"),
        (Algorithm::Window, "k 5 10000 MS"),
        (Algorithm::Window, "k 5 10000 MS PRECISION 1000"),
    ] {
        let (mut took, mut debited) = (Key::default(), Key::default());
        for (ms, q) in [(0, 2), (700, 2), (1_500, 1), (2_000, 0)] {
            let q = if algorithm == Algorithm::Quota { format!("QUANTITY {q}") } else { q.to_string() };
            let take = took.run(algorithm, &format!("{words} {q}"), T0 + ms * MS);
            let debit = debited.run(algorithm, &format!("{words} {q} DEBIT"), T0 + ms * MS);
            assert_eq!(debit, take, "{words} {q} at {ms} ms");
            assert_eq!(debited, took, "{words}: the same state");
        }
    }
}

#[test]
fn refunds_give_debited_units_back() {
    // A debit, then a refund of what it overdrew: the limiter admits again at once.
    let mut key = Key::default();
    key.run(Algorithm::Throttle, "k 4 1 10000 8 MS DEBIT", T0).unwrap();
    assert_eq!(key.run(Algorithm::Throttle, "k 4 1 10000 -4 MS", T0), Ok([0, 5, 1, -1, 40_000]));
    assert_eq!(key.run(Algorithm::Throttle, "k 4 1 10000 1 MS", T0), Ok([0, 5, 0, -1, 50_000]));
    let mut key = Key::default();
    key.run(Algorithm::Bucket, "k 5 1 1000 8 MS DEBIT", T0).unwrap();
    assert_eq!(key.run(Algorithm::Bucket, "k 5 1 1000 -4 MS", T0), Ok([0, 5, 1, -1, 4_000]));
}

#[test]
fn debit_is_a_flag_of_every_limiter_command() {
    for (algorithm, words) in [
        (Algorithm::Throttle, "k 1 1 1"),
        (Algorithm::Window, "k 1 1"),
        (Algorithm::Bucket, "k 1 1 1"),
        (Algorithm::Counter, "k 1 1"),
        (Algorithm::Quota, "k 1 PER DAY"),
    ] {
        let parse = |tail: &str| {
            let s = format!("{words} {tail}");
            let args: Vec<&[u8]> = s.split(' ').filter(|w| !w.is_empty()).map(str::as_bytes).collect();
            Request::parse(algorithm, &args, &Caps::DEFAULT).map(|r| (r.charge, r.quantity, r.unit, r.shadow()))
        };
        assert_eq!(parse(""), Ok((Charge::Take, 1, Unit::Seconds, false)), "{words}");
        assert_eq!(parse("DEBIT"), Ok((Charge::Debit, 1, Unit::Seconds, false)), "{words}");
        assert_eq!(parse("debit MS SHADOW"), Ok((Charge::Debit, 1, Unit::Millis, true)), "{words}");
        let quantity = if algorithm == Algorithm::Quota { "QUANTITY 0" } else { "0" };
        assert_eq!(parse(&format!("Debit {quantity}")), Ok((Charge::Debit, 0, Unit::Seconds, false)), "{words}");
        assert_eq!(parse("DEBIT DEBIT"), Err(Error::Syntax), "{words}: at most once");
        let refund = if algorithm == Algorithm::Quota { "QUANTITY -1" } else { "-1" };
        let err = parse(&format!("{refund} DEBIT")).unwrap_err();
        assert_eq!(err, Error::DebitRefund);
        assert_eq!(
            err.to_string(),
            "ERR DEBIT takes a quantity of 0 or more (a refund is a negative quantity without DEBIT)"
        );
        // HELD needs a refund, DEBIT refuses one: HELD's own error (or DEBIT's, for a refund).
        let held = if algorithm == Algorithm::Quota { "QUANTITY 2 HELD 5 DEBIT" } else { "2 HELD 5 DEBIT" };
        assert_eq!(parse(held), Err(Error::HeldWithoutRefund), "{words}");
        let held = if algorithm == Algorithm::Quota { "QUANTITY -2 HELD 5 DEBIT" } else { "-2 HELD 5 DEBIT" };
        assert_eq!(parse(held), Err(Error::DebitRefund), "{words}");
    }
}

#[test]
fn debits_are_bounded_by_what_the_state_can_hold() {
    let at = T0;
    let mut key = Key::default();
    // GCRA: quantity × EI at most 10^18 ns.
    assert_eq!(
        key.run(Algorithm::Throttle, "k 0 1 1000000000 2 DEBIT", at).unwrap_err().to_string(),
        "ERR parameters are too large: quantity * period / count must be at most 1000000000 seconds (1000000000000 milliseconds)"
    );
    // ...and the TAT an instant: the eighth such debit passes the year 2262.
    for _ in 0..7 {
        assert!(key.run(Algorithm::Throttle, "k 0 1 1000000000 1 DEBIT", at).is_ok());
    }
    assert_eq!(
        key.run(Algorithm::Throttle, "k 0 1 1000000000 1 DEBIT", at).map(|_| ()).unwrap_err().to_string(),
        "ERR parameters are too large: their nanosecond arithmetic overflows 64 bits"
    );
    // A counter (and a quota) stays below 10^18.
    let mut key = Key::default();
    assert!(key.run(Algorithm::Counter, "k 5 60 999999999999999998 DEBIT", at).is_ok());
    assert_eq!(key.run(Algorithm::Counter, "k 5 60 1 DEBIT", at).map(|_| ()), Ok(()));
    let before = key.clone();
    assert_eq!(
        key.run(Algorithm::Counter, "k 5 60 1 DEBIT", at).unwrap_err().to_string(),
        "ERR DEBIT is too large: a count must stay at most 999999999999999999"
    );
    assert_eq!(key, before, "an error writes nothing");
    let mut key = Key::default();
    assert_eq!(
        key.run(Algorithm::Quota, "k 5 PER DAY QUANTITY 1000000000000000000 DEBIT", at),
        Err(Error::DebitTooLarge(crate::counter::MAX_LIMIT))
    );
    // A bucket's debt is repaid within the longest duration.
    let mut key = Key::default();
    assert!(key.run(Algorithm::Bucket, "k 1 1 1000000000 1 DEBIT", at).is_ok());
    assert_eq!(
        key.run(Algorithm::Bucket, "k 1 1 1000000000 1 DEBIT", at).unwrap_err().to_string(),
        "ERR parameters are too large: interval * ceil(deficit / tokens) must be at most 1000000000 seconds (1000000000000 milliseconds)"
    );
    // An exact window logs at most max-exact-limit units a call.
    let mut key = Key::default();
    assert!(key.run(Algorithm::Window, "k 5 60 100000 DEBIT", at).is_ok());
    assert_eq!(
        key.run(Algorithm::Window, "k 5 60 100001 DEBIT", at).unwrap_err().to_string(),
        "ERR DEBIT is too large: an exact window logs at most 100000 units a call (use PRECISION for larger budgets)"
    );
    // A bucket of a PRECISION window holds an i64.
    let mut key = Key::default();
    assert!(key.run(Algorithm::Window, "k 5 60 9223372036854775807 DEBIT PRECISION 1", at).is_ok());
    assert_eq!(key.run(Algorithm::Window, "k 5 60 1 DEBIT PRECISION 1", at), Err(Error::DebitTooLarge(i64::MAX)));
}

#[test]
fn a_take_on_a_limiter_in_debt_answers_its_retry() {
    // A peek answers as a take of nothing: refused while over the limit, admitted at it.
    let mut key = Key::default();
    key.run(Algorithm::Counter, "k 5 10000 5 MS DEBIT", T0).unwrap();
    assert_eq!(key.run(Algorithm::Counter, "k 5 10000 0 MS", T0), Ok([0, 5, 0, -1, 10_000]), "at the limit");
    key.run(Algorithm::Counter, "k 5 10000 1 MS DEBIT", T0).unwrap();
    assert_eq!(key.run(Algorithm::Counter, "k 5 10000 0 MS", T0), Ok([1, 5, 0, 10_000, 10_000]), "over it");
}

mod all {
    use super::*;
    use crate::all::{Request, decide_charge};

    fn call(keys: &mut [Key], words: &str, now: i64) -> Result<Vec<[i64; 5]>> {
        let words: Vec<&[u8]> = words.split(' ').map(str::as_bytes).collect();
        let r = Request::parse(&words, &Caps::DEFAULT)?;
        let stored: Vec<_> = keys.iter().map(|k| k.live(now)).collect();
        let outcome = decide_charge(&r.limiters, &r.held, &stored, Instant::from_nanos(now), r.unit, r.charge)?;
        let mut replies = vec![outcome.reply().to_array(r.unit)];
        let binding = outcome.binding;
        let decisions = outcome.decisions.clone();
        for (key, d) in keys.iter_mut().zip(decisions) {
            replies.push(d.reply.to_array(r.unit));
            key.apply(now, d.effect);
        }
        replies.push([binding as i64 + 1, 0, 0, 0, 0]);
        Ok(replies)
    }

    #[test]
    fn every_limiter_counts_whether_or_not_some_overdrew() {
        let mut keys = [Key::default(), Key::default()];
        // 3 requests of 5 a minute; 70 tokens of a 50-token bucket: the bucket overdraws and
        // binds, the counter counts its 3 all the same.
        let words = "2 r t COUNTER 5 60000 QUANTITY 1 BUCKET 50 10 1000 QUANTITY 70 MS DEBIT";
        let replies = call(&mut keys, words, T0).unwrap();
        assert_eq!(replies[0], [1, 50, 0, -1, 7_000]);
        assert_eq!(replies[1], [0, 5, 4, -1, 60_000]);
        assert_eq!(replies[2], [1, 50, 0, -1, 7_000]);
        assert_eq!(replies[3][0], 2, "the overdrawn limiter binds");
        assert_eq!(keys[0].0.as_ref().map(|(v, _)| v.clone()), Some(b"1".to_vec()));
        assert_eq!(keys[1].0.as_ref().map(|(v, _)| v.clone()), Some(b"-70".to_vec()));
        // A check of both: refused while the bucket is in debt, the bucket binding.
        let check = "2 r t COUNTER 5 60000 QUANTITY 0 BUCKET 50 10 1000 QUANTITY 0 MS DEBIT";
        let before = keys.clone();
        let replies = call(&mut keys, check, T0 + 1_000 * MS).unwrap();
        assert_eq!((replies[0], replies[3][0]), ([1, 50, 0, 1_000, 6_000], 2));
        assert_eq!(keys, before, "a check writes nothing");
        // All fitting: the fewest remaining binds, as for an admission.
        let replies = call(&mut keys, check, T0 + 2_000 * MS).unwrap();
        assert_eq!((replies[0], replies[3][0]), ([0, 50, 0, -1, 5_000], 2));
        let replies =
            call(&mut keys, "2 r t COUNTER 5 60000 QUANTITY 3 BUCKET 50 10 1000 QUANTITY 0 MS DEBIT", T0 + 7_000 * MS)
                .unwrap();
        assert_eq!((replies[0], replies[3][0]), ([0, 5, 1, -1, 53_000], 1));
    }

    #[test]
    fn debit_is_one_word_of_the_call() {
        let parse = |s: &str| {
            let words: Vec<&[u8]> = s.split(' ').map(str::as_bytes).collect();
            Request::parse(&words, &Caps::DEFAULT).map(|r| r.charge)
        };
        assert_eq!(parse("1 k COUNTER 5 60"), Ok(Charge::Take));
        assert_eq!(parse("1 k COUNTER 5 60 DEBIT"), Ok(Charge::Debit));
        assert_eq!(parse("1 k DEBIT COUNTER 5 60 MS"), Ok(Charge::Debit));
        assert_eq!(parse("1 k COUNTER 5 60 DEBIT DEBIT"), Err(Error::Syntax));
        assert_eq!(
            parse("2 a b COUNTER 5 60 COUNTER 5 60 QUANTITY -1 DEBIT").unwrap_err().to_string(),
            "ERR limiter 2: DEBIT takes a quantity of 0 or more (a refund is a negative quantity without DEBIT)"
        );
        assert_eq!(parse("2 a b COUNTER 5 60 COUNTER 5 60 QUANTITY -1"), Ok(Charge::Take));
    }
}

/// The property of issue 41: a random mix of checks, takes, debits and refunds never admits
/// more than the limit allows for the elapsed time, counting debited units as admitted.
mod never_over_admits {
    use super::*;
    use proptest::prelude::*;

    /// Units counted (admitted takes, every debit, refunds negative) at their instants (ns).
    #[derive(Default)]
    struct Ledger {
        events: Vec<(i64, i64)>,
        /// CL.COUNTER's window as the contract opens it: at the first counted action after
        /// the last one closed, on its whole millisecond, for `window`.
        window: Option<(i64, i64)>,
    }

    /// What a limiter allows, stated from its parameters alone.
    #[derive(Clone, Copy, Debug)]
    enum Allows {
        /// GCRA: `limit` plus one per `ei` elapsed, from any instant.
        Rate { limit: i64, ei: i64 },
        /// A bucket: `capacity` plus `tokens` for each refill that can come (one per interval).
        Refills { capacity: i64, tokens: i64, interval: i64 },
        /// A sliding window: at most `limit` in any span of `window` (PRECISION counts longer).
        Span { limit: i64, window: i64 },
        /// A fixed window opened by the first counted action.
        Window { limit: i64, window: i64 },
        /// A calendar minute (UTC).
        Minute { limit: i64 },
    }

    impl Ledger {
        fn count(&mut self, at: i64, units: i64, allows: Allows) {
            if let Allows::Window { window, .. } = allows
                && units > 0
                && self.window.is_none_or(|(_, end)| at >= end)
            {
                let start = at - at.rem_euclid(MS);
                self.window = Some((start, start + window));
            }
            self.events.push((at, units));
            // A refund to nothing deletes the key: the window closes with it.
            if let (Allows::Window { .. }, Some((start, _))) = (allows, self.window)
                && units < 0
                && self.events.iter().filter(|&&(t, _)| t >= start).map(|&(_, u)| u).sum::<i64>() == 0
            {
                self.window = None;
            }
        }

        /// Whether what was counted up to `now` (an admission just made) is within `allows`.
        fn within(&self, now: i64, allows: Allows) -> std::result::Result<(), String> {
            let sum = |from: i64, to: i64| -> i64 {
                self.events.iter().filter(|&&(t, _)| t >= from && t <= to).map(|&(_, u)| u).sum()
            };
            let starts = self.events.iter().map(|&(t, _)| t);
            let (most, counted) = match allows {
                Allows::Rate { limit, ei } => {
                    match starts.map(|s| (limit + (now - s) / ei, sum(s, now))).find(|(most, n)| n > most) {
                        Some(over) => over,
                        None => return Ok(()),
                    }
                }
                Allows::Refills { capacity, tokens, interval } => {
                    let allowed = |s: i64| capacity + tokens * ((now - s) / interval + 1);
                    match starts.map(|s| (allowed(s), sum(s, now))).find(|(most, n)| n > most) {
                        Some(over) => over,
                        None => return Ok(()),
                    }
                }
                Allows::Span { limit, window } => (limit, sum(now - window + 1, now)),
                Allows::Window { limit, .. } => match self.window {
                    Some((start, end)) if now < end => (limit, sum(start, now)),
                    _ => return Ok(()),
                },
                Allows::Minute { limit } => {
                    let minute = 60 * NANOS_PER_SEC;
                    (limit, sum(now - now.rem_euclid(minute), now))
                }
            };
            match counted <= most {
                true => Ok(()),
                false => Err(format!("{counted} counted where {allows:?} allows {most} at {}", now - T0)),
            }
        }
    }

    /// One step: time moves on `step_ms`; then a check (`kind` 0), a take (1), or a debit
    /// (2, 3) of `q`, followed at the same instant, one time in three, by a refund of
    /// `refund` of what it counted (an estimate corrected).
    type Step = (i64, u8, i64, i64);

    fn steps(most_q: i64) -> impl Strategy<Value = Vec<Step>> {
        proptest::collection::vec((0i64..3_000, 0u8..4, 1i64..most_q, 0i64..6), 1..60)
    }

    fn limiters() -> Vec<(Algorithm, &'static str, Allows)> {
        let s = NANOS_PER_SEC;
        vec![
            (Algorithm::Throttle, "k 4 1 1000 MS", Allows::Rate { limit: 5, ei: s }),
            (Algorithm::Throttle, "k 0 3 1000 MS", Allows::Rate { limit: 1, ei: s / 3 }),
            (Algorithm::Bucket, "k 5 1 1000 MS", Allows::Refills { capacity: 5, tokens: 1, interval: s }),
            (Algorithm::Bucket, "k 6 3 2000 MS", Allows::Refills { capacity: 6, tokens: 3, interval: 2 * s }),
            (Algorithm::Window, "k 5 4000 MS", Allows::Span { limit: 5, window: 4 * s }),
            (Algorithm::Window, "k 5 4000 MS PRECISION 500", Allows::Span { limit: 5, window: 4 * s }),
            (Algorithm::Counter, "k 5 4000 MS", Allows::Window { limit: 5, window: 4 * s }),
            (Algorithm::Quota, "k 7 PER MINUTE", Allows::Minute { limit: 7 }),
        ]
    }

    fn run(
        algorithm: Algorithm,
        words: &str,
        allows: Allows,
        steps: &[Step],
    ) -> std::result::Result<(), TestCaseError> {
        let words: Vec<&[u8]> = words.split(' ').map(str::as_bytes).collect();
        let limiter = Request::parse(algorithm, &words, &Caps::DEFAULT).unwrap().limiter;
        let (mut key, mut ledger, mut now) = (Key::default(), Ledger::default(), T0 + 123_456);
        // Debits may overdraw far: a debt is repaid by time, and is never admitted through.
        for &(step_ms, kind, q, refund) in steps {
            now += step_ms * MS;
            let (q, charge) = match kind {
                0 => (0, Charge::of(q % 2 == 0)),
                1 => (q, Charge::Take),
                _ => (q, Charge::Debit),
            };
            let d = limiter.decide_charge(key.live(now), Instant::from_nanos(now), q, None, charge).unwrap();
            let admitted = !d.reply.limited;
            let counted = if q > 0 && (admitted || charge == Charge::Debit) { q } else { 0 };
            key.apply(now, d.effect);
            if counted > 0 {
                ledger.count(now, counted, allows);
            }
            if admitted && (charge == Charge::Take || q <= d.reply.limit) {
                // An admitted take or check, or a debit that fitted: within what is allowed.
                ledger.within(now, allows).map_err(|e| TestCaseError::fail(format!("{words:?}: {e}")))?;
            }
            prop_assert!(!(charge == Charge::Debit && q > 0 && d.reply.limited && d.reply.remaining != 0));
            // An estimate corrected at once: the units are still held, all come back.
            let refund = refund.min(counted);
            if refund > 0 && refund % 3 == 0 {
                let back = limiter.decide(key.live(now), Instant::from_nanos(now), -refund).unwrap();
                key.apply(now, back.effect);
                ledger.count(now, -refund, allows);
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(600))]

        #[test]
        fn per_algorithm(steps in steps(9)) {
            for (algorithm, words, allows) in limiters() {
                run(algorithm, words, allows, &steps)?;
            }
        }

        #[test]
        fn with_large_debits(steps in steps(40)) {
            for (algorithm, words, allows) in limiters() {
                run(algorithm, words, allows, &steps)?;
            }
        }

        /// CL.ALL: every limiter of a call, takes all or nothing and debits all counted, each
        /// within what its own parameters allow.
        #[test]
        fn in_cl_all(steps in steps(9), shares in proptest::collection::vec(1i64..4, 4)) {
            let specs = ["THROTTLE 4 1 1000", "BUCKET 6 3 2000", "WINDOW 5 4000", "COUNTER 5 4000"];
            let allows: Vec<Allows> = limiters().into_iter().map(|(_, _, a)| a).collect();
            let allows = [allows[0], allows[3], allows[4], allows[6]];
            let mut keys = vec![Key::default(); 4];
            let mut ledgers: Vec<Ledger> = (0..4).map(|_| Ledger::default()).collect();
            let mut now = T0 + 987_654;
            for &(step_ms, kind, q, _) in &steps {
                now += step_ms * MS;
                let q = if kind == 0 { 0 } else { q };
                let debit = if kind >= 2 { " DEBIT" } else { "" };
                let words: String = (0..4)
                    .map(|i| format!(" {} QUANTITY {}", specs[i], (q * shares[i]).min(9)))
                    .collect::<String>();
                let words = format!("4 a b c d{words} MS{debit}");
                let args: Vec<&[u8]> = words.split(' ').map(str::as_bytes).collect();
                let r = crate::all::Request::parse(&args, &Caps::DEFAULT).unwrap();
                let stored: Vec<_> = keys.iter().map(|k| k.live(now)).collect();
                let outcome = crate::all::decide_charge(&r.limiters, &r.held, &stored, Instant::from_nanos(now), r.unit, r.charge).unwrap();
                let admitted = outcome.admitted();
                for (i, d) in outcome.decisions.into_iter().enumerate() {
                    let qi = r.limiters[i].1;
                    let counted = qi > 0 && (admitted || r.charge == Charge::Debit);
                    keys[i].apply(now, d.effect);
                    if counted {
                        ledgers[i].count(now, qi, allows[i]);
                    }
                    if admitted {
                        ledgers[i].within(now, allows[i]).map_err(|e| TestCaseError::fail(format!("{}: {e}", specs[i])))?;
                    }
                }
            }
        }
    }
}
