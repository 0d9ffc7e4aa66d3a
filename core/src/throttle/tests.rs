use super::*;
use crate::time::{NANOS_PER_SEC, Unit};
use proptest::prelude::*;

const T0: i64 = 1_700_000_000 * NANOS_PER_SEC;

fn secs(s: i64) -> Nanos {
    Nanos::new(s * NANOS_PER_SEC).unwrap()
}

/// Runs calls at `now`, carrying the state as the module would.
fn run(state: &mut Option<Instant>, now: Instant, p: &Params, q: i64) -> [i64; 5] {
    let d = decide(*state, now, p, q, Charge::Take).unwrap();
    match d.effect {
        Effect::Store { state: s, expires_at } => {
            assert_eq!(s, expires_at, "a GCRA key expires at its TAT");
            *state = Some(s)
        }
        Effect::Delete => *state = None,
        Effect::Nothing => {}
    }
    d.reply.to_array(Unit::Seconds)
}

#[test]
fn redis_cell_documented_example() {
    let p = Params::new(15, 30, secs(60)).unwrap();
    let now = Instant::from_nanos(T0);
    let mut s = None;
    assert_eq!(run(&mut s, now, &p, 1), [0, 16, 15, -1, 2]);
    assert_eq!(run(&mut s, now, &p, 1), [0, 16, 14, -1, 4]);
}

#[test]
fn burst_then_denial() {
    let p = Params::new(4, 1, secs(10)).unwrap();
    let now = Instant::from_nanos(T0);
    let mut s = None;
    for (remaining, reset) in [(4, 10), (3, 20), (2, 30), (1, 40), (0, 50)] {
        assert_eq!(run(&mut s, now, &p, 1), [0, 5, remaining, -1, reset]);
    }
    assert_eq!(run(&mut s, now, &p, 1), [1, 5, 0, 10, 50]);
    let mut fresh = None;
    assert_eq!(run(&mut fresh, now, &p, 6), [1, 5, 5, -1, 0]);
    assert_eq!(fresh, None);
}

#[test]
fn peek_and_refund() {
    let p = Params::new(4, 1, secs(10)).unwrap();
    let now = Instant::from_nanos(T0);
    let mut s = None;
    assert_eq!(run(&mut s, now, &p, 0), [0, 5, 5, -1, 0]);
    assert_eq!(s, None, "a peek creates nothing");
    run(&mut s, now, &p, 3);
    let before = s;
    assert_eq!(run(&mut s, now, &p, 0), [0, 5, 2, -1, 30]);
    assert_eq!(s, before, "a peek re-times nothing");
    assert_eq!(run(&mut s, now, &p, -1), [0, 5, 3, -1, 20]);
    assert_eq!(run(&mut s, now, &p, -100), [0, 5, 5, -1, 0]);
    assert_eq!(s, None, "a refund to full deletes the key");
}

#[test]
fn parameters_are_validated() {
    assert!(matches!(Params::new(-1, 1, secs(1)), Err(Error::OutOfRange { name: "max_burst", .. })));
    assert!(matches!(Params::new(0, 0, secs(1)), Err(Error::OutOfRange { name: "count", .. })));
    assert!(matches!(Params::new(0, 2, Nanos::new(1).unwrap()), Err(Error::RateTooFast { .. })));
    assert!(matches!(Params::new(i64::MAX, 1, secs(1)), Err(Error::OutOfRange { name: "max_burst", .. })));
    let too_long = Err(Error::SpanTooLong("(max_burst + 1) * period / count"));
    assert_eq!(Params::new(1 << 40, 1, secs(1 << 20)), too_long);
    // The tolerance may be up to MAX_DURATION, not a nanosecond more.
    assert!(Params::new(999_999_999, 1, secs(1)).is_ok());
    assert_eq!(Params::new(1_000_000_000, 1, secs(1)), too_long);
}

#[test]
fn stored_state_is_decimal_nanoseconds() {
    assert_eq!(decode(b"1700000000000000000"), Ok(Instant::from_nanos(T0)));
    for bad in [&b""[..], b"abc", b"-5", b"5", b"999999999999999999", b"1.5", b"\x00\x01"] {
        assert_eq!(decode(bad), Err(Error::InvalidState("CL.THROTTLE")));
    }
}

fn check(
    tat: Option<i64>,
    now: i64,
    max_burst: i64,
    count: i64,
    period: i64,
    q: i64,
    debit: bool,
) -> std::result::Result<(), TestCaseError> {
    let Ok(p) = Params::new(max_burst, count, Nanos::new(period).unwrap()) else {
        prop_assert!(!crate::reference::throttle::valid(max_burst, count, period));
        return Ok(());
    };
    let got = decide(tat.map(Instant::from_nanos), Instant::from_nanos(now), &p, q, Charge::of(debit));
    let want = crate::reference::throttle::call(tat, now, max_burst, count, period, q, debit);
    match (got, want) {
        (Err(Error::TooLarge), None) => {}
        (Err(Error::SpanTooLong("quantity * period / count")), None) if debit => {}
        (Ok(d), Some((reply, write))) => {
            let r = d.reply;
            let got_reply = [
                i128::from(r.limited),
                r.limit as i128,
                r.remaining as i128,
                r.retry_after.map_or(-1, |n| n.as_nanos() as i128),
                r.reset_after.as_nanos() as i128,
            ];
            prop_assert_eq!(got_reply, reply);
            prop_assert!(r.remaining >= 0 && r.remaining <= r.limit);
            // No reply time exceeds the tolerance or the stored TAT's lead on now (a debt
            // is waited out), plus a debit's own units.
            let lead = tat.map_or(0, |t| (i128::from(t) - i128::from(now)).max(0));
            let debited = if debit && q > 0 { i128::from(q) * i128::from(p.emission_interval().as_nanos()) } else { 0 };
            let bound = lead.max(p.tolerance().as_nanos().into()) + debited;
            let (reset, retry) =
                (i128::from(r.reset_after.as_nanos()), r.retry_after.map_or(0, |t| i128::from(t.as_nanos())));
            prop_assert!(reset <= bound && retry <= bound, "{:?}", r);
            let got_write = match d.effect {
                Effect::Nothing => None,
                Effect::Delete => Some(None),
                Effect::Store { state, expires_at } => {
                    prop_assert_eq!(state, expires_at);
                    Some(Some(state.as_nanos() as i128))
                }
            };
            prop_assert_eq!(got_write, write);
        }
        (got, want) => prop_assert!(false, "module {:?} vs reference {:?}", got, want),
    }
    Ok(())
}

fn around_limits() -> impl Strategy<Value = i64> {
    prop_oneof![1i64..=100, 1i64..=i64::MAX, (i64::MAX - 1000)..=i64::MAX, (1i64 << 30)..(1i64 << 34)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn matches_the_reference_everyday(
        tat_offset in proptest::option::of(-100_000i64..200_000),
        max_burst in 0i64..20, count in 1i64..20, period in 1i64..20_000, q in -30i64..30, debit: bool,
    ) {
        let now = T0;
        check(tat_offset.map(|o| now + o), now, max_burst, count, period, q, debit)?;
    }

    #[test]
    fn matches_the_reference_near_the_limits(
        tat in proptest::option::of(0i64..=i64::MAX), now in 0i64..=i64::MAX,
        max_burst in prop_oneof![0i64..10, 0i64..=i64::MAX - 1], count in around_limits(),
        period in around_limits(), q in prop_oneof![-5i64..5, i64::MIN..=i64::MAX], debit: bool,
    ) {
        check(tat, now, max_burst, count, period, q, debit)?;
    }

    /// Over any sequence of calls, the units admitted never exceed what the limiter allows:
    /// `limit` at once plus one per emission interval elapsed.
    #[test]
    fn never_admits_more_than_the_rate(
        max_burst in 0i64..10, ei in 1i64..1000,
        calls in proptest::collection::vec((0i64..3000, -2i64..6), 1..60),
    ) {
        let p = Params::new(max_burst, 1, Nanos::new(ei).unwrap()).unwrap();
        let (mut state, mut now, mut admitted) = (None, T0, 0i64);
        for (step, q) in calls {
            now += step;
            let d = decide(state, Instant::from_nanos(now), &p, q, Charge::Take).unwrap();
            if !d.reply.limited && q > 0 { admitted += q }
            if q < 0 { admitted = (admitted + q).max(0) } // a refund returns units
            match d.effect {
                Effect::Store { state: s, .. } => state = Some(s),
                Effect::Delete => state = None,
                Effect::Nothing => {}
            }
            let elapsed = now - T0;
            prop_assert!(admitted <= p.limit() + elapsed / ei, "admitted {} by {}", admitted, elapsed);
        }
    }
}

#[test]
fn a_tat_beyond_the_tolerance_is_waited_out() {
    // Burst 4 at 1 per 10 s: takes never leave a TAT more than 50 s ahead, but a DEBIT does
    // (units counted past the burst), and so does a clock stepped back, which cannot be told
    // from it: both are read as they are, as redis-cell reads them. A TAT an hour ahead is an
    // hour of units owed: refused until the TAT is back within the tolerance.
    let p = Params::new(4, 1, secs(10)).unwrap();
    let now = Instant::from_nanos(T0);
    let ahead = Some(Instant::from_nanos(T0 + 3600 * NANOS_PER_SEC));
    let mut s = ahead;
    assert_eq!(run(&mut s, now, &p, 1), [1, 5, 0, 3560, 3600]);
    assert_eq!(run(&mut s, now, &p, 0), [1, 5, 0, 3550, 3600], "a check: over the limit");
    assert_eq!(s, ahead, "nothing written");
    let before = Instant::from_nanos(T0 + 3560 * NANOS_PER_SEC - 1);
    assert_eq!(run(&mut s, before, &p, 1)[0], 1);
    let repaid = Instant::from_nanos(T0 + 3560 * NANOS_PER_SEC);
    assert_eq!(run(&mut s, repaid, &p, 1), [0, 5, 0, -1, 50]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]

    /// State stamped anywhere (far in the future after a debit or a clock step back, far in
    /// the past) never panics and never admits beyond what a peek says remains; after one
    /// take (admitted or not) the limiter admits again exactly when its TAT is one emission
    /// interval within the tolerance, and is full at its TAT.
    #[test]
    fn any_stamped_state_is_full_at_its_tat(
        offset in prop_oneof![-(1i64 << 62)..(1i64 << 62), -1_000_000_000i64..1_000_000_000],
        max_burst in 0i64..20, ei in 1i64..1_000_000, q in 1i64..25,
    ) {
        let p = Params::new(max_burst, 1, Nanos::new(ei).unwrap()).unwrap();
        let now = Instant::from_nanos(T0);
        let mut state = Some(Instant::from_nanos(T0.saturating_add(offset)));
        let peek = decide(state, now, &p, 0, Charge::Take).unwrap();
        prop_assert_eq!(peek.effect, Effect::Nothing, "a peek stays pure");
        let d = decide(state, now, &p, q, Charge::Take).unwrap();
        if !d.reply.limited { prop_assert!(q <= peek.reply.remaining) }
        if let Effect::Store { state: s, .. } = d.effect { state = Some(s) }
        let after = state.map_or(T0, |s| s.as_nanos().max(T0));
        prop_assert_eq!(d.reply.reset_after.as_nanos(), after - T0);
        let next = T0.max(after + ei - p.tolerance().as_nanos());
        prop_assert!(!decide(state, Instant::from_nanos(next), &p, 1, Charge::Take).unwrap().reply.limited, "admits again");
        if next > T0 {
            prop_assert!(decide(state, Instant::from_nanos(next - 1), &p, 1, Charge::Take).unwrap().reply.limited, "not earlier");
        }
        let full = Instant::from_nanos(after);
        prop_assert_eq!(decide(state, full, &p, 0, Charge::Take).unwrap().reply.remaining, p.limit(), "full at its TAT");
    }
}
