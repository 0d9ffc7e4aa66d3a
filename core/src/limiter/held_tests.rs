//! Bounded refunds (`HELD t`): a refund never gives back units the limiter has already
//! regained by time. A client takes units, other clients take what they can while time
//! passes, the first client gives its (unspent) units back late: what the others are then
//! admitted never exceeds what the limit allows them in any window, period or span.

use super::*;
use crate::Reply;
use crate::time::{NANOS_PER_MILLI, NANOS_PER_SEC};
use proptest::prelude::*;

const T0: i64 = 1_700_000_000 * NANOS_PER_SEC;

/// A key as the server holds it: its bytes and absolute expiry (Unix ms).
#[derive(Default, Clone, Debug, PartialEq)]
pub(super) struct Key(pub(super) Option<(Vec<u8>, i64)>);

impl Key {
    /// The key as a call at `now` reads it (gone once its expiry's millisecond has passed).
    pub(super) fn live(&self, now: i64) -> Option<Stored<'_>> {
        self.0
            .as_ref()
            .filter(|(_, ms)| now.div_euclid(NANOS_PER_MILLI) <= *ms)
            .map(|(v, ms)| Stored { value: v, expires_at_ms: Some(*ms) })
    }

    /// Applies a call's effect at `now`, as the module does.
    pub(super) fn apply(&mut self, now: i64, effect: crate::Effect<Write>) {
        match effect {
            crate::Effect::Nothing => {}
            crate::Effect::Delete => self.0 = None,
            crate::Effect::Store { state, expires_at } => {
                let value = match state {
                    Write::Integer(v) => v.to_string().into_bytes(),
                    Write::Tagged(..) => unreachable!("no limiter stores a tagged value"),
                    Write::Patch(p) => {
                        let mut v = self.live(now).map(|s| s.value.to_vec()).unwrap_or_default();
                        p.apply(&mut v);
                        v
                    }
                };
                self.0 = Some((value, expires_at.ceil_millis()));
            }
        }
    }

    /// One call at `now`; the reply and the key's expiry after it (`PEXPIRETIME`).
    fn call(&mut self, limiter: &Limiter, now: i64, quantity: i64, held: Option<i64>) -> (Reply, Option<i64>) {
        let at = Instant::from_nanos(now);
        let held = held.map(|ms| Instant::from_nanos(ms * NANOS_PER_MILLI));
        let d = limiter.decide_held(self.live(now), at, quantity, held).unwrap();
        self.apply(now, d.effect);
        let expiry = self.live(now).and_then(|s| s.expires_at_ms);
        (d.reply, expiry)
    }
}

fn limiter(algorithm: Algorithm, words: &str) -> Limiter {
    let words: Vec<&[u8]> = words.split(' ').map(str::as_bytes).collect();
    Request::parse(algorithm, &words, &Caps::DEFAULT).unwrap().limiter
}

/// Runs the attack: at `start` the holder takes `k` (and keeps the expiry then), then each
/// step moves time on and lets another client take `q`; at step `refund_at` the holder gives
/// its `k` back (bounded by `HELD` when `bounded`). Returns the others' admissions (instant,
/// units) and the expiry of each admitting call.
fn attack(
    limiter: &Limiter,
    start: i64,
    k: i64,
    steps: &[(i64, i64)],
    refund_at: usize,
    bounded: bool,
) -> Vec<(i64, i64, Option<i64>)> {
    let mut key = Key::default();
    let (reply, held) = key.call(limiter, start, k, None);
    assert!(!reply.limited);
    let mut now = start;
    let mut admitted = Vec::new();
    for (i, &(dt, q)) in steps.iter().enumerate() {
        now += dt;
        if i == refund_at {
            key.call(limiter, now, -k, if bounded { held } else { None });
        }
        let (reply, expiry) = key.call(limiter, now, q, None);
        if !reply.limited {
            admitted.push((now, q, expiry));
        }
    }
    admitted
}

/// The most units admitted in any span `[s, s + len)` starting at an admission.
fn most_in_span(admitted: &[(i64, i64, Option<i64>)], len: i64) -> i64 {
    admitted
        .iter()
        .map(|&(s, _, _)| admitted.iter().filter(|&&(t, _, _)| t >= s && t < s + len).map(|&(_, q, _)| q).sum())
        .max()
        .unwrap_or(0)
}

/// The most units admitted in one fixed window or period (those whose call left the same expiry).
fn most_in_period(admitted: &[(i64, i64, Option<i64>)]) -> i64 {
    let mut by: std::collections::HashMap<Option<i64>, i64> = Default::default();
    for &(_, q, e) in admitted {
        *by.entry(e).or_default() += q;
    }
    by.values().copied().max().unwrap_or(0)
}

fn steps() -> impl Strategy<Value = Vec<(i64, i64)>> {
    proptest::collection::vec((prop_oneof![0i64..3 * NANOS_PER_MILLI, 0i64..400 * NANOS_PER_MILLI], 1i64..4), 1..80)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// 10 per second, fixed windows: never more than 10 in one window.
    #[test]
    fn counter_never_over_admits(offset in 0i64..NANOS_PER_SEC, k in 1i64..=10, steps in steps(), at in 0usize..80) {
        let l = limiter(Algorithm::Counter, "k 10 1000 MS");
        let admitted = attack(&l, T0 + offset, k, &steps, at, true);
        prop_assert!(most_in_period(&admitted) <= 10, "{admitted:?}");
    }

    /// A calendar minute: never more than 10 in one period.
    #[test]
    fn quota_never_over_admits(offset in 0i64..60 * NANOS_PER_SEC, k in 1i64..=10, steps in proptest::collection::vec((0i64..20 * NANOS_PER_SEC, 1i64..4), 1..40), at in 0usize..40) {
        let l = limiter(Algorithm::Quota, "k 10 PER MINUTE");
        let admitted = attack(&l, T0 + offset, k, &steps, at, true);
        prop_assert!(most_in_period(&admitted) <= 10, "{admitted:?}");
    }

    /// Sliding window, exact and bucketed: never more than 10 in any span of the window.
    #[test]
    fn window_never_over_admits(offset in 0i64..NANOS_PER_SEC, k in 1i64..=10, steps in steps(), at in 0usize..80, bucketed in any::<bool>()) {
        let l = limiter(Algorithm::Window, if bucketed { "k 10 1000 MS PRECISION 100" } else { "k 10 1000 MS" });
        let admitted = attack(&l, T0 + offset, k, &steps, at, true);
        prop_assert!(most_in_span(&admitted, NANOS_PER_SEC) <= 10, "{admitted:?}");
    }

    /// GCRA, 10 at once then 10 per second: in any span of `L`, at most `limit + ⌈L / EI⌉`.
    #[test]
    fn throttle_never_over_admits(offset in 0i64..NANOS_PER_SEC, k in 1i64..=10, steps in steps(), at in 0usize..80, span_ms in 1i64..3000) {
        let l = limiter(Algorithm::Throttle, "k 9 10 1000 MS");
        let admitted = attack(&l, T0 + offset, k, &steps, at, true);
        let span = span_ms * NANOS_PER_MILLI;
        let ei = 100 * NANOS_PER_MILLI;
        prop_assert!(most_in_span(&admitted, span) <= 10 + (span + ei - 1) / ei, "{admitted:?}");
    }

    /// A bucket of 10, 1 more every 100 ms: in any span of `L`, at most
    /// `capacity + tokens·(⌊L / interval⌋ + 1)`, exactly as without the refund.
    #[test]
    fn bucket_of_single_refills_never_over_admits(offset in 0i64..NANOS_PER_SEC, k in 1i64..=10, steps in steps(), at in 0usize..80, span_ms in 1i64..3000) {
        let l = limiter(Algorithm::Bucket, "k 10 1 100 MS");
        let admitted = attack(&l, T0 + offset, k, &steps, at, true);
        let span = span_ms * NANOS_PER_MILLI;
        prop_assert!(most_in_span(&admitted, span) <= 10 + (span / (100 * NANOS_PER_MILLI) + 1), "{admitted:?}");
    }

    /// A bucket of 10, 2 more every 200 ms: in any span of `L`, at most
    /// `capacity + tokens·(⌊L / interval⌋ + 1)`, plus `tokens − 1` for the late refund: `HELD t`
    /// names the refill that ends the draw's deficit, not how much of that refill was the
    /// draw's, so the refund may give back up to `tokens − 1` tokens that a refill had already
    /// made up (`bucket::held_units`; the manual's reply page says so, and
    /// `no_bounded_bucket_refund_can_be_exact_with_several_tokens_per_refill` shows why no rule
    /// can do better).
    #[test]
    fn bucket_never_over_admits(offset in 0i64..NANOS_PER_SEC, k in 1i64..=10, steps in steps(), at in 0usize..80, span_ms in 1i64..3000) {
        let l = limiter(Algorithm::Bucket, "k 10 2 200 MS");
        let admitted = attack(&l, T0 + offset, k, &steps, at, true);
        let span = span_ms * NANOS_PER_MILLI;
        prop_assert!(most_in_span(&admitted, span) <= 10 + 2 * (span / (200 * NANOS_PER_MILLI) + 1) + (2 - 1), "{admitted:?}");
    }
}

/// The attack of the issue, in core: a whole window reserved, 1.1 s later others take what
/// they can, the reservation is dropped, they take more. A plain refund gives the window's
/// units back (the over-admission); a bounded one gives nothing back once they are regained.
#[test]
fn a_late_refund_gives_nothing_back_and_an_immediate_one_everything() {
    let cases = [
        (Algorithm::Counter, "k 100 1000 MS", 100),
        (Algorithm::Window, "k 100 1000 MS", 100),
        (Algorithm::Window, "k 100 1000 MS PRECISION 100", 100),
        (Algorithm::Throttle, "k 99 100 1000 MS", 100),
        (Algorithm::Bucket, "k 100 10 100 MS", 100),
    ];
    for (algorithm, words, k) in cases {
        let l = limiter(algorithm, words);
        let start = T0 + 123_456;
        let late = |bounded: bool| {
            let mut steps = vec![(1_100 * NANOS_PER_MILLI, 1)];
            steps.extend(std::iter::repeat_n((0, 1), 299));
            attack(&l, start, k, &steps, 150, bounded).iter().map(|a| a.1).sum::<i64>()
        };
        let (plain, bounded) = (late(false), late(true));
        assert!(
            plain > bounded,
            "{words}: the plain refund over-admits ({plain}), the bounded one must not ({bounded})"
        );
        assert!(bounded <= 100 + 11, "{words}: {bounded}");
        // At once: everything back.
        let mut key = Key::default();
        let (_, held) = key.call(&l, start, k, None);
        let (reply, _) = key.call(&l, start + NANOS_PER_MILLI / 2, -k, held);
        assert!(!reply.limited);
        assert!(reply.remaining >= k - 1, "{words}: an immediate refund gives back {} of {k}", reply.remaining);
        if algorithm != Algorithm::Throttle {
            assert_eq!(reply.remaining, k, "{words}");
        }
    }
    // CL.QUOTA too.
    let l = limiter(Algorithm::Quota, "k 100 PER MINUTE");
    let mut key = Key::default();
    let start = T0 + 7 * NANOS_PER_SEC;
    let (_, held) = key.call(&l, start, 100, None);
    let (reply, _) = key.call(&l, start + NANOS_PER_SEC, -100, held);
    assert_eq!(reply.remaining, 100);
    let (_, held) = key.call(&l, start, 100, None);
    let next = held.unwrap() * NANOS_PER_MILLI + NANOS_PER_SEC;
    key.call(&l, next, 50, None);
    let (reply, _) = key.call(&l, next, -100, held);
    assert_eq!(reply.remaining, 50, "a refund into the next period gives nothing back");
}

#[test]
fn held_is_only_for_refunds_and_in_range() {
    let parse = |a: Algorithm, s: &str| {
        Request::parse(a, &s.split(' ').map(str::as_bytes).collect::<Vec<_>>(), &Caps::DEFAULT).map(|r| r.held)
    };
    assert_eq!(
        parse(Algorithm::Counter, "k 10 60 -3 HELD 1700000000000"),
        Ok(Some(Instant::from_nanos(1_700_000_000_000 * NANOS_PER_MILLI)))
    );
    assert_eq!(
        parse(Algorithm::Window, "k 10 60 HELD 1700000000000 -3 MS PRECISION 5"),
        Ok(Some(Instant::from_nanos(1_700_000_000_000 * NANOS_PER_MILLI)))
    );
    assert_eq!(
        parse(Algorithm::Quota, "k 10 PER DAY QUANTITY -3 HELD 5"),
        Ok(Some(Instant::from_nanos(5 * NANOS_PER_MILLI)))
    );
    assert_eq!(
        parse(Algorithm::Counter, "k 10 60 3 HELD 1").unwrap_err().to_string(),
        "ERR HELD is valid only with a negative quantity (a refund)"
    );
    assert_eq!(
        parse(Algorithm::Counter, "k 10 60 HELD 1").unwrap_err().to_string(),
        "ERR HELD is valid only with a negative quantity (a refund)"
    );
    assert_eq!(
        parse(Algorithm::Throttle, "k 1 1 1 -1 HELD -1").unwrap_err().to_string(),
        "ERR held must be an integer from 0 to 9223372036854"
    );
    assert_eq!(parse(Algorithm::Bucket, "k 1 1 1 -1 HELD x"), Err(Error::NotAnInteger));
    assert_eq!(parse(Algorithm::Bucket, "k 1 1 1 -1 HELD 1 HELD 1"), Err(Error::Syntax));
    let all = |s: &str| {
        crate::all::Request::parse(&s.split(' ').map(str::as_bytes).collect::<Vec<_>>(), &Caps::DEFAULT).map(|r| r.held)
    };
    assert_eq!(
        all("2 a b COUNTER 1 1 QUANTITY -1 HELD 7 QUOTA 5 PER DAY HELD 9 QUANTITY -2"),
        Ok(vec![Some(Instant::from_nanos(7 * NANOS_PER_MILLI)), Some(Instant::from_nanos(9 * NANOS_PER_MILLI))])
    );
    assert_eq!(
        all("1 a WINDOW 1 1 HELD 7").unwrap_err().to_string(),
        "ERR limiter 1: HELD is valid only with a negative quantity (a refund)"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    /// Whatever the state and the instant given, a bounded refund gives back no more than the
    /// plain refund would, takes nothing (a peek's remaining at least), and is never a denial.
    #[test]
    fn a_bounded_refund_is_between_a_peek_and_a_plain_refund(
        which in 0usize..6, offset in 0i64..NANOS_PER_SEC, steps in steps(), k in 1i64..15,
        dt in 0i64..2 * NANOS_PER_SEC, held_shift in prop_oneof![Just(0i64), -2i64..3, -1500i64..1500],
    ) {
        let (algorithm, words) = [
            (Algorithm::Counter, "k 10 1000 MS"),
            (Algorithm::Window, "k 10 1000 MS"),
            (Algorithm::Window, "k 10 1000 MS PRECISION 100"),
            (Algorithm::Throttle, "k 9 10 1000 MS"),
            (Algorithm::Bucket, "k 10 2 200 MS"),
            (Algorithm::Quota, "k 10 PER MINUTE"),
        ][which];
        let l = limiter(algorithm, words);
        let mut key = Key::default();
        let mut now = T0 + offset;
        let (_, held) = key.call(&l, now, k.min(10), None);
        for (step, q) in steps {
            now += step;
            key.call(&l, now, q, None);
        }
        now += dt;
        // The taking call's expiry, as read then (or another instant: a wrong or stale `t`).
        let held = held.unwrap_or(now / NANOS_PER_MILLI) + held_shift;
        let at = Instant::from_nanos(now);
        let stored = key.live(now);
        let peek = l.decide(stored, at, 0).unwrap().reply;
        let plain = l.decide(stored, at, -k).unwrap().reply;
        let bounded = l.decide_held(stored, at, -k, Some(Instant::from_nanos(held * NANOS_PER_MILLI))).unwrap().reply;
        prop_assert!(!bounded.limited && bounded.retry_after.is_none());
        prop_assert!(bounded.remaining >= peek.remaining.min(plain.remaining), "{bounded:?} vs peek {peek:?}");
        prop_assert!(bounded.remaining <= plain.remaining, "{bounded:?} vs plain {plain:?}");
    }
}

/// Why no bounded refund of CL.BUCKET with several tokens per refill can be exact (the reply
/// page shows this case): two histories leave the refund call the very same inputs (the key's
/// bytes and expiry, `HELD t`, the quantity and the instant), yet the units the draw still
/// holds differ by `tokens − 1`. Whatever it answers, one of them is wrong: giving everything
/// back (as a refund sent at once must) lets the other admit `tokens − 1` beyond what the
/// bucket would without the draw; keeping `tokens − 1` back withholds them from the refund
/// sent at once.
#[test]
fn no_bounded_bucket_refund_can_be_exact_with_several_tokens_per_refill() {
    // 10 tokens, 2 more every 200 ms (the last refill of a deficit may add one too many).
    let l = limiter(Algorithm::Bucket, "k 10 2 200 MS");
    let ms = NANOS_PER_MILLI;
    let t0 = T0; // a whole millisecond: grids start on it
    // Once: A draws 4 from a full bucket and gives them back 100 ms later, before any refill.
    let mut once = Key::default();
    let (_, held_once) = once.call(&l, t0, 4, None);
    // Late: C drew 1 at t0 − 200 ms; A drew 4 at the same instant (the refill at t0 + 400 ms
    // makes the 5 up with a token to spare); the refill at t0 came; B drew 1 at t0 + 50 ms
    // (it fits in that spare token: the expiry stays); A gives its 4 back at t0 + 100 ms.
    let mut late = Key::default();
    late.call(&l, t0 - 200 * ms, 1, None);
    let (_, held_late) = late.call(&l, t0 - 200 * ms, 4, None);
    late.call(&l, t0 + 50 * ms, 1, None);
    let now = t0 + 100 * ms;
    assert_eq!(held_once, held_late, "the same HELD t");
    assert_eq!(once, late, "the same bytes and expiry: nothing tells the histories apart");

    // What the bucket would hold at `now` without A's draw: all 10 (once), 9 (late: B's
    // token is not back before t0 + 250 ms, on the grid B's draw starts).
    let available = |steps: &[(i64, i64)]| {
        let mut key = Key::default();
        for &(at, q) in steps {
            key.call(&l, at, q, None);
        }
        key.call(&l, now, 0, None).0.remaining
    };
    assert_eq!(available(&[]), 10);
    assert_eq!(available(&[(t0 - 200 * ms, 1), (t0 + 50 * ms, 1)]), 9);

    // The bounded refund gives all 4 back (a refund sent at once must): exact for `once`,
    // one token (`tokens − 1`) beyond what `late` may hold.
    let (reply, _) = once.call(&l, now, -4, held_once);
    assert_eq!(reply.remaining, 10);
    let (reply, _) = late.call(&l, now, -4, held_late);
    assert_eq!(reply.remaining, 10, "one more than the 9 the bucket holds without the draw");
}
