use super::*;
use crate::calendar::tests::{cal, calendars, instants, ms};
use crate::calendar::{Period, compute};
use crate::limits::testing::{IntegerKey, carry, reply_i128};
use crate::reference::quota::Model;
use crate::time::NANOS_PER_MILLI;
use proptest::prelude::*;

const NANOS_PER_SEC_I: i64 = crate::time::NANOS_PER_SEC;

#[test]
fn bad_quota_words_are_named() {
    let split = |s: &str| {
        Words::split(&s.split(' ').map(str::as_bytes).collect::<Vec<_>>()).map(|_| ()).map_err(|e| e.to_string())
    };
    assert_eq!(split("10 EVERY DAY"), Err("ERR expected PER unit after the limit (e.g. 1000 PER MONTH)".into()));
    assert_eq!(split("10 PER DAY TZ UTC TZ UTC"), Err("ERR syntax error".into()));
    assert_eq!(split("10 PER DAY TZ"), Err("ERR syntax error".into()));
    assert!(split("10 PER day tz Europe/Berlin anchor 0 QUANTITY 3").is_ok());
    let w = Words::split(&[b"0", b"PER", b"DAY"]).unwrap();
    assert_eq!(
        w.params(Unit::Seconds).unwrap_err().to_string(),
        "ERR limit must be an integer from 1 to 999999999999999999"
    );
}

fn run(key: &mut IntegerKey, now: i64, p: &Params, q: i64) -> [i64; 5] {
    let state = key.map(|(count, at)| decode(count.to_string().as_bytes(), Some(at)).unwrap());
    let d = decide(state, Instant::from_nanos(now), p, q, Charge::Take).unwrap();
    carry(key, d.effect);
    d.reply.to_array(Unit::Millis)
}

#[test]
fn counts_until_the_period_ends_then_starts_empty() {
    let p = Params::new(3, cal(Per::Day, "UTC", None)).unwrap();
    let (mut key, t) = (None, ms("2027-02-10T23:59:58Z") * NANOS_PER_MILLI);
    assert_eq!(run(&mut key, t, &p, 2), [0, 3, 1, -1, 2000]);
    assert_eq!(key, Some((2, ms("2027-02-11T00:00:00Z"))), "the key expires at the period's end");
    assert_eq!(run(&mut key, t + 1, &p, 2), [1, 3, 1, 2000, 2000]);
    assert_eq!(run(&mut key, t, &p, 4), [1, 3, 1, -1, 2000], "never admittable");
    assert_eq!(run(&mut key, t, &p, 0), [0, 3, 1, -1, 2000]);
    assert_eq!(run(&mut key, t, &p, -1), [0, 3, 2, -1, 2000]);
    assert_eq!(run(&mut key, t, &p, -5), [0, 3, 3, -1, 0]);
    assert_eq!(key, None, "a refund to full deletes the key");
    run(&mut key, t, &p, 3);
    // One millisecond before midnight: still today; at midnight: a new day.
    assert_eq!(run(&mut key, t + 1_999_999_999, &p, 1)[0], 1);
    assert_eq!(run(&mut key, t + 2_000_000_000, &p, 1), [0, 3, 2, -1, 86_400_000]);
}

#[test]
fn a_changed_period_carries_its_count_over() {
    let t = ms("2027-02-10T12:00:00Z") * NANOS_PER_MILLI;
    let day = Params::new(10, cal(Per::Day, "UTC", None)).unwrap();
    let month = Params::new(10, cal(Per::Month, "UTC", None)).unwrap();
    let mut key = None;
    run(&mut key, t, &day, 7);
    // The seven units were taken this month too: only three more this month.
    assert_eq!(
        run(&mut key, t + 1, &month, 0),
        [0, 10, 3, -1, ms("2027-03-01T00:00:00Z") - ms("2027-02-10T12:00:00Z")]
    );
    assert_eq!(key, Some((7, ms("2027-02-11T00:00:00Z"))), "a peek writes nothing");
    assert_eq!(run(&mut key, t + 1, &month, 4)[0], 1);
    assert_eq!(key, Some((7, ms("2027-03-01T00:00:00Z"))), "a denial re-times the carried count");
    assert_eq!(run(&mut key, t + 1, &month, 3)[..3], [0, 10, 0]);
    // Tomorrow the month still holds them.
    assert_eq!(run(&mut key, t + 86_400 * NANOS_PER_SEC_I, &month, 1)[0], 1);
    // A key without an expiry (PERSIST) is a mismatch: carried, and re-timed.
    let mut key = Some((5, i64::MAX / NANOS_PER_MILLI));
    let state = key.map(|(c, _)| decode(c.to_string().as_bytes(), None).unwrap());
    let d = decide(state, Instant::from_nanos(t), &day, 1, Charge::Take).unwrap();
    carry(&mut key, d.effect);
    assert_eq!(key, Some((6, ms("2027-02-11T00:00:00Z"))));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Calls (any quantities, several calendars and limits on one key) decide as the model.
    #[test]
    fn decides_as_the_reference(
        start in instants(),
        cals in proptest::collection::vec(calendars(), 1..3),
        calls in proptest::collection::vec((0i64..40 * 86_400_000, -3i64..8, 0usize..3, 1i64..10), 1..40),
    ) {
        let mut now = start;
        let (mut key, mut model) = (None, Model::default());
        for (step_ms, q, which, limit) in calls {
            now += step_ms * NANOS_PER_MILLI / 7;
            let c = cals[which % cals.len()];
            let p = Params::new(limit, c).unwrap();
            let end = i128::from(period(&c, Instant::from_nanos(now)).unwrap().end.as_nanos());
            let state = key.map(|(count, at): (i64, i64)| decode(count.to_string().as_bytes(), Some(at)).unwrap());
            let d = decide(state, Instant::from_nanos(now), &p, q, Charge::Take).unwrap();
            // Redis reclaims a key whose millisecond expiry has passed.
            if key.is_some_and(|(_, at)| at * NANOS_PER_MILLI <= now) { key = None; }
            carry(&mut key, d.effect);
            let want = model.call(i128::from(now), i128::from(limit), end, i128::from(q), false);
            prop_assert_eq!(reply_i128(d.reply), want);
            let model_key = (model.expires_at > 0).then(|| (model.count as i64, (model.expires_at / i128::from(NANOS_PER_MILLI)) as i64));
            prop_assert_eq!(key, model_key);
        }
    }

    /// Honesty when the calendar changes on a live key: the units of the old period still
    /// counted when the first call under the new one is made, plus those admitted under it,
    /// never exceed its limit in its period holding that call; every later period admits at
    /// most `limit`.
    #[test]
    fn a_changed_calendar_never_admits_more_than_the_limit(
        a in calendars(), b in calendars(), start in instants(),
        before in proptest::collection::vec((0i64..3_600_000, 1i64..5), 1..20),
        after in proptest::collection::vec((0i64..20 * 86_400_000, 1i64..5), 1..40),
        (limit_a, limit_b) in (1i64..12, 1i64..12),
    ) {
        let (pa, pb) = (Params::new(limit_a, a).unwrap(), Params::new(limit_b, b).unwrap());
        let mut key: IntegerKey = None;
        let mut now = start;
        let call = |key: &mut IntegerKey, now: i64, p: &Params, q: i64| {
            if key.is_some_and(|(_, at)| at * NANOS_PER_MILLI <= now) { *key = None; }
            let state = key.map(|(count, at)| decode(count.to_string().as_bytes(), Some(at)).unwrap());
            let d = decide(state, Instant::from_nanos(now), p, q, Charge::Take).unwrap();
            carry(key, d.effect);
            !d.reply.limited
        };
        let mut admitted_a = Vec::new();
        for (step, q) in before {
            now += step * 1000;
            if call(&mut key, now, &pa, q) { admitted_a.push((now, q)); }
        }
        let switch = now + 1;
        let pa_now = compute(&a, Instant::from_nanos(switch)).unwrap();
        // The A units still counted: those of A's period holding the switch.
        let carried: i64 = admitted_a.iter().filter(|(t, _)| Instant::from_nanos(*t) >= pa_now.start).map(|(_, q)| q).sum();
        let mut admitted_b: Vec<(Period, i64)> = Vec::new();
        now = switch;
        for (i, (step, q)) in after.into_iter().enumerate() {
            if i > 0 { now += step * NANOS_PER_MILLI / 3; }
            if call(&mut key, now, &pb, q) {
                admitted_b.push((compute(&b, Instant::from_nanos(now)).unwrap(), q));
            }
        }
        let first = compute(&b, Instant::from_nanos(switch)).unwrap();
        let mut periods: Vec<Period> = admitted_b.iter().map(|(p, _)| *p).collect();
        periods.dedup();
        for p in periods {
            let sum: i64 = admitted_b.iter().filter(|(q, _)| *q == p).map(|(_, q)| q).sum();
            let held = if p == first { carried } else { 0 };
            prop_assert!(sum + held <= limit_b.max(held), "{sum} + {held} in {p:?} (limit {limit_b})");
            if held > 0 && held >= limit_b { prop_assert_eq!(sum, 0); }
        }
    }
}

#[test]
fn commands_parse_quota_words() {
    use crate::limiter::{Limiter, Request};
    let words = |s: &'static str| s.split(' ').map(str::as_bytes).collect::<Vec<_>>();
    let r = Request::parse(
        crate::limiter::Algorithm::Quota,
        &words("k 100 PER month TZ Europe/Berlin ANCHOR 2026-01-31T09:00:00Z QUANTITY 3 MS SHADOW"),
        &crate::Caps::DEFAULT,
    )
    .unwrap();
    assert_eq!((r.key, r.quantity, r.unit, r.shadow()), (&b"k"[..], 3, Unit::Millis, true));
    let Limiter::Quota(p) = r.limiter else { panic!() };
    assert_eq!(p.calendar(), cal(Per::Month, "Europe/Berlin", Some("2026-01-31T09:00:00Z")));
    // ANCHOR as Unix time reads in the call's unit, wherever MS is.
    let r = Request::parse(
        crate::limiter::Algorithm::Quota,
        &words("k 1 PER DAY ANCHOR 1769850000000 MS"),
        &crate::Caps::DEFAULT,
    )
    .unwrap();
    let Limiter::Quota(p) = r.limiter else { panic!() };
    assert_eq!(p.calendar().anchor_ms, Some(1_769_850_000_000));
    let err = |s: &'static str| {
        Request::parse(crate::limiter::Algorithm::Quota, &words(s), &crate::Caps::DEFAULT).unwrap_err().to_string()
    };
    assert_eq!(err("k 100 PER"), "ERR wrong number of arguments for 'cl.quota' command");
    assert_eq!(err("k 100 PER DAY 5"), "ERR syntax error");
    assert_eq!(err("k 100 PER DAY PRECISION 5"), "ERR syntax error");
    assert_eq!(err("k 1.5 PER DAY"), "ERR value is not an integer or out of range");

    let all = |s: &'static str| crate::all::Request::parse(&words(s), &crate::Caps::DEFAULT);
    let r = all("2 a b THROTTLE 9 10 1 QUOTA 1000000 PER MONTH TZ +05:30 QUANTITY 500 MS").unwrap();
    assert_eq!(r.limiters[1].1, 500);
    assert_eq!(r.limiters[1].0, Limiter::Quota(Params::new(1_000_000, cal(Per::Month, "+05:30", None)).unwrap()));
    let err = |s: &'static str| all(s).unwrap_err().to_string();
    assert_eq!(err("1 a QUOTA 5 PER DAY PRECISION 3"), "ERR limiter 1: QUOTA does not take PRECISION");
    assert_eq!(err("2 a b COUNTER 5 60 TZ UTC QUOTA 5 PER DAY"), "ERR limiter 1: COUNTER does not take TZ");
    assert_eq!(err("1 a QUOTA 5 PER DAY TZ Nowhere/Land").split(':').next(), Some("ERR limiter 1"));
    assert_eq!(err("1 a QUOTA 5 PER"), "ERR limiter 1: QUOTA takes 3 numbers");
}

/// A call of the invariant below: CL.QUOTA under a calendar, or CL.COUNTER with a window (s).
#[derive(Debug, Clone, Copy)]
enum Call {
    Quota(Calendar),
    Counter(i64),
}

fn stray_calls() -> impl Strategy<Value = Call> {
    prop_oneof![3 => calendars().prop_map(Call::Quota), 1 => (1i64..200_000).prop_map(Call::Counter)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// No sequence of calls on one key (CL.QUOTA under any calendars, CL.COUNTER with any
    /// windows, limits changed, the clock stepping back and forth) admits more than a limit
    /// asked for: when a call is admitted, the units of every earlier admitted call whose
    /// period (its calendar's, or the counter's window as its reply gave it) still holds now,
    /// and through which the clock never reached that period's end, plus its own, are at
    /// most its limit. (A stray call used to re-time the key to its own, earlier end.)
    #[test]
    fn no_sequence_admits_more_than_a_limit_asked_for(
        start in instants(),
        kinds in proptest::collection::vec(stray_calls(), 1..4),
        calls in proptest::collection::vec((-2_000_000i64..3_000_000, 0i64..6, 0usize..4, 1i64..10), 1..40),
    ) {
        let mut key: IntegerKey = None;
        let mut now = start;
        // (admitted at, its period's end, units), and the latest clock since each.
        let mut admitted: Vec<(i64, i64, i64, i64)> = Vec::new();
        for (step_ms, q, which, limit) in calls {
            // Mostly forward (up to about 35 days), sometimes back (up to about 23 days).
            now += step_ms * 1_000_000;
            for a in &mut admitted { a.3 = a.3.max(now); }
            if key.is_some_and(|(_, at)| at * NANOS_PER_MILLI <= now) { key = None; }
            let (limited, end) = match kinds[which % kinds.len()] {
                Call::Quota(c) => {
                    let p = Params::new(limit, c).unwrap();
                    let state = key.map(|(count, at)| decode(count.to_string().as_bytes(), Some(at)).unwrap());
                    let d = decide(state, Instant::from_nanos(now), &p, q, Charge::Take).unwrap();
                    carry(&mut key, d.effect);
                    (d.reply.limited, compute(&c, Instant::from_nanos(now)).unwrap().end.as_nanos())
                }
                Call::Counter(window_s) => {
                    let p = crate::counter::Params::new(limit, crate::time::Nanos::new(window_s * NANOS_PER_SEC_I).unwrap()).unwrap();
                    let state = key.map(|(count, at)| crate::counter::decode(count.to_string().as_bytes(), Some(at)).unwrap());
                    let d = crate::counter::decide(state, Instant::from_nanos(now), &p, q, Charge::Take).unwrap();
                    carry(&mut key, d.effect);
                    (d.reply.limited, now + d.reply.reset_after.as_nanos())
                }
            };
            if limited || q == 0 { continue; }
            let held: i64 = admitted.iter().filter(|&&(_, end, _, latest)| end > now && latest < end).map(|a| a.2).sum();
            prop_assert!(held + q <= limit, "admitted {} at {} with {} of earlier periods still held (limit {})", q, now, held, limit);
            admitted.push((now, end, q, now));
        }
    }
}
